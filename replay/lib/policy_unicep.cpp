// Queue order 'unicep': UNICEP, w / (log2(n) * r), largest first (score is the negation
// RLScheduler computes, including its 1e-15 guards, so single-processor jobs sort as it sorts
// them). The wait w comes from JobView (see policy_wfp3.cpp).
#include <cmath>

#include "policies.hpp"

namespace mlprio::replay::detail {
namespace {

class UnicepPolicy final : public QueuePolicy {
 public:
  std::string_view name() const override { return "unicep"; }
  bool tracks_job_ends() const override { return false; }
  double score(const JobView& j, const ClusterState& /*state*/) const override {
    return -(j.wait + 1e-15) / (std::log2(static_cast<double>(j.procs) + 1e-15) * j.estimate);
  }
  // RLScheduler sorts by this score alone (list order breaks ties).
  bool submit_breaks_ties() const override { return false; }
  bool dynamic() const override { return true; }
  bool scores_view_only() const override { return true; }
};

}  // namespace

std::unique_ptr<QueuePolicy> make_unicep_policy(const PolicyOptions& /*opts*/) {
  return std::make_unique<UnicepPolicy>();
}

}  // namespace mlprio::replay::detail
