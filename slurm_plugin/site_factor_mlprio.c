/*****************************************************************************\
 *  site_factor_mlprio.c - site_factor plugin that sets the SITE term of
 *  priority/multifactor from mlprio's learned model.
 *
 *  site_factor_p_set() runs under the job write lock on every set_job_prio():
 *  it reads the job record (writing only the LLM advisor's answer into
 *  admin_comment, once) and calls the C ABI, which answers from a
 *  per-job cache or with one in-process model call within budget_us; anything
 *  slower is queued for a C++ worker and the job keeps a neutral factor until
 *  the answer is ready. A second thread started here (the "applier") waits for
 *  ready answers with NO Slurm lock and NO plugin mutex held, then takes the
 *  job write lock and calls set_job_prio() on those jobs, the pattern
 *  job_submit/pbs uses. site_factor_p_update() (only run with slurmdbd) sets
 *  the cached factors of all pending jobs. Every history_period_ms the applier
 *  also scans the job list under the job read lock for jobs that ended, and
 *  the live feature store learns their run times (p_update does the same).
 *  All logic lives behind mlprio_abi.h; no C++ exception can reach slurmctld.
 *
 *  This plugin's context is the one model slot of both mlprio plugins:
 *  job_submit/mlprio decides through the hub exported below (mlprio_hub_v4,
 *  found with dlopen(RTLD_NOLOAD)), so one reload switches both at once. With
 *  llm_url set it also owns the LLM advisor that job_submit hands scripts to;
 *  answers arrive on the advisor's own thread and reach jobs through the same
 *  late-answer path, within the configured bounds.
\*****************************************************************************/

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "slurm/slurm.h"
#include "slurm/slurm_errno.h"

#include "src/common/list.h"
#include "src/common/log.h"
#include "src/common/uid.h"
#include "src/common/xmalloc.h"
#include "src/common/xstring.h"
#include "src/slurmctld/locks.h"
#include "src/slurmctld/slurmctld.h"

#include "mlprio_abi.h"
#include "slurm_compat.h"

const char plugin_name[] = "mlprio learned site factor plugin";
const char plugin_type[] = "site_factor/mlprio";
const uint32_t plugin_version = SLURM_VERSION_NUMBER;

#define APPLY_BATCH 1024

static mlprio_ctx_t *ctx = NULL;
static pthread_t applier_tid;
static bool applier_running = false;
static volatile bool applier_stop = false;
/* Guards ctx against fini() while job_submit/mlprio calls the hub. */
static pthread_rwlock_t ctx_lock = PTHREAD_RWLOCK_INITIALIZER;

/* The reading of slurm.conf in force (see mlprio_conf_epoch). */
static uint64_t _conf_epoch(void)
{
	return mlprio_conf_epoch(slurm_conf.site_factor_params,
				 (int64_t) slurm_conf.last_update);
}

static void _log_cb(int level, const char *msg)
{
	if (level == 0)
		error("%s: %s", plugin_type, msg);
	else if (level == 1)
		info("%s: %s", plugin_type, msg);
	else
		debug("%s: %s", plugin_type, msg);
}

/* Memory (bytes, whole job) from pn_min_memory, which carries MEM_PER_CPU. */
static int64_t _job_mem_bytes(job_record_t *job_ptr)
{
	mlprio_job_details_t *d = job_ptr->details;
	uint64_t mem;

	if (!d || (d->pn_min_memory == 0) || (d->pn_min_memory == NO_VAL64))
		return -1;
	if (d->pn_min_memory & MEM_PER_CPU) {
		mem = d->pn_min_memory & (~MEM_PER_CPU);
		return (int64_t) (mem * (uint64_t) MAX(d->min_cpus, 1)) << 20;
	}
	return (int64_t) (d->pn_min_memory * (uint64_t) MAX(d->min_nodes, 1))
	       << 20;
}

