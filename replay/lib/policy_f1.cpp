// Queue order 'f1': Carastan-Santos \& de Camargo's F1 as RLScheduler codes it:
// log10(r) * n + 870 * log10(s), with r, s <= 0 read as 0.1.
#include <cmath>

#include "policies.hpp"

namespace mlprio::replay::detail {
namespace {

class F1Policy final : public QueuePolicy {
 public:
  std::string_view name() const override { return "f1"; }
  bool tracks_job_ends() const override { return false; }
  double score(const JobView& j, const ClusterState& /*state*/) const override {
    return std::log10(j.estimate > 0 ? j.estimate : 0.1) * static_cast<double>(j.procs) +
           870 * std::log10(j.submit > 0 ? j.submit : 0.1);
  }
  // RLScheduler sorts by this score alone (list order breaks ties).
  bool submit_breaks_ties() const override { return false; }
};

}  // namespace

std::unique_ptr<QueuePolicy> make_f1_policy(const PolicyOptions& /*opts*/) {
  return std::make_unique<F1Policy>();
}

}  // namespace mlprio::replay::detail
