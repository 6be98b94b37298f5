/*****************************************************************************\
 *  slurm_compat.h - the differences in Slurm's internal API that the two mlprio
 *  plugins meet between Debian bookworm's 22.05.8 and upstream 26.05, all in one
 *  place, keyed on SLURM_VERSION_NUMBER (slurm/slurm_version.h of the tree the
 *  plugin is compiled against). Include after Slurm's headers.
 *
 *  Checked against 22.05.8, 23.11.11, 24.05.8, 24.11.7, 25.05.8, 25.11.7 and
 *  26.05.3; what did NOT change for our use, so needs nothing here:
 *  - job_submit(job_desc, submit_uid, err_msg): same in every version;
 *  - job_record_t itself, and its fields tres_per_job, tres_per_node, user_name,
 *    admin_comment, site_factor, details->submit_time/min_cpus/min_nodes/
 *    pn_min_memory (moved from slurmctld.h to src/common/job_record.h in
 *    24.05; slurmctld.h still includes it);
 *  - part_record_t default_time/max_time (src/common/part_record.h from
 *    24.05), default_part_loc, default_part_name, find_part_record,
 *    find_job_record, set_job_prio, job_list (List before 24.11, list_t * from
 *    24.11: list_for_each() takes either), uid_to_string_cached,
 *    assoc_mgr_fill_in_{user,assoc,qos}, IS_JOB_* and JOB_* state macros;
 *  - plugin_version = SLURM_VERSION_NUMBER, and plugin.c's rule: major, minor
 *    AND micro must equal slurmctld's (mask 0xffffff) in every version.
\*****************************************************************************/

#ifndef MLPRIO_SLURM_COMPAT_H
#define MLPRIO_SLURM_COMPAT_H

#include "slurm/slurm.h"	/* SLURM_VERSION_NUMBER, SLURM_VERSION_NUM */
#include "src/slurmctld/slurmctld.h"

#define MLPRIO_SLURM_AT_LEAST(maj, min) \
	(SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(maj, min, 0))

/*
 * The job details record: "struct job_details" in 22.05; from 23.02 an
 * anonymous struct typedef'd job_details_t (no struct tag any more).
 */
#if MLPRIO_SLURM_AT_LEAST(23, 2)
typedef job_details_t mlprio_job_details_t;
#else
typedef struct job_details mlprio_job_details_t;
#endif

/*
 * job_modify(): 23.02 added "char **err_msg" as the last argument.
 *   extern int job_modify(job_desc_msg_t *, job_record_t *, uint32_t
 *                         MLPRIO_JOB_MODIFY_ERR_MSG);
 */
#if MLPRIO_SLURM_AT_LEAST(23, 2)
#define MLPRIO_JOB_MODIFY_ERR_MSG , char **err_msg
#else
#define MLPRIO_JOB_MODIFY_ERR_MSG
#endif

/*
 * Threads: 26.05 runs slurm_thread_create() on its own thread pool
 * (src/common/threadpool.h): it takes a thread name first, and a joinable
 * thread must be joined with slurm_thread_join() (threadpool_join), never
 * pthread_join(). Before 26.05: slurm_thread_create(id, func, arg) in
 * macros.h, a plain pthread, joined with pthread_join().
 */
#if MLPRIO_SLURM_AT_LEAST(26, 5)
#include "src/common/threadpool.h"
#define MLPRIO_THREAD_CREATE(name, id, func, arg) \
	slurm_thread_create(name, id, func, arg)
#define MLPRIO_THREAD_JOIN(id) slurm_thread_join(id)
#else
#include "src/common/macros.h"
#define MLPRIO_THREAD_CREATE(name, id, func, arg) \
	slurm_thread_create(id, func, arg)
#define MLPRIO_THREAD_JOIN(id) pthread_join(id, NULL)
#endif

/*
 * site_factor_p_reconfig(): called by "scontrol reconfigure" up to 23.11
 * (site_factor_g_reconfig). From 24.05 the interface no longer looks it up:
 * reconfigure restarts slurmctld, which runs fini() and init() again. The
 * plugin keeps defining it (harmless where unused).
 */
#define MLPRIO_SLURM_HAS_SITE_FACTOR_RECONFIG (!MLPRIO_SLURM_AT_LEAST(24, 5))

/*
 * slurmctld_lock_t: 22.05-25.11 have {conf, job, node, part, fed}; 26.05
 * adds select_node. The plugins use designated initialisers, so the lock
 * structs need no macro (unnamed members are NO_LOCK, i.e. 0, in all).
 */

#endif /* MLPRIO_SLURM_COMPAT_H */
