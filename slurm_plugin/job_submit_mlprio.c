/*****************************************************************************\
 *  job_submit_mlprio.c - job_submit plugin that fills a missing time limit
 *  from mlprio's predicted run time, refuses (or warns about) jobs the model
 *  predicts will fail, and records the LLM fine-tuning parameters found in the
 *  job script (#MLPRIO lines), comment or name in admin_comment so that
 *  site_factor/mlprio sees them later.
 *
 *  job_submit() runs under slurmctld's read locks and one global job_submit
 *  mutex, so it does only in-process work: one model call (microseconds), no
 *  network, no waiting on any thread. The model file's mtime is checked at
 *  most every check_period_ms (a stat); a changed file is reloaded by the
 *  ABI's own watcher thread, which touches no Slurm state.
 *
 *  With llm_url set, each submission gets a random advisor key in
 *  admin_comment ("mlprio_llm=<hex>") and is handed, script included, to the
 *  LLM advisor that site_factor/mlprio owns (its exported hub function, found
 *  once with dlopen(RTLD_NOLOAD) and kept referenced until fini). That call
 *  only queues; the answer never delays or changes the submission.
\*****************************************************************************/

#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* dladdr */
#endif
#include <dlfcn.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <sys/random.h>

#include "slurm/slurm.h"
#include "slurm/slurm_errno.h"

#include "src/common/log.h"
#include "src/common/uid.h"
#include "src/common/xmalloc.h"
#include "src/common/xstring.h"
#include "src/slurmctld/slurmctld.h"

#include "mlprio_abi.h"

const char plugin_name[] = "mlprio job submit plugin";
const char plugin_type[] = "job_submit/mlprio";
const uint32_t plugin_version = SLURM_VERSION_NUMBER;

static mlprio_ctx_t *ctx = NULL;
static char *applied_params = NULL;	/* PrioritySiteFactorParameters in use */
/* LLM hub of site_factor/mlprio; only touched under the job_submit mutex. */
static void *sf_handle = NULL;
static mlprio_llm_hub_fn llm_hub = NULL;
static time_t hub_next_try = 0;
static uint64_t key_seed = 0, key_count = 0;

static void _log_cb(int level, const char *msg)
{
	if (level == 0)
		error("%s: %s", plugin_type, msg);
	else if (level == 1)
		info("%s: %s", plugin_type, msg);
	else
		debug("%s: %s", plugin_type, msg);
}

extern int init(void)
{
	char desc[512];
	int rc;

	mlprio_set_log(_log_cb);
	rc = mlprio_ctx_create(slurm_conf.site_factor_params, &ctx);
	if (!ctx) {
		error("%s: cannot create context: %s", plugin_type,
		      mlprio_last_error());
		return SLURM_SUCCESS;
	}
	applied_params = xstrdup(slurm_conf.site_factor_params);
	if (getrandom(&key_seed, sizeof(key_seed), GRND_NONBLOCK) !=
	    sizeof(key_seed))
		key_seed = ((uint64_t) time(NULL) << 20) ^ (uint64_t) getpid();
	mlprio_ctx_describe(ctx, desc, sizeof(desc));
	info("%s: loaded (%s)%s", plugin_type, desc,
	     (rc == MLPRIO_OK) ? "" : "; submissions pass unchanged");
	/* The watcher only stats and reloads the model file. */
	if (mlprio_worker_start(ctx) != MLPRIO_OK)
		error("%s: model watcher not started: %s", plugin_type,
		      mlprio_last_error());
	return SLURM_SUCCESS;
}

extern int fini(void)
{
	if (ctx) {
		mlprio_ctx_free(ctx);
		ctx = NULL;
	}
	xfree(applied_params);
	llm_hub = NULL;
	if (sf_handle) {
		dlclose(sf_handle);
		sf_handle = NULL;
	}
	return SLURM_SUCCESS;
}

/*
 * Finds site_factor_mlprio.so next to this plugin, already loaded by
 * slurmctld (RTLD_NOLOAD: never loads anything, and the reference it takes
 * keeps the hub mapped until our fini). Retried at most every 10 s.
 */