static void _fill_job(job_record_t *job_ptr, mlprio_job_t *j)
{
	mlprio_job_details_t *d = job_ptr->details;
	double gpn;

	memset(j, 0, sizeof(*j));
	j->job_id = job_ptr->job_id;
	j->submit_time = d ? (double) d->submit_time : -1;
	j->time_limit_s = ((job_ptr->time_limit == NO_VAL) ||
			   (job_ptr->time_limit == INFINITE)) ?
		-1 : (double) job_ptr->time_limit * 60.0;
	j->req_cpus = d ? (int64_t) d->min_cpus : -1;
	j->req_nodes = d ? (int64_t) d->min_nodes : -1;
	j->req_gpus = mlprio_tres_gpus(job_ptr->tres_per_job);
	if ((j->req_gpus < 0) &&
	    ((gpn = mlprio_tres_gpus(job_ptr->tres_per_node)) >= 0))
		j->req_gpus = gpn * (d ? MAX(d->min_nodes, 1) : 1);
	j->req_mem_bytes = _job_mem_bytes(job_ptr);
	/*
	 * 22.05 fills user_name only at launch or state recovery, so pending
	 * jobs have none; the uid cache is warm (job_submit and slurmctld
	 * resolved this uid at submission), so this is a hash lookup.
	 */
	j->user = job_ptr->user_name ? job_ptr->user_name :
		uid_to_string_cached(job_ptr->user_id);
	j->account = job_ptr->account;
	j->partition = job_ptr->partition;
	j->qos = job_ptr->qos_ptr ? job_ptr->qos_ptr->name : NULL;
	j->name = job_ptr->name;
	j->comment = job_ptr->comment;
	j->admin_comment = job_ptr->admin_comment;
	j->script = NULL;
}

/* The notes job_submit/mlprio left in admin_comment under these keys, as "k=v k=v". */
static size_t _notes(const char *admin_comment, const char *const *keys,
		     size_t nkeys, char *notes, size_t len)
{
	size_t i, used = 0;

	notes[0] = '\0';
	if (!admin_comment || !strstr(admin_comment, "mlprio_"))
		return 0;
	for (i = 0; i < nkeys; i++) {
		const char *at = strstr(admin_comment, keys[i]);
		int n;

		if (!at)
			continue;
		n = snprintf(notes + used, len - used, "%s%.*s",
			     used ? " " : "", (int) strcspn(at, " "), at);
		if ((n < 0) || ((size_t) n >= len - used))
			break;
		used += n;
	}
	return used;
}

/* Submitted in the last 5 minutes: a restart does not log every pending job again. */
static bool _is_new(job_record_t *job_ptr)
{
	return job_ptr->details &&
	       (job_ptr->details->submit_time + 300 >= time(NULL));
}

/*
 * What job_submit/mlprio did to this job, from the notes it left in
 * admin_comment (where users cannot write): mlprio_limit= (time limit set),
 * mlprio_warn= (warned), mlprio_exempt=/mlprio_override= with mlprio_fail=
 * (accepted although predicted to fail). job_submit runs before the job has an
 * id, so the id is logged here, once, when the job is new.
 */
static void _log_admin_note(job_record_t *job_ptr, const char *user)
{
	static const char *const keys[] = {
		"mlprio_limit=", "mlprio_warn=", "mlprio_exempt=",
		"mlprio_override=", "mlprio_fail=" };
	char notes[256];

	if (!_is_new(job_ptr) ||
	    !_notes(job_ptr->admin_comment, keys, sizeof(keys) / sizeof(keys[0]),
		    notes, sizeof(notes)) ||
	    !mlprio_first_sight(ctx, job_ptr->job_id))
		return;
	info("%s: JobId=%u user=%s: %s", plugin_type, job_ptr->job_id,
	     user ? user : "?", notes);
}

/*
 * mode=shadow: one line per new job with everything enforce mode would have
 * done to it: the SITE it would get and job_submit's notes (the limit it
 * would fill, a refusal or warning). `mlprio-model shadow-report` reads these
 * lines against sacct.
 */
