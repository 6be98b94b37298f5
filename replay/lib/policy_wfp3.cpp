// Queue order 'wfp3': WFP3, (w / r)^3 * n, largest first (score is its negation, the
// exact expression RLScheduler uses, pow(x, 3) and all, so its ties and rounding are kept). The
// wait w comes from JobView: the elapsed wait here, RLScheduler's -1 - submit in its profile.
#include <cmath>

#include "policies.hpp"

namespace mlprio::replay::detail {
namespace {

class Wfp3Policy final : public QueuePolicy {
 public:
  std::string_view name() const override { return "wfp3"; }
  bool tracks_job_ends() const override { return false; }
  double score(const JobView& j, const ClusterState& /*state*/) const override {
    return -std::pow(j.wait / j.estimate, 3.0) * static_cast<double>(j.procs);
  }
  // RLScheduler sorts by this score alone (list order breaks ties).
  bool submit_breaks_ties() const override { return false; }
  bool dynamic() const override { return true; }
  bool scores_view_only() const override { return true; }
};

}  // namespace

std::unique_ptr<QueuePolicy> make_wfp3_policy(const PolicyOptions& /*opts*/) {
  return std::make_unique<Wfp3Policy>();
}

}  // namespace mlprio::replay::detail
