// CPU references of the kernels (see reference.hpp): the definitions the GPU results are checked
// against. Written for clarity, not speed; single precision where the kernel uses single
// precision, in the same order of operations, so the tolerances can stay tight.
#include "mlprio/kernels/reference.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace mlprio::kernels {

uint16_t bf16_from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffU) > 0x7f800000U) return static_cast<uint16_t>((u >> 16) | 0x40U);  // NaN
  const uint32_t rounding = 0x7fffU + ((u >> 16) & 1U);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float float_from_bf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

void fill_pattern_ref(void* dst, uint64_t bytes, uint32_t seed) {
  auto* out = static_cast<unsigned char*>(dst);
  const uint64_t words = bytes / 4;
  for (uint64_t i = 0; i < words; ++i) {
    const uint32_t w = pattern_word(seed, i);
    std::memcpy(out + 4 * i, &w, 4);
  }
  if (bytes % 4) {
    const uint32_t w = pattern_word(seed, words);
    std::memcpy(out + 4 * words, &w, bytes % 4);  // little-endian low bytes, as the GPU writes
  }
}

void adamw_ref(float* p, const float* g, float* m, float* v, int64_t n, const AdamWParams& hp,
               int step) {
  const auto bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta1), step));
  const auto bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta2), step));
  const float step_size = hp.lr / bc1;
  const float bc2_sqrt = std::sqrt(bc2);
  const float decay = 1.0f - hp.lr * hp.weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = hp.beta1 * m[i] + (1.0f - hp.beta1) * gi;
    const float vi = hp.beta2 * v[i] + (1.0f - hp.beta2) * gi * gi;
    const float denom = std::sqrt(vi) / bc2_sqrt + hp.eps;
    p[i] = p[i] * decay - step_size * mi / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

float gelu_tanh(float x) {
  const float k0 = 0.7978845608028654f;  // sqrt(2/pi)
  const float k1 = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(k0 * (x + k1 * x * x * x)));
}

void gelu_bf16_ref(const uint16_t* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_from_float(gelu_tanh(float_from_bf16(x[i])));
}

int bf16_ulp_distance(uint16_t a, uint16_t b) {
  // Map sign-magnitude bit patterns onto a monotonic integer line; +0 and -0 are 0 apart.
  auto line = [](uint16_t h) {
    return (h & 0x8000U) ? -static_cast<int>(h & 0x7fffU) : static_cast<int>(h);
  };
  return std::abs(line(a) - line(b));
}

std::string CompareResult::describe(const char* what) const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s: %lld wrong (first at index %lld), max abs error %.3g", what,
                static_cast<long long>(wrong), static_cast<long long>(first_wrong), max_abs_err);
  return buf;
}

CompareResult compare_floats(const float* got, const float* want, int64_t n, double rel_tol,
                             double abs_tol) {
  CompareResult r;
  for (int64_t i = 0; i < n; ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    const bool bad = !(err <= abs_tol + rel_tol * std::fabs(static_cast<double>(want[i])));
    if (err > r.max_abs_err || std::isnan(err)) r.max_abs_err = err;
    if (bad) {
      if (r.wrong++ == 0) r.first_wrong = i;
    }
  }
  return r;
}

CompareResult compare_bf16(const uint16_t* got, const uint16_t* want, int64_t n, int max_ulp) {
  CompareResult r;
  for (int64_t i = 0; i < n; ++i) {
    const double err = std::fabs(static_cast<double>(float_from_bf16(got[i])) -
                                 static_cast<double>(float_from_bf16(want[i])));
    if (err > r.max_abs_err) r.max_abs_err = err;
    if (bf16_ulp_distance(got[i], want[i]) > max_ulp) {
      if (r.wrong++ == 0) r.first_wrong = i;
    }
  }
  return r;
}

CompareResult compare_bytes(const void* got, const void* want, uint64_t bytes) {
  CompareResult r;
  const auto* a = static_cast<const unsigned char*>(got);
  const auto* b = static_cast<const unsigned char*>(want);
  for (uint64_t i = 0; i < bytes; ++i) {
    if (a[i] != b[i]) {
      if (r.wrong++ == 0) r.first_wrong = static_cast<int64_t>(i);
      r.max_abs_err = 1.0;
    }
  }
  return r;
}

}  // namespace mlprio::kernels