static void _log_shadow(job_record_t *job_ptr, const char *user, int64_t f)
{
	static const char *const keys[] = {
		"mlprio_shadow_limit=", "mlprio_shadow_refuse=",
		"mlprio_shadow_warn=" };
	char notes[256];

	if (!_is_new(job_ptr) || !mlprio_first_sight(ctx, job_ptr->job_id))
		return;
	_notes(job_ptr->admin_comment, keys, sizeof(keys) / sizeof(keys[0]),
	       notes, sizeof(notes));
	info("%s: shadow: JobId=%u user=%s would_site=%"PRId64"%s%s",
	     plugin_type, job_ptr->job_id, user ? user : "?", f,
	     notes[0] ? " " : "", notes);
}

static bool _shadow_mode(void)
{
	mlprio_params_t p;

	memset(&p, 0, sizeof(p));
	mlprio_ctx_params(ctx, &p);
	return p.mode == MLPRIO_MODE_SHADOW;
}

/* Caller holds the job write lock. */
/*
 * The advisor's answer, once, where `scontrol show job` and mlprio-why show it:
 * "mlprio_llm_run=HH:MM:SS mlprio_llm_conf=0.80" appended to admin_comment
 * (the answer as given; SITE uses it within llm_min/max_factor of the model's
 * prediction). set_job_prio() holds the job write lock here. Jobs without an
 * advisor key cost one strstr.
 */
static void _note_advice(job_record_t *job_ptr)
{
	double run_s = 0, conf = 0;
	char dur[32];

	if (!job_ptr->admin_comment ||
	    !strstr(job_ptr->admin_comment, "mlprio_llm=") ||
	    strstr(job_ptr->admin_comment, "mlprio_llm_run=") ||
	    (mlprio_advice_of(ctx, job_ptr->admin_comment, &run_s, &conf) !=
	     MLPRIO_OK))
		return;
	mlprio_format_duration(run_s, dur, sizeof(dur));
	xstrfmtcat(job_ptr->admin_comment, " mlprio_llm_run=%s mlprio_llm_conf=%.2f",
		   dur, conf);
}

static void _set_factor(job_record_t *job_ptr)
{
	mlprio_job_t j;
	int64_t f = 0;
	int rc;

	if (!ctx) {
		job_ptr->site_factor = NICE_OFFSET;
		return;
	}
	_fill_job(job_ptr, &j);
	rc = mlprio_site_factor(ctx, &j, &f);
	if (rc == MLPRIO_ERR_INTERNAL) {
		error("%s: JobId=%u: %s", plugin_type, job_ptr->job_id,
		      mlprio_last_error());
		f = 0;
	}
	if (_shadow_mode()) {
		/* Computed and logged, never applied. */
		if (rc == MLPRIO_OK)
			_log_shadow(job_ptr, j.user, f);
		f = 0;
	} else {
		_log_admin_note(job_ptr, j.user);
	}
	_note_advice(job_ptr);
	job_ptr->site_factor = (uint32_t) ((int64_t) NICE_OFFSET + f);
}

/* Jobs that ended before this (less a minute's slack) were offered already. */
static time_t history_watermark = 0;	/* under slurmctld's job lock */
static time_t history_logged = 0;

static int _end_state(uint32_t job_state)
{
	switch (job_state & JOB_STATE_BASE) {
	case JOB_COMPLETE:
		return MLPRIO_END_COMPLETED;
	case JOB_FAILED:
		return MLPRIO_END_FAILED;
	case JOB_TIMEOUT:
		return MLPRIO_END_TIMEOUT;
	case JOB_OOM:
		return MLPRIO_END_OOM;
	case JOB_NODE_FAIL:
		return MLPRIO_END_NODE_FAIL;
	case JOB_CANCELLED:
		return MLPRIO_END_CANCELLED;
	default:
		return MLPRIO_END_OTHER;
	}
}

/*
 * Teaches the live feature store a job that ran and ended (caller holds the
 * job read or write lock). The ABI learns each job id once; the watermark only
 * saves calls for jobs offered by an earlier scan.
 */
