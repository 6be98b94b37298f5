// Tests of the Lublin & Feitelson workload generator (core/jobs/lublin.hpp): determinism and a
// pinned golden prefix (so a platform or refactoring that changes the trace for a seed fails
// here), hard invariants (sizes within the machine, ordered submits, bounded runtimes), and the
// generated distributions against values computed independently from the published parameters.
// Statistical checks use 100k jobs and 4 standard errors: a correct generator passes for any seed
// with probability > 0.9999, while swapping in another job class's constants, dropping the size
// dependence of the runtime mixture, or losing the daily cycle is tens of standard errors away.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

#include "mlprio/jobs/lublin.hpp"

using namespace mlprio;

namespace {

constexpr int64_t N_STAT = 100000;

// The published constants, typed here again from m_lublin99.c (and GridSim's
// WorkloadLublin99.java) so that the statistical checks below do not take their expectations from
// the code under test.
const LublinParams PUBLISHED_BATCH = {.serial_prob = 0.2927,
                                      .pow2_prob = 0.6686,
                                      .ulow = 1.2,
                                      .umed = 5,
                                      .uhi = 7,
                                      .uprob = 0.875,
                                      .a1 = 6.57,
                                      .b1 = 0.823,
                                      .a2 = 639.1,
                                      .b2 = 0.0156,
                                      .pa = -0.003,
                                      .pb = 0.6986,
                                      .aarr = 6.0415,
                                      .barr = 0.8531,
                                      .arar = 1.0519,
                                      .anum = 6.1271,
                                      .bnum = 5.2740};
const LublinParams PUBLISHED_INTERACTIVE = {.serial_prob = 0.1541,
                                            .pow2_prob = 0.625,
                                            .ulow = 1,
                                            .umed = 3,
                                            .uhi = 5.5,
                                            .uprob = 0.705,
                                            .a1 = 3.8351,
                                            .b1 = 0.6605,
                                            .a2 = 7.073,
                                            .b2 = 0.6856,
                                            .pa = -0.0118,
                                            .pb = 0.9156,
                                            .aarr = 6.5510,
                                            .barr = 0.6621,
                                            .arar = 0.9797,
                                            .anum = 8.9186,
                                            .bnum = 3.6680};
const LublinParams PUBLISHED_TYPELESS = {.serial_prob = 0.244,
                                         .pow2_prob = 0.576,
                                         .ulow = 0.8,
                                         .umed = 4.5,
                                         .uhi = 7,
                                         .uprob = 0.86,
                                         .a1 = 4.2,
                                         .b1 = 0.94,
                                         .a2 = 312,
                                         .b2 = 0.03,
                                         .pa = -0.0054,
                                         .pb = 0.78,
                                         .aarr = 10.2303,
                                         .barr = 0.4871,
                                         .arar = 1.0225,
                                         .anum = 8.1737,
                                         .bnum = 3.9631};

bool same_params(const LublinParams& a, const LublinParams& b) {
  return a.serial_prob == b.serial_prob && a.pow2_prob == b.pow2_prob && a.ulow == b.ulow &&
         a.umed == b.umed && a.uhi == b.uhi && a.uprob == b.uprob && a.a1 == b.a1 && a.b1 == b.b1 &&
         a.a2 == b.a2 && a.b2 == b.b2 && a.pa == b.pa && a.pb == b.pb && a.aarr == b.aarr &&
         a.barr == b.barr && a.arar == b.arar && a.anum == b.anum && a.bnum == b.bnum;
}

LublinOptions options_for(LublinJobTypes types, int64_t nodes = 128, uint64_t seed = 1) {
  LublinOptions o;
  o.types = types;
  o.nodes = nodes;
  o.seed = seed;
  return o;
}

bool is_pow2(int64_t v) {
  return v > 0 && (v & (v - 1)) == 0;
}

// P(x0 <= U < x1) for the two-stage uniform: U(ulow, umed) w.p. uprob, else U(umed, uhi).
double tsu_prob(const LublinParams& p, double x0, double x1) {
  auto part = [&](double lo, double hi) {
    if (hi <= lo) return 0.0;
    return std::max(0.0, std::min(x1, hi) - std::max(x0, lo)) / (hi - lo);
  };
  return p.uprob * part(p.ulow, p.umed) + (1.0 - p.uprob) * part(p.umed, p.uhi);
}

struct SizeExpectation {
  double pow2_share_of_parallel;  // P(size is a power of two | size > 1)
  double mean_log2_parallel;      // E[log2(size) | size > 1]
};

// Exact expectations of the size model at a machine where no job is capped: power-of-two jobs
// have size 2^round(U); the others round(2^U), which may also be a power of two by chance.
SizeExpectation expected_sizes(const LublinParams& p, int64_t max_size) {
  double other_pow2 = 0, e_round = 0, e_log2_other = 0;
  for (int64_t m = 1; m <= max_size; ++m) {
    const double pm = tsu_prob(p, std::log2(static_cast<double>(m) - 0.5),
                               std::log2(static_cast<double>(m) + 0.5));
    if (is_pow2(m)) other_pow2 += pm;
    e_log2_other += std::log2(static_cast<double>(m)) * pm;
  }
  for (int k = -2; k <= 64; ++k) e_round += k * tsu_prob(p, k - 0.5, k + 0.5);
  const double parallel = 1.0 - p.serial_prob;
  const double other = parallel - p.pow2_prob;
  return {(p.pow2_prob + other * other_pow2) / parallel,
          (p.pow2_prob * e_round + other * e_log2_other) / parallel};
}

// E[X | X <= cap] for X ~ p gamma(a1,b1) + (1-p) gamma(a2,b2): the model redraws the whole mixture
// above TOO_MUCH_TIME. Simpson's rule on normalised densities (std::lgamma is fine in a test).
double truncated_hyper_gamma_mean(double a1, double b1, double a2, double b2, double p,
                                  double cap) {
  const double log_norm1 = std::lgamma(a1) + a1 * std::log(b1),
               log_norm2 = std::lgamma(a2) + a2 * std::log(b2);
  auto pdf = [&](double x, double a, double b) {
    if (x <= 0) return 0.0;
    return std::exp((a - 1) * std::log(x) - x / b - (a == a1 && b == b1 ? log_norm1 : log_norm2));
  };
  constexpr int PANELS = 240000;
  const double h = cap / PANELS;
  double mass = 0, first_moment = 0;
  for (int k = 0; k <= PANELS; ++k) {
    const double x = k * h;
    const double wgt = (k == 0 || k == PANELS) ? 1.0 : ((k % 2) ? 4.0 : 2.0);
    const double f = p * pdf(x, a1, b1) + (1 - p) * pdf(x, a2, b2);
    mass += wgt * f;
    first_moment += wgt * x * f;
  }
  return first_moment / mass;
}

struct MeanSe {
  double mean, se;
};
MeanSe mean_se(const std::vector<double>& v) {
  double s = 0, s2 = 0;
  for (double x : v) s += x;
  const double m = s / static_cast<double>(v.size());
  for (double x : v) s2 += (x - m) * (x - m);
  return {m, std::sqrt(s2 / static_cast<double>(v.size() - 1) / static_cast<double>(v.size()))};
}

}  // namespace

