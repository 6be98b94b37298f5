// The contract between the priority model and its users (the replayer, the Slurm plugin's C ABI,
// the mlprio-model tool): a Predictor turns job records into run-time and failure predictions,
// and score() turns a prediction into a priority. Implementations (XGBoost model, closed-form
// formulas, LLM advisor) live in core/src/model/, one file each, registered by the model file's
// "kind". Predictors are immutable after loading, so concurrent readers need no lock.
#pragma once

#include <cmath>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "mlprio/jobs/job.hpp"
#include "mlprio/jobs/trace.hpp"
#include "mlprio/model/score_terms.hpp"
#include "mlprio/util/errors.hpp"

namespace mlprio::model {

struct UserHistory;  // features.hpp

inline constexpr double NOT_PREDICTED = std::numeric_limits<double>::quiet_NaN();

struct Prediction {
  double runtime = NOT_PREDICTED;        // expected actual run time, seconds
  double runtime_upper = NOT_PREDICTED;  // a high quantile, seconds (for time limits)
  double fail_prob = NOT_PREDICTED;      // probability the job fails (OOM, timeout, crash)
  // Not from the model: the job's user's fair-share position at scoring time, U/S of Slurm's
  // classic fair share (the user's decayed usage over an equal share of all usage; 1 = exactly
  // their share). Filled by the replayer's `ml` order from its usage record; 0 = none (no term).
  double usage_share = 0.0;
};

// A model file that cannot be used: missing, unreadable, corrupt, wrong schema or version,
// unsafe permissions. what() says which and why.
class ModelError : public ::mlprio::UsageError {
 public:
  using ::mlprio::UsageError::UsageError;
};

// Score parameters (core/src/model/README.md, "Score"). Higher score = scheduled earlier. The
// defaults are a hand-set starting point; `mlprio-replay tune` chooses them by replaying the
// training part of a site's trace and stores its choice in the model file (PolicyParams).
struct ScoreConfig {
  double age_weight = 1.0;            // a: how fast waiting raises the score (0: pure SJF)
  double starvation_limit = 86400.0;  // L: wait (s) after which a job outranks any fresh job
  double size_weight = 0.0;           // b: favour (>0) or penalise (<0) wide jobs, per doubling
  double fail_weight = 1.0;           // g: lowers jobs the model predicts will fail
  // c in [0, 1]: which run time the order ranks by, the prediction (0), the user's request (1),
  // or between (the run-time term blended in log space); a job without a request uses the
  // prediction. Lets `tune` choose the request-ordered family (SJF by request) where it replays
  // better than the model's order.
  double request_weight = 0.0;
  // f >= 0: lowers a job by f * U/S log2 units (Prediction::usage_share), i.e. multiplies its
  // response ratio by Slurm's classic fair-share factor 2^(-U/S) raised to f. In the replayer
  // only; in slurmctld that part is multifactor's own PriorityWeightFairshare (the SITE factor is
  // cached per job and cannot follow usage).
  double fairshare_weight = 0.0;
};

// What the policy runs with beyond the score: which prediction backfilling uses and how EASY
// treats estimates that run out (replay/README.md, "EASY++"). Stored with the score in the model
// file's "policy" object, so the replayer (--estimate model:FILE) and site_factor/mlprio run
// what `mlprio-replay tune` proved.
struct PolicyParams {
  ScoreConfig score;
  std::string backfill_estimate = "upper";  // point | upper | request | last2
  std::string correction = "tsafrir";       // none | request | tsafrir
  std::string backfill_order = "sjbf";      // fcfs | sjbf
  std::string tuned_by;                     // provenance (empty: defaults, never tuned)
};

class Predictor {
 public:
  virtual ~Predictor() = default;
  // Predicts for each job; `names` resolves the interned strings of the jobs (user, partition,
  // job name, ...). out.size() == jobs.size(). Must not allocate per job on the hot path.
  virtual void predict(std::span<const Job> jobs, const TraceNames& names,
                       std::span<Prediction> out) const = 0;
  // One line for logs: kind, schema version, training window.
  virtual std::string describe() const = 0;

  // Added for the evaluator and the replayer, which keep their own causal history: predicts from
  // feature rows already built (features.hpp schema, row-major, jobs.size() x N_FEATURES).
  // `jobs` supplies what is not in the row (the request that caps a prediction). The default
  // throws ModelError, so test doubles of Predictor need not implement it.
  virtual void predict_rows(std::span<const float> rows, std::span<const Job> jobs,
                            std::span<Prediction> out) const;
  // The model file's kind ("xgboost", "formula").
  virtual std::string kind() const { return "unknown"; }

  // The policy stored with the model (defaults when the file has none).
  const PolicyParams& policy() const { return policy_; }
  void set_policy(PolicyParams p) { policy_ = std::move(p); }