static void _resolve_hub(void)
{
	Dl_info dli;
	char *path, *slash;
	time_t now = time(NULL);

	if (llm_hub || (now < hub_next_try))
		return;
	hub_next_try = now + 10;
	if (!dladdr(&key_seed, &dli) || !dli.dli_fname)
		return;
	path = xstrdup(dli.dli_fname);
	if ((slash = strrchr(path, '/')))
		slash[1] = '\0';
	else
		path[0] = '\0';
	xstrcat(path, "site_factor_mlprio.so");
	if (!sf_handle)
		sf_handle = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
	if (sf_handle) {
		void *sym = dlsym(sf_handle, MLPRIO_LLM_HUB_SYMBOL);
		/* POSIX: a dlsym() result converts to a function pointer. */
		memcpy(&llm_hub, &sym, sizeof(llm_hub));
	}
	if (llm_hub)
		info("%s: LLM advice goes to site_factor/mlprio (%s)",
		     plugin_type, path);
	else
		error("%s: llm_url is set but %s is not loaded (PrioritySiteFactorPlugin=site_factor/mlprio?); no LLM advice",
		      plugin_type, path);
	xfree(path);
}

/* splitmix64 of a per-process random seed and a counter: unique, never 0. */
static uint64_t _next_key(void)
{
	uint64_t z = key_seed + (++key_count) * 0x9e3779b97f4a7c15ULL;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return z ? z : 1;
}