TEST_CASE("lublin: the model constants are the published ones", "[lublin]") {
  CHECK(same_params(lublin_batch_params(), PUBLISHED_BATCH));
  CHECK(same_params(lublin_interactive_params(), PUBLISHED_INTERACTIVE));
  CHECK(same_params(lublin_typeless_params(), PUBLISHED_TYPELESS));
  CHECK(LUBLIN_MAX_LOG_RUNTIME == 12);
  CHECK(LUBLIN_MAX_LOG_INTERARRIVAL == 13);
  CHECK(LUBLIN_BUCKETS == 48);
  CHECK(LUBLIN_CYCLIC_DAY_START == 11);
  CHECK(LublinOptions{}.start_hour == 0);
  // At the fitted machine size the generator uses them unchanged.
  CHECK(same_params(LublinGenerator(options_for(LublinJobTypes::BOTH)).params(1), PUBLISHED_BATCH));
  CHECK(same_params(LublinGenerator(options_for(LublinJobTypes::BOTH)).params(0),
                    PUBLISHED_INTERACTIVE));
  CHECK(same_params(LublinGenerator(options_for(LublinJobTypes::TYPELESS)).params(0),
                    PUBLISHED_TYPELESS));
}

TEST_CASE("lublin: the PRNG is xoshiro256** seeded by splitmix64, pinned", "[lublin]") {
  // Values checked against an independent implementation of both published algorithms.
  LublinGenerator::Rng rng(1);
  CHECK(rng.next_u64() == 0xb3f2af6d0fc710c5ULL);
  CHECK(rng.next_u64() == 0x853b559647364ceaULL);
  CHECK(rng.next_u64() == 0x92f89756082a4514ULL);
  LublinGenerator::Rng rng0(0);
  CHECK(rng0.next_u64() == 0x99ec5f36cb75f2b4ULL);
  LublinGenerator::Rng u(7);
  for (int i = 0; i < 10000; ++i) {
    const double x = u.uniform(), y = u.uniform_pos();
    REQUIRE(x >= 0.0);
    REQUIRE(x < 1.0);
    REQUIRE(y > 0.0);
    REQUIRE(y < 1.0);
  }
}

