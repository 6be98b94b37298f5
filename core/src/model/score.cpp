// The policy score shared by the replayer's `ml` policy and site_factor/mlprio: predicted
// shortest-job-first with linear aging, and a starvation limit past which a job outranks every
// job that has not reached it (formula and proofs of its properties in core/src/model/README.md).
// O(1), no allocation, no exception, finite for any input (NaN predictions fall back to the
// request, then to DEFAULT_RUNTIME), because slurmctld calls it for every pending job.
#include <algorithm>
#include <cmath>

#include "mlprio/model/predictor.hpp"

namespace mlprio::model {
namespace {

constexpr double DEFAULT_RUNTIME = 3600.0;  // when neither a prediction nor a request exists
constexpr double RUNTIME_SCALE = 60.0;      // one minute: the SJF term halves at this run time

double finite_or(double v, double fallback) { return std::isfinite(v) ? v : fallback; }

}  // namespace

double score(const Job& job, const Prediction& p, double now, const ClusterState& cluster,
             const ScoreConfig& cfg) {
  double runtime = p.runtime;
  if (!(runtime >= 0) || !std::isfinite(runtime))
    runtime = (job.req_time > 0 && std::isfinite(job.req_time)) ? job.req_time : DEFAULT_RUNTIME;
  // SJF term in (0, 1]: 1 for an instant job, strictly decreasing, log-scaled so that minutes vs
  // hours and hours vs days are both told apart.
  const double sjf = 1.0 / (1.0 + std::log2(1.0 + runtime / RUNTIME_SCALE));

  const double limit = cfg.starvation_limit > 0 && std::isfinite(cfg.starvation_limit)
                           ? cfg.starvation_limit
                           : 86400.0;
  const double age_weight = std::max(0.0, finite_or(cfg.age_weight, 0.0));
  const double size_weight = finite_or(cfg.size_weight, 0.0);
  const double wait = std::max(0.0, finite_or(now - job.submit, 0.0));

  // Size term in [-|size_weight|, |size_weight|]: fraction of the machine the job asks for.
  double size = 0.0;
  if (size_weight != 0.0 && cluster.total_procs > 0 && job.procs() > 0)
    size = size_weight * std::min(1.0, static_cast<double>(job.procs()) /
                                           static_cast<double>(cluster.total_procs));

  if (wait < limit) return sjf + age_weight * (wait / limit) + size;
  // Starved: above every non-starved score (those are < 1 + age_weight + |size_weight|), and
  // first-come-first-served among the starved.
  return 2.0 + age_weight + 2.0 * std::abs(size_weight) + std::log1p(wait / limit);
}

}  // namespace mlprio::model
