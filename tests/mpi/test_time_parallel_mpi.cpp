// Time-parallel exact replay: one segment per rank must give every job the start time of the
// sequential replay, on a generated trace (several queue orders and backfilling rules, the
// fair-share order included, whose history never converges from a guess) and on a small real
// trace when ../shared/data is present. Also the early-stop repair itself: a re-run rejoins
// its recorded path and splices the recorded outcomes in, which must change nothing; on a trace
// whose queue drains the repair must be short; on one whose queue never drains it must still be
// exact (and then cannot stop early). The one-process emulation is checked for N = 1..8.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <limits>
#include <string>

#include "mlprio/replay/segment.hpp"

#include "../support/skip.hpp"
#include "mlprio/replay/dist/mpi_support.hpp"
#include "mlprio/replay/dist/time_parallel.hpp"
#include "mlprio/replay/simulator.hpp"
#include "mpi_test_util.hpp"

using namespace mlprio;
using namespace mlprio::replay;

namespace {

void check_same_schedule(const dist::TimeParallelResult& tp, const SimResult& seq,
                         const SimConfig& cfg) {
  INFO("policy " << cfg.policy << ", backfill " << backfill_name(cfg.backfill) << ", "
                 << tp.stats.rounds << " rounds on " << tp.stats.segments << " segments");
  REQUIRE(tp.result.jobs.size() == seq.jobs.size());
  size_t differ = 0;
  for (size_t i = 0; i < seq.jobs.size(); ++i)
    if (tp.result.jobs[i].id != seq.jobs[i].id || tp.result.jobs[i].start != seq.jobs[i].start ||
        tp.result.jobs[i].end != seq.jobs[i].end)
      ++differ;
  CHECK(differ == 0);
  CHECK(tp.result.summary.avg_bsld == seq.summary.avg_bsld);
  CHECK(tp.result.summary.avg_wait == seq.summary.avg_wait);
  CHECK(tp.result.summary.utilization == seq.summary.utilization);
  CHECK(tp.result.summary.skipped == seq.summary.skipped);
  CHECK(tp.result.summary.estimates_raised == seq.summary.estimates_raised);
  CHECK(tp.stats.rounds <= tp.stats.segments);
  CHECK(tp.stats.reruns.size() == static_cast<size_t>(tp.stats.rounds));
  CHECK(tp.stats.early_stops.size() == static_cast<size_t>(tp.stats.rounds));
  CHECK(tp.stats.early_stops.front() == 0);  // the first round has nothing to rejoin
}

// Returns the stats on rank 0 (empty elsewhere) after checking the schedule there.
dist::TimeParallelStats check_equal_to_sequential(const std::vector<Job>& jobs, SimConfig cfg) {
  cfg.record_jobs = true;
  cfg.record_series = false;
  const auto tp = dist::time_parallel_mpi(jobs, cfg, MPI_COMM_WORLD);
  if (test::world_rank() != 0) return {};
  check_same_schedule(tp, simulate(jobs, cfg), cfg);
  return tp.stats;
}

SimConfig small_machine(const char* policy, Backfill b) {
  SimConfig cfg;
  cfg.machine.nodes = 128;
  cfg.machine.cores_per_node = 1;
  cfg.policy = policy;
  cfg.backfill = b;
  return cfg;
}

// Jobs that each take the whole machine for 100 s, one every 10 s: the queue only grows, so
// every boundary carries a long queue and no state along a re-run can equal a guessed run's.
std::vector<Job> never_draining_jobs(int64_t n) {
  std::vector<Job> jobs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    Job& j = jobs[static_cast<size_t>(i)];
    j.id = i + 1;
    j.submit = 10.0 * static_cast<double>(i);
    j.run = 100 + static_cast<double>(i % 7);
    j.req_time = 120;
    j.req_procs = j.alloc_procs = 64 + (i % 3) * 32;
    j.user = static_cast<int32_t>(i % 5);
  }
  return jobs;
}

}  // namespace

