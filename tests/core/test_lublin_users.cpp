// Tests of the Lublin generator's user model (LublinUserModel in core/jobs/lublin.hpp): the plain
// model is untouched (digests pinned from the generator before the user model existed), the same
// seed gives the same jobs, each mechanism of the model gives what its definition implies (checked
// one at a time with the others switched off, against expectations computed here from the
// definition, not from the code), and the calibrated defaults land among the real traces'
// statistics (user_stats.hpp; the table in replay/README.md).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <vector>

#include "mlprio/jobs/lublin.hpp"
#include "mlprio/jobs/user_stats.hpp"

using namespace mlprio;

namespace {

// FNV-1a over the fields the generator sets, job by job.
uint64_t digest(const LublinOptions& o, int64_t n) {
  auto mix = [](uint64_t h, const void* p, size_t len) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < len; ++i) h = (h ^ c[i]) * 0x100000001b3ULL;
    return h;
  };
  LublinGenerator g(o);
  Job j;
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int64_t i = 0; i < n; ++i) {
    g.next(j);
    const double v[4] = {j.submit, j.run, j.req_time, static_cast<double>(j.req_procs)};
    const int32_t q[2] = {j.queue, j.user};
    h = mix(h, v, sizeof v);
    h = mix(h, q, sizeof q);
  }
  return h;
}

// A user model with every mechanism off but the users themselves (one application per
// submission, no bursts, no spread, no crashes or hangs).
LublinOptions bare_users(int64_t users, uint64_t seed = 1) {
  LublinOptions o;
  o.nodes = 256;
  o.seed = seed;
  o.user_model = {.users = users,
                  .activity_exponent = 1.2,
                  .stickiness = 0,
                  .repeat_prob = 0,
                  .new_app_weight = 1e6,
                  .burst_mean = 1,
                  .runtime_spread = 0,
                  .crash_prob = 0,
                  .hang_prob = 0,
                  .habit_share = 0,
                  .factor_min = 2,
                  .factor_max = 2};
  return o;
}

}  // namespace

TEST_CASE("lublin users: without users the plain model is unchanged, bit for bit",
          "[lublin][users]") {
  // Digests of 50,000 jobs from the generator as it was before the user model (commit d6809a8).
  LublinOptions plain;
  CHECK(digest(plain, 50000) == 0x5ef5e403052eb3ccULL);
  LublinOptions demo;
  demo.types = LublinJobTypes::BOTH;
  demo.nodes = 256;
  demo.req_time = LublinReqTime::FACTOR;
  CHECK(digest(demo, 50000) == 0x7f48b41e667967eeULL);
  LublinOptions typeless;
  typeless.types = LublinJobTypes::TYPELESS;
  typeless.nodes = 1000;
  typeless.seed = 7;
  typeless.load_scale = 1.7;
  typeless.req_time = LublinReqTime::EXACT;
  typeless.procs_per_node = 4;
  CHECK(digest(typeless, 50000) == 0x28daf8fa85724bdeULL);
  // The user model's other settings are ignored while users == 0.
  LublinOptions ignored = demo;
  ignored.user_model = {.users = 0,
                        .activity_exponent = 3,
                        .stickiness = 0.9,
                        .repeat_prob = 1,
                        .new_app_weight = 0.5,
                        .burst_mean = 7,
                        .runtime_spread = 2,
                        .crash_prob = 0.5,
                        .hang_prob = 0.5,
                        .habit_share = 1,
                        .factor_min = 3,
                        .factor_max = 9};
  CHECK(digest(ignored, 50000) == 0x7f48b41e667967eeULL);
  for (const Job& j : generate_lublin(demo, 1000)) REQUIRE(j.user == -1);
}

