// CPU references for the kernels in kernels.hpp, compiled on every machine. Each GPU kernel is
// checked against its reference (tests, and the benchmark before it times anything); the
// tolerances the checks use are declared here beside the definitions they apply to, so a test and
// the benchmark cannot disagree about what "correct" means. bf16 values are stored as uint16_t
// bit patterns so that this header needs no CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

// pattern_word() is shared with the device code: the same definition on both sides.
#if defined(__CUDACC__)
#define MLPRIO_HOST_DEVICE __host__ __device__
#else
#define MLPRIO_HOST_DEVICE
#endif

namespace mlprio::kernels {

// ---- bf16 -------------------------------------------------------------------------------------
// Round-to-nearest-even float -> bf16 (NaN stays a quiet NaN), as __float2bfloat16_rn does.
uint16_t bf16_from_float(float f);
float float_from_bf16(uint16_t b);

// ---- fill_pattern: first touch of a freshly allocated block ------------------------------------
// 32-bit word i of the block gets pattern_word(seed, i); a tail of 1-3 bytes gets the low bytes of
// the next word. Exact: the GPU result must equal the reference bit for bit.
MLPRIO_HOST_DEVICE inline uint32_t pattern_word(uint32_t seed, uint64_t i) {
  // splitmix-style mix of (seed, index): cheap, and a wrong index shows up as a wrong word.
  uint64_t z = (static_cast<uint64_t>(seed) << 32) ^ (i * 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return static_cast<uint32_t>(z ^ (z >> 31));
}
void fill_pattern_ref(void* dst, uint64_t bytes, uint32_t seed);

// ---- AdamW over a flat fp32 shard (torch.optim.AdamW, decoupled weight decay) ------------------
struct AdamWParams {
  float lr = 1e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
};
// step is 1-based (bias correction uses beta^step). Updates p, m, v in place.
void adamw_ref(float* p, const float* g, float* m, float* v, int64_t n, const AdamWParams& hp,
               int step);
// |gpu - ref| <= ADAMW_ABS_TOL + ADAMW_REL_TOL * |ref| for p, m and v: the GPU may contract
// multiply-adds into FMAs and uses a different sqrt/division rounding path.
inline constexpr double ADAMW_REL_TOL = 1e-5;
inline constexpr double ADAMW_ABS_TOL = 1e-7;

// ---- GELU forward, bf16 in/out, fp32 arithmetic (tanh approximation) ---------------------------
float gelu_tanh(float x);
void gelu_bf16_ref(const uint16_t* x, uint16_t* y, int64_t n);
// Results may differ by this many bf16 units in the last place (tanhf differs between the
// device and host libraries by a few float ulps, which can flip one bf16 rounding).
inline constexpr int GELU_MAX_ULP = 1;
int bf16_ulp_distance(uint16_t a, uint16_t b);

// ---- comparison helpers shared by the tests and the benchmark ----------------------------------
struct CompareResult {
  int64_t wrong = 0;  // elements outside tolerance (nccl-tests' #wrong)
  int64_t first_wrong = -1;
  double max_abs_err = 0.0;
  std::string describe(const char* what) const;  // one line for a failure message
  bool ok() const { return wrong == 0; }
};
CompareResult compare_floats(const float* got, const float* want, int64_t n, double rel_tol,
                             double abs_tol);
CompareResult compare_bf16(const uint16_t* got, const uint16_t* want, int64_t n, int max_ulp);
CompareResult compare_bytes(const void* got, const void* want, uint64_t bytes);

}  // namespace mlprio::kernels
