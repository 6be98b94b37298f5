// Queue order 'fcfs': first come, first served (score = submit time).
#include <cmath>

#include "policies.hpp"

namespace mlprio::replay::detail {
namespace {

class FcfsPolicy final : public QueuePolicy {
 public:
  std::string_view name() const override { return "fcfs"; }
  bool tracks_job_ends() const override { return false; }
  bool scores_submit() const override { return true; }
  double score(const JobView& j, const ClusterState& /*state*/) const override { return j.submit; }
};

}  // namespace

std::unique_ptr<QueuePolicy> make_fcfs_policy(const PolicyOptions& /*opts*/) {
  return std::make_unique<FcfsPolicy>();
}

}  // namespace mlprio::replay::detail