TEST_CASE("lublin users: same seed gives the same jobs, another seed other jobs",
          "[lublin][users]") {
  for (auto types : {LublinJobTypes::BATCH, LublinJobTypes::BOTH}) {
    LublinOptions o;
    o.types = types;
    o.nodes = 256;
    o.seed = 42;
    o.req_time = LublinReqTime::USER;
    o.user_model.users = 40;
    const auto a = generate_lublin(o, 20000);
    LublinGenerator streaming(o);
    Job j;
    for (const Job& x : a) {
      REQUIRE(streaming.next(j));
      REQUIRE(j.id == x.id);
      REQUIRE(j.submit == x.submit);
      REQUIRE(j.run == x.run);
      REQUIRE(j.req_procs == x.req_procs);
      REQUIRE(j.req_time == x.req_time);
      REQUIRE(j.user == x.user);
      REQUIRE(j.status == x.status);
    }
    CHECK(digest(o, 20000) == digest(o, 20000));
    o.seed = 43;
    const auto b = generate_lublin(o, 200);
    int differing = 0;
    for (size_t i = 0; i < b.size(); ++i)
      if (b[i].submit != a[i].submit || b[i].run != a[i].run || b[i].user != a[i].user) ++differing;
    CHECK(differing > 180);
  }
}

TEST_CASE("lublin users: invariants", "[lublin][users]") {
  LublinOptions o;
  o.types = LublinJobTypes::BOTH;
  o.nodes = 64;
  o.req_time = LublinReqTime::USER;
  o.user_model.users = 25;
  const double max_run = std::floor(std::exp(LUBLIN_MAX_LOG_RUNTIME));
  const auto jobs = generate_lublin(o, 50000);
  double prev_submit = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    INFO("job " << j.id);
    REQUIRE(j.id == static_cast<int64_t>(i) + 1);
    REQUIRE(j.submit >= prev_submit);
    prev_submit = j.submit;
    REQUIRE(j.user >= 1);
    REQUIRE(j.user <= 25);
    REQUIRE((j.queue == 0 || j.queue == 1));
    REQUIRE(j.app == -1);  // the application is not written
    REQUIRE(j.req_procs >= 1);
    REQUIRE(j.req_procs <= 64);
    REQUIRE(j.run >= 1);
    REQUIRE(j.run <= j.req_time);
    // Only a job killed at its request (a hang) may run past the model's cap e^12 s.
    if (j.status != JobStatus::TIMEOUT) REQUIRE(j.run <= max_run);
    REQUIRE(lublin_round_limit(j.req_time) == j.req_time);  // requests are round limits
    if (j.status == JobStatus::FAILED) REQUIRE(j.run < 60);
    REQUIRE((j.status == JobStatus::TIMEOUT) ==
            (j.status != JobStatus::FAILED && j.run == j.req_time));
  }
}

TEST_CASE("lublin users: round limits", "[lublin][users]") {
  CHECK(lublin_round_limit(1) == 300);
  CHECK(lublin_round_limit(300) == 300);
  CHECK(lublin_round_limit(301) == 600);
  CHECK(lublin_round_limit(3601) == 7200);
  CHECK(lublin_round_limit(5 * 86400 + 1) == 7 * 86400);
  CHECK(lublin_round_limit(7 * 86400 + 1) == 8 * 86400);  // beyond the list: whole days
}

TEST_CASE("lublin users: jobs arrive at the published rate; bursts have the mean size",
          "[lublin][users]") {
  constexpr int64_t N = 100000;
  const auto plain = generate_lublin(LublinOptions{.nodes = 256, .seed = 5}, N);
  LublinOptions o = bare_users(20, 5);
  o.user_model.burst_mean = 3;
  const auto users = generate_lublin(o, N);
  // Submissions arrive 3 times less often, with 3 jobs each on average: the same span.
  CHECK(users.back().submit / plain.back().submit == Approx(1.0).epsilon(0.05));
  // A submission starts wherever the (submit, user) pair changes.
  int64_t submissions = 0;
  for (size_t i = 0; i < users.size(); ++i)
    if (i == 0 || users[i].submit != users[i - 1].submit || users[i].user != users[i - 1].user)
      ++submissions;
  CHECK(static_cast<double>(N) / static_cast<double>(submissions) == Approx(3.0).epsilon(0.03));
}

