// Exact-output tests: tiny traces in tests/replay/data/*.swf whose schedules were worked out by
// hand (the reasoning is in each file's header). A line "; expect PROFILE/BACKFILL[+kill][+skip]:
// id:start ..." gives the start time of every job under that configuration; "; policy: P" the
// queue order (default fcfs). Also: too-large jobs, kills at the limit, estimates, windows.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>

#include "mlprio/jobs/trace.hpp"
#include "mlprio/replay/rlscheduler.hpp"
#include "mlprio/replay/simulator.hpp"

using namespace mlprio;
using namespace mlprio::replay;

namespace {

const std::string DATA = MLPRIO_REPLAY_TEST_DATA;

struct Expectation {
  std::string key;
  std::map<int64_t, double> starts;
};

std::vector<Expectation> read_expectations(const std::string& path, std::string& policy) {
  std::ifstream in(path);
  std::string line;
  std::vector<Expectation> out;
  policy = "fcfs";
  while (std::getline(in, line)) {
    if (line.rfind("; policy: ", 0) == 0) policy = line.substr(10);
    if (line.rfind("; expect ", 0) != 0) continue;
    const auto colon = line.find(':');
    Expectation e;
    e.key = line.substr(9, colon - 9);
    std::stringstream ss(line.substr(colon + 1));
    std::string pair;
    while (ss >> pair) {
      const auto c = pair.find(':');
      e.starts[std::stoll(pair.substr(0, c))] = std::stod(pair.substr(c + 1));
    }
    out.push_back(e);
  }
  return out;
}

SimResult run_key(const Trace& trace, const std::string& key, const std::string& policy) {
  const auto slash = key.find('/');
  const std::string profile = key.substr(0, slash);
  std::string rest = key.substr(slash + 1);
  SimConfig cfg;
  cfg.policy = policy;
  cfg.check_invariants = true;
  cfg.profile = parse_profile(profile);
  cfg.kill_at_limit = rest.find("+kill") != std::string::npos;
  cfg.too_large = rest.find("+skip") != std::string::npos ? TooLarge::SKIP : TooLarge::ERROR;
  cfg.backfill = parse_backfill(rest.substr(0, rest.find('+')));
  if (cfg.profile == Profile::RLSCHEDULER) {
    cfg.machine = rlscheduler_machine(trace.header);
    const std::vector<Job> jobs = prepare_rlscheduler_jobs(trace.jobs);
    return simulate(jobs, cfg);
  }
  cfg.machine = machine_from_header(trace.header);
  return simulate(trace.jobs, cfg);
}

}  // namespace

TEST_CASE("hand-worked schedules start every job when worked out", "[replay][exact]") {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(DATA)) {
    if (entry.path().extension() != ".swf") continue;
    ++files;
    std::string policy;
    const auto expectations = read_expectations(entry.path().string(), policy);
    REQUIRE(!expectations.empty());
    const Trace trace = load_trace(entry.path().string());
    for (const auto& e : expectations) {
      SECTION(entry.path().filename().string() + " " + e.key) {
        const SimResult r = run_key(trace, e.key, policy);
        std::map<int64_t, double> got;
        for (const auto& o : r.jobs) got[o.id] = o.start;
        INFO(entry.path().filename().string() << " " << e.key << " policy " << policy);
        CHECK(got == e.starts);
      }
    }
  }
  CHECK(files >= 6);
}

TEST_CASE("kill at limit ends the job at its requested time and flags it", "[replay][exact]") {
  const Trace trace = load_trace(DATA + "/kill_and_too_large.swf");
  const SimResult r = run_key(trace, "standard/easy+kill+skip", "fcfs");
  REQUIRE(r.jobs.size() == 2);
  CHECK(r.summary.killed == 1);
  CHECK(r.summary.skipped == 1);
  CHECK(r.jobs[0].id == 1);
  CHECK(r.jobs[0].killed == 1);
  CHECK(r.jobs[0].end == 50);
  CHECK(r.jobs[1].killed == 0);
}

