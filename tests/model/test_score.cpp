// Score properties (core/src/model/README.md): shorter predicted runs score higher at equal
// wait, waiting raises the score, any job at or past the starvation limit outranks every job
// below it whatever the predictions and weights, starved jobs are served oldest first, and
// missing predictions fall back to the request without producing NaN.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>

#include "mlprio/model/predictor.hpp"

using namespace mlprio;
using namespace mlprio::model;

namespace {
Job job_at(double submit, int64_t procs = 1, double req = 3600) {
  Job j;
  j.submit = submit;
  j.req_procs = procs;
  j.req_time = req;
  return j;
}
Prediction pred(double rt) {
  Prediction p;
  p.runtime = rt;
  return p;
}
const ClusterState CLUSTER{1024, 512, 10};
}  // namespace

TEST_CASE("shorter predicted run time scores higher", "[model][score]") {
  const ScoreConfig cfg;
  double prev = std::numeric_limits<double>::infinity();
  for (double rt : {0.0, 1.0, 30.0, 60.0, 600.0, 3600.0, 86400.0, 1e6}) {
    const double s = score(job_at(0), pred(rt), 100, CLUSTER, cfg);
    CHECK(s < prev);
    prev = s;
  }
}

TEST_CASE("waiting raises the score", "[model][score]") {
  const ScoreConfig cfg;
  double prev = -1;
  for (double w : {0.0, 10.0, 3600.0, 40000.0, 86399.0, 86400.0, 1e6}) {
    const double s = score(job_at(0), pred(3600), w, CLUSTER, cfg);
    CHECK(s > prev);
    prev = s;
  }
}

TEST_CASE("starvation limit: a starved job outranks any job below the limit", "[model][score]") {
  std::mt19937_64 rng(123);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 2000; ++trial) {
    ScoreConfig cfg;
    cfg.age_weight = 10 * u(rng);
    cfg.starvation_limit = 60 + 1e6 * u(rng);
    cfg.size_weight = 4 * u(rng) - 2;
    const double now = 2e6;
    const Job starved = job_at(now - cfg.starvation_limit * (1 + u(rng)), 1024, 1e6);
    const Job fresh = job_at(now - cfg.starvation_limit * u(rng) * 0.999,
                             1 + static_cast<int64_t>(u(rng) * 1024));
    const double s_starved = score(starved, pred(1e7 * u(rng) + 1e5), now, CLUSTER, cfg);
    const double s_fresh = score(fresh, pred(u(rng) * 10), now, CLUSTER, cfg);
    INFO("trial " << trial);
    REQUIRE(s_starved > s_fresh);
  }
}

TEST_CASE("starved jobs are served oldest first", "[model][score]") {
  const ScoreConfig cfg;
  const double now = 1e6;
  const double a = score(job_at(now - 2 * cfg.starvation_limit), pred(1e5), now, CLUSTER, cfg);
  const double b = score(job_at(now - 1.5 * cfg.starvation_limit), pred(1), now, CLUSTER, cfg);
  CHECK(a > b);
}

TEST_CASE("missing predictions fall back to the request; scores stay finite", "[model][score]") {
  const ScoreConfig cfg;
  const double with_req = score(job_at(0, 1, 600), Prediction{}, 10, CLUSTER, cfg);
  CHECK(with_req == score(job_at(0, 1, 600), pred(600), 10, CLUSTER, cfg));
  Job nothing = job_at(0, -1, -1);
  CHECK(std::isfinite(score(nothing, Prediction{}, 0, ClusterState{}, cfg)));
  CHECK(std::isfinite(
      score(nothing, pred(std::numeric_limits<double>::infinity()), -5, CLUSTER, cfg)));
  ScoreConfig broken;
  broken.starvation_limit = 0;
  broken.age_weight = std::nan("");
  CHECK(std::isfinite(score(job_at(0), pred(10), 100, CLUSTER, broken)));
}

TEST_CASE("size weight favours or penalises wide jobs within its bound", "[model][score]") {
  ScoreConfig cfg;
  cfg.size_weight = 0.5;
  const double wide = score(job_at(0, 1024), pred(600), 0, CLUSTER, cfg);
  const double narrow = score(job_at(0, 1), pred(600), 0, CLUSTER, cfg);
  CHECK(wide > narrow);
  CHECK(wide - narrow <= 0.5 + 1e-12);
  cfg.size_weight = -0.5;
  CHECK(score(job_at(0, 1024), pred(600), 0, CLUSTER, cfg) <
        score(job_at(0, 1), pred(600), 0, CLUSTER, cfg));
}

