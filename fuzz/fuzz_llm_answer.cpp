// The LLM answer parser: any HTTP body (an endpoint that obeys injected instructions, or a
// hostile one) gives advice within the configured bounds or nullopt with a reason.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "mlprio/model/llm_advisor.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  mlprio::model::AdvisorConfig cfg;
  std::string error;
  const auto a = mlprio::model::parse_advice(body, cfg, &error);
  if (a &&
      (!std::isfinite(a->runtime_seconds) || a->runtime_seconds <= 0 ||
       a->runtime_seconds > cfg.max_runtime_seconds || !(a->confidence >= 0) || a->confidence > 1))
    std::abort();
  if (!a && error.empty()) std::abort();
  return 0;
}
