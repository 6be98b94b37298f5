// The PyTorch memory-snapshot reader of mlprio-fsdp: any text gives a snapshot or an error
// naming the source, never a crash (deeply nested JSON included).
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "mlprio/fsdp/snapshot.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    (void)mlprio::fsdp::parse_snapshot(text, "fuzz-input");
  } catch (const std::runtime_error&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