  // Added: predict() and predict_rows() with options, for callers that need less than every
  // field (a scheduler ordering jobs needs no fail_prob, which costs an XGBoost model half its
  // tree walks). Fields not asked for are NOT_PREDICTED, or filled when that is free. The
  // defaults ignore the options and call the plain versions.
  struct Options {
    bool fail_prob = true;  // false: skip the failure model
  };
  virtual void predict_with(std::span<const Job> jobs, const TraceNames& names,
                            std::span<Prediction> out, const Options& opt) const {
    (void)opt;
    predict(jobs, names, out);
  }
  virtual void predict_rows_with(std::span<const float> rows, std::span<const Job> jobs,
                                 std::span<Prediction> out, const Options& opt) const {
    (void)opt;
    predict_rows(rows, jobs, out);
  }

  // Added for job_submit/mlprio's refusal message: why one job's failure prediction is what it
  // is. Fills `row` (N_FEATURES floats, the job's encoded features) and `contrib` (N_FEATURES + 1
  // values: each feature's contribution, then the bias) in the failure model's own units, so that
  // they sum to its output: log-odds for "xgboost" (TreeSHAP, the numbers XGBoost's
  // pred_contribs and `mlprio-model explain` give), the probability for "formula". Returns false
  // when the model has no failure part or cannot explain it. Allocates; not for the hot path.
  virtual bool explain_fail(const Job& job, const TraceNames& names, std::span<double> contrib,
                            std::span<float> row) const {
    (void)job, (void)names, (void)contrib, (void)row;
    return false;
  }

  // Added for the live feature store (site_factor/mlprio keeps each user's history current with
  // the finishes slurmctld reports, instead of the snapshot frozen at training): the history the
  // model file carries (nullptr: none), the epoch offset its rows use, and explain_fail() for a
  // row the caller encoded from its own history. Predictions from such rows go through
  // predict_rows_with().
  virtual const UserHistory* frozen_history() const { return nullptr; }
  virtual double epoch_offset() const { return 0.0; }
  virtual bool explain_fail_row(std::span<const float> row, std::span<double> contrib) const {
    (void)row, (void)contrib;
    return false;
  }

 private:
  PolicyParams policy_;
};

// Loads a model file and checks its schema; throws ModelError with a reason.
std::unique_ptr<Predictor> load_predictor(const std::string& path);

// What the score may know about the cluster at scoring time.
struct ClusterState {
  int64_t total_procs = 0;
  int64_t free_procs = 0;
  int64_t queued_jobs = 0;
};

// The unsquashed order key of a job below the starvation limit (log2 units): a log2(1 + w/60)
// - log2(1 + r/60) + b log2(procs) - 8 g p_fail - f U/S. Exposed for explanations (mlprio-why,
// logs).
double score_log_ratio(const Job& job, const Prediction& p, double now, const ScoreConfig& cfg);
// Its run-time term (log2 units, subtracted): log2(1 + r/60) of the prediction (else the request,
// else an hour), blended with the request's by cfg.request_weight.
double score_run_term(const Job& job, const Prediction& p, const ScoreConfig& cfg);

// The one priority function both the replayer's `ml` policy and site_factor/mlprio call.
double score(const Job& job, const Prediction& p, double now, const ClusterState& cluster,
             const ScoreConfig& cfg);

// SITE as site_factor/mlprio sets it: score() at the job's submission with the age term off
// (age and starvation are left to priority/multifactor's own age factor), times `weight`,
// rounded and capped at +-max_boost; 0 for a score that is not finite. The plugin and the
// replay's deployed-stack engine (`mlprio-replay run --slurm-conf`) both call this.
int64_t site_factor(const Job& job, const Prediction& p, const ScoreConfig& policy_score,
                    double weight, int64_t max_boost);
// weight x score rounded and capped at +-max_boost (0 when not finite): the last step above.
int64_t site_factor_value(double weighted_score, int64_t max_boost);

// The terms of score_log_ratio() that a job's wait and its user's usage do not move, worked out
// once: a scheduler that re-scores its queue at every pass (the replayer's `ml` order) keeps them
// beside each job and pays only for the wait's logarithm and the squash. The functions below give
// score_log_ratio() and score() bit for bit (they are how those two are computed). ScoreTerms:
// score_terms.hpp.
ScoreTerms score_terms(const Job& job, const Prediction& p, const ScoreConfig& cfg);
// score_log_ratio() of a job submitted at `submit` with these terms and Prediction::usage_share
// `usage_share`.
double score_log_ratio(const ScoreTerms& terms, double submit, double usage_share, double now,
                       const ScoreConfig& cfg);
// score() of the same.
double score(const ScoreTerms& terms, double submit, double usage_share, double now,
             const ScoreConfig& cfg);

}  // namespace mlprio::model
