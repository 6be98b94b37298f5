// What a parameter sweep (`mlprio-replay sweep`) is asked to do: SweepSpec, filled from the
// command line and the TOML config subset (apply_sweep_config), the bound on its size and the
// error it throws for a sweep that cannot run as asked. The plan that expands a spec into tasks
// is sweep_plan.hpp; the windows' syntax and draw are sweep_windows.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mlprio/replay/spec.hpp"
#include "mlprio/util/errors.hpp"

namespace mlprio::replay::dist {

// A sweep that cannot run as asked (bad option, config line, window, journal of another sweep).
class SweepError : public ::mlprio::UsageError {
 public:
  using ::mlprio::UsageError::UsageError;
};

// The most tasks one sweep may expand to (traces x policies x parameter sets x backfills x
// windows), and so the most random windows or parameter sets: the plan and its results are held
// in memory, one entry per task.
inline constexpr int64_t MAX_SWEEP_TASKS = 1'000'000;

// What the user asked for (command line and/or TOML config).
struct SweepSpec {
  std::vector<std::string> traces;
  std::vector<std::string> policies{"fcfs"};
  std::vector<std::string> backfills{"easy"};
  std::vector<std::pair<int64_t, int64_t>> windows;  // explicit START:LEN
  int64_t random_count = 0, random_len = 0;          // --windows COUNTxLEN
  uint64_t seed = 1;
  bool per_job = false;  // store per-job detail (/tasks/task_NNNN)
  // Estimate, EASY++ parts, the ml score and the machine: the options run and tune share.
  replay::ReplaySpec replay;
  // The multifactor weight grid: every combination is one parameter set (Cartesian product).
  std::vector<double> weight_age{1000}, weight_job_size{1000}, weight_fairshare{10000};
  std::vector<double> max_age{7 * 86400.0}, decay_half_life{7 * 86400.0};
  bool favor_small = false;
  // Deployed-stack tasks (--slurm-conf FILE,...): each file is replayed as `run --slurm-conf`
  // replays it, one task per trace x file x window, beside the policy tasks; slurm_release as
  // --slurm-release (YY.MM).
  std::vector<std::string> slurm_confs;
  std::string slurm_release = "26.05";
  // external:CMD and llm:URL (command line only): every task of such a policy starts its own
  // agent, on the rank that runs it.
  replay::AgentOptions agent;
};

// Reads the TOML subset documented in replay/README.md ("Sweeps"): `key = value` with strings,
// integers, floats, booleans and one-line arrays of them, `[table]` headers and # comments.
// Keys it sets: top level traces, policies, backfill, windows ("START:LEN" strings), estimate,
// estimate_quantile, correction, backfill_order, allocation, kill_at_limit, too_large, per_job,
// slurm_confs, slurm_release;
// [random_windows] count, len, seed; [machine] nodes, cores_per_node; [ml] age_weight,
// starvation_limit, size_weight, fail_weight, request_weight, fairshare_weight; [multifactor]
// weight_age, weight_job_size, weight_fairshare, max_age, decay_half_life (numbers or arrays: the
// grid), favor_small. Unknown keys are errors naming file:line. Values it sets replace those in
// `spec`.
void apply_sweep_config(const std::string& path, SweepSpec& spec);

}  // namespace mlprio::replay::dist
