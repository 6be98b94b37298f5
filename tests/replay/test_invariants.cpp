// Invariants on generated workloads (Lublin model, seeded): for every queue order and backfilling
// rule, with the engine's always-on checks plus the costly ones (conservative never delays a
// reservation, the profile matches the free resources) switched on, every job starts once, never
// before its submit time, and a sweep over start/end events never finds more cores busy than the
// machine has. Also: the same input gives the same schedule twice (determinism).
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "mlprio/jobs/lublin.hpp"
#include "mlprio/replay/ml.hpp"
#include "mlprio/replay/simulator.hpp"

using namespace mlprio;
using namespace mlprio::replay;

namespace {

std::vector<Job> workload() {
  LublinOptions o;
  o.nodes = 64;
  o.seed = 7;
  o.load_scale = 1.5;
  o.req_time = LublinReqTime::FACTOR;
  std::vector<Job> jobs = generate_lublin(o, 3000);
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].user = static_cast<int32_t>(i % 5);
  return jobs;
}

int64_t max_busy(const SimResult& r) {
  std::vector<std::pair<double, int64_t>> ev;
  for (const auto& o : r.jobs) {
    ev.emplace_back(o.start, o.procs);
    ev.emplace_back(o.end, -o.procs);
  }
  std::sort(ev.begin(), ev.end());  // ends (-procs) sort before starts at the same instant
  int64_t busy = 0, peak = 0;
  for (const auto& [t, d] : ev) peak = std::max(peak, busy += d);
  return peak;
}

}  // namespace

TEST_CASE("every policy and backfilling rule keeps the schedule invariants",
          "[replay][invariants]") {
  const std::vector<Job> jobs = workload();
  for (const std::string& policy : policy_names()) {
    for (Backfill b :
         {Backfill::NONE, Backfill::EASY, Backfill::CONSERVATIVE, Backfill::RLSCHEDULER}) {
      for (bool kill : {false, true}) {
        if (b == Backfill::RLSCHEDULER && kill) continue;
        SimConfig cfg;
        cfg.machine = {64, 1, 0, Allocation::NODES};
        cfg.policy = policy;
        cfg.backfill = b;
        cfg.kill_at_limit = kill;
        cfg.check_invariants = true;
        if (policy == "ml") {
          // The ml order needs predictions: half the true run time, so estimates fall short.
          std::vector<model::Prediction> preds(jobs.size());
          for (size_t i = 0; i < jobs.size(); ++i) preds[i].runtime = jobs[i].run / 2;
          cfg.policy_options.ml =
              std::make_shared<MlPredictions>(jobs, preds, model::ScoreConfig{});
        }
        INFO(policy << " " << backfill_name(b) << (kill ? " kill" : ""));
        const SimResult r = simulate(jobs, cfg);
        CHECK(r.summary.jobs == static_cast<int64_t>(jobs.size()));
        CHECK(max_busy(r) <= 64);
        bool ok = true;
        for (const auto& o : r.jobs) ok = ok && o.start >= o.submit && o.end >= o.start;
        CHECK(ok);
        CHECK(r.summary.utilization <= 1.0);
        for (int64_t busy : r.series.busy_cores) CHECK(busy <= 64);
      }
    }
  }
}

TEST_CASE("EASY passes after arrivals alone keep the previous pass's reservation",
          "[replay][invariants][easy]") {
  // Workloads made for the cases where the kept reservation could go wrong: estimates of zero
  // and estimates far below the run time (running jobs past their estimated end, so the shadow
  // time is now), estimated ends that tie (whole minutes), arrivals spread out between ends.
  // The costly checks compare the kept reservation with a fresh walk at every such pass.
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL;
    auto next = [&x](uint64_t n) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      return (x >> 33) % n;
    };
    std::vector<Job> jobs;
    double t = 0;
    for (int i = 0; i < 400; ++i) {
      Job j;
      j.id = i;
      t += static_cast<double>(next(4) * 60 + next(2));
      j.submit = t;
      j.req_procs = static_cast<int64_t>(1 + next(6) + (next(5) == 0 ? 8 : 0));
      j.run = static_cast<double>(next(10) * 60);
      j.req_time = static_cast<double>(next(6) * 60);  // often below the run time
      j.user = static_cast<int32_t>(next(3));
      jobs.push_back(j);
    }
    for (Correction c : {Correction::NONE, Correction::TSAFRIR, Correction::REQUEST}) {
      SimConfig cfg;
      cfg.backfill_order = seed % 4 < 2 ? BackfillOrder::QUEUE : BackfillOrder::SJBF;
      cfg.machine = {16, 1, 0, Allocation::NODES};
      cfg.policy = seed % 2 == 0 ? "fcfs" : "sjf";  // SJF queues some arrivals ahead
      cfg.backfill = Backfill::EASY;
      cfg.correction = c;
      cfg.check_invariants = true;
      INFO("seed " << seed << ", correction " << static_cast<int>(c));
      const SimResult r = simulate(jobs, cfg);
      CHECK(r.jobs.size() == jobs.size());
    }
  }
}