TEST_CASE("a repair from the recorded start state rejoins at once and changes nothing",
          "[mpi][time]") {
  if (test::world_rank() != 0) return;
  const auto jobs = test::lublin_jobs(4000, 5, 1.0);
  for (Backfill b : {Backfill::EASY, Backfill::CONSERVATIVE}) {
    const SimConfig cfg = small_machine("fcfs", b);
    const auto segs = dist::split_segments(jobs, 3);
    const dist::Segment& s = segs[1];
    const EngineState idle = idle_state(cfg);
    const SegmentResult rec =
        simulate_segment(jobs, s.begin, s.end, s.t_begin, s.t_end, idle, cfg, 20);
    REQUIRE(rec.checkpoints.size() > 10);
    const SegmentResult rep =
        resimulate_segment(jobs, s.begin, s.end, s.t_begin, s.t_end, idle, cfg, rec);
    CHECK(rep.rejoined_at == rec.checkpoints.front().t);
    CHECK(rep.events_simulated == rec.checkpoints.front().events_before);
    CHECK(rep.events == rec.events);
    CHECK(rep.final_state == rec.final_state);
    REQUIRE(rep.jobs.size() == rec.jobs.size());
    for (size_t i = 0; i < rec.jobs.size(); ++i) CHECK(rep.jobs[i].start == rec.jobs[i].start);
  }
}

TEST_CASE("an early-stopped repair equals a full run from the corrected state", "[mpi][time]") {
  if (test::world_rank() != 0) return;
  const auto jobs = test::lublin_jobs(6000, 11, 1.2);
  for (const char* policy : {"fcfs", "multifactor"})
    for (Backfill b : {Backfill::EASY, Backfill::CONSERVATIVE}) {
      const SimConfig cfg = small_machine(policy, b);
      // Cut where the machine is busy (an idle boundary would leave nothing to repair): the
      // first cut from the middle on whose true state is not the idle guess.
      const EngineState idle = idle_state(cfg);
      const auto n = static_cast<int64_t>(jobs.size());
      dist::Segment s{n / 2, n, 0, std::numeric_limits<double>::infinity()};
      SegmentResult first;
      for (;; s.begin += 37) {
        REQUIRE(s.begin < n);
        const auto at = static_cast<size_t>(s.begin);
        if (jobs[at - 1].submit == jobs[at].submit) continue;
        s.t_begin = jobs[at].submit;
        first = simulate_segment(jobs, 0, s.begin, jobs.front().submit, s.t_begin, idle, cfg);
        if (!(first.final_state == idle) && !first.final_state.running.empty()) break;
      }
      const SegmentResult guessed =
          simulate_segment(jobs, s.begin, s.end, s.t_begin, s.t_end, idle, cfg, 16);
      const SegmentResult full =
          simulate_segment(jobs, s.begin, s.end, s.t_begin, s.t_end, first.final_state, cfg, 16);
      const SegmentResult rep = resimulate_segment(jobs, s.begin, s.end, s.t_begin, s.t_end,
                                                   first.final_state, cfg, guessed);
      INFO(policy << " " << backfill_name(b) << ": rejoined at " << rep.rejoined_at << " after "
                  << rep.events_simulated << " of " << full.events << " events");
      CHECK(rep.final_state == full.final_state);
      CHECK(rep.events == full.events);
      CHECK(rep.skipped == full.skipped);
      CHECK(rep.estimates_raised == full.estimates_raised);
      REQUIRE(rep.jobs.size() == full.jobs.size());
      size_t differ = 0;
      for (size_t i = 0; i < full.jobs.size(); ++i)
        differ += rep.jobs[i].id != full.jobs[i].id || rep.jobs[i].start != full.jobs[i].start;
      CHECK(differ == 0);
      // The spliced checkpoints must describe the true path (a later repair compares with
      // them): replay the true path up to a sample of their instants and compare.
      REQUIRE(rep.checkpoints.size() == guessed.checkpoints.size());
      for (size_t k = 0; k < rep.checkpoints.size(); k += 7) {
        const Checkpoint& c = rep.checkpoints[k];
        const auto stop = std::lower_bound(jobs.begin() + s.begin, jobs.begin() + s.end, c.t,
                                           [](const Job& j, double t) { return j.submit < t; });
        const SegmentResult upto = simulate_segment(jobs, s.begin, stop - jobs.begin(), s.t_begin,
                                                    c.t, first.final_state, cfg);
        CHECK(upto.final_state == c.state);
        CHECK(static_cast<int64_t>(upto.jobs.size()) == c.jobs_before);
        CHECK(upto.events == c.events_before);
      }
      if (std::string(policy) == "fcfs") CHECK(rep.events_simulated < full.events);
    }
}