TEST_CASE("lublin users: activity is Zipf, with or without sticky sessions", "[lublin][users]") {
  constexpr int64_t USERS = 20;
  double total = 0;
  for (int k = 1; k <= USERS; ++k) total += std::pow(k, -1.2);
  for (double stickiness : {0.0, 0.65}) {
    LublinOptions o = bare_users(USERS, 9);
    o.user_model.stickiness = stickiness;
    std::map<int32_t, int64_t> count;
    const auto jobs = generate_lublin(o, 100000);
    for (const Job& j : jobs) ++count[j.user];
    INFO("stickiness " << stickiness);
    for (int k : {1, 2, 5}) {
      INFO("user " << k);
      CHECK(static_cast<double>(count[k]) / 1e5 == Approx(std::pow(k, -1.2) / total).margin(0.015));
    }
    // Sticky sessions: the next submission is by the same user w.p. s + (1 - s) sum p_k^2.
    double same_next = 0, p2 = 0;
    for (size_t i = 1; i < jobs.size(); ++i) same_next += jobs[i].user == jobs[i - 1].user;
    for (int k = 1; k <= USERS; ++k) p2 += std::pow(std::pow(k, -1.2) / total, 2);
    CHECK(same_next / static_cast<double>(jobs.size() - 1) ==
          Approx(stickiness + (1 - stickiness) * p2).margin(0.01));
  }
}

TEST_CASE("lublin users: repeats and bursts resubmit the same application", "[lublin][users]") {
  // No spread: a repeat runs exactly its application's time; a new application (always new here,
  // new_app_weight huge) almost never does. A job repeats its user's previous one when it is not
  // the first of its burst (1 - 1/b of jobs), or is the first and its submission repeats (r / b).
  LublinOptions o = bare_users(20, 11);
  o.user_model.burst_mean = 2.5;
  o.user_model.repeat_prob = 0.4;
  const auto jobs = generate_lublin(o, 100000);
  std::map<int32_t, const Job*> last;
  int64_t same_run = 0;
  for (const Job& j : jobs) {
    if (const auto it = last.find(j.user); it != last.end()) {
      same_run += j.run == it->second->run;
      if (j.run == it->second->run && j.submit == it->second->submit) {
        REQUIRE(j.req_time == it->second->req_time);
        REQUIRE(j.req_procs == it->second->req_procs);
      }
    }
    last[j.user] = &j;
  }
  CHECK(static_cast<double>(same_run) / 1e5 == Approx(1 - 1 / 2.5 + 0.4 / 2.5).margin(0.01));
  // With repeat_prob 0 and a small repertoire weight, old applications come back as the Chinese
  // restaurant process says: a user's k-th submission is new w.p. w / (w + k - 1); the expected
  // number of applications of a user with n submissions is sum_k w / (w + k - 1).
  LublinOptions crp = bare_users(5, 12);
  crp.user_model.new_app_weight = 2;
  const auto cj = generate_lublin(crp, 20000);
  std::map<int32_t, int64_t> n;
  std::map<int32_t, std::map<double, int>> runs;  // distinct run times = applications (no spread)
  for (const Job& j : cj) ++n[j.user], ++runs[j.user][j.run];
  double expected = 0, observed = 0;
  for (const auto& [u, count] : n) {
    for (int64_t k = 1; k <= count; ++k) expected += 2.0 / (2.0 + static_cast<double>(k - 1));
    observed += static_cast<double>(runs[u].size());
  }
  // The count is a sum of independent Bernoullis: variance below the mean.
  CHECK(std::abs(observed - expected) < 4 * std::sqrt(expected) + 2);
}