TEST_CASE("lublin: gamma sampler matches mean and variance", "[lublin]") {
  LublinGenerator::Rng rng(3);
  const std::vector<std::pair<double, double>> cases = {
      {6.57, 0.823}, {639.1, 0.0156}, {0.4, 2.0}, {1.0, 1.0}};
  for (const auto& [shape, scale] : cases) {
    std::vector<double> v(N_STAT);
    for (auto& x : v) x = rng.gamma(shape, scale);
    const auto [m, se] = mean_se(v);
    double var = 0;
    for (double x : v) var += (x - m) * (x - m);
    var /= static_cast<double>(v.size() - 1);
    INFO("shape " << shape << " scale " << scale);
    CHECK(std::abs(m - shape * scale) < 4 * se);
    // Var of the sample variance ~ (mu4 - sigma^4)/n; for a gamma mu4 = 3(1 + 2/shape) sigma^4.
    const double sigma2 = shape * scale * scale;
    const double var_se =
        sigma2 * std::sqrt((3.0 * (1.0 + 2.0 / shape) - 1.0) / static_cast<double>(v.size()));
    CHECK(std::abs(var - sigma2) < 4 * var_se);
  }
}

TEST_CASE("lublin: golden prefix for seed 1 is pinned", "[lublin]") {
  struct G {
    int64_t id;
    double submit, run;
    int64_t procs;
    int32_t queue;
  };
  SECTION("batch, 128 nodes (the defaults)") {
    const std::vector<G> golden = {{1, 38879, 2199, 1, 1},   {2, 38902, 2, 1, 1},
                                   {3, 46947, 12738, 16, 1}, {4, 46953, 139, 4, 1},
                                   {5, 46976, 397, 4, 1},    {6, 46978, 22615, 8, 1}};
    const auto jobs = generate_lublin(LublinOptions{}, static_cast<int64_t>(golden.size()));
    for (size_t i = 0; i < golden.size(); ++i) {
      INFO("job " << i + 1);
      CHECK(jobs[i].id == golden[i].id);
      CHECK(jobs[i].submit == golden[i].submit);
      CHECK(jobs[i].run == golden[i].run);
      CHECK(jobs[i].req_procs == golden[i].procs);
      CHECK(jobs[i].queue == golden[i].queue);
    }
  }
  SECTION("both classes merged") {
    const std::vector<G> golden = {
        {1, 31, 3870, 32, 0}, {2, 72, 9, 1, 0}, {3, 104, 43, 44, 0}, {4, 159, 6, 4, 0}};
    const auto jobs =
        generate_lublin(options_for(LublinJobTypes::BOTH), static_cast<int64_t>(golden.size()));
    for (size_t i = 0; i < golden.size(); ++i) {
      INFO("job " << i + 1);
      CHECK(jobs[i].submit == golden[i].submit);
      CHECK(jobs[i].run == golden[i].run);
      CHECK(jobs[i].req_procs == golden[i].procs);
      CHECK(jobs[i].queue == golden[i].queue);
    }
  }
}

