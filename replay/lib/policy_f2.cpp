// Queue order 'f2': Carastan-Santos \& de Camargo's F2 as RLScheduler codes it:
// sqrt(r) * n + 25600 * log10(s).
#include <cmath>

#include "policies.hpp"

namespace mlprio::replay::detail {
namespace {

class F2Policy final : public QueuePolicy {
 public:
  std::string_view name() const override { return "f2"; }
  bool tracks_job_ends() const override { return false; }
  double score(const JobView& j, const ClusterState& /*state*/) const override {
    return std::sqrt(j.estimate) * static_cast<double>(j.procs) + 25600 * std::log10(j.submit);
  }
  // RLScheduler sorts by this score alone (list order breaks ties).
  bool submit_breaks_ties() const override { return false; }
};

}  // namespace

std::unique_ptr<QueuePolicy> make_f2_policy(const PolicyOptions& /*opts*/) {
  return std::make_unique<F2Policy>();
}

}  // namespace mlprio::replay::detail
