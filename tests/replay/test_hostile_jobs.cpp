// Job lists that once broke the engine, found by fuzz/fuzz_replay.cpp: conservative backfilling
// with a booking that rounds to nothing (a zero estimate, or a start so late that adding the
// estimate gives the start back), which let two jobs be booked on the same resources at one
// instant ("job started without free resources"), and Tsafrir's correction on an absurd run
// time, which raised one correction event per 100 h of it (10^16 s: a stalled replay). And a
// time segment resumed with a running job whose estimated end had passed before the boundary,
// which replayed that expiry in the past ("time went backwards").
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "mlprio/replay/detail/profile_scan.hpp"
#include "mlprio/replay/segment.hpp"
#include "mlprio/replay/simulator.hpp"

using namespace mlprio;
using namespace mlprio::replay;

namespace {

Job job(int64_t id, double submit, double run, double req, int64_t procs) {
  Job j;
  j.id = id;
  j.submit = submit;
  j.run = run;
  j.req_time = req;
  j.req_procs = procs;
  j.user = 1;
  return j;
}

SimConfig one_node(Backfill b) {
  SimConfig cfg;
  cfg.machine = {1, 1, 0, Allocation::NODES};
  cfg.backfill = b;
  cfg.record_series = false;
  return cfg;
}

// Runs `cfg` with the costly checks on and off and, for conservative, both profile scans; all
// must give the same starts, which are returned in start order.
std::vector<double> starts(const std::vector<Job>& jobs, SimConfig cfg) {
  std::vector<double> first;
  for (int scan : {1, 2, 3}) {
    for (bool check : {true, false}) {
      detail::set_profile_scan_mode(scan);
      cfg.check_invariants = check;
      SimResult r;
      REQUIRE_NOTHROW(r = simulate(jobs, cfg));
      detail::set_profile_scan_mode(0);
      std::vector<double> s;
      for (const auto& o : r.jobs) s.push_back(o.start);
      if (first.empty())
        first = s;
      else
        CHECK(s == first);
    }
  }
  return first;
}

}  // namespace

TEST_CASE("conservative: a zero estimate holds its resources for an instant",
          "[replay][conservative][hostile]") {
  // A runs 0-100 on the only node. Z (0 s, no request) is booked at 100, for an instant. B is
  // booked just after that instant, not on Z's node at 100 (both would start there). Z starts
  // and ends at 100, before its booking ends: an early end, after which B moves to 100.
  const std::vector<Job> jobs = {job(1, 0, 100, 100, 1), job(2, 1, 0, 0, 1), job(3, 2, 50, 50, 1)};
  const std::vector<double> s = starts(jobs, one_node(Backfill::CONSERVATIVE));
  CHECK(s == std::vector<double>{0, 100, 100});
}

TEST_CASE("conservative: an estimate that rounds away at a late start books an instant",
          "[replay][conservative][hostile]") {
  // At 2^60 s one step of time is 256 s: a 100 s run or estimate added to it gives 2^60 back.
  // Each job holds the node for an instant, then ends at its start: the next one moves there.
  const double late = std::ldexp(1.0, 60);
  const std::vector<Job> jobs = {job(1, late, 100, 100, 1), job(2, late, 100, 100, 1),
                                 job(3, late, 100, 100, 1)};
  const std::vector<double> s = starts(jobs, one_node(Backfill::CONSERVATIVE));
  CHECK(s == std::vector<double>{late, late, late});
}

TEST_CASE("Tsafrir's correction stops after 10,000 steps of 100 h: no stall on absurd run times",
          "[replay][easy][hostile]") {
  // A asks for a minute and runs 10^16 s; B waits for the whole machine. Without the bound the
  // replay would raise one correction event per 100 h of A's run (about 2.8e10 of them).
  SimConfig cfg = one_node(Backfill::EASY);
  cfg.correction = Correction::TSAFRIR;
  const std::vector<Job> jobs = {job(1, 0, 1e16, 60, 1), job(2, 1, 10, 10, 1)};
  for (bool check : {true, false}) {
    cfg.check_invariants = check;
    const SimResult r = simulate(jobs, cfg);
    REQUIRE(r.jobs.size() == 2);
    CHECK(r.jobs[0].end == 1e16);
    CHECK(r.jobs[1].start == 1e16);
  }
}

TEST_CASE("a time segment resumes past an estimated end whose correction was declined",
          "[replay][easy][segment][hostile]") {
  // A asks for 100 s and runs 1000 s: at 100, --correction request declines to raise it (the
  // request has passed), so A counts as ending now from then on. The cut at B's arrival (500)
  // carries A with its estimated end at 100, already handled.
  SimConfig cfg = one_node(Backfill::EASY);
  cfg.correction = Correction::REQUEST;
  cfg.check_invariants = true;
  const std::vector<Job> jobs = {job(1, 0, 1000, 100, 1), job(2, 500, 10, 10, 1)};
  const SimResult serial = simulate(jobs, cfg);
  const SegmentResult a = simulate_segment(jobs, 0, 1, 0, 500, idle_state(cfg), cfg);
  const SegmentResult b = simulate_segment(jobs, 1, 2, 500, INFINITY, a.final_state, cfg);
  REQUIRE(a.jobs.size() + b.jobs.size() == serial.jobs.size());
  REQUIRE(serial.jobs.size() == 2);
  CHECK(a.jobs[0].start == serial.jobs[0].start);
  CHECK(b.jobs[0].start == serial.jobs[1].start);
  CHECK(b.jobs[0].start == 1000);
}
