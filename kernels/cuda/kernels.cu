// The CUDA kernels of kernels.hpp. Grid-stride loops with a grid sized to the device's SMs, so one
// launch covers any size; every launch is checked. The CPU references in cpu/reference.cpp define
// the expected results (fill_pattern exactly, AdamW and GELU within reference.hpp's tolerances).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "mlprio/kernels/check.hpp"
#include "mlprio/kernels/kernels.hpp"

namespace mlprio::kernels {

namespace {

constexpr int THREADS = 256;

int grid_for(uint64_t items) {
  static int max_blocks = [] {
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms * 8;
  }();
  const uint64_t need = (items + THREADS - 1) / THREADS;
  if (need == 0) return 1;
  return need < static_cast<uint64_t>(max_blocks) ? static_cast<int>(need) : max_blocks;
}

__global__ void fill_pattern_vec_kernel(uint4* dst, uint64_t n_vec, uint32_t seed) {
  for (uint64_t v = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; v < n_vec;
       v += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint64_t w = 4 * v;
    dst[v] = make_uint4(pattern_word(seed, w), pattern_word(seed, w + 1), pattern_word(seed, w + 2),
                        pattern_word(seed, w + 3));
  }
}

// Bytes [first, bytes) one at a time: the unaligned head/tail (at most a few dozen bytes).
__global__ void fill_pattern_bytes_kernel(unsigned char* base, uint64_t first, uint64_t bytes,
                                          uint32_t seed) {
  for (uint64_t b = first + threadIdx.x; b < bytes; b += blockDim.x) {
    const uint32_t w = pattern_word(seed, b / 4);
    base[b] = static_cast<unsigned char>(w >> (8 * (b % 4)));
  }
}

__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g,
                             float* __restrict__ m, float* __restrict__ v, int64_t n, float beta1,
                             float beta2, float eps, float step_size, float bc2_sqrt, float decay) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    const float denom = sqrtf(vi) / bc2_sqrt + eps;
    p[i] = p[i] * decay - step_size * mi / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

__global__ void gelu_bf16_kernel(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t n) {
  const float k0 = 0.7978845608028654f;
  const float k1 = 0.044715f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float xi = __bfloat162float(x[i]);
    y[i] = __float2bfloat16_rn(0.5f * xi * (1.0f + tanhf(k0 * (xi + k1 * xi * xi * xi))));
  }
}

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void busy_wait_kernel(uint64_t ns) {
  const uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < ns) {
  }
}

}  // namespace

void busy_wait(uint64_t ns, cudaStream_t stream) {
  if (ns == 0) return;
  busy_wait_kernel<<<1, 1, 0, stream>>>(ns);
  CUDA_CHECK(cudaGetLastError());
}

void fill_pattern(void* dst, uint64_t bytes, uint32_t seed, cudaStream_t stream) {
  if (bytes == 0) return;
  auto* base = static_cast<unsigned char*>(dst);
  // The vector kernel needs 16-byte alignment; word i of the pattern is tied to byte 4i of the
  // block, so an unaligned start falls back to the byte kernel for the whole range.
  uint64_t vec_bytes = (reinterpret_cast<uintptr_t>(dst) % 16 == 0) ? bytes / 16 * 16 : 0;
  if (vec_bytes > 0) {
    fill_pattern_vec_kernel<<<grid_for(vec_bytes / 16), THREADS, 0, stream>>>(
        reinterpret_cast<uint4*>(base), vec_bytes / 16, seed);
    CUDA_CHECK(cudaGetLastError());
  }
  if (vec_bytes < bytes) {
    fill_pattern_bytes_kernel<<<1, THREADS, 0, stream>>>(base, vec_bytes, bytes, seed);
    CUDA_CHECK(cudaGetLastError());
  }
}

void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWParams& hp, int step,
           cudaStream_t stream) {
  if (n <= 0) return;
  // Same host-side constants as adamw_ref, so both sides start from identical floats.
  const auto bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta1), step));
  const auto bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta2), step));
  adamw_kernel<<<grid_for(static_cast<uint64_t>(n)), THREADS, 0, stream>>>(
      p, g, m, v, n, hp.beta1, hp.beta2, hp.eps, hp.lr / bc1, std::sqrt(bc2),
      1.0f - hp.lr * hp.weight_decay);
  CUDA_CHECK(cudaGetLastError());
}

void gelu_bf16(const uint16_t* x, uint16_t* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  gelu_bf16_kernel<<<grid_for(static_cast<uint64_t>(n)), THREADS, 0, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(x), reinterpret_cast<__nv_bfloat16*>(y), n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlprio::kernels
