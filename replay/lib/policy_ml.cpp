// Queue order 'ml': ranks jobs by mlprio::model::score(job, prediction, now, cluster, cfg), the
// one priority function the Slurm plugin (site_factor/mlprio) also calls — predicted
// shortest-job-first raised by waiting, with a starvation limit. Higher score runs first, so the
// replayer's (lower-first) score is its negation. The score grows with waiting, so the order is
// dynamic (re-scored at every pass). Predictions come through PolicyOptions::ml (built by
// `--estimate model:FILE`, see mlprio/replay/ml.hpp); without them the order cannot run.
#include <string>

#include "mlprio/model/predictor.hpp"
#include "mlprio/replay/ml.hpp"
#include "policies.hpp"

namespace mlprio::replay::detail {
namespace {

class MlPolicy final : public QueuePolicy {
 public:
  explicit MlPolicy(std::shared_ptr<const MlPredictions> ml) : ml_(std::move(ml)) {}
  std::string_view name() const override { return "ml"; }
  bool dynamic() const override { return true; }

  double score(const JobView& j, const ClusterState& state) const override {
    // The prediction the engine attached at submission (online estimator or fixed predictions);
    // score() falls back to the request when there is none.
    Job job;
    job.submit = j.submit;
    job.req_time = j.req_time;
    job.req_procs = j.procs;
    model::Prediction p;
    p.runtime = j.pred_runtime;
    p.runtime_upper = j.pred_upper;
    p.fail_prob = j.fail_prob;
    model::ClusterState cluster;
    cluster.total_procs = state.total_cores;
    cluster.free_procs = state.free_cores;
    cluster.queued_jobs = state.queued;
    return -model::score(job, p, state.now, cluster, ml_->score);
  }

 private:
  std::shared_ptr<const MlPredictions> ml_;
};

}  // namespace

std::unique_ptr<QueuePolicy> make_ml_policy(const PolicyOptions& opts) {
  if (!opts.ml)
    throw ConfigError(
        "policy 'ml' ranks jobs by predicted run times: give the model with --estimate "
        "model:FILE (train one with mlprio-model train), or --estimate last2");
  return std::make_unique<MlPolicy>(opts.ml);
}

}  // namespace mlprio::replay::detail
