// Queue order 'sjf': shortest (estimated) job first; ties by submit time, as
// RLScheduler's (r, s) tuple.
#include <cmath>

#include "policies.hpp"

namespace mlprio::replay::detail {
namespace {

class SjfPolicy final : public QueuePolicy {
 public:
  std::string_view name() const override { return "sjf"; }
  bool tracks_job_ends() const override { return false; }
  double score(const JobView& j, const ClusterState& /*state*/) const override {
    return j.estimate;
  }
};

}  // namespace

std::unique_ptr<QueuePolicy> make_sjf_policy(const PolicyOptions& /*opts*/) {
  return std::make_unique<SjfPolicy>();
}

}  // namespace mlprio::replay::detail
