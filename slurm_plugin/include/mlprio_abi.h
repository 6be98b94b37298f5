/*
 * mlprio_abi.h - the small C ABI between Slurm's C plugins (site_factor/mlprio,
 * job_submit/mlprio) and mlprio's C++ core. Every function returns an MLPRIO_*
 * status and never lets an exception, exit() or abort() escape; on failure the
 * reason is in mlprio_last_error() (thread-local, valid until the next call on
 * the same thread), as in XGBoost's C API. A context owns one parsed parameter
 * set, one model (reloaded when its file changes), a cache of per-job site
 * factors and, when started, a C++ watcher/worker thread that never touches
 * Slurm state: it only predicts and reports job ids whose answers are ready.
 *
 * When both plugins are loaded, site_factor/mlprio's context is the only one:
 * job_submit/mlprio makes its decisions through the hub site_factor exports
 * (mlprio_hub_t), so the two plugins can never use different models.
 */
#ifndef MLPRIO_ABI_H
#define MLPRIO_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum mlprio_status {
	MLPRIO_OK = 0,
	MLPRIO_ERR_PARAM = 1,    /* a parameter string could not be parsed */
	MLPRIO_ERR_MODEL = 2,    /* model missing/corrupt/unsafe: neutral mode */
	MLPRIO_ERR_INTERNAL = 3, /* unexpected C++ exception, caught here */
	MLPRIO_NO_MODEL = 4,     /* no usable model loaded: answer is neutral */
	MLPRIO_PENDING = 5,      /* answer queued for the worker thread */
	MLPRIO_TIMEOUT = 6,      /* nothing became ready before the timeout */
	MLPRIO_OUT_OF_SCOPE = 7  /* the job is outside scope_*: left alone */
};

enum mlprio_refuse_mode { MLPRIO_REFUSE = 0, MLPRIO_WARN = 1 };
/* mode=enforce applies SITE, limits and refusals; mode=shadow computes and
 * logs them ("would ...") but applies nothing. */
enum mlprio_mode { MLPRIO_MODE_ENFORCE = 0, MLPRIO_MODE_SHADOW = 1 };

typedef struct mlprio_ctx mlprio_ctx_t;

/* What the plugins know about a job, in plain units. Unknown numbers are < 0,
 * unknown strings NULL. Strings are only read during the call. */
typedef struct {
	uint32_t job_id;          /* 0 in job_submit (no id yet) */
	double submit_time;       /* Unix seconds */
	double time_limit_s;      /* requested limit, seconds */
	int64_t req_cpus;
	int64_t req_nodes;
	double req_gpus;
	int64_t req_mem_bytes;    /* whole job */
	const char *user;
	const char *account;
	const char *partition;
	const char *qos;
	const char *name;         /* job name */
	const char *comment;      /* --comment */
	const char *admin_comment;/* where job_submit/mlprio leaves parsed features */
	const char *script;       /* batch script (job_submit only) */
} mlprio_job_t;

typedef struct {
	double runtime_s;         /* NaN when not predicted */
	double runtime_upper_s;
	double fail_prob;
} mlprio_prediction_t;

/* The parsed PrioritySiteFactorParameters, for the shims' own decisions. */
typedef struct {
	double weight;
	int64_t max_boost;
	double limit_margin;
	double refuse_above;
	int refuse_mode;          /* enum mlprio_refuse_mode */
	int64_t budget_us;        /* inline model budget per job; 0 = always async */
	int64_t check_period_ms;  /* model file mtime check period */
	int64_t llm_timeout_ms;
	int64_t reload_wait_ms;   /* bound on mlprio_decide's wait after a re-read */
	int have_model_path;
	int have_llm;             /* llm_url is set */
	int mode;                 /* enum mlprio_mode */
	int override_default_time;/* fill limits even where a partition has DefaultTime */
} mlprio_params_t;

/* Log sink: level 0 = error, 1 = info, 2 = debug. Called from any thread. */
typedef void (*mlprio_log_fn)(int level, const char *msg);

const char *mlprio_last_error(void);
void mlprio_set_log(mlprio_log_fn fn);

/* Identifies one reading of slurm.conf: PrioritySiteFactorParameters (its
 * text and address: every read_slurm_conf() frees and re-allocates it) and
 * slurm_conf.last_update (set by every read_slurm_conf(), the value slurmctld's
 * own code compares to notice a reconfigure, one-second resolution). Pass
 * slurm_conf.site_factor_params itself, not a copy. */
