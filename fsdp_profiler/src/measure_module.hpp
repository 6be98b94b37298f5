// The one door between mlprio-fsdp and its CUDA side. The CUDA device, the kernels, NCCL and the
// measuring runner are built as a loadable module (mlprio-fsdp-cuda.so, in lib/mlprio/ beside
// the program's bin/), which `mlprio-fsdp measure` opens with dlopen. The program itself then
// needs no CUDA or NCCL library, so `sweep` and `replay`, which never touch a GPU, start on
// login nodes without them. C++ objects cross the door by pointer (program and module come from
// one build and share libstdc++; the ABI number below refuses a module of another build shape);
// exceptions never cross it: the module returns an exit code and the message.
#pragma once

#include <cstddef>

#include "mlprio/fsdp/measure.hpp"

namespace mlprio::fsdp {

// Bumped whenever MeasureOptions, MeasureResult or the entry's signature change; combined with
// their sizes, so a stale module from another build is refused instead of misread.
constexpr long MEASURE_MODULE_ABI = 2L * 1000000L +
                                    static_cast<long>(sizeof(MeasureOptions)) * 1000L +
                                    static_cast<long>(sizeof(MeasureResult));

// Runs run_measure(*opts) into *out. Returns 0, or the program's exit code for the error
// (3 no device, 2 bad input, 1 runtime) with its message in err (NUL-terminated, truncated).
using MeasureEntry = int (*)(const MeasureOptions* opts, MeasureResult* out, char* err,
                             std::size_t err_len);
using MeasureAbiEntry = long (*)();

}  // namespace mlprio::fsdp

extern "C" {
int mlprio_fsdp_measure(const mlprio::fsdp::MeasureOptions* opts, mlprio::fsdp::MeasureResult* out,
                        char* err, std::size_t err_len);
long mlprio_fsdp_measure_abi();
}
