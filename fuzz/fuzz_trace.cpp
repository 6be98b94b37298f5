// Trace readers (SWF, sacct, Alibaba, jobcomp/filetxt, and the gzip layer under all of them):
// any bytes give jobs or an InputError naming the file, never a crash, hang or unbounded memory.
// MLPRIO_FUZZ_FORMAT picks the reader (0 = auto-detect); strict and lenient modes alternate.
#include <cstdint>

#include "fuzz_util.hpp"
#include "mlprio/jobs/trace.hpp"

#ifndef MLPRIO_FUZZ_FORMAT
#define MLPRIO_FUZZ_FORMAT AUTO
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mlprio::fuzz::write_input(data, size, ".trace");
  for (bool strict : {false, true}) {
    mlprio::ReadOptions o;
    o.format = mlprio::TraceFormat::MLPRIO_FUZZ_FORMAT;
    o.strict = strict;
    try {
      const mlprio::Trace t = mlprio::load_trace(path, o);
      (void)t.jobs.size();
    } catch (const mlprio::InputError&) {
    } catch (const std::invalid_argument&) {  // cannot tell the format (auto)
    }
  }
  return 0;
}
