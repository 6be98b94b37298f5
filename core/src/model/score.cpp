// The policy score shared by the replayer's `ml` policy and site_factor/mlprio: a response-ratio
// order in log space (predicted shortest job first, raised by waiting, lowered by predicted
// failure, optionally by size), squashed into (0, 1), and a starvation limit past which a job
// outranks every job that has not reached it (formula and the proofs of its properties in
// core/src/model/README.md). O(1), no allocation, no exception, finite for any input (NaN
// predictions fall back to the request, then to DEFAULT_RUNTIME), because slurmctld calls it for
// every pending job.
#include <algorithm>
#include <cmath>

#include "mlprio/model/predictor.hpp"
#include "mlprio/util/checked_cast.hpp"

namespace mlprio::model {
namespace {

constexpr double DEFAULT_RUNTIME = 3600.0;  // when neither a prediction nor a request exists
constexpr double TIME_SCALE = 60.0;         // one minute: the unit of run time and wait
constexpr double SQUASH = 4.0;              // log2 units per e-fold of the logistic
constexpr double FAIL_SCALE = 8.0;          // a certain failure costs 2^8 x the run time (g = 1)
constexpr double MAX_USAGE_SHARE = 1024.0;  // U/S beyond this ranks as this (keeps u finite)

double finite_or(double v, double fallback) {
  return std::isfinite(v) ? v : fallback;
}

// Logistic squash into (0, 1): strictly increasing in u, so the order is u's.
double squash(double u) {
  return 1.0 / (1.0 + std::exp2(-u / SQUASH));
}

}  // namespace

double score_run_term(const Job& job, const Prediction& p, const ScoreConfig& cfg) {
  double runtime = p.runtime;
  const bool has_request = job.req_time > 0 && std::isfinite(job.req_time);
  if (!(runtime >= 0) || !std::isfinite(runtime))
    runtime = has_request ? job.req_time : DEFAULT_RUNTIME;
  const double request_weight = std::clamp(finite_or(cfg.request_weight, 0.0), 0.0, 1.0);
  const double run_term = std::log2(1.0 + runtime / TIME_SCALE);
  if (request_weight > 0.0 && has_request)
    return (1.0 - request_weight) * run_term +
           request_weight * std::log2(1.0 + job.req_time / TIME_SCALE);
  return run_term;
}

ScoreTerms score_terms(const Job& job, const Prediction& p, const ScoreConfig& cfg) {
  const double size_weight = std::clamp(finite_or(cfg.size_weight, 0.0), -64.0, 64.0);
  const double fail_weight = std::clamp(finite_or(cfg.fail_weight, 0.0), 0.0, 64.0);
  ScoreTerms t;
  t.run = score_run_term(job, p, cfg);
  t.sized = size_weight != 0.0 && job.procs() > 1;
  if (t.sized) t.size = size_weight * std::log2(static_cast<double>(job.procs()));
  t.fail = fail_weight * FAIL_SCALE * std::clamp(finite_or(p.fail_prob, 0.0), 0.0, 1.0);
  // With a = 0 the age term is a zero for every wait (log2(1 + w/60) is finite), and with f = 0
  // there is no usage term: u, hence the squash, is the same at every wait below the limit (a
  // zero's sign may differ, and the squash maps both zeros to 1/2).
  const double age_weight = std::clamp(finite_or(cfg.age_weight, 0.0), 0.0, 64.0);
  const double fairshare_weight = std::clamp(finite_or(cfg.fairshare_weight, 0.0), 0.0, 64.0);
  if (age_weight == 0.0 && !(fairshare_weight > 0.0)) {
    t.unmoved = squash(score_log_ratio(t, job.submit, 0.0, job.submit, cfg));
    t.fixed = true;
  }
  return t;
}

double score_log_ratio(const ScoreTerms& terms, double submit, double usage_share, double now,
                       const ScoreConfig& cfg) {
  const double age_weight = std::clamp(finite_or(cfg.age_weight, 0.0), 0.0, 64.0);
  const double wait = std::max(0.0, finite_or(now - submit, 0.0));
  double u = age_weight * std::log2(1.0 + wait / TIME_SCALE) - terms.run;
  if (terms.sized) u += terms.size;
  u -= terms.fail;
  const double fairshare_weight = std::clamp(finite_or(cfg.fairshare_weight, 0.0), 0.0, 64.0);
  if (fairshare_weight > 0.0)
    u -= fairshare_weight * std::clamp(finite_or(usage_share, 0.0), 0.0, MAX_USAGE_SHARE);
  return u;
}

double score_log_ratio(const Job& job, const Prediction& p, double now, const ScoreConfig& cfg) {
  return score_log_ratio(score_terms(job, p, cfg), job.submit, p.usage_share, now, cfg);
}

double score(const ScoreTerms& terms, double submit, double usage_share, double now,
             const ScoreConfig& cfg) {
  const double limit = cfg.starvation_limit > 0 && std::isfinite(cfg.starvation_limit)
                           ? cfg.starvation_limit
                           : 86400.0;
  const double wait = std::max(0.0, finite_or(now - submit, 0.0));
  if (wait < limit)
    return terms.fixed ? terms.unmoved
                       : squash(score_log_ratio(terms, submit, usage_share, now, cfg));
  // Starved: above every non-starved score (those are < 1), oldest first among the starved.
  return 2.0 + std::log1p(wait / limit);
}

double score(const Job& job, const Prediction& p, double now, const ClusterState& cluster,
             const ScoreConfig& cfg) {
  (void)cluster;
  const double limit = cfg.starvation_limit > 0 && std::isfinite(cfg.starvation_limit)
                           ? cfg.starvation_limit
                           : 86400.0;
  const double wait = std::max(0.0, finite_or(now - job.submit, 0.0));
  // A starved job's score reads only its wait: the terms (three logarithms) are not needed.
  if (!(wait < limit)) return 2.0 + std::log1p(wait / limit);
  return score(score_terms(job, p, cfg), job.submit, p.usage_share, now, cfg);
}

int64_t site_factor_value(double weighted_score, int64_t max_boost) {
  if (!std::isfinite(weighted_score)) return 0;
  const int64_t cap = std::max<int64_t>(max_boost, 0);
  const double f =
      std::round(std::clamp(weighted_score, -static_cast<double>(cap), static_cast<double>(cap)));
  // (double)cap rounds up to 2^63 for a cap near INT64_MAX: saturate instead of casting.
  if (const auto v = to_integer<int64_t>(f)) return std::clamp(*v, -cap, cap);
  return f > 0 ? cap : -cap;
}

int64_t site_factor(const Job& job, const Prediction& p, const ScoreConfig& policy_score,
                    double weight, int64_t max_boost) {
  // The age term and the starvation limit are left to multifactor's own age factor
  // (PriorityWeightAge/PriorityMaxAge), which keeps the factor fixed per job and cacheable.
  ScoreConfig cfg = policy_score;
  cfg.age_weight = 0;
  const double now = job.submit >= 0 ? job.submit : 0;
  const double s = score(job, p, now, ClusterState{}, cfg);
  if (!std::isfinite(s)) return 0;
  return site_factor_value(weight * s, max_boost);
}

}  // namespace mlprio::model