TEST_CASE("lublin users: repeats spread log-Laplace around their application", "[lublin][users]") {
  // One application per user (repeat_prob 1), no bursts: consecutive jobs of a user differ by
  // b (L1 - L2) in ln(run), and E|L1 - L2| = 3/2 for independent standard Laplace variables.
  LublinOptions o = bare_users(200, 13);
  o.user_model.repeat_prob = 1;
  o.user_model.runtime_spread = 0.3;
  const auto jobs = generate_lublin(o, 200000);
  // Only users whose application runs between 300 s and 20,000 s: whole seconds and the e^12 s cap
  // hardly touch them (the median of a user's runs is their application's run time).
  std::map<int32_t, std::vector<double>> by_user;
  for (const Job& j : jobs) by_user[j.user].push_back(j.run);
  double sum = 0;
  int64_t pairs = 0;
  for (auto& [u, runs] : by_user) {
    std::vector<double> sorted = runs;
    std::nth_element(sorted.begin(),
                     sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
    const double med = sorted[sorted.size() / 2];
    if (runs.size() < 20 || med < 300 || med > 20000) continue;
    for (size_t i = 1; i < runs.size(); ++i, ++pairs)
      sum += std::fabs(std::log(runs[i] / runs[i - 1]));
  }
  REQUIRE(pairs > 50000);
  CHECK(sum / static_cast<double>(pairs) == Approx(1.5 * 0.3).epsilon(0.03));
}

TEST_CASE("lublin users: crashes, hangs and requests", "[lublin][users]") {
  SECTION("crashes and hangs happen at their rates; spread-free jobs never pass their request") {
    LublinOptions o = bare_users(30, 17);
    o.req_time = LublinReqTime::USER;
    o.user_model.crash_prob = 0.1;
    o.user_model.hang_prob = 0.05;
    o.user_model.factor_min = 1;  // factor >= 1 and no spread: only hangs reach the limit
    o.user_model.factor_max = 3;
    constexpr double N = 100000;
    int64_t failed = 0, timeout = 0;
    for (const Job& j : generate_lublin(o, static_cast<int64_t>(N))) {
      failed += j.status == JobStatus::FAILED;
      timeout += j.status == JobStatus::TIMEOUT;
    }
    CHECK(std::abs(failed / N - 0.1) < 4 * std::sqrt(0.1 * 0.9 / N));
    const double hang = 0.9 * 0.05;  // jobs that did not crash
    CHECK(std::abs(timeout / N - hang) < 4 * std::sqrt(hang * (1 - hang) / N));
  }
  SECTION("a factor-2 user asks for the round limit at or above twice the run") {
    LublinOptions o = bare_users(30, 19);
    o.req_time = LublinReqTime::USER;
    for (const Job& j : generate_lublin(o, 20000)) {
      REQUIRE(j.req_time == lublin_round_limit(2 * j.run));
      // Round limits are at most 2x apart above 5 min: the ratio lies in (1/4, 1/2].
      if (2 * j.run >= 300) REQUIRE(j.run / j.req_time > 0.25);
    }
  }
  SECTION("a default limit is kept unless the job needs more") {
    LublinOptions o = bare_users(30, 23);
    o.req_time = LublinReqTime::USER;
    o.user_model.habit_share = 1;
    std::map<int32_t, double> smallest;  // per user: the smallest request = their default limit
    const auto jobs = generate_lublin(o, 20000);
    for (const Job& j : jobs)
      smallest[j.user] =
          smallest.count(j.user) ? std::min(smallest[j.user], j.req_time) : j.req_time;
    for (const Job& j : jobs) {
      REQUIRE(smallest[j.user] >= 3600);
      REQUIRE(smallest[j.user] <= 4 * 86400);
      REQUIRE(j.req_time == std::max(smallest[j.user], lublin_round_limit(2 * j.run)));
    }
  }
  SECTION("the other request models apply to each job's run") {
    LublinOptions o = bare_users(30, 29);
    o.user_model.runtime_spread = 0.5;
    o.req_time = LublinReqTime::EXACT;
    for (const Job& j : generate_lublin(o, 2000)) REQUIRE(j.req_time == j.run);
    o.req_time = LublinReqTime::NONE;
    for (const Job& j : generate_lublin(o, 2000)) REQUIRE(j.req_time == UNKNOWN);
  }
}

TEST_CASE("lublin users: the calibrated defaults land among the real traces", "[lublin][users]") {
  // The real traces' figures (mlprio-replay inspect --user-stats; replay/README.md "Users"):
  // hpc2n_subset, metacentrum_wagap_2013.
  struct Range {
    const char* name;
    double hpc2n, metacentrum;
    double UserBehaviourStats::*field;
  };
  const std::vector<Range> ranges = {
      {"top10_share", 0.562, 0.654, &UserBehaviourStats::top10_share},
      {"same_request_size", 0.557, 0.888, &UserBehaviourStats::same_request_size},
      {"gap_within_10s", 0.352, 0.680, &UserBehaviourStats::gap_within_10s},
      {"gap_within_1h", 0.801, 0.900, &UserBehaviourStats::gap_within_1h},
      {"run_within_2x", 0.611, 0.751, &UserBehaviourStats::run_within_2x},
      {"median_abs_log2_ratio", 0.485, 0.154, &UserBehaviourStats::median_abs_log2_ratio},
      {"mean_run_over_request", 0.464, 0.218, &UserBehaviourStats::mean_run_over_request},
      {"run_at_limit_share", 0.103, 0.039, &UserBehaviourStats::run_at_limit_share},
  };
  // The demo's set-up (batch class, 256 nodes, 32 users), averaged over seeds: one seed's
  // figures move with its few heavy users' applications.
  constexpr int SEEDS = 8;
  std::vector<double> mean(ranges.size(), 0.0);
  double short_share = 0;
  for (int seed = 1; seed <= SEEDS; ++seed) {
    LublinOptions o;
    o.nodes = 256;
    o.seed = static_cast<uint64_t>(seed);
    o.req_time = LublinReqTime::USER;
    o.user_model.users = 32;
    const UserBehaviourStats s = user_behaviour_stats(generate_lublin(o, 6000));
    for (size_t i = 0; i < ranges.size(); ++i) mean[i] += s.*(ranges[i].field) / SEEDS;
    short_share += s.short_run_share / SEEDS;
  }
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    INFO(r.name << ": generated " << mean[i] << ", real " << r.hpc2n << " / " << r.metacentrum);
    // Between the two real traces, give or take 0.03.
    CHECK(mean[i] >= std::min(r.hpc2n, r.metacentrum) - 0.03);
    CHECK(mean[i] <= std::max(r.hpc2n, r.metacentrum) + 0.03);
  }
  // Runs under a minute are the Lublin model's own (its batch class has more of them than the
  // real traces, 0.156 / 0.172): applications keep its run times, crashes add crash_prob and
  // hangs take hang_prob of the rest to their request.
  LublinOptions plain;
  plain.nodes = 256;
  const UserBehaviourStats p = user_behaviour_stats(generate_lublin(plain, 100000));
  const LublinUserModel d;
  const double expected = d.crash_prob + (1 - d.crash_prob) * (1 - d.hang_prob) * p.short_run_share;
  INFO("short_run_share: generated " << short_share << ", plain Lublin " << p.short_run_share);
  CHECK(short_share == Approx(expected).margin(0.04));
}