uint64_t mlprio_conf_epoch(const char *params, int64_t conf_time);

/* Parses params and loads the model, as the state of slurm.conf reading
 * conf_epoch. The context is created (in neutral mode) even when the model
 * cannot be used: then MLPRIO_ERR_MODEL is returned and *out is valid.
 * Parameter problems are logged, never fatal. */
int mlprio_ctx_create(const char *params, uint64_t conf_epoch,
		      mlprio_ctx_t **out);
void mlprio_ctx_free(mlprio_ctx_t *ctx);
/* New parameters (scontrol reconfigure): re-parse, reload the model, drop the
 * cache. Same return convention as create. Blocking file I/O: call with no
 * Slurm lock held. Skipped (once) when a fence in mlprio_decide already loaded
 * the model for this conf_epoch. */
int mlprio_ctx_reconfigure(mlprio_ctx_t *ctx, const char *params,
			   uint64_t conf_epoch);
/* Reload the model when its file's mtime/size/mode changed; *reloaded = 1 if
 * the model (or neutral mode) changed. Cheap when nothing changed (one stat). */
int mlprio_ctx_check_reload(mlprio_ctx_t *ctx, int *reloaded);
int mlprio_ctx_params(const mlprio_ctx_t *ctx, mlprio_params_t *out);
/* One line: model kind and version, or why the context is neutral. */
int mlprio_ctx_describe(const mlprio_ctx_t *ctx, char *buf, size_t len);
/* Monotonic counter that changes on every model swap. */
uint64_t mlprio_ctx_generation(const mlprio_ctx_t *ctx);

/* In-process prediction for one job. */
int mlprio_predict(mlprio_ctx_t *ctx, const mlprio_job_t *job,
		   mlprio_prediction_t *out);

enum mlprio_verdict {
	MLPRIO_VERDICT_PASS = 0,    /* not predicted to fail (or no failure model) */
	MLPRIO_VERDICT_WARN = 1,    /* predicted to fail, refuse_mode=warn */
	MLPRIO_VERDICT_REFUSE = 2,  /* predicted to fail, refuse_mode=refuse */
	MLPRIO_VERDICT_EXEMPT = 3,  /* would be refused; its QOS/account is exempt */
	MLPRIO_VERDICT_OVERRIDE = 4 /* would be refused; user's override accepted */
};

/* job_submit/mlprio's decision for one job, all from one snapshot of
 * parameters + model (never parameters of one and the model of another). */
typedef struct {
	mlprio_params_t params;
	mlprio_prediction_t pred;
	int verdict;              /* enum mlprio_verdict */
	uint64_t generation;      /* the model generation that decided */
	char message[1024];       /* for the user (*err_msg) unless PASS */
	char log[512];            /* for slurmctld's log unless PASS */
	/* EXEMPT/OVERRIDE: to append to admin_comment ("mlprio_override=1
	 * mlprio_fail=0.90"): users cannot set it, so it is a trustworthy
	 * record with the job, and site_factor logs it with the job id. */
	char admin_note[128];
} mlprio_decision_t;

/* Decides for a job under slurm.conf reading conf_epoch (MLPRIO_OUT_OF_SCOPE:
 * outside scope_*, pass unchanged; params are filled) (params = its
 * PrioritySiteFactorParameters). When the context's state is older than that
 * reading (slurm.conf re-read, no reconfigure hook has loaded the model yet),
 * the worker loads it while this call waits at most reload_wait_ms; then
 * MLPRIO_TIMEOUT (the job should pass unchanged: the old model must not decide
 * under the new configuration). MLPRIO_NO_MODEL: neutral, params are filled. */
int mlprio_decide(mlprio_ctx_t *ctx, const char *params, uint64_t conf_epoch,
		  const mlprio_job_t *job, mlprio_decision_t *out);

/* The site factor for a job, as a signed offset (the shim adds NICE_OFFSET).
 * Cached answer or an in-process call within the budget: MLPRIO_OK. Over the
 * budget: *factor = 0 and MLPRIO_PENDING (queued for the worker). No model:
 * *factor = 0 and MLPRIO_NO_MODEL. Outside scope_*: *factor = 0 and
 * MLPRIO_OUT_OF_SCOPE. In mode=shadow the factor is computed all the same:
 * the shim logs it and applies 0. */
int mlprio_site_factor(mlprio_ctx_t *ctx, const mlprio_job_t *job,
		       int64_t *factor);
