// Queue order 'llm:URL' (placeholder until the client is wired in).
#include "mlprio/replay/simulator.hpp"
#include "policy_agent.hpp"

namespace mlprio::replay::detail {

std::unique_ptr<QueuePolicy> make_llm_policy(std::string_view name, const PolicyOptions&) {
  throw ConfigError("policy '" + std::string(name) + "': llm:URL is not available yet");
}

}  // namespace mlprio::replay::detail