TEST_CASE("lublin: same seed gives the same jobs, another seed other jobs", "[lublin]") {
  for (auto types : {LublinJobTypes::BATCH, LublinJobTypes::BOTH, LublinJobTypes::TYPELESS}) {
    LublinOptions o = options_for(types, 256, 42);
    o.req_time = LublinReqTime::FACTOR;
    const auto a = generate_lublin(o, 20000);
    LublinGenerator streaming(o);
    Job j;
    for (const Job& x : a) {
      REQUIRE(streaming.next(j));
      REQUIRE(j.id == x.id);
      REQUIRE(j.submit == x.submit);
      REQUIRE(j.run == x.run);
      REQUIRE(j.req_procs == x.req_procs);
      REQUIRE(j.alloc_procs == x.alloc_procs);
      REQUIRE(j.req_time == x.req_time);
      REQUIRE(j.queue == x.queue);
    }
    o.seed = 43;
    const auto b = generate_lublin(o, 100);
    int differing = 0;
    for (size_t i = 0; i < b.size(); ++i)
      if (b[i].submit != a[i].submit || b[i].run != a[i].run || b[i].req_procs != a[i].req_procs)
        ++differing;
    CHECK(differing > 90);
  }
}

TEST_CASE("lublin: invariants hold for any machine size and class", "[lublin]") {
  const double max_run = std::floor(std::exp(LUBLIN_MAX_LOG_RUNTIME));
  for (int64_t nodes : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}, int64_t{8}, int64_t{100},
                        int64_t{128}, int64_t{256}, int64_t{1000}, int64_t{100000}}) {
    for (auto types : {LublinJobTypes::BATCH, LublinJobTypes::INTERACTIVE, LublinJobTypes::BOTH,
                       LublinJobTypes::TYPELESS}) {
      LublinOptions o = options_for(types, nodes, static_cast<uint64_t>(nodes));
      o.procs_per_node = nodes == 100 ? 4 : 1;
      LublinGenerator gen(o);
      INFO("nodes " << nodes << " types " << lublin_job_types_name(types));
      Job j;
      double last_submit = 0;
      int64_t largest = 0;
      bool saw_queue[2] = {false, false};
      for (int64_t i = 1; i <= 5000; ++i) {
        gen.next(j);
        REQUIRE(j.id == i);
        REQUIRE(j.submit >= last_submit);
        REQUIRE(j.submit == std::floor(j.submit));
        last_submit = j.submit;
        REQUIRE(j.alloc_nodes >= 1);
        REQUIRE(j.alloc_nodes <= nodes);
        REQUIRE(j.req_nodes == j.alloc_nodes);
        REQUIRE(j.req_procs == j.alloc_nodes * o.procs_per_node);
        REQUIRE(j.alloc_procs == j.req_procs);
        REQUIRE(j.run >= 1);
        REQUIRE(j.run <= max_run);
        REQUIRE(j.req_time == UNKNOWN);
        REQUIRE(j.wait == UNKNOWN);
        REQUIRE(j.status == JobStatus::COMPLETED);
        REQUIRE(j.user == -1);
        if (types == LublinJobTypes::TYPELESS) {
          REQUIRE(j.queue == -1);
        } else {
          REQUIRE((j.queue == 0 || j.queue == 1));
          saw_queue[j.queue] = true;
        }
        largest = std::max(largest, j.alloc_nodes);
      }
      if (types == LublinJobTypes::BATCH) CHECK((saw_queue[1] && !saw_queue[0]));
      if (types == LublinJobTypes::INTERACTIVE) CHECK((saw_queue[0] && !saw_queue[1]));
      if (types == LublinJobTypes::BOTH) CHECK((saw_queue[0] && saw_queue[1]));
      // Scaling reaches the machine: the biggest of 5000 batch jobs is at least a quarter of it.
      if (types == LublinJobTypes::BATCH && nodes >= 2) CHECK(largest * 4 >= nodes);
    }
  }
}

