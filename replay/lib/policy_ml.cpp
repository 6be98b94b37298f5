// Queue order 'ml': ranks jobs by mlprio::model::score(job, prediction, now, cluster, cfg), the
// one priority function the Slurm plugin (site_factor/mlprio) also calls — predicted
// shortest-job-first raised by waiting, with a starvation limit. Higher score runs first, so the
// replayer's (lower-first) score is its negation. The score grows with waiting, so the order is
// dynamic (re-scored at every pass). With a fair-share weight the score also sees the user's
// U/S from the same usage record as `multifactor` (fairshare_usage.hpp). Predictions come through
// PolicyOptions::ml (built by `--estimate model:FILE`, see mlprio/replay/ml.hpp); without them the
// order cannot run.
#include <string>

#include "fairshare_usage.hpp"
#include "mlprio/model/predictor.hpp"
#include "mlprio/replay/ml.hpp"
#include "policies.hpp"

namespace mlprio::replay::detail {
namespace {

class MlPolicy final : public QueuePolicy {
 public:
  MlPolicy(std::shared_ptr<const MlPredictions> ml, double decay_half_life)
      : ml_(std::move(ml)), usage_(decay_half_life) {}
  std::string_view name() const override { return "ml"; }
  bool dynamic() const override { return true; }
  bool finite_scores() const override { return true; }  // model::score is finite for any input

  double score(const JobView& j, const ClusterState& state) const override {
    // The prediction the engine attached at submission (online estimator or fixed predictions);
    // the terms fall back to the request when there is none. The engine keeps the terms that the
    // wait does not move (prepare); without them they are worked out here, to the same value.
    const double share = ml_->score.fairshare_weight > 0 ? usage_.usage_share(j.user) : 0.0;
    const model::ScoreTerms terms = j.terms_set ? j.terms : prepare(j);
    return -model::score(terms, j.submit, share, state.now, ml_->score);
  }
  bool prepares() const override { return true; }
  model::ScoreTerms prepare(const JobView& j) const override {
    Job job;
    job.submit = j.submit;
    job.req_time = j.req_time;
    job.req_procs = j.procs;
    model::Prediction p;
    p.runtime = j.pred_runtime;
    p.runtime_upper = j.pred_upper;
    p.fail_prob = j.fail_prob;
    return model::score_terms(job, p, ml_->score);
  }

  // The fair-share term's usage record (kept whatever the weight, so a saved state does not
  // depend on it): multifactor's, charged at job ends, decayed with --priority-decay-half-life.
  void on_job_end(const JobView& j, double start, double end, int64_t cores) override {
    usage_.charge(j.user, (end - start) * static_cast<double>(cores), end);
  }
  std::vector<double> save_state() const override { return usage_.save(); }
  void load_state(std::span<const double> s) override { usage_.load(s, "ml"); }

 private:
  std::shared_ptr<const MlPredictions> ml_;
  FairShareUsage usage_;
};

}  // namespace

std::unique_ptr<QueuePolicy> make_ml_policy(const PolicyOptions& opts) {
  if (!opts.ml)
    throw ConfigError(
        "policy 'ml' ranks jobs by predicted run times: give the model with --estimate "
        "model:FILE (train one with mlprio-model train), or --estimate last2");
  return std::make_unique<MlPolicy>(opts.ml, opts.decay_half_life);
}

}  // namespace mlprio::replay::detail