TEST_CASE("a job larger than the machine is an error unless skipped", "[replay][exact]") {
  const Trace trace = load_trace(DATA + "/kill_and_too_large.swf");
  SimConfig cfg;
  cfg.machine = machine_from_header(trace.header);
  CHECK_THROWS_AS(simulate(trace.jobs, cfg), JobTooLargeError);
  cfg.too_large = TooLarge::SKIP;
  CHECK(simulate(trace.jobs, cfg).summary.skipped == 1);
  cfg.profile = Profile::RLSCHEDULER;
  cfg.backfill = Backfill::RLSCHEDULER;
  cfg.too_large = TooLarge::ERROR;
  CHECK_THROWS_AS(simulate(prepare_rlscheduler_jobs(trace.jobs), cfg), JobTooLargeError);
}

TEST_CASE("a job asking for out-of-range GPUs is too large, never free", "[replay][exact]") {
  // 1e300 GPUs used to be cast to int64_t (undefined; INT64_MIN in practice), so the job ran at
  // once as if it needed no GPU at all.
  Job big;
  big.id = 7;
  big.submit = 0;
  big.run = 10;
  big.req_time = 20;
  big.req_procs = 1;
  Job small = big;
  small.id = 8;
  small.req_gpus = 1;
  SimConfig cfg;
  cfg.machine = {4, 1, 2, Allocation::NODES};
  for (double gpus : {1e300, std::numeric_limits<double>::infinity(), 0x1p63, 0x1p44 + 1}) {
    INFO(gpus);
    big.req_gpus = gpus;
    cfg.too_large = TooLarge::ERROR;
    CHECK_THROWS_WITH(
        simulate(std::vector<Job>{big, small}, cfg),
        Catch::Contains("job 7 asks for") && Catch::Contains("GPUs, more than any job"));
    cfg.too_large = TooLarge::SKIP;
    const SimResult r = simulate(std::vector<Job>{big, small}, cfg);
    CHECK(r.summary.skipped == 1);
    CHECK(r.summary.jobs == 1);
  }
  big.req_gpus = 0x1p44;  // the largest count a job may ask for: only too large for this machine
  cfg.too_large = TooLarge::ERROR;
  CHECK_THROWS_WITH(simulate(std::vector<Job>{big}, cfg), Catch::Contains("but the machine has"));
}

TEST_CASE("metrics of a hand-worked run", "[replay][exact]") {
  // backfill_rules.swf under EASY: starts 0, 10, 31, 1; runs 10, 5, 10, 30; submits 0, 0, 0, 1.
  const Trace trace = load_trace(DATA + "/backfill_rules.swf");
  const SimResult r = run_key(trace, "standard/easy", "fcfs");
  const Summary& s = r.summary;
  CHECK(s.jobs == 4);
  CHECK(s.avg_wait == Approx((0 + 10 + 31 + 0) / 4.0));
  // bsld = max(1, (wait + run) / max(run, 10)): 1, 15/10, 41/10, 1.
  CHECK(s.avg_bsld == Approx((1 + 1.5 + 4.1 + 1) / 4.0));
  CHECK(s.avg_turnaround == Approx((10 + 15 + 41 + 30) / 4.0));
  CHECK(s.makespan == 41);  // job 3 ends at 41
  // core-seconds 3*10 + 3*5 + 4*10 + 1*30 = 115 over 41 s x 4 cores
  CHECK(s.utilization == Approx(115.0 / (41.0 * 4)));
  REQUIRE(r.users.size() == 2);
  CHECK(r.users[0].user == 1);
  CHECK(r.users[0].jobs == 3);
  CHECK(r.series.busy_cores.front() == 3);
  for (int64_t b : r.series.busy_cores) CHECK(b <= 4);
}

