/*****************************************************************************\
 *  job_submit_mlprio.c - job_submit plugin that fills a missing time limit
 *  from mlprio's predicted run time, refuses (or warns about) jobs the model
 *  predicts will fail, and records the LLM fine-tuning parameters found in the
 *  job script (#MLPRIO lines), comment or name in admin_comment so that
 *  site_factor/mlprio sees them later.
 *
 *  job_submit() runs under slurmctld's read locks and one global job_submit
 *  mutex, so it does only in-process work: one model call (microseconds), no
 *  network, no file I/O.
 *
 *  With PrioritySiteFactorPlugin=site_factor/mlprio (the usual setup) this
 *  plugin has no model of its own: it decides through the hub that
 *  site_factor_mlprio.so exports (found once with dlopen(RTLD_NOLOAD) and kept
 *  referenced until fini), so both plugins always use the same model, and a
 *  reload (scontrol reconfigure, changed file) switches both at once. 22.05
 *  has no reconfigure hook for job_submit plugins, so each decision names the
 *  slurm.conf reading it runs under (slurm_conf.last_update + parameters);
 *  right after a re-read the hub's worker loads that configuration's model
 *  while the decision waits, at most reload_wait_ms. Without site_factor/mlprio
 *  this plugin keeps its own context, with the same fence on its own worker.
 *
 *  With llm_url set, each submission gets a random advisor key in
 *  admin_comment ("mlprio_llm=<hex>") and is handed, script included, to the
 *  LLM advisor that site_factor/mlprio owns. That call only queues; the answer
 *  never delays or changes the submission.
\*****************************************************************************/

#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* dladdr */
#endif
#include <dlfcn.h>
#include <inttypes.h>
#include <link.h>	/* dl_iterate_phdr */
#include <math.h>
#include <string.h>
#include <sys/random.h>

#include "slurm/slurm.h"
#include "slurm/slurm_errno.h"

#include "src/common/assoc_mgr.h"
#include "src/common/log.h"
#include "src/common/uid.h"
#include "src/common/xmalloc.h"
#include "src/common/xstring.h"
#include "src/slurmctld/slurmctld.h"

#include "mlprio_abi.h"
#include "slurm_compat.h"

const char plugin_name[] = "mlprio job submit plugin";
const char plugin_type[] = "job_submit/mlprio";
const uint32_t plugin_version = SLURM_VERSION_NUMBER;

#define SITE_FACTOR_SO "site_factor_mlprio.so"

/* Our own context, only without site_factor/mlprio. */
static mlprio_ctx_t *ctx = NULL;
static bool use_hub = false;
/* site_factor/mlprio's hub; only touched under the job_submit mutex. */
static void *sf_handle = NULL;
static const mlprio_hub_t *hub = NULL;
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
	if (getrandom(&key_seed, sizeof(key_seed), GRND_NONBLOCK) !=
	    sizeof(key_seed))
		key_seed = ((uint64_t) time(NULL) << 20) ^ (uint64_t) getpid();
	/* site_factor/mlprio is loaded later (priority_g_init); found lazily. */
	use_hub = !xstrcmp(slurm_conf.site_factor_plugin, "site_factor/mlprio");
	if (use_hub) {
		info("%s: loaded, built for Slurm %d.%02d.%d; decides with the model of site_factor/mlprio (one model for both plugins)",
		     plugin_type, SLURM_VERSION_MAJOR(plugin_version),
		     SLURM_VERSION_MINOR(plugin_version),
		     SLURM_VERSION_MICRO(plugin_version));
		return SLURM_SUCCESS;
	}
	rc = mlprio_ctx_create(slurm_conf.site_factor_params,
			       mlprio_conf_epoch(slurm_conf.site_factor_params,
						 (int64_t) slurm_conf.last_update),
			       &ctx);
	if (!ctx) {
		error("%s: cannot create context: %s", plugin_type,
		      mlprio_last_error());
		return SLURM_SUCCESS;
	}
	mlprio_ctx_describe(ctx, desc, sizeof(desc));
	info("%s: loaded, built for Slurm %d.%02d.%d, without site_factor/mlprio: own model (%s)%s",
	     plugin_type, SLURM_VERSION_MAJOR(plugin_version),
	     SLURM_VERSION_MINOR(plugin_version),
	     SLURM_VERSION_MICRO(plugin_version), desc,
	     (rc == MLPRIO_OK) ? "" : "; submissions pass unchanged");
	/* Watches the model file and loads new configurations off-lock. */
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
	hub = NULL;
	if (sf_handle) {
		dlclose(sf_handle);
		sf_handle = NULL;
	}
	return SLURM_SUCCESS;
}

