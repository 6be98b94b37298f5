// Queue order 'f3': Carastan-Santos \& de Camargo's F3 as RLScheduler codes it:
// r * n + 6860000 * log10(s).
#include <cmath>

#include "policies.hpp"

namespace mlprio::replay::detail {
namespace {

class F3Policy final : public QueuePolicy {
 public:
  std::string_view name() const override { return "f3"; }
  bool tracks_job_ends() const override { return false; }
  double score(const JobView& j, const ClusterState& /*state*/) const override {
    return j.estimate * static_cast<double>(j.procs) + 6860000 * std::log10(j.submit);
  }
  // RLScheduler sorts by this score alone (list order breaks ties).
  bool submit_breaks_ties() const override { return false; }
};

}  // namespace

std::unique_ptr<QueuePolicy> make_f3_policy(const PolicyOptions& /*opts*/) {
  return std::make_unique<F3Policy>();
}

}  // namespace mlprio::replay::detail
