// Queue order 'smallest': fewest processors first; ties by submit time, as RLScheduler's
// (n, s) tuple.
#include <cmath>

#include "policies.hpp"

namespace mlprio::replay::detail {
namespace {

class SmallestPolicy final : public QueuePolicy {
 public:
  std::string_view name() const override { return "smallest"; }
  bool tracks_job_ends() const override { return false; }
  double score(const JobView& j, const ClusterState& /*state*/) const override {
    return static_cast<double>(j.procs);
  }
};

}  // namespace

std::unique_ptr<QueuePolicy> make_smallest_policy(const PolicyOptions& /*opts*/) {
  return std::make_unique<SmallestPolicy>();
}

}  // namespace mlprio::replay::detail
