// Host-side launchers of the CUDA kernels (cuda/kernels.cu). Each is asynchronous on `stream`,
// checks its launch with CUDA_CHECK, and has a CPU reference with a stated tolerance in
// reference.hpp. Pointers are device pointers; bf16 data is passed as uint16_t bit patterns.
// Needs CUDA (MLPRIO_KERNELS_HAVE_CUDA).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "mlprio/kernels/reference.hpp"

namespace mlprio::kernels {

// Writes fill_pattern_ref's bytes over [dst, dst + bytes): 16-byte stores where dst is 16-byte
// aligned (every caching-allocator block is 512-byte aligned), so it runs near copy bandwidth.
void fill_pattern(void* dst, uint64_t bytes, uint32_t seed, cudaStream_t stream);

// Fused AdamW over a flat shard of n fp32 values (one pass: read p, g, m, v; write p, m, v).
void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWParams& hp, int step,
           cudaStream_t stream);

// y = gelu_tanh(x) elementwise over n bf16 values (x and y may be the same buffer).
void gelu_bf16(const uint16_t* x, uint16_t* y, int64_t n, cudaStream_t stream);

// Keeps `stream` busy for `ns` nanoseconds of GPU time (one thread reading the global timer):
// the stand-in for a layer's GEMMs when measure models compute time. Holds one SM only.
void busy_wait(uint64_t ns, cudaStream_t stream);

}  // namespace mlprio::kernels
