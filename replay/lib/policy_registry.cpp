// The name -> factory table of queue orders. To add an order: write policy_<name>.cpp with a
// make_<name>_policy() factory, declare it in policies.hpp and append it here. The agent orders
// (external:CMD, llm:URL; policy_agent.hpp) are matched by their prefix before the table.
#include <utility>

#include "policies.hpp"
#include "policy_agent.hpp"

namespace mlprio::replay {
namespace {

using Factory = std::unique_ptr<QueuePolicy> (*)(const PolicyOptions&);

const std::vector<std::pair<std::string, Factory>>& registry() {
  static const std::vector<std::pair<std::string, Factory>> table = {
      {"fcfs", detail::make_fcfs_policy},
      {"sjf", detail::make_sjf_policy},
      {"smallest", detail::make_smallest_policy},
      {"f1", detail::make_f1_policy},
      {"f2", detail::make_f2_policy},
      {"f3", detail::make_f3_policy},
      {"f4", detail::make_f4_policy},
      {"wfp3", detail::make_wfp3_policy},
      {"unicep", detail::make_unicep_policy},
      {"multifactor", detail::make_multifactor_policy},
      {"ml", detail::make_ml_policy},
  };
  return table;
}

}  // namespace

bool is_agent_policy(std::string_view name) {
  return name.starts_with("external:") || name.starts_with("llm:");
}

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry()) names.push_back(name);
  return names;
}

std::unique_ptr<QueuePolicy> make_policy(std::string_view name, const PolicyOptions& opts) {
  if (name.starts_with("external:")) return detail::make_external_policy(name, opts);
  if (name.starts_with("llm:")) return detail::make_llm_policy(name, opts);
  for (const auto& [n, factory] : registry())
    if (n == name) return factory(opts);
  std::string valid;
  for (const auto& [n, factory] : registry()) valid += (valid.empty() ? "" : ", ") + n;
  throw UnknownPolicyError("unknown policy '" + std::string(name) + "' (valid: " + valid +
                           ", external:CMD, llm:URL)");
}

}  // namespace mlprio::replay