static void _learn_if_finished(job_record_t *job_ptr, size_t *learned)
{
	mlprio_finish_t f;
	size_t n = 0;

	if (!IS_JOB_FINISHED(job_ptr) || !job_ptr->start_time ||
	    (job_ptr->end_time < job_ptr->start_time) ||
	    (job_ptr->end_time + 60 < history_watermark))
		return;
	_fill_job(job_ptr, &f.job);
	f.start_time = (double) job_ptr->start_time;
	f.end_time = (double) job_ptr->end_time;
	f.state = _end_state(job_ptr->job_state);
	if (mlprio_observe_finished(ctx, &f, 1, &n) == MLPRIO_OK)
		*learned += n;
}

static int _learn_finished(void *x, void *arg)
{
	_learn_if_finished(x, arg);
	return SLURM_SUCCESS;
}

static void _history_learned(size_t learned, time_t scan_start)
{
	time_t now = time(NULL);

	history_watermark = scan_start;
	if (!learned)
		return;
	if (!history_logged || (now - history_logged >= 600)) {
		info("%s: live history: learned %zu ended jobs (each user's next prediction uses them)",
		     plugin_type, learned);
		history_logged = now;
	} else {
		debug("%s: live history: learned %zu ended jobs",
		      plugin_type, learned);
	}
}

/*
 * Scans the job list for ended jobs under the job read lock: this is how the
 * live history learns without slurmdbd (site_factor_p_update does the same
 * when it runs). About a microsecond per ended job still in the list.
 */
static void _scan_history(void)
{
	slurmctld_lock_t job_read_lock = { .job = READ_LOCK };
	size_t learned = 0;
	time_t start = time(NULL);

	lock_slurmctld(job_read_lock);
	list_for_each(job_list, _learn_finished, &learned);
	_history_learned(learned, start);
	unlock_slurmctld(job_read_lock);
}

static int64_t _now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct reprio_counts {
	int pending;
	int changed;
};

/* Re-prioritises one pending job; counts it, and whether its priority moved. */
static int _reprio_pending(void *x, void *arg)
{
	job_record_t *job_ptr = x;
	struct reprio_counts *c = arg;
	uint32_t before;

	if (!IS_JOB_PENDING(job_ptr))
		return SLURM_SUCCESS;
	before = job_ptr->priority;
	set_job_prio(job_ptr);
	if (c) {
		c->pending++;
		if (job_ptr->priority != before)
			c->changed++;
	}
	return SLURM_SUCCESS;
}

struct update_counts {
	int pending;
	size_t learned;
};

static int _update_pending(void *x, void *arg)
{
	job_record_t *job_ptr = x;
	struct update_counts *c = arg;

	if (IS_JOB_PENDING(job_ptr)) {
		_set_factor(job_ptr);
		c->pending++;
	} else if (IS_JOB_FINISHED(job_ptr)) {
		mlprio_forget(ctx, job_ptr->job_id);
	}
	return SLURM_SUCCESS;
}

/*
 * Applies late answers. Waits in the ABI with no lock held; only then takes
 * the job write lock (config read, job write, node read, part read: what
 * set_job_prio() needs) and releases it before waiting again, so it can never
 * hold a Slurm lock while blocked on the plugin, and fini() can always join it.
 */
/*
 * Pending jobs recovered from the state file carry the SITE that the previous
 * slurmctld computed under its parameters. From 23.11 `scontrol reconfigure`
 * is such a restart (a new slurmctld that loads the plugins afresh), so the
 * recovered jobs are re-scored once, as soon as the job list holds them: one
 * try per applier wake-up (about 1 s), at most STARTUP_TRIES. Returns the next
 * try number, STARTUP_TRIES when done.
 */
#define STARTUP_TRIES 60
static int _startup_pass(int tries)
{
	slurmctld_lock_t job_write_lock = {
		.conf = READ_LOCK, .job = WRITE_LOCK, .node = READ_LOCK,
		.part = READ_LOCK };
	int jobs;

	lock_slurmctld(job_write_lock);
	jobs = job_list ? list_count(job_list) : 0;
	if (jobs > 0)
		list_for_each(job_list, _reprio_pending, NULL);
	unlock_slurmctld(job_write_lock);
	if (jobs > 0) {
		info("%s: re-scored the pending jobs recovered at start (%d jobs in the list)",
		     plugin_type, jobs);
		return STARTUP_TRIES;
	}
	return tries + 1;
}