/* dl_iterate_phdr callback: the loaded site_factor_mlprio.so, if any. */
static int _find_sf(struct dl_phdr_info *info, size_t size, void *arg)
{
	const char *name = info->dlpi_name, *slash;
	char **found = arg;

	if (!name || !(slash = strrchr(name, '/')) ||
	    xstrcmp(slash + 1, SITE_FACTOR_SO))
		return 0;
	*found = xstrdup(name);
	return 1;
}

/*
 * Finds the hub of site_factor_mlprio.so among the objects slurmctld has
 * loaded (whatever PluginDir entry it came from). RTLD_NOLOAD never loads
 * anything; the reference it takes keeps the hub mapped until our fini.
 * No file I/O. Retried at most once a second while not found.
 */
static const mlprio_hub_t *_resolve_hub(void)
{
	char *path = NULL;
	const mlprio_hub_t *h;
	time_t now;

	if (hub)
		return hub;
	now = time(NULL);
	if (now < hub_next_try)
		return NULL;
	hub_next_try = now + 1;
	dl_iterate_phdr(_find_sf, &path);
	if (!path) {
		error("%s: site_factor/mlprio is not loaded (yet); job passed unchanged",
		      plugin_type);
		return NULL;
	}
	if (!sf_handle)
		sf_handle = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
	h = sf_handle ? dlsym(sf_handle, MLPRIO_HUB_SYMBOL) : NULL;
	if (!h || (h->version != MLPRIO_HUB_VERSION) ||
	    (h->size != sizeof(mlprio_hub_t))) {
		error("%s: %s has no compatible %s (built from another mlprio?); jobs pass unchanged",
		      plugin_type, path, MLPRIO_HUB_SYMBOL);
		xfree(path);
		return NULL;
	}
	hub = h;
	info("%s: decisions use the model of site_factor/mlprio (%s)",
	     plugin_type, path);
	xfree(path);
	return hub;
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

/*
 * The DefaultTime Slurm would give the job (minutes), NO_VAL when its
 * partition (the first listed that exists, else the default) has none.
 */
static uint32_t _default_time(const char *parts)
{
	uint32_t def = NO_VAL;
	char *tmp, *tok, *save = NULL;
	part_record_t *part_ptr;

	if (!parts || !parts[0])
		return default_part_loc ? default_part_loc->default_time : NO_VAL;
	tmp = xstrdup(parts);
	for (tok = strtok_r(tmp, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if ((part_ptr = find_part_record(tok))) {
			def = part_ptr->default_time;
			break;
		}
	}
	xfree(tmp);
	return def;
}

static void _msg(char **err_msg, const char *text)
{
	if (*err_msg)
		xstrfmtcat(*err_msg, "\n%s", text);
	else
		*err_msg = xstrdup(text);
}

/*
 * The account and QOS the job will run under: what the user named, else the
 * user's default account and the association's default QOS from slurmctld's
 * association cache (what job_submit/lua's default_account/default_qos read).
 * locked = true: memory only, never a database call; slurmctld locks are taken
 * before assoc_mgr locks, as everywhere in slurmctld. NULL without accounting.
 * Caller xfree()s both.
 */
static void _acct_qos(job_desc_msg_t *job_desc, char **acct, char **qos)
{
	assoc_mgr_lock_t locks = { .assoc = READ_LOCK, .qos = READ_LOCK,
				   .user = READ_LOCK };
	slurmdb_user_rec_t user;
	slurmdb_assoc_rec_t assoc;
	slurmdb_qos_rec_t qrec;

	*acct = xstrdup(job_desc->account);
	*qos = xstrdup(job_desc->qos);
	if (*acct && *qos)
		return;
	assoc_mgr_lock(&locks);
	if (!*acct) {
		memset(&user, 0, sizeof(user));
		user.uid = job_desc->user_id;
		if (assoc_mgr_fill_in_user(acct_db_conn, &user,
					   accounting_enforce, NULL,
					   true) == SLURM_SUCCESS)
			*acct = xstrdup(user.default_acct);
	}
	if (!*qos && *acct) {
		memset(&assoc, 0, sizeof(assoc));
		assoc.uid = job_desc->user_id;
		assoc.acct = *acct;
		assoc.partition = job_desc->partition;
		if ((assoc_mgr_fill_in_assoc(acct_db_conn, &assoc,
					     accounting_enforce, NULL,
					     true) == SLURM_SUCCESS) &&
		    assoc.def_qos_id) {
			memset(&qrec, 0, sizeof(qrec));
			qrec.id = assoc.def_qos_id;
			if (assoc_mgr_fill_in_qos(acct_db_conn, &qrec,
						  accounting_enforce, NULL,
						  true) == SLURM_SUCCESS)
				*qos = xstrdup(qrec.name);
		}
	}
	assoc_mgr_unlock(&locks);
}

static void _append_admin_comment(job_desc_msg_t *job_desc, const char *s)
{
	if (job_desc->admin_comment)
		xstrfmtcat(job_desc->admin_comment, " %s", s);
	else
		job_desc->admin_comment = xstrdup(s);
}

/*
 * The short reason `scontrol show job` shows for every decided job: SITE
 * ranks by the predicted run (mlprio_pred=) and lowers likely failures
 * (mlprio_pfail=, when the model has a failure classifier; a warned,
 * exempted or overridden job already carries the probability in its note).
 */
static void _note_prediction(job_desc_msg_t *job_desc,
			     const mlprio_decision_t *d)
{
	char dur[32], text[96];

	if (!isfinite(d->pred.runtime_s))
		return;
	mlprio_format_duration(d->pred.runtime_s, dur, sizeof(dur));
	if ((d->verdict == MLPRIO_VERDICT_PASS) && isfinite(d->pred.fail_prob))
		snprintf(text, sizeof(text), "mlprio_pred=%s mlprio_pfail=%.2f",
			 dur, d->pred.fail_prob);
	else
		snprintf(text, sizeof(text), "mlprio_pred=%s", dur);
	_append_admin_comment(job_desc, text);
}

/* One decision through the hub or our own context; MLPRIO_* status. */
static int _decide(const mlprio_job_t *j, mlprio_decision_t *d,
		   const char **why)
{
	const char *params = slurm_conf.site_factor_params;
	/* Config read lock held: slurm.conf cannot be re-read under us. */
	uint64_t epoch = mlprio_conf_epoch(params,
					   (int64_t) slurm_conf.last_update);
	int rc;

	if (use_hub) {
		if (!_resolve_hub()) {
			*why = "site_factor/mlprio not available";
			return MLPRIO_NO_MODEL;
		}
		rc = hub->decide(params, epoch, j, d);
		*why = hub->last_error();
		return rc;
	}
	if (!ctx) {
		*why = "no context";
		return MLPRIO_NO_MODEL;
	}
	rc = mlprio_decide(ctx, params, epoch, j, d);
	*why = mlprio_last_error();
	return rc;
}

/*
 * The limit job_submit would fill (minutes): only when the user gave none and
 * the model predicted a run time; max(run x (1 + limit_margin), the upper
 * estimate), at least a minute, clamped to the partition's MaxTime. A
 * partition's DefaultTime is left to apply unless override_default_time=1
 * (*def returns it, NO_VAL when the partition has none).
 */
static bool _fill_limit(job_desc_msg_t *job_desc, const mlprio_decision_t *d,
			uint32_t *lim_min, bool *clamped, uint32_t *def)
{
	double lim_s;
	uint32_t max;

	*clamped = false;
	*def = _default_time(job_desc->partition);
	if ((job_desc->time_limit != NO_VAL) || !isfinite(d->pred.runtime_s) ||
	    (d->pred.runtime_s <= 0))
		return false;
	if ((*def != NO_VAL) && !d->params.override_default_time)
		return false;
	lim_s = d->pred.runtime_s * (1.0 + d->params.limit_margin);
	*lim_min = (uint32_t) ceil(lim_s / 60.0);
	if (isfinite(d->pred.runtime_upper_s) && d->pred.runtime_upper_s > lim_s)
		*lim_min = (uint32_t) ceil(d->pred.runtime_upper_s / 60.0);
	if (*lim_min < 1)
		*lim_min = 1;
	max = _max_time(job_desc->partition);
	if ((max != INFINITE) && (*lim_min > max)) {
		*lim_min = max;
		*clamped = true;
	}
	return true;
}

/*
 * mode=shadow: what enforce mode would do is logged and recorded in
 * admin_comment (mlprio_shadow_refuse=P, mlprio_shadow_warn=P,
 * mlprio_shadow_limit=HH:MM:SS; users cannot set it), where site_factor/mlprio
 * logs it again with the job id and `mlprio-model shadow-report` reads it.
 * Nothing reaches the user and the job is not changed.
 */
static int _shadow(job_desc_msg_t *job_desc, uint32_t submit_uid,
		   const mlprio_job_t *j, const mlprio_decision_t *d)
{
	char text[256], note[64], d1[32];
	uint32_t lim_min = 0, def = NO_VAL;
	bool clamped = false;
	size_t used = 0;
	int n;

	text[0] = '\0';
	if ((d->verdict == MLPRIO_VERDICT_REFUSE) ||
	    (d->verdict == MLPRIO_VERDICT_WARN)) {
		snprintf(note, sizeof(note), "mlprio_shadow_%s=%.2f",
			 (d->verdict == MLPRIO_VERDICT_REFUSE) ? "refuse" : "warn",
			 d->pred.fail_prob);
		_append_admin_comment(job_desc, note);
		n = snprintf(text, sizeof(text), "would %s it (failure probability %.2f)",
			     (d->verdict == MLPRIO_VERDICT_REFUSE) ? "refuse" : "warn",
			     d->pred.fail_prob);
		used = (n > 0) ? (size_t) n : 0;
	}
	if (_fill_limit(job_desc, d, &lim_min, &clamped, &def)) {
		mlprio_format_duration(lim_min * 60.0, d1, sizeof(d1));
		snprintf(note, sizeof(note), "mlprio_shadow_limit=%s", d1);
		_append_admin_comment(job_desc, note);
		if (used < sizeof(text))
			snprintf(text + used, sizeof(text) - used,
				 "%swould set time limit %s", used ? ", " : "",
				 d1);
	}
	if (text[0])
		info("%s: shadow: job from uid %u (%s) name %s: %s", plugin_type,
		     submit_uid, j->user ? j->user : "?",
		     job_desc->name ? job_desc->name : "(none)", text);
	return SLURM_SUCCESS;
}

/*
 * FSDP advice, independent of the model's decision: the script's
 * #MLPRIO training configuration against the precomputed table (two hash
 * lookups, no file I/O). Warns past the retry or OOM point; refuses a
 * predicted OOM only with fsdp_refuse_oom=1 (returns SLURM_ERROR then).
 */
static int _fsdp(job_desc_msg_t *job_desc, uint32_t submit_uid,
		 const mlprio_job_t *j, char **err_msg)
{
	mlprio_fsdp_advice_t a;
	const char *tres = job_desc->tres_per_node;
	int64_t gpus = -1;
	double per_job = mlprio_tres_gpus(job_desc->tres_per_job);
	char text[512];
	int rc;

	if (per_job > 0) {
		tres = job_desc->tres_per_job;
		gpus = (int64_t) per_job;
	} else if (mlprio_tres_gpus(job_desc->tres_per_node) > 0) {
		gpus = (int64_t) mlprio_tres_gpus(job_desc->tres_per_node) *
			(((job_desc->min_nodes == NO_VAL) ||
			  (job_desc->min_nodes < 1)) ? 1 : job_desc->min_nodes);
	}
	memset(&a, 0, sizeof(a));
	if (use_hub)
		rc = _resolve_hub() && hub->fsdp_advise ?
			hub->fsdp_advise(j, tres, gpus, &a) : MLPRIO_NO_MODEL;
	else
		rc = ctx ? mlprio_fsdp_advise(ctx, j, tres, gpus, &a) :
			MLPRIO_NO_MODEL;
	if (rc != MLPRIO_OK)
		return SLURM_SUCCESS;
	if (a.problems[0]) {
		snprintf(text, sizeof(text), "mlprio: ignored: %s", a.problems);
		_msg(err_msg, text);
		info("%s: uid %u: training configuration %s", plugin_type,
		     submit_uid, text + 8);
	}
	if ((a.verdict != MLPRIO_FSDP_RETRIES) &&
	    (a.verdict != MLPRIO_FSDP_OOM)) {
		if (a.why[0])
			debug("%s: uid %u: no FSDP advice: %s", plugin_type,
			      submit_uid, a.why);
		return SLURM_SUCCESS;
	}
	if (a.shadow) {
		info("%s: shadow: job from uid %u name %s: would tell: %s",
		     plugin_type, submit_uid,
		     job_desc->name ? job_desc->name : "(none)", a.message);
		return SLURM_SUCCESS;
	}
	if (a.refuse) {
		info("%s: refused job from uid %u name %s: %s", plugin_type,
		     submit_uid, job_desc->name ? job_desc->name : "(none)",
		     a.message);
		_msg(err_msg, a.message);
		_msg(err_msg, "mlprio: refused: predicted out-of-memory jobs are refused here (fsdp_refuse_oom=1); lower the minibatch.");
		return SLURM_ERROR;
	}
	_msg(err_msg, a.message);
	_append_admin_comment(job_desc, a.note);
	info("%s: advised job from uid %u name %s: %s", plugin_type,
	     submit_uid, job_desc->name ? job_desc->name : "(none)",
	     a.message);
	return SLURM_SUCCESS;
}

/* ~150 lines, flat as Slurm's job_submit plugins are: features, job, verdict, limit. */
extern int job_submit(job_desc_msg_t *job_desc, uint32_t submit_uid,
		      char **err_msg)
{
	mlprio_decision_t d;
	mlprio_job_t j;
	char feats[512], text[512], bad[400], d1[32], d2[32];
	char *acct = NULL, *qos = NULL;
	const char *why = "";
	int nfeat, rc;
	uint64_t llm_key = 0;
	uint32_t lim_min = 0, def = NO_VAL;
	bool clamped = false;

	nfeat = mlprio_extract_features(job_desc->script, job_desc->comment,
					job_desc->name, feats, sizeof(feats));
	if (mlprio_feature_problems(job_desc->script, job_desc->comment,
				    job_desc->name, bad, sizeof(bad)) > 0) {
		snprintf(text, sizeof(text), "mlprio: ignored: %s", bad);
		_msg(err_msg, text);
		info("%s: uid %u: job hints %s", plugin_type, submit_uid, text + 8);
	}
	if (nfeat > 0) {
		/* Users cannot set admin_comment; site_factor reads it. */
		if (job_desc->admin_comment)
			xstrfmtcat(job_desc->admin_comment, " mlprio: %s",
				   feats);
		else
			job_desc->admin_comment = xstrdup_printf("mlprio: %s",
								 feats);
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
	j.req_gpus = mlprio_tres_gpus(job_desc->tres_per_job);
	if (j.req_gpus < 0)
		j.req_gpus = mlprio_tres_gpus(job_desc->tres_per_node);
	j.req_mem_bytes = -1;
	/* Cached: slurmctld resolves this uid for the job record anyway. */
	j.user = uid_to_string_cached((uid_t) job_desc->user_id);
	/* As the site factor will see them on the job record. */
	_acct_qos(job_desc, &acct, &qos);
	j.account = acct;
	/* As the job record will name it: the default partition when none. */
	j.partition = job_desc->partition ? job_desc->partition :
		default_part_name;
	j.qos = qos;
	j.name = job_desc->name;
	j.comment = job_desc->comment;
	j.admin_comment = job_desc->admin_comment;
	j.script = job_desc->script;

	if (_fsdp(job_desc, submit_uid, &j, err_msg) != SLURM_SUCCESS) {
		xfree(acct);
		xfree(qos);
		return SLURM_ERROR;
	}
	j.admin_comment = job_desc->admin_comment;

	rc = _decide(&j, &d, &why);
	xfree(acct);
	xfree(qos);
	j.account = j.qos = NULL;
	if (rc == MLPRIO_TIMEOUT) {
		/* Never the old model under the new configuration. */
		info("%s: uid %u: job passed unchanged: %s", plugin_type,
		     submit_uid, why);
		return SLURM_SUCCESS;
	}
	if (rc == MLPRIO_OUT_OF_SCOPE) {
		debug("%s: uid %u: job passed unchanged: %s", plugin_type,
		      submit_uid, why);
		return SLURM_SUCCESS;
	}
	if (rc != MLPRIO_OK) {
		debug("%s: no prediction: %s", plugin_type, why);
		return SLURM_SUCCESS;	/* neutral: pass unchanged */
	}

	if (d.params.have_llm && use_hub && hub) {
		llm_key = _next_key();
		/* Users cannot set admin_comment, so nor the key. */
		snprintf(text, sizeof(text), "mlprio_llm=%016"PRIx64, llm_key);
		_append_admin_comment(job_desc, text);
		j.admin_comment = job_desc->admin_comment;
		/* Only queues (the advisor's thread does the HTTP call). */
		if (hub->llm_submit(llm_key, &j) != MLPRIO_OK)
			debug("%s: LLM advisor: %s", plugin_type,
			      hub->last_error());
	}

	if (d.params.mode == MLPRIO_MODE_SHADOW)
		return _shadow(job_desc, submit_uid, &j, &d);

	/*
	 * No job id exists before job_submit returns: these lines name the
	 * user and job name, and for accepted jobs a note in admin_comment
	 * lets site_factor/mlprio log the decision again with the job id.
	 */
	if (d.verdict == MLPRIO_VERDICT_REFUSE) {
		info("%s: refused job from uid %u (%s) name %s: %s", plugin_type,
		     submit_uid, j.user ? j.user : "?",
		     job_desc->name ? job_desc->name : "(none)", d.log);
		_msg(err_msg, d.message);
		/*
		 * No ESLURM_* code means "predicted to fail"; the message says
		 * why (job_submit/lua does the same).
		 */
		return SLURM_ERROR;
	}
	if (d.verdict == MLPRIO_VERDICT_WARN) {
		_msg(err_msg, d.message);
		snprintf(text, sizeof(text), "mlprio_warn=%.2f", d.pred.fail_prob);
		_append_admin_comment(job_desc, text);
		info("%s: warned job from uid %u (%s) name %s: %s", plugin_type,
		     submit_uid, j.user ? j.user : "?",
		     job_desc->name ? job_desc->name : "(none)", d.log);
	}
	if ((d.verdict == MLPRIO_VERDICT_EXEMPT) ||
	    (d.verdict == MLPRIO_VERDICT_OVERRIDE)) {
		/* No job id yet: site_factor/mlprio logs it with the note. */
		_msg(err_msg, d.message);
		_append_admin_comment(job_desc, d.admin_note);
		info("%s: accepted job from uid %u (%s) name %s despite predicted failure: %s",
		     plugin_type, submit_uid, j.user ? j.user : "?",
		     job_desc->name ? job_desc->name : "(none)", d.log);
	}

	_note_prediction(job_desc, &d);

	if (_fill_limit(job_desc, &d, &lim_min, &clamped, &def)) {
		job_desc->time_limit = lim_min;
		mlprio_format_duration(lim_min * 60.0, d1, sizeof(d1));
		mlprio_format_duration(d.pred.runtime_s, d2, sizeof(d2));
		snprintf(text, sizeof(text),
			 "mlprio: time limit set to %s (predicted run %s + margin%s%s)",
			 d1, d2,
			 clamped ? ", clamped to the partition's MaxTime" : "",
			 (def != NO_VAL) ?
			 ", in place of the partition's DefaultTime" : "");
		_msg(err_msg, text);
		info("%s: job from uid %u (%s) name %s: %s", plugin_type,
		     submit_uid, j.user ? j.user : "?",
		     job_desc->name ? job_desc->name : "(none)", text);
		snprintf(text, sizeof(text), "mlprio_limit=%s", d1);
		_append_admin_comment(job_desc, text);
	} else if ((job_desc->time_limit == NO_VAL) && (def != NO_VAL)) {
		debug("%s: uid %u: no limit filled: the partition's DefaultTime applies (override_default_time=0)",
		      plugin_type, submit_uid);
	}
	return SLURM_SUCCESS;
}

extern int job_modify(job_desc_msg_t *job_desc, job_record_t *job_ptr,
		      uint32_t submit_uid MLPRIO_JOB_MODIFY_ERR_MSG)
{
	return SLURM_SUCCESS;
}