TEST_CASE("lublin: job sizes follow the published size model", "[lublin]") {
  struct Case {
    LublinJobTypes types;
    LublinParams params;
  };
  for (const auto& c : {Case{LublinJobTypes::BATCH, PUBLISHED_BATCH},
                        Case{LublinJobTypes::INTERACTIVE, PUBLISHED_INTERACTIVE},
                        Case{LublinJobTypes::TYPELESS, PUBLISHED_TYPELESS}}) {
    INFO("types " << lublin_job_types_name(c.types));
    LublinGenerator gen(options_for(c.types, 128, 11));

    int64_t serial = 0;
    std::vector<double> log2_sizes;
    int64_t pow2 = 0;
    Job j;
    for (int64_t i = 0; i < N_STAT; ++i) {
      gen.next(j);
      if (j.alloc_nodes == 1) {
        ++serial;
        continue;
      }
      log2_sizes.push_back(std::log2(static_cast<double>(j.alloc_nodes)));
      if (is_pow2(j.alloc_nodes)) ++pow2;
    }
    const double n = static_cast<double>(N_STAT);
    const double p_serial = c.params.serial_prob;
    CHECK(std::abs(static_cast<double>(serial) / n - p_serial) <
          4 * std::sqrt(p_serial * (1 - p_serial) / n));

    const auto expect = expected_sizes(c.params, 128);
    const double n_par = static_cast<double>(log2_sizes.size());
    const double q = expect.pow2_share_of_parallel;
    CHECK(std::abs(static_cast<double>(pow2) / n_par - q) < 4 * std::sqrt(q * (1 - q) / n_par));

    const auto [m, se] = mean_se(log2_sizes);
    CHECK(std::abs(m - expect.mean_log2_parallel) < 4 * se);
    // The rounding to whole nodes moves the mean of log2(size) only slightly off the two-stage
    // uniform's own mean (Uprob*ULow + UMed + (1-Uprob)*UHi) / 2, quoted in m_lublin99.c.
    const auto& p = c.params;
    CHECK(std::abs(m - (p.uprob * p.ulow + p.umed + (1 - p.uprob) * p.uhi) / 2) < 0.1);
  }
}

TEST_CASE("lublin: mean log runtime matches the size-dependent hyper-gamma", "[lublin]") {
  for (auto types : {LublinJobTypes::BATCH, LublinJobTypes::INTERACTIVE}) {
    INFO("types " << lublin_job_types_name(types));
    LublinGenerator gen(options_for(types, 128, 5));
    const LublinParams& p =
        types == LublinJobTypes::BATCH ? PUBLISHED_BATCH : PUBLISHED_INTERACTIVE;
    std::map<int64_t, double> analytic;  // per size: E[ln runtime | size]
    auto expected_for = [&](int64_t size) {
      auto it = analytic.find(size);
      if (it != analytic.end()) return it->second;
      const double mix = std::clamp(p.pa * static_cast<double>(size) + p.pb, 0.0, 1.0);
      const double e =
          truncated_hyper_gamma_mean(p.a1, p.b1, p.a2, p.b2, mix, LUBLIN_MAX_LOG_RUNTIME);
      analytic.emplace(size, e);
      return e;
    };
    std::vector<double> serial_obs, big_obs;
    double serial_exp = 0, big_exp = 0;
    Job j;
    for (int64_t i = 0; i < N_STAT; ++i) {
      gen.next(j);
      // Runtimes are whole seconds, floor(e^X); ln(run + 0.5) undoes the floor's bias to well
      // under 0.005 for these parameters (P(e^X < 2) is below 2% even for interactive jobs).
      const double obs = std::log(j.run + 0.5);
      if (j.alloc_nodes == 1) {
        serial_obs.push_back(obs);
        serial_exp += expected_for(1);
      } else if (j.alloc_nodes >= 16) {
        big_obs.push_back(obs);
        big_exp += expected_for(j.alloc_nodes);
      }
    }
    serial_exp /= static_cast<double>(serial_obs.size());
    big_exp /= static_cast<double>(big_obs.size());
    const auto s = mean_se(serial_obs);
    const auto b = mean_se(big_obs);
    CHECK(std::abs(s.mean - serial_exp) < 4 * s.se + 0.005);
    CHECK(std::abs(b.mean - big_exp) < 4 * b.se + 0.005);
    // pa < 0: bigger jobs run longer (Lublin & Feitelson's size-runtime correlation).
    CHECK(b.mean > s.mean + 4 * std::hypot(s.se, b.se));
  }
}

