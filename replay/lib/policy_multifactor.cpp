// Queue order 'multifactor', modelled on Slurm's priority/multifactor plugin: priority =
// PriorityWeightAge * age + PriorityWeightJobSize * size + PriorityWeightFairshare * fairshare,
// each factor in [0, 1], highest priority first (the score is its negation). age = min(wait,
// PriorityMaxAge) / PriorityMaxAge; size = cores / machine cores (1 - that with
// PriorityFavorSmall); fair share is Slurm's classic 2^(-U/S) with every user seen so far holding
// an equal share S and U the user's share of all usage, usage being core-seconds decayed with
// PriorityDecayHalfLife. Usage is charged when a job ends (Slurm charges running jobs every
// decay interval; charging at the end keeps the simulation event-driven, and is documented as a
// difference in replay/README.md). QOS, partition and TRES factors are not modelled.
#include <algorithm>
#include <span>
#include <vector>

#include "fairshare_usage.hpp"
#include "policies.hpp"

namespace mlprio::replay::detail {
namespace {

class MultifactorPolicy final : public QueuePolicy {
 public:
  explicit MultifactorPolicy(const PolicyOptions& o) : opts_(o), usage_(o.decay_half_life) {}
  std::string_view name() const override { return "multifactor"; }
  bool dynamic() const override { return true; }

  double score(const JobView& j, const ClusterState& state) const override {
    const double age =
        opts_.max_age > 0 ? std::min(std::max(j.wait, 0.0), opts_.max_age) / opts_.max_age : 0.0;
    double size = state.total_cores > 0
                      ? static_cast<double>(j.procs) / static_cast<double>(state.total_cores)
                      : 0.0;
    if (opts_.favor_small) size = 1.0 - size;
    return -(opts_.weight_age * age + opts_.weight_job_size * size +
             opts_.weight_fairshare * fairshare(j.user, state.now));
  }

  void on_job_end(const JobView& j, double start, double end, int64_t cores) override {
    usage_.charge(j.user, (end - start) * static_cast<double>(cores), end);
  }
  std::vector<double> save_state() const override { return usage_.save(); }
  void load_state(std::span<const double> s) override { usage_.load(s, "multifactor"); }

 private:
  double fairshare(int32_t user, double /*now*/) const { return usage_.factor(user); }

  PolicyOptions opts_;
  FairShareUsage usage_;
};

}  // namespace

std::unique_ptr<QueuePolicy> make_multifactor_policy(const PolicyOptions& opts) {
  return std::make_unique<MultifactorPolicy>(opts);
}

}  // namespace mlprio::replay::detail