/* 1 the first time this context sees job_id here, else 0 (bounded memory: a
 * job may rarely answer 1 twice). For logging a job's admin note once. */
int mlprio_first_sight(mlprio_ctx_t *ctx, uint32_t job_id);
/* Forget a job's cached factor (job finished/purged). */
void mlprio_forget(mlprio_ctx_t *ctx, uint32_t job_id);

/*
 * The live feature store. A context keeps each user's history (the run times
 * the model's history features come from) current: it starts from the
 * snapshot in the model file and learns every job slurmctld reports as ended,
 * so a user's next prediction follows their latest jobs without retraining.
 * Lost on restart (it is rebuilt from the model file and the jobs still in
 * slurmctld's list); re-applied on top of a new model's snapshot on reload.
 */
enum mlprio_end_state {
	MLPRIO_END_COMPLETED = 0,
	MLPRIO_END_FAILED = 1,
	MLPRIO_END_TIMEOUT = 2,
	MLPRIO_END_OOM = 3,
	MLPRIO_END_NODE_FAIL = 4,
	MLPRIO_END_CANCELLED = 5,
	MLPRIO_END_OTHER = 6
};

typedef struct {
	mlprio_job_t job;         /* job_id, user, time limit, cpus matter */
	double start_time;        /* Unix seconds; the job ran end - start */
	double end_time;
	int state;                /* enum mlprio_end_state */
} mlprio_finish_t;

/* Learns ended jobs. Each job id is learned once; jobs that ended before the
 * model's own history ends, that never started, or of unknown users are
 * skipped; nothing is learned when history_period_ms=0. No model call, no I/O,
 * one short lock: safe under slurmctld's job lock. *learned (may be NULL): how
 * many were new. */
int mlprio_observe_finished(mlprio_ctx_t *ctx, const mlprio_finish_t *jobs,
			    size_t n, size_t *learned);
/* history_period_ms in force: how often the shim should scan slurmctld's job
 * list for ended jobs (0 = never: the model's snapshot only). */
int64_t mlprio_history_period_ms(mlprio_ctx_t *ctx);

/* Start/stop the C++ worker: it predicts queued jobs and checks the model
 * file every check_period_ms. */
int mlprio_worker_start(mlprio_ctx_t *ctx);
void mlprio_worker_stop(mlprio_ctx_t *ctx);
/* Wait up to timeout_ms for job ids whose late answers are ready. *all = 1
 * means "the model changed: re-prioritise every pending job". Returns
 * MLPRIO_OK when ids or all are set, MLPRIO_TIMEOUT otherwise. */
int mlprio_take_ready(mlprio_ctx_t *ctx, uint32_t *ids, size_t cap,
		      size_t *n, int *all, int timeout_ms);
/* The LLM advisor's answer for the job whose admin_comment holds its key
 * ("mlprio_llm=..."): the run time it answered (seconds, before the
 * llm_min_factor..llm_max_factor bounds) and its confidence. MLPRIO_OK when
 * an answer is stored, MLPRIO_PENDING when none (yet, or ever). */
int mlprio_advice_of(mlprio_ctx_t *ctx, const char *admin_comment,
		     double *runtime_s, double *confidence);
/* Ask the worker to stat the model file now (non-blocking; a changed file is
 * reloaded on the worker and reported as "all" by mlprio_take_ready). */
void mlprio_ctx_poke(mlprio_ctx_t *ctx);
/* Wake anyone in mlprio_take_ready (used by fini before joining). */
void mlprio_wake(mlprio_ctx_t *ctx);

/*
 * LLM advisor (llm_url=...). Only the context that owns it (site_factor's)
 * calls mlprio_llm_enable(); it then keeps one asynchronous advisor whose
 * answers, bounded by llm_min_factor/llm_max_factor, move the predicted run
 * time of jobs whose admin_comment carries "mlprio_llm=<key>", and reports
 * those jobs through mlprio_take_ready(). Without libcurl it only logs.
 */
int mlprio_llm_enable(mlprio_ctx_t *ctx);
/* Queues a job for the advisor (key != 0; the script is copied, at most
 * 16 KiB). Never touches the network, never waits: O(1) under a short lock.
 * MLPRIO_OK when queued, MLPRIO_NO_MODEL when no advisor runs. */
int mlprio_llm_submit(mlprio_ctx_t *ctx, uint64_t key, const mlprio_job_t *job);

/*
 * FSDP advice: the job's #MLPRIO training configuration checked
 * against the precomputed table (fsdp_table=), never any computation: two hash
 * lookups. Independent of the model (a neutral context still advises).
 */
