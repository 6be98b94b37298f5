// Pieces the simulation engines share that stay inside replay/lib: the always-on invariant
// check, the estimate rule, the nearly-sorted sort, and the engines' entry points. The metrics
// they share (MetricsAccumulator, WaitQuantiles, bounded_slowdown, append_growing) are in
// mlprio/replay/detail/metrics.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mlprio/replay/detail/metrics.hpp"
#include "mlprio/replay/detail/profile_scan.hpp"
#include "mlprio/replay/simulator.hpp"

namespace mlprio::replay::detail {

// Sorts `v` by `less` with an insertion sort while that stays cheap: O(n) on input already sorted
// but for a few elements (a queue in the previous pass's order plus its new jobs, running jobs
// between two events). Returns false once more than 8 moves per element were made, leaving `v`
// partly sorted for the caller's std::sort or std::stable_sort to finish. It never moves an
// element past an equal one, so a std::stable_sort that finishes gives the result it would have
// given alone; under a total order any sort does.
template <typename T, typename Less>
bool insertion_sort_while_cheap(std::vector<T>& v, Less less) {
  const size_t n = v.size();
  size_t budget = 8 * n + 64;
  for (size_t i = 1; i < n; ++i) {
    if (!less(v[i], v[i - 1])) continue;
    const T x = v[i];
    size_t j = i;
    do {
      v[j] = v[j - 1];
      --j;
    } while (j > 0 && less(x, v[j - 1]));
    v[j] = x;
    if (i - j >= budget) return false;
    budget -= i - j;
  }
  return true;
}

// Always-on check: invariants protect the results, so they do not vanish under NDEBUG.
#define MLPRIO_REPLAY_CHECK(cond, msg)                                                          \
  do {                                                                                          \
    if (!(cond))                                                                                \
      throw ::mlprio::replay::InvariantError(std::string("replay invariant broken: ") + (msg) + \
                                             " [" #cond "] at " __FILE__ ":" +                  \
                                             std::to_string(__LINE__));                         \
  } while (0)

// The runtime estimate a job is scheduled with. REQUEST falls back to the run time when the
// trace has no requested time (as RLScheduler and most simulators do).
inline double job_estimate(const Job& j, const SimConfig& c) {
  switch (c.estimate) {
    case EstimateMode::ACTUAL:
      return j.run;
    case EstimateMode::CUSTOM: {
      if (!c.estimate_fn) throw ConfigError("estimate mode 'custom' needs an estimate function");
      const double e = c.estimate_fn(j);
      if (!std::isfinite(e) || e < 0)
        throw ConfigError("estimate function gave " + std::to_string(e) + " for job " +
                          std::to_string(j.id) + "; it must be a finite number of seconds >= 0");
      return e;
    }
    case EstimateMode::REQUEST:
    default:
      return j.req_time >= 0 ? j.req_time : j.run;
  }
}

// Runs the rlscheduler profile (rlscheduler_engine.cpp).
SimResult simulate_rlscheduler(std::span<const Job> jobs, const SimConfig& config);
// Runs the deployed-stack replay of config.slurm (slurm_engine.cpp).
SimResult simulate_slurm(std::span<const Job> jobs, const SimConfig& config);

}  // namespace mlprio::replay::detail