TEST_CASE("estimate modes and the estimate hook", "[replay][exact]") {
  // kill_and_too_large.swf without 3: job 1 requested 50 but runs 100. With estimate=actual the
  // head's shadow is 100, with request 50, with a hook 7; the schedule itself is the same, the
  // estimates recorded differ.
  Trace trace = load_trace(DATA + "/kill_and_too_large.swf");
  trace.jobs.pop_back();
  SimConfig cfg;
  cfg.machine = machine_from_header(trace.header);
  cfg.estimate = EstimateMode::ACTUAL;
  CHECK(simulate(trace.jobs, cfg).jobs[0].estimate == 100);
  cfg.estimate = EstimateMode::REQUEST;
  CHECK(simulate(trace.jobs, cfg).jobs[0].estimate == 50);
  cfg.estimate = EstimateMode::CUSTOM;
  cfg.estimate_fn = [](const Job& j) { return j.id == 1 ? 7.0 : 1.0; };
  CHECK(simulate(trace.jobs, cfg).jobs[0].estimate == 7);
  cfg.estimate_fn = [](const Job&) { return -1.0; };
  CHECK_THROWS_AS(simulate(trace.jobs, cfg), ConfigError);
  // Conservative raises estimates below the run time (a plan needs bounds) and counts them.
  cfg.estimate = EstimateMode::REQUEST;
  cfg.backfill = Backfill::CONSERVATIVE;
  CHECK(simulate(trace.jobs, cfg).summary.estimates_raised == 1);
}

TEST_CASE("windows cut the job list and start from an empty cluster", "[replay][exact]") {
  const Trace trace = load_trace(DATA + "/backfill_rules.swf");
  const std::span<const Job> all(trace.jobs);
  CHECK(select_window(all, 1, 2).size() == 2);
  CHECK(select_window(all, 3, 10).size() == 1);  // cut at the end
  CHECK(select_window(all, 9, 10).empty());
  SimConfig cfg;
  cfg.machine = machine_from_header(trace.header);
  // Jobs 3 and 4 alone: 3 takes all 4 nodes 0..10, 4 waits until 10.
  const SimResult r = simulate(select_window(all, 2, 2), cfg);
  REQUIRE(r.jobs.size() == 2);
  CHECK(r.jobs[0].start == 0);
  CHECK(r.jobs[1].start == 10);
}

TEST_CASE("unknown names are refused with the valid ones listed", "[replay]") {
  CHECK_THROWS_AS(make_policy("nope"), UnknownPolicyError);
  CHECK_THROWS_WITH(parse_backfill("x"), Catch::Contains("conservative"));
  CHECK(policy_names().size() >= 10);
  SimConfig cfg;
  cfg.machine = {4, 1, 0, Allocation::NODES};
  cfg.policy = "bogus";
  std::vector<Job> none;
  CHECK_THROWS_AS(simulate(none, cfg), UnknownPolicyError);
}

TEST_CASE("the option parsers name the valid values in their messages", "[replay]") {
  CHECK(parse_backfill("conservative") == Backfill::CONSERVATIVE);
  CHECK(parse_profile("rlscheduler") == Profile::RLSCHEDULER);
  CHECK_THROWS_WITH(parse_backfill("x"),
                    "unknown backfill 'x' (valid: none, easy, conservative, rlscheduler)");
  CHECK_THROWS_WITH(parse_profile("x"), "unknown profile 'x' (valid: standard, rlscheduler)");
  CHECK_THROWS_WITH(parse_allocation("x"), "unknown allocation 'x' (valid: nodes, cores)");
  CHECK_THROWS_WITH(parse_too_large("x"), "unknown too-large rule 'x' (valid: error, skip)");
  CHECK_THROWS_WITH(parse_correction("x"),
                    "unknown correction 'x' (valid: none, request, tsafrir)");
  CHECK_THROWS_WITH(parse_backfill_order("x"), "unknown backfill order 'x' (valid: fcfs, sjbf)");
}

TEST_CASE("every order's traits are its hooks' answers", "[replay]") {
  for (const std::string& name : policy_names()) {
    if (name == "ml") continue;  // needs a model's predictions to be made (test_ml_policy)
    INFO(name);
    const auto p = make_policy(name);
    const PolicyTraits t = p->traits();
    CHECK(t.dynamic == p->dynamic());
    CHECK(t.scores_view_only == p->scores_view_only());
    CHECK(t.finite_scores == p->finite_scores());
    CHECK(t.prepares == p->prepares());
    CHECK(t.submit_breaks_ties == p->submit_breaks_ties());
    CHECK(t.tracks_job_ends == p->tracks_job_ends());
    CHECK(t.scores_submit == p->scores_submit());
    CHECK(t.orders_queue == p->orders_queue());
  }
}
