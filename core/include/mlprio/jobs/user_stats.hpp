// Statistics of how users behave in a trace: how concentrated activity is, how often a user's job
// repeats their previous one, and how close its run time is to that one's. They describe the
// structure a run-time predictor learns from (users resubmitting the same work), so a synthetic
// workload can be checked against real logs on it (`mlprio-replay inspect --user-stats`, the
// calibration table in replay/README.md). Every figure is a plain count or median over the jobs,
// defined below; nothing is fitted.
//
// "The same user's previous job" of a job is the last job before it, in the order given (a
// Trace's jobs are in submit order), with the same user id >= 0. Jobs without a user id (-1, e.g.
// Mira and Theta) count in `jobs` and in the whole-trace figures but never in the per-user ones.
#pragma once

#include <cstdint>
#include <span>

#include "mlprio/jobs/job.hpp"

namespace mlprio {

struct UserBehaviourStats {
  int64_t jobs = 0;            // all jobs
  int64_t jobs_with_user = 0;  // jobs with a user id >= 0
  int64_t users = 0;           // distinct user ids >= 0
  // Share of jobs_with_user submitted by the ceil(10 % of users) users with the most jobs (ties
  // between equal counts do not change the share). NaN without users.
  double top10_share = 0;
  // Jobs that have a previous job by the same user (jobs_with_user - users).
  int64_t pairs = 0;
  // Of the pairs: the job's (requested time, processors) equal the previous job's exactly (as
  // recorded: two unknown requests are equal).
  double same_request_size = 0;
  // Of the pairs: the job was submitted within 10 s (a burst: one script, a job array) / within
  // 1 h of the previous one.
  double gap_within_10s = 0;
  double gap_within_1h = 0;
  // Of the pairs where both run times are known (>= 0): `run_pairs` of them; run times are
  // floored at 1 s, so r = max(run, 1) / max(prev run, 1):
  int64_t run_pairs = 0;
  double run_within_2x = 0;          // share with 1/2 <= r <= 2
  double median_abs_log2_ratio = 0;  // median of |log2 r| (mean of the middle two when even)
  // Whole trace, jobs with a requested time > 0 and a run time >= 0 (`request_jobs` of them):
  int64_t request_jobs = 0;
  double mean_run_over_request = 0;  // mean of run / request
  double run_at_limit_share = 0;     // share with run >= request (ran into the limit, or past it)
  // Whole trace, jobs with a run time >= 0 (`run_jobs` of them): share with run < 60 s.
  int64_t run_jobs = 0;
  double short_run_share = 0;
};

// Computes the figures above; a share or median with an empty denominator is NaN.
UserBehaviourStats user_behaviour_stats(std::span<const Job> jobs);

}  // namespace mlprio