static void *_applier(void *arg)
{
	slurmctld_lock_t job_write_lock = {
		.conf = READ_LOCK, .job = WRITE_LOCK, .node = READ_LOCK,
		.part = READ_LOCK };
	uint32_t ids[APPLY_BATCH];
	int64_t next_scan = _now_ms();
	int startup_tries = 0;

	while (!applier_stop) {
		size_t n = 0, i;
		int all = 0;
		struct reprio_counts counts = { 0, 0 };
		int64_t period = mlprio_history_period_ms(ctx);

		if ((period > 0) && (_now_ms() >= next_scan)) {
			_scan_history();
			next_scan = _now_ms() + period;
		}
		if (startup_tries < STARTUP_TRIES)
			startup_tries = _startup_pass(startup_tries);
		if (mlprio_take_ready(ctx, ids, APPLY_BATCH, &n, &all, 1000) !=
		    MLPRIO_OK)
			continue;
		if (applier_stop)
			break;
		lock_slurmctld(job_write_lock);
		if (all) {
			list_for_each(job_list, _reprio_pending, &counts);
		} else {
			for (i = 0; i < n; i++) {
				job_record_t *job_ptr = find_job_record(ids[i]);
				if (job_ptr && IS_JOB_PENDING(job_ptr))
					set_job_prio(job_ptr);
			}
		}
		unlock_slurmctld(job_write_lock);
		if (all && counts.changed)
			info("%s: re-prioritised pending jobs after a model change: %d of %d changed priority",
			     plugin_type, counts.changed, counts.pending);
		else if (all)
			debug("%s: model change: none of the %d pending jobs changed priority",
			      plugin_type, counts.pending);
		else
			debug("%s: applied %zu late answers", plugin_type, n);
	}
	return NULL;
}

extern int init(void)
{
	char desc[512];
	int rc;

	mlprio_set_log(_log_cb);
	rc = mlprio_ctx_create(slurm_conf.site_factor_params, _conf_epoch(),
			       &ctx);
	if (!ctx) {
		/* Never fatal: the plugin stays loaded and neutral. */
		error("%s: cannot create context: %s", plugin_type,
		      mlprio_last_error());
		return SLURM_SUCCESS;
	}
	mlprio_ctx_describe(ctx, desc, sizeof(desc));
	/* slurmctld loads only plugins built for its own exact version. */
	info("%s: loaded, built for Slurm %d.%02d.%d (%s)%s", plugin_type,
	     SLURM_VERSION_MAJOR(plugin_version),
	     SLURM_VERSION_MINOR(plugin_version),
	     SLURM_VERSION_MICRO(plugin_version), desc,
	     (rc == MLPRIO_OK) ? "" : "; SITE factor is neutral");
	if (mlprio_llm_enable(ctx) != MLPRIO_OK)
		error("%s: LLM advisor: %s", plugin_type, mlprio_last_error());
	if (mlprio_worker_start(ctx) != MLPRIO_OK) {
		error("%s: worker not started: %s", plugin_type,
		      mlprio_last_error());
		return SLURM_SUCCESS;
	}
	applier_stop = false;
	MLPRIO_THREAD_CREATE("mlprio_applier", &applier_tid, _applier, NULL);
	applier_running = true;
	return SLURM_SUCCESS;
}

extern int fini(void)
{
	if (applier_running) {
		applier_stop = true;
		mlprio_wake(ctx);
		MLPRIO_THREAD_JOIN(applier_tid);
		applier_running = false;
	}
	pthread_rwlock_wrlock(&ctx_lock);
	if (ctx) {
		mlprio_ctx_free(ctx);	/* joins the C++ worker and the advisor */
		ctx = NULL;
	}
	pthread_rwlock_unlock(&ctx_lock);
	info("%s: unloaded", plugin_type);
	return SLURM_SUCCESS;
}