enum mlprio_fsdp_verdict {
	MLPRIO_FSDP_NONE = 0,    /* no (complete) directive, no table or no entry */
	MLPRIO_FSDP_OK = 1,      /* at or below the largest safe minibatch */
	MLPRIO_FSDP_RETRIES = 2, /* past the predicted cudaMalloc-retry point */
	MLPRIO_FSDP_OOM = 3      /* predicted to run out of GPU memory */
};

typedef struct {
	int verdict;              /* enum mlprio_fsdp_verdict */
	int refuse;               /* OOM, fsdp_refuse_oom=1 and mode=enforce */
	int shadow;               /* mode=shadow: log, tell nobody */
	int64_t minibatch;        /* declared per-GPU minibatch (0: none) */
	int64_t max_safe_mbs;     /* -1 when unknown */
	int64_t gpu_memory_gib;   /* what the job's GPUs were taken to have */
	double penalty;           /* RETRIES: predicted fraction of throughput lost */
	char message[768];        /* for the user (RETRIES, OOM) */
	char note[96];            /* for admin_comment ("mlprio_fsdp=oom:64>60") */
	char why[384];            /* NONE: why not (for a debug log line) */
	char problems[400];       /* bad #MLPRIO training keys, for the user ("" if none) */
} mlprio_fsdp_advice_t;

/* tres: the job's gres/gpu request (tres_per_node or tres_per_job) for the GPU
 * type; gpus_total: its GPU count, the world size when the script does not
 * declare one (<= 0: unknown). Never blocks: a snapshot pointer copy. */
int mlprio_fsdp_advise(mlprio_ctx_t *ctx, const mlprio_job_t *job,
		       const char *tres, int64_t gpus_total,
		       mlprio_fsdp_advice_t *out);

/*
 * Exported by site_factor_mlprio.so (data symbol MLPRIO_HUB_SYMBOL) so that
 * job_submit/mlprio (another .so whose C++ copy is hidden) uses site_factor's
 * one context: its model for decisions and its LLM advisor. Each function
 * holds site_factor's context against fini() for the call and answers
 * MLPRIO_NO_MODEL while it is being unloaded. last_error() is the hub's own
 * thread-local error text (the caller's mlprio_last_error() is another copy).
 */
typedef struct {
	uint32_t version;         /* MLPRIO_HUB_VERSION */
	uint32_t size;            /* sizeof(mlprio_hub_t) */
	int (*decide)(const char *params, uint64_t conf_epoch,
		      const mlprio_job_t *job, mlprio_decision_t *out);
	int (*llm_submit)(uint64_t key, const mlprio_job_t *job);
	const char *(*last_error)(void);
	int (*fsdp_advise)(const mlprio_job_t *job, const char *tres,
			   int64_t gpus_total, mlprio_fsdp_advice_t *out);
} mlprio_hub_t;
#define MLPRIO_HUB_SYMBOL "mlprio_hub_v4"
#define MLPRIO_HUB_VERSION 4

/* LLM fine-tuning parameters found in text (#MLPRIO lines of a script,
 * "key=value" in a comment, hints in a job name) as "k=v k=v". Returns the
 * number of parameters found, or -1 on error. */
int mlprio_extract_features(const char *script, const char *comment,
			    const char *name, char *buf, size_t len);

/* What mlprio_extract_features ignored, for the user: "model_size=banana (not
 * a number); seq_len=-5 (out of range: ...); foo=bar (unknown key; ...)".
 * Returns how many, or -1 on error. */
int mlprio_feature_problems(const char *script, const char *comment,
			    const char *name, char *buf, size_t len);

/* "HH:MM:SS" or "D-HH:MM:SS" for a number of seconds. */
void mlprio_format_duration(double seconds, char *buf, size_t len);

/* GPUs a Slurm TRES/GRES request string asks for (tres_per_job or
 * tres_per_node): "gres:gpu:2", "gres/gpu:2", "gres:gpu:a100:2",
 * "gres/gpu=2", "gpu:2", comma or semicolon lists (gpu entries summed; a GPU
 * type alone counts 1; other GRES such as "gres:gpumem:..." ignored). -1 when
 * the string names no GPU or a GPU entry cannot be parsed. Never fails. */
double mlprio_tres_gpus(const char *tres);

#ifdef __cplusplus
}
#endif
#endif /* MLPRIO_ABI_H */
