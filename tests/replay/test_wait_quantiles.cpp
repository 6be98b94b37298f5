// The waits' percentiles in bounded memory (mlprio/replay/detail/metrics.hpp, WaitQuantiles): once
// the waits are counted per second instead of kept, p95, p99 and the maximum stay the same, bit
// for bit, as selection over every wait and as a full sort (nearest rank), whatever the mix of
// whole seconds, fractions, zeros and waits beyond the counters' range, and wherever the switch
// to counting happens.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "../support/same_bits.hpp"
#include "mlprio/replay/detail/metrics.hpp"

using mlprio::test::same_bits;

using mlprio::replay::detail::WaitQuantiles;

namespace {

WaitQuantiles::Result by_sort(std::vector<double> w) {
  std::sort(w.begin(), w.end());
  const auto n = static_cast<double>(w.size());
  const auto at = [&](double p) {
    const auto k = static_cast<size_t>(std::ceil(p / 100.0 * n));
    return w[std::max<size_t>(k, 1) - 1];
  };
  return {at(95), at(99), w.back()};
}

WaitQuantiles::Result with(const std::vector<double>& w, size_t histogram_after,
                           size_t far_block = WaitQuantiles::FAR_BLOCK) {
  WaitQuantiles q(histogram_after, far_block);
  for (double x : w) q.add(x);
  return q.finish();
}

void check_all_agree(const std::vector<double>& w) {
  const WaitQuantiles::Result want = by_sort(w);
  for (size_t after : {size_t{0}, size_t{1}, size_t{7}, w.size() / 2, w.size(), w.size() + 1,
                       WaitQuantiles::HISTOGRAM_AFTER}) {
    // Long waits counted in blocks of one, of a few, and of the default size (a block that
    // fills during the run, at the switch, or only at finish()).
    for (size_t block : {size_t{1}, size_t{3}, size_t{64}, WaitQuantiles::FAR_BLOCK}) {
      const WaitQuantiles::Result got = with(w, after, block);
      INFO("n = " << w.size() << ", counting after " << after << ", blocks of " << block);
      CHECK(same_bits(got.p95, want.p95));
      CHECK(same_bits(got.p99, want.p99));
      CHECK(same_bits(got.max, want.max));
    }
  }
}

}  // namespace

TEST_CASE("wait quantiles: counting per second gives the selection's values", "[replay][metrics]") {
  std::mt19937_64 rng(2026);
  const double beyond = static_cast<double>(WaitQuantiles::HISTOGRAM_SECONDS);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = 1 + rng() % (trial < 200 ? 60 : 5000);
    std::vector<double> w(n);
    const int kind = trial % 5;
    for (double& x : w) {
      const uint64_t r = rng();
      switch (r % 8 + (kind == 0 ? 8 : 0)) {
        case 0:
        case 1:
          x = 0;  // most jobs start at once
          break;
        case 2:
        case 3:
          x = static_cast<double>(rng() % 100000);  // whole seconds
          break;
        case 4:
          x = static_cast<double>(rng() % 100000) + 0.5;  // a scaled load's fractions
          break;
        case 5:
          x = std::ldexp(static_cast<double>(rng() % 1000000), -7);  // finer fractions
          break;
        case 6:
          x = beyond + static_cast<double>(rng() % 1000);  // past the counters' range
          break;
        case 7:
          x = beyond - 1 - static_cast<double>(rng() % 3);  // the counters' last seconds
          break;
        default:
          x = static_cast<double>(rng() % (kind == 0 ? 5 : 100));  // few distinct values, ties
      }
    }
    check_all_agree(w);
  }
}

TEST_CASE("wait quantiles: edges (one job, all equal, only fractions, only long waits)",
          "[replay][metrics]") {
  check_all_agree({0.0});
  check_all_agree({42.0});
  check_all_agree(std::vector<double>(1000, 7.0));
  check_all_agree({0.25, 0.5, 0.75});
  const double beyond = static_cast<double>(WaitQuantiles::HISTOGRAM_SECONDS);
  check_all_agree({beyond, beyond + 1, beyond * 4});
  // Whole seconds and fractions interleaved: every rank sits next to the other kind.
  for (int n = 1; n <= 300; ++n) {
    std::vector<double> mixed;
    for (int i = n - 1; i >= 0; --i) mixed.push_back(i % 2 ? i / 2 + 0.5 : i / 2);
    check_all_agree(mixed);
  }
  // Around the seconds counted at once (2^14) and the first windows' edges, with ties.
  std::vector<double> edge;
  for (int i = 0; i < 400; ++i) edge.push_back(16380 + i % 9 + (i % 3 == 0 ? 16384 : 0));
  check_all_agree(edge);
  // 100 jobs: p95 is the 95th smallest, p99 the 99th; the switch in the middle.
  std::vector<double> w;
  for (int i = 100; i >= 1; --i) w.push_back(i);
  const WaitQuantiles::Result r = with(w, 50);
  CHECK(r.p95 == 95.0);
  CHECK(r.p99 == 99.0);
  CHECK(r.max == 100.0);
}

TEST_CASE("wait quantiles: values no replay gives (negative, tiny, huge, infinite)",
          "[replay][metrics]") {
  // The counting sorts each wait out by its value, 16 at a time with AVX-512 where the CPU has it
  // and one at a time for the rest of a block: every kind in every lane and at every offset.
  const double top = static_cast<double>(WaitQuantiles::HISTOGRAM_SECONDS);
  const std::vector<double> kinds = {-1e300,  -5.0,
                                     -0.5,    std::numeric_limits<double>::denorm_min(),
                                     0.0,     1.0,
                                     16383.0, 16384.0,
                                     16384.5, top - 1,
                                     top,     4294967296.0,
                                     1e300,   std::numeric_limits<double>::infinity()};
  std::mt19937_64 rng(49);
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<double> w(1 + rng() % 200);
    for (double& x : w) x = kinds[rng() % kinds.size()];
    check_all_agree(w);
  }
}