/*
 * Called with no slurmctld lock held after "scontrol reconfigure" (and SIGHUP,
 * setdebugflags, fs dampening): after the RPC's reply is sent, so a submission
 * can race it; job_submit/mlprio's decisions wait for this configuration's
 * model either way (mlprio_decide's fence), and whichever of the two loads it
 * first, the other does not load it again.
 */
extern void site_factor_p_reconfig(void)
{
	char desc[512];
	int rc;

	if (!ctx)
		return;
	rc = mlprio_ctx_reconfigure(ctx, slurm_conf.site_factor_params,
				    _conf_epoch());
	mlprio_ctx_describe(ctx, desc, sizeof(desc));
	info("%s: reconfigured (%s)%s", plugin_type, desc,
	     (rc == MLPRIO_OK) ? "" : "; SITE factor is neutral");
}

extern void site_factor_p_set(job_record_t *job_ptr)
{
	_set_factor(job_ptr);
}

/* Only run by multifactor's decay thread, i.e. with slurmdbd. */
extern void site_factor_p_update(void)
{
	struct update_counts c = { 0, 0 };
	time_t start = time(NULL);

	if (!ctx)
		return;
	/* Ended jobs first, so pending jobs are scored with what they taught. */
	if (mlprio_history_period_ms(ctx) > 0) {
		list_for_each(job_list, _learn_finished, &c.learned);
		_history_learned(c.learned, start);
	}
	list_for_each(job_list, _update_pending, &c);
	/* A changed model file is seen at least every PriorityCalcPeriod. */
	mlprio_ctx_poke(ctx);
	/* Once per PriorityCalcPeriod (default 5 min). */
	info("%s: update: site factor set for %d pending jobs", plugin_type,
	     c.pending);
}

/*
 * The hub, called by job_submit/mlprio under slurmctld's read locks and the
 * job_submit mutex. decide: one in-process prediction (microseconds), or right
 * after a slurm.conf re-read a wait of at most reload_wait_ms for the worker
 * to load the new model. llm_submit only queues the job for the advisor, O(1),
 * never the network.
 */
static int _hub_decide(const char *params, uint64_t conf_epoch,
		       const mlprio_job_t *job, mlprio_decision_t *out)
{
	int rc = MLPRIO_NO_MODEL;

	if (pthread_rwlock_tryrdlock(&ctx_lock))
		return rc;	/* fini() in progress */
	if (ctx)
		rc = mlprio_decide(ctx, params, conf_epoch, job, out);
	pthread_rwlock_unlock(&ctx_lock);
	return rc;
}

static int _hub_llm_submit(uint64_t key, const mlprio_job_t *job)
{
	int rc = MLPRIO_NO_MODEL;

	if (pthread_rwlock_tryrdlock(&ctx_lock))
		return rc;	/* fini() in progress */
	if (ctx)
		rc = mlprio_llm_submit(ctx, key, job);
	pthread_rwlock_unlock(&ctx_lock);
	return rc;
}

static int _hub_fsdp_advise(const mlprio_job_t *job, const char *tres,
			    int64_t gpus_total, mlprio_fsdp_advice_t *out)
{
	int rc = MLPRIO_NO_MODEL;

	if (pthread_rwlock_tryrdlock(&ctx_lock))
		return rc;	/* fini() in progress */
	if (ctx)
		rc = mlprio_fsdp_advise(ctx, job, tres, gpus_total, out);
	pthread_rwlock_unlock(&ctx_lock);
	return rc;
}

extern const mlprio_hub_t mlprio_hub_v4;
const mlprio_hub_t mlprio_hub_v4 = {
	.version = MLPRIO_HUB_VERSION,
	.size = sizeof(mlprio_hub_t),
	.decide = _hub_decide,
	.llm_submit = _hub_llm_submit,
	.last_error = mlprio_last_error,
	.fsdp_advise = _hub_fsdp_advise,
};
