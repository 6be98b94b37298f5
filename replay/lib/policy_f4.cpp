// Queue order 'f4': Carastan-Santos \& de Camargo's F4 as RLScheduler codes it:
// r * sqrt(n) + 530000 * log10(s).
#include <cmath>

#include "policies.hpp"

namespace mlprio::replay::detail {
namespace {

class F4Policy final : public QueuePolicy {
 public:
  std::string_view name() const override { return "f4"; }
  bool tracks_job_ends() const override { return false; }
  double score(const JobView& j, const ClusterState& /*state*/) const override {
    return j.estimate * std::sqrt(static_cast<double>(j.procs)) + 530000 * std::log10(j.submit);
  }
  // RLScheduler sorts by this score alone (list order breaks ties).
  bool submit_breaks_ties() const override { return false; }
};

}  // namespace

std::unique_ptr<QueuePolicy> make_f4_policy(const PolicyOptions& /*opts*/) {
  return std::make_unique<F4Policy>();
}

}  // namespace mlprio::replay::detail