TEST_CASE("lublin users: bad options are refused with a reason", "[lublin][users]") {
  auto refused = [](auto edit, const char* word) {
    LublinOptions o;
    o.user_model.users = 10;
    edit(o);
    CHECK_THROWS_WITH(LublinGenerator(o), Catch::Contains(word));
  };
  refused([](LublinOptions& o) { o.user_model.users = -1; }, "users");
  refused([](LublinOptions& o) { o.user_model.users = LUBLIN_MAX_USERS + 1; }, "users");
  refused([](LublinOptions& o) { o.user_model.stickiness = 1; }, "stickiness");
  refused([](LublinOptions& o) { o.user_model.repeat_prob = 1.5; }, "repeat");
  refused([](LublinOptions& o) { o.user_model.new_app_weight = 0; }, "new-application");
  refused([](LublinOptions& o) { o.user_model.burst_mean = 0.5; }, "burst");
  refused(
      [](LublinOptions& o) {
        o.load_scale = 0.01;
        o.user_model.burst_mean = 100;
      },
      "submission rate");
  refused([](LublinOptions& o) { o.user_model.runtime_spread = -1; }, "spread");
  refused([](LublinOptions& o) { o.user_model.crash_prob = std::nan(""); }, "crash");
  refused([](LublinOptions& o) { o.user_model.hang_prob = 2; }, "hang");
  refused([](LublinOptions& o) { o.user_model.habit_share = -0.1; }, "habit");
  refused([](LublinOptions& o) { o.user_model.factor_min = 0.5; }, "over-estimation");
  refused([](LublinOptions& o) { o.user_model.factor_max = 0.9 * o.user_model.factor_min; },
          "over-estimation");
  refused([](LublinOptions& o) { o.user_model.activity_exponent = -1; }, "activity");
  refused(
      [](LublinOptions& o) {
        o.user_model.users = 0;
        o.req_time = LublinReqTime::USER;
      },
      "users > 0");
  CHECK(parse_lublin_req_time("user") == LublinReqTime::USER);
}
