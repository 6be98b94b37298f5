// Factories of the queue orders, one per replay/lib/policy_*.cpp file; policy_registry.cpp maps
// names to them. Internal to the replay library (not a public header).
#pragma once

#include <memory>

#include "mlprio/replay/policy.hpp"

namespace mlprio::replay::detail {

std::unique_ptr<QueuePolicy> make_fcfs_policy(const PolicyOptions& opts);
std::unique_ptr<QueuePolicy> make_sjf_policy(const PolicyOptions& opts);
std::unique_ptr<QueuePolicy> make_smallest_policy(const PolicyOptions& opts);
std::unique_ptr<QueuePolicy> make_f1_policy(const PolicyOptions& opts);
std::unique_ptr<QueuePolicy> make_f2_policy(const PolicyOptions& opts);
std::unique_ptr<QueuePolicy> make_f3_policy(const PolicyOptions& opts);
std::unique_ptr<QueuePolicy> make_f4_policy(const PolicyOptions& opts);
std::unique_ptr<QueuePolicy> make_wfp3_policy(const PolicyOptions& opts);
std::unique_ptr<QueuePolicy> make_unicep_policy(const PolicyOptions& opts);
std::unique_ptr<QueuePolicy> make_multifactor_policy(const PolicyOptions& opts);
std::unique_ptr<QueuePolicy> make_ml_policy(const PolicyOptions& opts);

}  // namespace mlprio::replay::detail