TEST_CASE("a likely failure ranks below a reliable job three times as long", "[model][score]") {
  // The admin hazard: failed jobs are short. With the default fail weight (1) the failure term
  // (8 x p_fail log2 units) outweighs a 3x shorter prediction; with weight 0 the order is the
  // prediction's alone.
  Prediction flaky = pred(600), steady = pred(1800);
  flaky.fail_prob = 0.8;
  steady.fail_prob = 0.0;
  ScoreConfig cfg;
  CHECK(score(job_at(0), steady, 100, CLUSTER, cfg) > score(job_at(0), flaky, 100, CLUSTER, cfg));
  cfg.fail_weight = 0;
  CHECK(score(job_at(0), steady, 100, CLUSTER, cfg) < score(job_at(0), flaky, 100, CLUSTER, cfg));
}

TEST_CASE("request weight: 1 ranks by the request, 0 by the prediction, between blends",
          "[model][score]") {
  // Two jobs that disagree: a long request predicted short, a short request predicted long.
  const Job long_req = job_at(0, 1, 86400), short_req = job_at(0, 1, 600);
  const Prediction short_pred = pred(300), long_pred = pred(20000);
  ScoreConfig cfg;
  cfg.request_weight = 0;  // the prediction's order
  CHECK(score(long_req, short_pred, 100, CLUSTER, cfg) >
        score(short_req, long_pred, 100, CLUSTER, cfg));
  cfg.request_weight = 1;  // SJF's key: the request, whatever the prediction says
  CHECK(score(long_req, short_pred, 100, CLUSTER, cfg) <
        score(short_req, long_pred, 100, CLUSTER, cfg));
  CHECK(score(short_req, pred(1), 100, CLUSTER, cfg) ==
        score(short_req, pred(1e6), 100, CLUSTER, cfg));
  // Halfway: the run-time term is the mean of the two log terms.
  cfg.request_weight = 0.5;
  ScoreConfig by_pred = cfg, by_req = cfg;
  by_pred.request_weight = 0;
  by_req.request_weight = 1;
  const double mid = score_log_ratio(long_req, short_pred, 100, cfg);
  CHECK(mid == Approx((score_log_ratio(long_req, short_pred, 100, by_pred) +
                       score_log_ratio(long_req, short_pred, 100, by_req)) /
                      2));
  // The term mlprio-why shows is the one the score subtracts.
  CHECK(score_run_term(long_req, short_pred, cfg) ==
        Approx(0.5 * std::log2(1 + 300.0 / 60) + 0.5 * std::log2(1 + 86400.0 / 60)));
  CHECK(score_run_term(long_req, Prediction{}, by_pred) == Approx(std::log2(1 + 86400.0 / 60)));
  // No request: the prediction alone, at any weight; out-of-range or NaN weights stay finite
  // and within [0, 1].
  cfg.request_weight = 1;
  const Job no_req = job_at(0, 1, -1);
  CHECK(score(no_req, pred(600), 100, CLUSTER, cfg) ==
        score(no_req, pred(600), 100, CLUSTER, by_pred));
  for (double w : {-5.0, 7.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    cfg.request_weight = w;
    CHECK(std::isfinite(score(long_req, short_pred, 100, CLUSTER, cfg)));
  }
  cfg.request_weight = 7;
  CHECK(score(long_req, short_pred, 100, CLUSTER, cfg) ==
        score(long_req, short_pred, 100, CLUSTER, by_req));
}

TEST_CASE("the fair-share term lowers the jobs of users over their share", "[model][score]") {
  const Job j = job_at(0, 4, 3600);
  const Prediction light = [] {
    Prediction p = pred(600);
    p.usage_share = 0.2;
    return p;
  }();
  Prediction heavy = light;
  heavy.usage_share = 3.0;
  ScoreConfig cfg;
  // Weight 0 (the default): usage changes nothing.
  CHECK(score(j, light, 100, CLUSTER, cfg) == score(j, heavy, 100, CLUSTER, cfg));
  cfg.fairshare_weight = 0.5;
  CHECK(score(j, light, 100, CLUSTER, cfg) > score(j, heavy, 100, CLUSTER, cfg));
  // f * U/S log2 units: the heavy user's 2.8 extra shares cost 1.4 doublings of run time.
  ScoreConfig none = cfg;
  none.fairshare_weight = 0;
  CHECK(score_log_ratio(j, heavy, 100, none) - score_log_ratio(j, heavy, 100, cfg) ==
        Approx(0.5 * 3.0));
  CHECK(score_log_ratio(j, light, 100, cfg) - score_log_ratio(j, heavy, 100, cfg) ==
        Approx(0.5 * 2.8));
  // A starved job still outranks every fresh one, whatever its user's usage.
  Prediction hog = heavy;
  hog.usage_share = 1e9;
  cfg.fairshare_weight = 64;
  CHECK(score(job_at(0), hog, cfg.starvation_limit, CLUSTER, cfg) >
        score(job_at(cfg.starvation_limit - 1), light, cfg.starvation_limit, CLUSTER, cfg));
  // Hostile values stay finite: NaN/inf usage and weights.
  for (double u : {std::nan(""), std::numeric_limits<double>::infinity(), -5.0, 1e300}) {
    Prediction p = light;
    p.usage_share = u;
    for (double f : {0.0, 1.0, 64.0, 1e9, std::nan(""), -1.0}) {
      cfg.fairshare_weight = f;
      CHECK(std::isfinite(score(j, p, 100, CLUSTER, cfg)));
      CHECK(std::isfinite(score_log_ratio(j, p, 100, cfg)));
    }
  }
}

namespace {
// The score written out as core/src/model/README.md gives it, one operation after another in the
// order score.cpp has always used, for the bit-for-bit comparison below.
double reference_score(const Job& job, const Prediction& p, double now, const ScoreConfig& cfg) {
  const auto fin = [](double v) { return std::isfinite(v) ? v : 0.0; };
  const double limit = cfg.starvation_limit > 0 && std::isfinite(cfg.starvation_limit)
                           ? cfg.starvation_limit
                           : 86400.0;
  const double wait = std::max(0.0, fin(now - job.submit));
  if (!(wait < limit)) return 2.0 + std::log1p(wait / limit);
  const bool has_req = job.req_time > 0 && std::isfinite(job.req_time);
  double runtime = p.runtime;
  if (!(runtime >= 0) || !std::isfinite(runtime)) runtime = has_req ? job.req_time : 3600.0;
  const double rw = std::clamp(fin(cfg.request_weight), 0.0, 1.0);
  double run = std::log2(1.0 + runtime / 60.0);
  if (rw > 0.0 && has_req) run = (1.0 - rw) * run + rw * std::log2(1.0 + job.req_time / 60.0);
  double u = std::clamp(fin(cfg.age_weight), 0.0, 64.0) * std::log2(1.0 + wait / 60.0) - run;
  const double b = std::clamp(fin(cfg.size_weight), -64.0, 64.0);
  if (b != 0.0 && job.procs() > 1) u += b * std::log2(static_cast<double>(job.procs()));
  u -= std::clamp(fin(cfg.fail_weight), 0.0, 64.0) * 8.0 * std::clamp(fin(p.fail_prob), 0.0, 1.0);
  const double f = std::clamp(fin(cfg.fairshare_weight), 0.0, 64.0);
  if (f > 0.0) u -= f * std::clamp(fin(p.usage_share), 0.0, 1024.0);
  return 1.0 / (1.0 + std::exp2(-u / 4.0));
}
}  // namespace

TEST_CASE("terms worked out once give the score bit for bit at every later time",
          "[model][score]") {
  // The replayer's `ml` order keeps score_terms() per job and re-scores with them at every pass;
  // the score must be the one the formula gives then, to the last bit, whatever the weights (a
  // zero age weight, whose score does not move below the limit, included) and the inputs.
  std::mt19937_64 rng(2026);
  std::uniform_real_distribution<double> u(0, 1);
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  const auto pick = [&](std::initializer_list<double> xs, double other) {
    const size_t k = static_cast<size_t>(u(rng) * static_cast<double>(xs.size() + 1));
    return k < xs.size() ? *(xs.begin() + k) : other;
  };
  int fixed = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    ScoreConfig cfg;
    cfg.age_weight = pick({0.0, -0.0, 1.0, nan}, 4 * u(rng));
    cfg.size_weight = pick({0.0, -0.25}, 2 * u(rng) - 1);
    cfg.fail_weight = pick({0.0, 1.0}, 3 * u(rng));
    cfg.request_weight = pick({0.0, 1.0}, u(rng));
    cfg.fairshare_weight = pick({0.0, 0.0, -1.0}, u(rng));
    cfg.starvation_limit = pick({86400.0, 0.0, inf}, 1e5 * u(rng));
    Job j = job_at(1e6 * u(rng), static_cast<int64_t>(pick({1, 0, -1}, 1 + 4096 * u(rng))),
                   pick({-1.0, 0.0, inf}, 1e5 * u(rng)));
    Prediction p;
    p.runtime = pick({nan, -1.0, 0.0, inf}, 1e5 * u(rng));
    p.fail_prob = pick({nan, 0.0, 1.0}, u(rng));
    const ScoreTerms t = score_terms(j, p, cfg);
    fixed += t.fixed ? 1 : 0;
    for (double later : {0.0, 1.0, 59.0, 3600.0, 86399.0, 86400.0, 1e6, 2e5 * u(rng)}) {
      p.usage_share = pick({0.0, nan, 1e9}, 3 * u(rng));
      const double now = j.submit + later;
      const double want = reference_score(j, p, now, cfg);
      INFO("trial " << trial << " age " << cfg.age_weight << " fair share " << cfg.fairshare_weight
                    << " wait " << later);
      const double kept = score(t, j.submit, p.usage_share, now, cfg);
      REQUIRE(std::memcmp(&want, &kept, sizeof want) == 0);
      const double whole = score(j, p, now, CLUSTER, cfg);
      REQUIRE(std::memcmp(&want, &whole, sizeof want) == 0);
    }
  }
  CHECK(fixed > 1000);  // the unmoved-score path ran
}
