// CPU references of kernels/ (always built): hand-checked values, bf16 rounding, the pattern's
// byte layout, and that AdamW's reference follows torch.optim.AdamW's formula step by step.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "mlprio/kernels/reference.hpp"

using namespace mlprio::kernels;

TEST_CASE("bf16 rounding is round-to-nearest-even", "[kernels][cpu]") {
  CHECK(bf16_from_float(1.0f) == 0x3f80);
  CHECK(float_from_bf16(0x3f80) == 1.0f);
  // 1 + 2^-8 is exactly halfway between 1 and the next bf16 (1 + 2^-7): ties to even -> 1.
  CHECK(bf16_from_float(1.0f + 1.0f / 256.0f) == 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up.
  CHECK(bf16_from_float(1.0f + 3.0f / 256.0f) == 0x3f82);
  CHECK(std::isnan(float_from_bf16(bf16_from_float(std::nanf("")))));
  CHECK(bf16_ulp_distance(0x3f80, 0x3f81) == 1);
  CHECK(bf16_ulp_distance(0x0000, 0x8000) == 0);
  CHECK(bf16_ulp_distance(0x0001, 0x8001) == 2);
}

TEST_CASE("fill_pattern_ref writes pattern_word little-endian, tail included", "[kernels][cpu]") {
  std::vector<unsigned char> buf(11, 0);
  fill_pattern_ref(buf.data(), buf.size(), 7);
  for (uint64_t w = 0; w < 3; ++w) {
    const uint32_t want = pattern_word(7, w);
    for (int b = 0; b < 4 && 4 * w + b < buf.size(); ++b)
      CHECK(buf[4 * w + b] == static_cast<unsigned char>(want >> (8 * b)));
  }
  CHECK(pattern_word(7, 0) != pattern_word(8, 0));
  CHECK(pattern_word(7, 0) != pattern_word(7, 1));
}

TEST_CASE("adamw_ref matches the AdamW formula for two steps", "[kernels][cpu]") {
  AdamWParams hp;
  hp.lr = 0.1f;
  float p = 1.0f, m = 0.0f, v = 0.0f;
  const float g = 0.5f;
  double pd = 1.0, md = 0.0, vd = 0.0;
  for (int step = 1; step <= 2; ++step) {
    adamw_ref(&p, &g, &m, &v, 1, hp, step);
    pd *= 1.0 - 0.1 * 0.01;
    md = 0.9 * md + 0.1 * 0.5;
    vd = 0.999 * vd + 0.001 * 0.25;
    const double mhat = md / (1.0 - std::pow(0.9, step));
    const double denom = std::sqrt(vd) / std::sqrt(1.0 - std::pow(0.999, step)) + 1e-8;
    pd -= 0.1 * mhat / denom;
    // The reference works in float like the kernel: 1 - 0.999f alone is 5e-5 off in relative
    // terms, so the double formula is matched to 1e-4, not to float epsilon.
    CHECK(static_cast<double>(p) == Approx(pd).epsilon(1e-4));
    CHECK(static_cast<double>(m) == Approx(md).epsilon(1e-4));
    CHECK(static_cast<double>(v) == Approx(vd).epsilon(1e-4));
  }
}

TEST_CASE("gelu reference at known points", "[kernels][cpu]") {
  CHECK(gelu_tanh(0.0f) == 0.0f);
  CHECK(static_cast<double>(gelu_tanh(1.0f)) == Approx(0.841192).epsilon(1e-5));
  CHECK(static_cast<double>(gelu_tanh(-1.0f)) == Approx(-0.158808).epsilon(1e-4));
  CHECK(static_cast<double>(gelu_tanh(10.0f)) == Approx(10.0).epsilon(1e-6));
  const uint16_t x[] = {bf16_from_float(1.0f), bf16_from_float(-3.0f)};
  uint16_t y[2];
  gelu_bf16_ref(x, y, 2);
  CHECK(y[0] == bf16_from_float(gelu_tanh(1.0f)));
  CHECK(y[1] == bf16_from_float(gelu_tanh(-3.0f)));
}

TEST_CASE("comparison helpers count wrong elements", "[kernels][cpu]") {
  const float a[] = {1.0f, 2.0f, 3.0f};
  const float b[] = {1.0f, 2.1f, 3.0f};
  const CompareResult r = compare_floats(a, b, 3, 1e-3, 0.0);
  CHECK(r.wrong == 1);
  CHECK(r.first_wrong == 1);
  CHECK(compare_floats(a, a, 3, 0.0, 0.0).ok());
  const float nan_v[] = {std::nanf("")};
  CHECK_FALSE(compare_floats(nan_v, a, 1, 1.0, 1.0).ok());
  CHECK(compare_bytes(a, b, sizeof a).wrong > 0);
}
