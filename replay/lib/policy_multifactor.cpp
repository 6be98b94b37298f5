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
#include <cmath>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "policies.hpp"

namespace mlprio::replay::detail {
namespace {

class MultifactorPolicy final : public QueuePolicy {
 public:
  explicit MultifactorPolicy(const PolicyOptions& o) : opts_(o) {}
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
    const double used = (end - start) * static_cast<double>(cores);
    decay_to(end);
    usage_[j.user] += used / scale_;
    total_usage_ += used / scale_;
  }

  // [total, scale, stamp, user, usage, user, usage, ...] with users ascending, so two policies
  // with the same history save equal vectors whatever their hash-map order.
  std::vector<double> save_state() const override {
    std::vector<std::pair<int32_t, double>> users(usage_.begin(), usage_.end());
    std::sort(users.begin(), users.end());
    std::vector<double> s = {total_usage_, scale_, stamp_};
    for (const auto& [u, v] : users) {
      s.push_back(static_cast<double>(u));
      s.push_back(v);
    }
    return s;
  }
  void load_state(std::span<const double> s) override {
    usage_.clear();
    if (s.size() < 3 || (s.size() - 3) % 2 != 0)
      throw std::invalid_argument("multifactor: a saved policy state needs 3 + 2k numbers, got " +
                                  std::to_string(s.size()));
    total_usage_ = s[0];
    scale_ = s[1];
    stamp_ = s[2];
    for (size_t i = 3; i + 1 < s.size(); i += 2) usage_[static_cast<int32_t>(s[i])] = s[i + 1];
  }

 private:
  // Usage is stored as of `stamp_`; decaying everything by the same factor keeps ratios, so only
  // the total's decay matters for U = user / total and the map need not be walked.
  void decay_to(double t) {
    if (opts_.decay_half_life <= 0 || t <= stamp_) {
      stamp_ = std::max(stamp_, t);
      return;
    }
    const double f = std::exp2(-(t - stamp_) / opts_.decay_half_life);
    scale_ *= f;
    stamp_ = t;
    // Renormalise before the common scale underflows.
    if (scale_ < 1e-200) {
      for (auto& [u, v] : usage_) v *= scale_;
      total_usage_ *= scale_;
      scale_ = 1.0;
    }
  }

  double fairshare(int32_t user, double /*now*/) const {
    if (total_usage_ <= 0) return 1.0;
    const auto it = usage_.find(user);
    const double u = it == usage_.end() ? 0.0 : it->second / total_usage_;
    const double users = static_cast<double>(std::max<size_t>(usage_.size(), 1));
    const double share = 1.0 / users;
    return std::exp2(-u / share);
  }

  PolicyOptions opts_;
  std::unordered_map<int32_t, double>
      usage_;  // core-seconds / scale_: the true usage is value * scale_
  double total_usage_ = 0;
  double scale_ = 1.0;
  double stamp_ = 0;
};

}  // namespace

std::unique_ptr<QueuePolicy> make_multifactor_policy(const PolicyOptions& opts) {
  return std::make_unique<MultifactorPolicy>(opts);
}

}  // namespace mlprio::replay::detail
