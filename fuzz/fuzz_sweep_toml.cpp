// The sweep TOML: any text configures a sweep or throws an error naming file and line, never
// crashes and never sizes work or memory beyond the documented bounds.
#include <cstdint>
#include <stdexcept>

#include "fuzz_util.hpp"
#include "mlprio/replay/dist/sweep_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mlprio::fuzz::write_input(data, size, ".toml");
  mlprio::replay::dist::SweepSpec spec;
  try {
    mlprio::replay::dist::apply_sweep_config(path, spec);
  } catch (const std::exception&) {
  }
  return 0;
}
