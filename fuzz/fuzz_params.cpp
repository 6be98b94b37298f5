// PrioritySiteFactorParameters (read by both plugins, job_submit's included): any text parses
// to parameters plus warnings, never throws, and what format_params() writes parses back to the
// same parameters.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "abi_detail.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto r = mlprio::plugin::parse_params(text);
  const std::string line = mlprio::plugin::format_params(r.params);
  const auto again = mlprio::plugin::parse_params(line);
  if (mlprio::plugin::format_params(again.params) != line) std::abort();
  return 0;
}