/* Smallest MaxTime (minutes) over the requested partitions, or INFINITE. */
static uint32_t _max_time(const char *parts)
{
	uint32_t max = INFINITE;
	char *tmp, *tok, *save = NULL;
	part_record_t *part_ptr;

	if (!parts || !parts[0])
		return default_part_loc ? default_part_loc->max_time : INFINITE;
	tmp = xstrdup(parts);
	for (tok = strtok_r(tmp, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if ((part_ptr = find_part_record(tok)) &&
		    (part_ptr->max_time != NO_VAL) &&
		    (part_ptr->max_time < max))
			max = part_ptr->max_time;
	}
	xfree(tmp);
	return max;
}

static double _gpus_in(const char *tres)
{
	const char *p;

	if (!tres || !(p = strstr(tres, "gpu")))
		return -1;
	while ((p = strchr(p, ':'))) {
		char *end = NULL;
		double v = strtod(p + 1, &end);
		if (end != p + 1 && (!*end || *end == ',' || *end == ';'))
			return v;
		p++;
	}
	return 1;
}

static void _msg(char **err_msg, const char *text)
{
	if (*err_msg)
		xstrfmtcat(*err_msg, "\n%s", text);
	else
		*err_msg = xstrdup(text);
}

extern int job_submit(job_desc_msg_t *job_desc, uint32_t submit_uid,
		      char **err_msg)
{
	mlprio_params_t params;
	mlprio_prediction_t pred;
	mlprio_job_t j;
	char feats[512], text[512], d1[32], d2[32];
	int nfeat;
	uint64_t llm_key = 0;

	if (!ctx)
		return SLURM_SUCCESS;

	/*
	 * 22.05 re-creates job_submit plugins on reconfigure only when
	 * JobSubmitPlugins changes, so pick up new parameters here (we hold
	 * the config read lock); this reloads once per change, not per job.
	 */
	if (xstrcmp(applied_params, slurm_conf.site_factor_params)) {
		xfree(applied_params);
		applied_params = xstrdup(slurm_conf.site_factor_params);
		if (mlprio_ctx_reconfigure(ctx, applied_params) != MLPRIO_OK)
			error("%s: new parameters: %s", plugin_type,
			      mlprio_last_error());
		else
			info("%s: parameters changed; reconfigured",
			     plugin_type);
	}

	nfeat = mlprio_extract_features(job_desc->script, job_desc->comment,
					job_desc->name, feats, sizeof(feats));
	if (nfeat > 0) {
		/* Users cannot set admin_comment; site_factor reads it. */
		if (job_desc->admin_comment)
			xstrfmtcat(job_desc->admin_comment, " mlprio: %s",
				   feats);
		else
			job_desc->admin_comment = xstrdup_printf("mlprio: %s",
								 feats);
	}

	if (mlprio_ctx_params(ctx, &params) != MLPRIO_OK)
		return SLURM_SUCCESS;	/* neutral: pass unchanged */

	if (params.have_llm) {
		_resolve_hub();
		if (llm_hub) {
			llm_key = _next_key();
			/* Users cannot set admin_comment, so nor the key. */
			if (job_desc->admin_comment)
				xstrfmtcat(job_desc->admin_comment,
					   " mlprio_llm=%016"PRIx64, llm_key);
			else
				job_desc->admin_comment = xstrdup_printf(
					"mlprio_llm=%016"PRIx64, llm_key);
		}
	}

	memset(&j, 0, sizeof(j));
	j.submit_time = (double) time(NULL);
	j.time_limit_s = ((job_desc->time_limit == NO_VAL) ||
			  (job_desc->time_limit == INFINITE)) ?
		-1 : job_desc->time_limit * 60.0;
	j.req_cpus = (job_desc->min_cpus == NO_VAL) ? -1 :
		(int64_t) job_desc->min_cpus;
	j.req_nodes = (job_desc->min_nodes == NO_VAL) ? -1 :
		(int64_t) job_desc->min_nodes;
	j.req_gpus = _gpus_in(job_desc->tres_per_job);
	if (j.req_gpus < 0)
		j.req_gpus = _gpus_in(job_desc->tres_per_node);
	j.req_mem_bytes = -1;
	/* Cached: slurmctld resolves this uid for the job record anyway. */
	j.user = uid_to_string_cached((uid_t) job_desc->user_id);
	j.account = job_desc->account;
	j.partition = job_desc->partition;
	j.qos = job_desc->qos;
	j.name = job_desc->name;
	j.comment = job_desc->comment;
	j.admin_comment = job_desc->admin_comment;
	j.script = job_desc->script;

	/* Only queues (the advisor's thread does the HTTP call). */
	if (llm_key && (llm_hub(llm_key, &j) != MLPRIO_OK))
		debug("%s: LLM advisor: %s", plugin_type, mlprio_last_error());

	if (mlprio_predict(ctx, &j, &pred) != MLPRIO_OK) {
		debug("%s: no prediction: %s", plugin_type,
		      mlprio_last_error());
		return SLURM_SUCCESS;
	}

	if (isfinite(pred.fail_prob) && (pred.fail_prob > params.refuse_above)) {
		snprintf(text, sizeof(text),
			 "mlprio: this job is predicted to fail with probability %.2f (limit %.2f): "
			 "check memory per GPU, batch size, sequence length and LoRA rank (#MLPRIO lines), "
			 "or ask your admin",
			 pred.fail_prob, params.refuse_above);
		if (params.refuse_mode == MLPRIO_REFUSE) {
			info("%s: refused job from uid %u: failure probability %.2f",
			     plugin_type, submit_uid, pred.fail_prob);
			_msg(err_msg, text);
			/*
			 * No ESLURM_* code means "predicted to fail"; the
			 * message says why (job_submit/lua does the same).
			 */
			return SLURM_ERROR;
		}
		_msg(err_msg, text);
		info("%s: warned uid %u: failure probability %.2f", plugin_type,
		     submit_uid, pred.fail_prob);
	}

	if ((job_desc->time_limit == NO_VAL) && isfinite(pred.runtime_s) &&
	    (pred.runtime_s > 0)) {
		double lim_s = pred.runtime_s * (1.0 + params.limit_margin);
		uint32_t lim_min = (uint32_t) ceil(lim_s / 60.0);
		uint32_t max = _max_time(job_desc->partition);
		bool clamped = false;

		if (isfinite(pred.runtime_upper_s) && pred.runtime_upper_s > lim_s)
			lim_min = (uint32_t) ceil(pred.runtime_upper_s / 60.0);
		if (lim_min < 1)
			lim_min = 1;
		if ((max != INFINITE) && (lim_min > max)) {
			lim_min = max;
			clamped = true;
		}
		job_desc->time_limit = lim_min;
		mlprio_format_duration(lim_min * 60.0, d1, sizeof(d1));
		mlprio_format_duration(pred.runtime_s, d2, sizeof(d2));
		snprintf(text, sizeof(text),
			 "mlprio: time limit set to %s (predicted run %s + margin%s)",
			 d1, d2, clamped ? ", clamped to the partition's MaxTime" : "");
		_msg(err_msg, text);
		info("%s: uid %u: %s", plugin_type, submit_uid, text);
	}
	return SLURM_SUCCESS;
}

extern int job_modify(job_desc_msg_t *job_desc, job_record_t *job_ptr,
		      uint32_t submit_uid)
{
	return SLURM_SUCCESS;
}
