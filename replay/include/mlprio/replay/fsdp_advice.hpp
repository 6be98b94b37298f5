// `mlprio-replay fsdp-advice`: what job_submit/mlprio's FSDP advice would have saved
// on a list of FSDP training jobs. Each job carries the #MLPRIO training keys; a job whose
// minibatch is past the predicted retry point is assumed to follow the advice (the largest safe
// minibatch, or expandable_segments where that makes its minibatch safe) and to run the same
// samples at retry-free throughput, i.e. its run time shrinks by the table's predicted penalty
// for its minibatch. Jobs predicted to run out of memory are counted apart (they fail early;
// their recorded time is what a refusal or warning would have spared, not a speed-up).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mlprio/model/fsdp_table.hpp"

namespace mlprio::replay {

inline constexpr size_t FSDP_JOBS_MAX = 10'000'000;

struct FsdpJob {
  int64_t id = 0;
  double run_s = -1;    // recorded run time (< 0: unknown, from --trace)
  int64_t gpu_gib = 0;  // 0: the command's default
  model::FsdpDirective directive;
  std::string line;  // the directive text as read (for --write-jobs)
};

// The job list: one job per line, `JOB_ID key=value ...` with the #MLPRIO training keys plus
// run_s=SECONDS and gpu_gib=N; '#' starts a comment line. Throws InputError naming file and line.
std::vector<FsdpJob> read_fsdp_jobs(const std::string& path);
void write_fsdp_jobs(std::ostream& out, const std::vector<FsdpJob>& jobs);
// A reproducible synthetic list drawn from the table's entries (expandable_segments off):
// minibatches around each entry's cliff, run times log-uniform in [1 h, 48 h].
std::vector<FsdpJob> generate_fsdp_jobs(const model::FsdpTable& table, size_t n, uint64_t seed);

struct FsdpAdviceRow {
  int64_t id = 0;
  model::FsdpVerdict verdict = model::FsdpVerdict::NO_ADVICE;
  int64_t gpus = 0;
  double run_s = 0, advised_run_s = 0, penalty = 0;
  int64_t minibatch = 0, max_safe_mbs = -1;
};

struct FsdpAdviceReport {
  size_t jobs = 0, no_advice = 0, ok = 0, retries = 0, oom = 0, unknown_run = 0;
  double gpu_hours = 0;        // all jobs with a run time, as recorded
  double gpu_hours_retry = 0;  // the retrying jobs, as recorded
  double gpu_hours_saved = 0;  // their recorded minus advised GPU-hours
  double gpu_hours_oom = 0;    // predicted-OOM jobs, as recorded
  std::vector<FsdpAdviceRow> rows;
  nlohmann::ordered_json to_json(bool with_rows) const;
};

// Applies the advice; fills each job's advised run time into the rows. default_gpu_gib for jobs
// without gpu_gib=.
FsdpAdviceReport apply_fsdp_advice(const model::FsdpTable& table, const std::vector<FsdpJob>& jobs,
                                   int64_t default_gpu_gib);

}  // namespace mlprio::replay