TEST_CASE("lublin: arrivals follow the daily cycle", "[lublin]") {
  LublinGenerator gen(options_for(LublinJobTypes::BATCH, 128, 9));
  const LublinParams& p = PUBLISHED_BATCH;
  const auto& w = gen.daily_weights(1);

  // The weights are the gamma(anum, bnum) mass of each half-hour bucket of the fitted day; the
  // mass of a unit interval is its density at the centre within 1%, which the closed form gives.
  double sum = 0;
  for (double x : w) sum += x;
  CHECK(sum / LUBLIN_BUCKETS == Approx(1.0).epsilon(1e-12));
  auto density_ratio = [&](double x, double y) {
    return std::exp((p.anum - 1) * std::log(x / y) - (x - y) / p.bnum);
  };
  // Slot k holds fitted-day bucket i = k + 1 (for i >= CYCLIC_DAY_START).
  CHECK(w[26] / w[10] == Approx(density_ratio(27, 11)).epsilon(0.01));
  CHECK(w[40] / w[20] == Approx(density_ratio(41, 21)).epsilon(0.01));

  std::array<int64_t, LUBLIN_BUCKETS> count{};
  Job j;
  for (int64_t i = 0; i < N_STAT; ++i) {
    gen.next(j);
    count[static_cast<size_t>(std::fmod(j.submit, 86400.0) / LUBLIN_SECONDS_IN_BUCKET)]++;
  }
  // 10:00-16:00 against 00:00-06:00. The arrival rate in a bucket is proportional to its weight
  // (each job spends iid points; a bucket absorbs its weight in points). Arrivals are bursty (a
  // heavy-tailed inter-arrival) so counts vary more than Poisson; 10% covers that at 100k jobs.
  double peak = 0, night = 0, peak_w = 0, night_w = 0;
  for (int k = 0; k < 12; ++k) {
    night += static_cast<double>(count[static_cast<size_t>(k)]);
    night_w += w[static_cast<size_t>(k)];
    peak += static_cast<double>(count[static_cast<size_t>(k + 20)]);
    peak_w += w[static_cast<size_t>(k + 20)];
  }
  CHECK(peak > 2 * night);
  CHECK(peak / night == Approx(peak_w / night_w).epsilon(0.10));
}