TEST_CASE("the repair round is short when the queue drains", "[mpi][time]") {
  // A light load: the machine empties between bursts, so a re-run rejoins its guessed run soon
  // after the jobs crossing its boundary have ended.
  const auto jobs = test::lublin_jobs(20000, 7, 0.8);
  for (Backfill b : {Backfill::EASY, Backfill::CONSERVATIVE}) {
    const auto st = check_equal_to_sequential(jobs, small_machine("fcfs", b));
    if (test::world_rank() != 0) continue;
    INFO(dist::describe(st));
    CHECK(st.rounds == 2);
    CHECK(st.early_stops.back() == st.reruns.back());
    CHECK(st.repair_fraction() < 0.25);
  }
}

TEST_CASE("time-parallel replay is exact on a queue that never drains", "[mpi][time]") {
  const auto jobs = never_draining_jobs(1500);
  for (const char* policy : {"fcfs", "multifactor"})
    for (Backfill b : {Backfill::EASY, Backfill::CONSERVATIVE}) {
      const auto st = check_equal_to_sequential(jobs, small_machine(policy, b));
      if (test::world_rank() != 0) continue;
      INFO(dist::describe(st));
      // Every boundary carries the growing queue: one more segment is fixed per round.
      CHECK(st.rounds == st.segments);
    }
}

TEST_CASE("the one-process emulation is exact for N = 1..8", "[mpi][time]") {
  if (test::world_rank() != 0) return;
  const auto drains = test::lublin_jobs(8000, 3, 1.4);
  const auto never = never_draining_jobs(800);
  for (const auto* jobs : {&drains, &never})
    for (const char* policy : {"fcfs", "multifactor"})
      for (Backfill b : {Backfill::EASY, Backfill::CONSERVATIVE}) {
        SimConfig cfg = small_machine(policy, b);
        cfg.record_jobs = true;
        cfg.record_series = false;
        const SimResult seq = simulate(*jobs, cfg);
        for (int n = 1; n <= 8; ++n) {
          const auto tp = dist::time_parallel_serial(*jobs, cfg, n);
          INFO("N = " << n << ": " << dist::describe(tp.stats));
          check_same_schedule(tp, seq, cfg);
          if (n == 1) CHECK(tp.stats.rounds == 1);
        }
      }
}

// The carried plan of conservative backfilling holds GPU counts beside cores: a machine whose
// GPUs bind as often as its cores (every other job asks for two per node's worth) must cross
// segment boundaries with both, and one without GPUs with cores alone.
TEST_CASE("time-parallel conservative replay carries GPU bookings across boundaries",
          "[mpi][time]") {
  if (test::world_rank() != 0) return;
  std::vector<Job> jobs = test::lublin_jobs(8000, 3, 1.4);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const int64_t nodes = jobs[i].procs();
    jobs[i].req_procs = jobs[i].alloc_procs = 4 * nodes;
    jobs[i].req_gpus = static_cast<double>(i % 2 == 0 ? std::min<int64_t>(2 * nodes, 128) : 0);
  }
  SimConfig cfg = small_machine("fcfs", Backfill::CONSERVATIVE);
  cfg.machine = {128, 4, 1, Allocation::CORES};
  cfg.record_jobs = true;
  cfg.record_series = false;
  const SimResult seq = simulate(jobs, cfg);
  for (int n = 2; n <= 4; ++n) {
    const auto tp = dist::time_parallel_serial(jobs, cfg, n);
    INFO("N = " << n << ": " << dist::describe(tp.stats));
    check_same_schedule(tp, seq, cfg);
  }
}

TEST_CASE("time-parallel replay equals the sequential one on a generated trace", "[mpi][time]") {
  const auto jobs = test::lublin_jobs(8000, 3, 1.4);
  for (const char* policy : {"fcfs", "sjf", "multifactor"})
    for (Backfill b : {Backfill::EASY, Backfill::CONSERVATIVE, Backfill::NONE})
      check_equal_to_sequential(jobs, small_machine(policy, b));
}

// Tagged [real]: ctest runs it as its own test (mpi_tests_real_np*), skipped without the trace.
TEST_CASE("time-parallel replay equals the sequential one on a real trace", "[mpi][time][real]") {
  const std::string path = std::string(MLPRIO_SHARED_DATA) + "/swf/hpc2n_subset.swf";
  if (!std::filesystem::exists(path))
    MLPRIO_SKIP(path << " is absent (real traces live in ../shared/data)");
  const Trace t = load_trace(path);
  for (Backfill b : {Backfill::EASY, Backfill::CONSERVATIVE}) {
    SimConfig cfg;
    cfg.machine = machine_from_header(t.header);
    cfg.policy = "fcfs";
    cfg.backfill = b;
    cfg.too_large = TooLarge::SKIP;
    check_equal_to_sequential(t.jobs, cfg);
  }
}
