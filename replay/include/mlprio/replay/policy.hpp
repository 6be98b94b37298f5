// Queue orders for the replayer: one small interface, one file per order in
// replay/lib/policy_*.cpp, registered by name in replay/lib/policy_registry.cpp. A policy only
// scores jobs; the simulator sorts the queue by score and backfilling decides what may start, so a
// future learned (`ml`) order is just another score(job, cluster state) function and the Slurm
// plugin can call the same code. Lower scores run first; ties go to the earlier submit time, then
// to trace order.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mlprio/util/errors.hpp"

namespace mlprio::replay {

struct MlPredictions;  // mlprio/replay/ml.hpp

// What a policy may look at for one queued job.
struct JobView {
  int64_t index = 0;    // position in the replayed job list (trace order)
  double submit = 0;    // absolute submit time, seconds, as in the trace
  double wait = 0;      // seconds waited so far (the rlscheduler profile passes its quirk here)
  double estimate = 0;  // runtime estimate, seconds (requested time, actual, or a predictor's)
  int64_t procs = 0;    // processors requested
  double gpus = 0;      // GPUs requested (0 when none)
  int32_t user = -1;
  double req_time = -1;  // requested time, seconds (-1 when none)
  // The runtime model's prediction for this job (order 'ml'); NaN when there is none.
  double pred_runtime = std::numeric_limits<double>::quiet_NaN();
  double pred_upper = std::numeric_limits<double>::quiet_NaN();
  double fail_prob = std::numeric_limits<double>::quiet_NaN();
};

// What a policy may look at for the whole machine.
struct ClusterState {
  double now = 0;
  int64_t total_cores = 0;
  int64_t free_cores = 0;
  int64_t queued = 0;
  int64_t running = 0;
};

// Settings of the orders that have any (Slurm priority/multifactor's names in brackets).
struct PolicyOptions {
  double weight_age = 1000;         // [PriorityWeightAge]
  double weight_job_size = 1000;    // [PriorityWeightJobSize]
  double weight_fairshare = 10000;  // [PriorityWeightFairshare]
  double max_age = 7 * 86400.0;     // [PriorityMaxAge] seconds at which the age factor saturates
  double decay_half_life = 7 * 86400.0;  // [PriorityDecayHalfLife] seconds; 0 = no decay
  bool favor_small = false;              // [PriorityFavorSmall]
  // Order 'ml': the runtime model's predictions for the replayed jobs and the score settings
  // (built by --estimate model:FILE); null for every other order.
  std::shared_ptr<const MlPredictions> ml;
};

class QueuePolicy {
 public:
  virtual ~QueuePolicy() = default;
  virtual std::string_view name() const = 0;
  // Lower runs first.
  virtual double score(const JobView& job, const ClusterState& state) const = 0;
  // True when the score changes with time or history (age, fair share): the simulator then
  // re-scores the whole queue at every scheduling pass instead of once at submission.
  virtual bool dynamic() const { return false; }
  // RLScheduler sorts by the bare score for F1-F4, WFP3 and UNICEP, and by (score, submit) for
  // FCFS, SJF and smallest; the rlscheduler profile needs to know which to copy its ties exactly.
  virtual bool submit_breaks_ties() const { return true; }
  // Usage hook for history-based orders (fair share): called when a job ends.
  virtual void on_job_end(const JobView& /*job*/, double /*start*/, double /*end*/,
                          int64_t /*cores*/) {}
  // The history the score depends on (fair-share usage) as plain numbers, so the time-parallel
  // replay can carry it across a segment boundary. Equal saved states must give equal futures;
  // load_state(save_state()) must restore the policy exactly.
  virtual std::vector<double> save_state() const { return {}; }
  virtual void load_state(std::span<const double> /*state*/) {}
};

class UnknownPolicyError : public ::mlprio::UsageError {
 public:
  using ::mlprio::UsageError::UsageError;
};

// Names accepted by make_policy, in registration order.
std::vector<std::string> policy_names();
// Throws UnknownPolicyError listing the valid names.
std::unique_ptr<QueuePolicy> make_policy(std::string_view name, const PolicyOptions& opts = {});

}  // namespace mlprio::replay