TEST_CASE("lublin: mean inter-arrival time matches the truncated gamma of the rush hours",
          "[lublin]") {
  // Each job buys exp(X) / 1800 points, X ~ gamma(aarr * arar, barr) redrawn above 13, and a day
  // costs 48 points (weights have mean 1), so over many days the mean inter-arrival is
  // E[e^X | X <= 13] seconds whatever the daily cycle, up to one day of edge effect.
  struct Case {
    LublinJobTypes types;
    LublinParams params;
  };
  for (const auto& c : {Case{LublinJobTypes::BATCH, PUBLISHED_BATCH},
                        Case{LublinJobTypes::INTERACTIVE, PUBLISHED_INTERACTIVE},
                        Case{LublinJobTypes::TYPELESS, PUBLISHED_TYPELESS}}) {
    INFO("types " << lublin_job_types_name(c.types));
    const double shape = c.params.aarr * c.params.arar, scale = c.params.barr;
    constexpr int PANELS = 260000;
    const double h = LUBLIN_MAX_LOG_INTERARRIVAL / PANELS;
    double mass = 0, m1 = 0, m2 = 0;
    for (int k = 1; k <= PANELS; ++k) {
      const double x = k * h;
      const double wgt = k == PANELS ? 1.0 : ((k % 2) ? 4.0 : 2.0);
      const double lf =
          (shape - 1) * std::log(x) - x / scale - std::lgamma(shape) - shape * std::log(scale);
      mass += wgt * std::exp(lf);
      m1 += wgt * std::exp(lf + x);
      m2 += wgt * std::exp(lf + 2 * x);
    }
    const double mean = m1 / mass, sd = std::sqrt(m2 / mass - mean * mean);
    const auto jobs = generate_lublin(options_for(c.types, 128, 21), N_STAT);
    const double observed = jobs.back().submit / static_cast<double>(N_STAT);
    const double tol =
        4 * sd / std::sqrt(static_cast<double>(N_STAT)) + 86400.0 / static_cast<double>(N_STAT);
    CHECK(std::abs(observed - mean) < tol);
  }
}

TEST_CASE("lublin: load scale compresses time and changes nothing else", "[lublin]") {
  // One stream, so the same draws happen in the same order (with two streams the interleaving,
  // and so the draws, shift with the times).
  LublinOptions o = options_for(LublinJobTypes::BATCH, 128, 4);
  const auto base = generate_lublin(o, 20000);
  o.load_scale = 2.0;
  const auto fast = generate_lublin(o, 20000);
  for (size_t i = 0; i < base.size(); ++i) {
    REQUIRE(fast[i].run == base[i].run);
    REQUIRE(fast[i].req_procs == base[i].req_procs);
  }
  CHECK(fast.back().submit / base.back().submit == Approx(0.5).epsilon(0.05));
}

TEST_CASE("lublin: requested-time models", "[lublin]") {
  LublinOptions o;
  o.req_time = LublinReqTime::EXACT;
  for (const Job& j : generate_lublin(o, 2000)) REQUIRE(j.req_time == j.run);
  o.req_time = LublinReqTime::FACTOR;
  o.req_time_factor = 3.0;
  o.req_time_round = 900.0;
  for (const Job& j : generate_lublin(o, 2000)) {
    REQUIRE(j.req_time >= j.run * 3.0);
    REQUIRE(j.req_time < j.run * 3.0 + 900.0);
    REQUIRE(std::fmod(j.req_time, 900.0) == 0.0);
  }
}

TEST_CASE("lublin: bad options are refused with a reason", "[lublin]") {
  auto refused = [](auto edit) {
    LublinOptions o;
    edit(o);
    CHECK_THROWS_AS(LublinGenerator(o), mlprio::UsageError);
  };
  refused([](LublinOptions& o) { o.nodes = 0; });
  refused([](LublinOptions& o) { o.procs_per_node = 0; });
  refused([](LublinOptions& o) { o.start_hour = 24; });
  refused([](LublinOptions& o) { o.load_scale = 0; });
  refused([](LublinOptions& o) { o.load_scale = std::nan(""); });
  refused([](LublinOptions& o) {
    o.req_time = LublinReqTime::FACTOR;
    o.req_time_factor = 0.5;
  });
  refused([](LublinOptions& o) {
    o.req_time = LublinReqTime::FACTOR;
    o.req_time_round = 0;
  });
  CHECK_THROWS_WITH(LublinGenerator(LublinOptions{.nodes = -3}), Catch::Contains("nodes"));
  CHECK_THROWS_AS(generate_lublin(LublinOptions{}, -1), mlprio::UsageError);
  CHECK(generate_lublin(LublinOptions{}, 0).empty());
  CHECK(parse_lublin_job_types("both") == LublinJobTypes::BOTH);
  CHECK_THROWS_AS(parse_lublin_job_types("mixed"), mlprio::UsageError);
  CHECK(parse_lublin_req_time("factor") == LublinReqTime::FACTOR);
  CHECK_THROWS_AS(parse_lublin_req_time("guess"), mlprio::UsageError);
}