TEST_CASE("the rlscheduler engine keeps an order it need not re-sort as a re-sort would",
          "[replay][invariants]") {
  // In the rlscheduler profile a queued job's wait is -1 - submit, so WFP3 and UNICEP scores are
  // fixed and the queue is kept in order instead of re-sorted before every pick; with its real
  // wait (the standard profile) they move. With check_invariants the engine re-scores and
  // stably re-sorts a copy at every pick it skips, and fails where the two differ. A deep queue
  // (twice the load on a small machine) and jobs repeated at the same instant (equal scores, so
  // ties must keep the re-sort's order) make that matter.
  LublinOptions o;
  o.nodes = 16;
  o.seed = 5;
  o.load_scale = 2.0;
  o.req_time = LublinReqTime::FACTOR;
  std::vector<Job> jobs;
  for (Job j : generate_lublin(o, 800)) {
    jobs.push_back(j);
    if (jobs.size() % 5 == 0) {  // the same job again, at the same instant
      j.id += 100000;
      jobs.push_back(j);
    }
  }
  for (const std::string& policy : policy_names()) {
    if (policy == "ml") continue;  // needs predictions; its order is dynamic in both profiles
    for (Profile profile : {Profile::RLSCHEDULER, Profile::STANDARD}) {
      for (Backfill b : {Backfill::NONE, Backfill::RLSCHEDULER}) {
        if (profile == Profile::STANDARD && b == Backfill::NONE) continue;  // the standard engine
        SimConfig cfg;
        cfg.machine = {16, 1, 0, Allocation::NODES};
        cfg.policy = policy;
        cfg.profile = profile;
        cfg.backfill = b;
        cfg.check_invariants = true;
        INFO(policy << " " << profile_name(profile) << " " << backfill_name(b));
        const SimResult r = simulate(jobs, cfg);
        CHECK(r.summary.jobs == static_cast<int64_t>(jobs.size()));
      }
    }
  }
}

TEST_CASE("the same input gives the same schedule", "[replay][invariants]") {
  const std::vector<Job> jobs = workload();
  SimConfig cfg;
  cfg.machine = {64, 1, 0, Allocation::NODES};
  cfg.backfill = Backfill::CONSERVATIVE;
  cfg.policy = "multifactor";
  const SimResult a = simulate(jobs, cfg);
  const SimResult b = simulate(jobs, cfg);
  REQUIRE(a.jobs.size() == b.jobs.size());
  bool same = true;
  for (size_t i = 0; i < a.jobs.size(); ++i)
    same = same && a.jobs[i].id == b.jobs[i].id && a.jobs[i].start == b.jobs[i].start;
  CHECK(same);
}

TEST_CASE("EASY does not raise the mean wait over no backfilling (FCFS, exact estimates)",
          "[replay][invariants]") {
  // A sanity check that can fail: with exact estimates, backfilling only fills holes, so on this
  // loaded workload EASY's mean wait must not exceed no backfilling's.
  const std::vector<Job> jobs = workload();
  SimConfig cfg;
  cfg.machine = {64, 1, 0, Allocation::NODES};
  cfg.estimate = EstimateMode::ACTUAL;
  cfg.backfill = Backfill::NONE;
  const double none_wait = simulate(jobs, cfg).summary.avg_wait;
  cfg.backfill = Backfill::EASY;
  const double easy_wait = simulate(jobs, cfg).summary.avg_wait;
  CHECK(easy_wait <= none_wait);
}
