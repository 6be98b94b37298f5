// The external:CMD order (replay/README.md, "External and LLM policies"): the example
// SJF agent (replay/examples/sjf_agent.py) must give --policy sjf's schedule job by job under
// every backfilling rule, which pins the protocol (request fields, base order, reordering before
// backfilling). Then the fall-back paths: malformed, partial, late answers and a crashed agent,
// and --external-every. Needs python3; skipped without it.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/process.hpp"
#include "../support/skip.hpp"
#include "agent_support.hpp"
#include "mlprio/replay/simulator.hpp"
#include "mlprio/util/errors.hpp"

namespace fs = std::filesystem;
using namespace mlprio;
using namespace mlprio::replay;

namespace {

bool have_python() {
  return std::system("python3 -c pass >/dev/null 2>&1") == 0;
}

std::string sjf_agent() {
  return "python3 '" + (fs::path(MLPRIO_REPLAY_EXAMPLES) / "sjf_agent.py").string() + "'";
}

SimConfig agent_policy_config(const std::string& policy, Backfill b) {
  SimConfig cfg = mlprio_test::agent_config(policy, b);
  cfg.policy_options.agent.timeout = 30;
  return cfg;
}

// An agent script in a scratch folder; returns the command that runs it.
std::string agent_script(const std::string& name, const std::string& body) {
  const fs::path dir = mlprio::test::scratch("mlprio_external_", name);
  const fs::path p = dir / (name + ".py");
  std::ofstream(p) << "import json, sys, time\n" << body;
  return "python3 '" + p.string() + "'";
}

void require_same_schedule_and_bsld(const SimResult& a, const SimResult& b) {
  mlprio_test::require_same_schedule(a, b);
  CHECK(a.summary.avg_bsld == b.summary.avg_bsld);
}

}  // namespace

TEST_CASE("an external agent answering SJF's order gives --policy sjf's schedule job by job",
          "[replay][external]") {
  if (!have_python()) MLPRIO_SKIP("python3 is not installed");
  const std::vector<Job> jobs = mlprio_test::agent_workload(2000, 11);
  for (Backfill b : {Backfill::EASY, Backfill::CONSERVATIVE, Backfill::NONE}) {
    INFO("backfill " << backfill_name(b));
    const SimResult ref = simulate(jobs, agent_policy_config("sjf", b));
    const SimResult ext = simulate(jobs, agent_policy_config("external:" + sjf_agent(), b));
    require_same_schedule_and_bsld(ref, ext);
    CHECK(ext.agent.points > 0);
    CHECK(ext.agent.calls == ext.agent.points);
    CHECK(ext.agent.answers == ext.agent.calls);
    CHECK(ext.agent.failures == 0);
    CHECK(ext.agent.fallbacks == 0);
    CHECK(ref.agent.points == 0);  // the built-in orders report no agent
  }
  // The same with EASY's shortest-first candidate order and a multifactor base order: the agent
  // sees the queue in base order, and its stable sort keeps that order for equal estimates,
  // which is sjf's tie rule only for the fcfs base; so this compares with the fcfs base again
  // but with sjbf candidates.
  SimConfig s = agent_policy_config("sjf", Backfill::EASY);
  s.backfill_order = BackfillOrder::SJBF;
  SimConfig e = agent_policy_config("external:" + sjf_agent(), Backfill::EASY);
  e.backfill_order = BackfillOrder::SJBF;
  require_same_schedule_and_bsld(simulate(jobs, s), simulate(jobs, e));
}

TEST_CASE("jobs an answer leaves out keep their base order after the listed ones",
          "[replay][external]") {
  if (!have_python()) MLPRIO_SKIP("python3 is not installed");
  const std::vector<Job> jobs = mlprio_test::agent_workload(600, 5);
  // Lists nothing: the base order (fcfs) runs, and that is a valid answer, not a fall-back.
  const std::string none = agent_script("empty", R"(
for line in sys.stdin:
    print(json.dumps({"order": []}), flush=True)
)");
  const SimResult fcfs = simulate(jobs, agent_policy_config("fcfs", Backfill::EASY));
  const SimResult r = simulate(jobs, agent_policy_config("external:" + none, Backfill::EASY));
  require_same_schedule_and_bsld(fcfs, r);
  CHECK(r.agent.answers == r.agent.calls);
  CHECK(r.agent.fallbacks == 0);
  // --external-base sjf with an empty answer is sjf.
  SimConfig c = agent_policy_config("external:" + none, Backfill::EASY);
  c.policy_options.agent.base = "sjf";
  require_same_schedule_and_bsld(simulate(jobs, agent_policy_config("sjf", Backfill::EASY)),
                                 simulate(jobs, c));
}

TEST_CASE("malformed answers fall back to the base order and are counted", "[replay][external]") {
  if (!have_python()) MLPRIO_SKIP("python3 is not installed");
  const std::vector<Job> jobs = mlprio_test::agent_workload(600, 5);
  // Every answer is unusable in a different way; the run goes on, on the base order (fcfs).
  const std::string bad = agent_script("bad", R"(
n = 0
for line in sys.stdin:
    q = json.loads(line)["queue"]
    kind = n % 6
    n += 1
    if kind == 0: out = "not json"
    elif kind == 1: out = json.dumps({"ordre": []})
    elif kind == 2: out = json.dumps({"order": ["a"]})
    elif kind == 3: out = json.dumps({"order": [-12345678]})
    elif kind == 4: out = json.dumps({"order": [q[0]["id"], q[0]["id"]]})
    else: out = "[" * 100000
    print(out, flush=True)
)");
  const SimResult fcfs = simulate(jobs, agent_policy_config("fcfs", Backfill::EASY));
  const SimResult r = simulate(jobs, agent_policy_config("external:" + bad, Backfill::EASY));
  require_same_schedule_and_bsld(fcfs, r);
  CHECK(r.agent.calls == r.agent.points);
  CHECK(r.agent.answers == 0);
  CHECK(r.agent.failures == r.agent.calls);
  CHECK(r.agent.malformed == r.agent.calls);
  CHECK(r.agent.fallbacks == r.agent.calls);
  CHECK(r.agent.timeouts == 0);
}

TEST_CASE("a late answer falls back, is counted, and is skipped so later answers stay in step",
          "[replay][external]") {
  if (!have_python()) MLPRIO_SKIP("python3 is not installed");
  const std::vector<Job> jobs = mlprio_test::agent_workload(300, 9);
  // SJF, except that the answer to request 3 comes after 1.2 s (past the 0.5 s time-out). The
  // agent then owes answers to the requests sent while it slept: those passes time out too (at
  // most ceil(1.2 / 0.5) = 3 in all), after which every answer matches its request again (a
  // stale answer would name jobs no longer queued: malformed).
  const std::string slow = agent_script("slow", R"(
n = 0
for line in sys.stdin:
    req = json.loads(line)
    n += 1
    if n == 3: time.sleep(1.2)
    q = sorted(req["queue"], key=lambda j: j["estimate"])
    print(json.dumps({"order": [j["id"] for j in q], "time": req["time"]}), flush=True)
)");
  SimConfig c = agent_policy_config("external:" + slow, Backfill::EASY);
  c.policy_options.agent.timeout = 0.5;
  const SimResult r = simulate(jobs, c);
  CHECK(r.summary.jobs == static_cast<int64_t>(jobs.size()));
  CHECK(r.agent.timeouts >= 1);
  CHECK(r.agent.timeouts <= 3);
  CHECK(r.agent.failures == r.agent.timeouts);
  CHECK(r.agent.fallbacks == r.agent.timeouts);
  CHECK(r.agent.malformed == 0);
  CHECK(r.agent.answers == r.agent.calls - r.agent.timeouts);
  CHECK(r.agent.wait_seconds >= 0.5);
}

TEST_CASE("a crashed agent stops the run with a message naming the event time",
          "[replay][external]") {
  if (!have_python()) MLPRIO_SKIP("python3 is not installed");
  const std::vector<Job> jobs = mlprio_test::agent_workload(300, 9);
  const std::string dies = agent_script("dies", R"(
n = 0
for line in sys.stdin:
    n += 1
    if n == 5:
        sys.stderr.write("agent: giving up\n")
        sys.exit(3)
    print(json.dumps({"order": []}), flush=True)
)");
  try {
    simulate(jobs, agent_policy_config("external:" + dies, Backfill::EASY));
    FAIL("the run went on without its agent");
  } catch (const mlprio::RuntimeError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK_THAT(what, Catch::Contains("external agent") && Catch::Contains("event time") &&
                         Catch::Contains("exit status 3"));
  }
  // A command that does not exist: the shell's 127.
  try {
    simulate(jobs, agent_policy_config("external:/nonexistent/agent --flag", Backfill::EASY));
    FAIL("the run went on without its agent");
  } catch (const mlprio::RuntimeError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK_THAT(what, Catch::Contains("event time") && Catch::Contains("exit status 127"));
  }
}

TEST_CASE("external-every K asks at every K-th pass and reuses the last answer between",
          "[replay][external]") {
  if (!have_python()) MLPRIO_SKIP("python3 is not installed");
  const std::vector<Job> jobs = mlprio_test::agent_workload(800, 13);
  SimConfig c = agent_policy_config("external:" + sjf_agent(), Backfill::EASY);
  c.policy_options.agent.every = 4;
  const SimResult r = simulate(jobs, c);
  CHECK(r.summary.jobs == static_cast<int64_t>(jobs.size()));
  CHECK(r.agent.points > 8);
  CHECK(r.agent.calls == (r.agent.points + 3) / 4);
  CHECK(r.agent.answers == r.agent.calls);
  CHECK(r.agent.fallbacks == 0);
}

TEST_CASE("agent orders refuse settings they cannot honour, naming them", "[replay][external]") {
  const std::vector<Job> jobs = mlprio_test::agent_workload(50, 3);
  auto message = [&](SimConfig c) -> std::string {
    try {
      simulate(jobs, c);
    } catch (const mlprio::UsageError& e) {
      return e.what();
    }
    return "(no error)";
  };
  SimConfig c = agent_policy_config("external:true", Backfill::EASY);
  c.policy_options.agent.timeout = 0;
  CHECK_THAT(message(c), Catch::Contains("--external-timeout"));
  c = agent_policy_config("external:true", Backfill::EASY);
  c.policy_options.agent.every = 0;
  CHECK_THAT(message(c), Catch::Contains("--external-every"));
  c = agent_policy_config("external:true", Backfill::EASY);
  c.policy_options.agent.base = "nope";
  CHECK_THAT(message(c), Catch::Contains("unknown policy 'nope'"));
  c = agent_policy_config("external:", Backfill::EASY);
  CHECK_THAT(message(c), Catch::Contains("needs a command"));
  c = agent_policy_config("external:true", Backfill::RLSCHEDULER);
  CHECK_THAT(message(c), Catch::Contains("rlscheduler"));
}

TEST_CASE("mlprio-replay run --policy external:CMD reports the agent's counts, exits 1 on a crash",
          "[replay][external][cli]") {
  const fs::path exe = fs::path(MLPRIO_BIN_DIR) / "mlprio-replay";
  if (!fs::exists(exe)) MLPRIO_SKIP(exe << " is not built");
  if (!have_python()) MLPRIO_SKIP("python3 is not installed");
  const fs::path dir = mlprio::test::scratch("mlprio_external_", "cli");
  using mlprio::test::run_in;
  using mlprio::test::slurp;
  REQUIRE(run_in(exe, dir, "true", "generate --jobs 500 --seed 3 -q -o t.swf") == 0);
  REQUIRE(run_in(exe, dir, "true", "run --trace t.swf --policy sjf --json", "sjf.json") == 0);
  const std::string agent = "--policy 'external:" + sjf_agent() + "'";
  REQUIRE(run_in(exe, dir, "true",
                 "run --trace t.swf " + agent + " --external-every 1 --json --out o.h5",
                 "agent.json") == 0);
  const std::string a = slurp(dir / "agent.json"), s = slurp(dir / "sjf.json");
  INFO(a << "\n" << s);
  CHECK_THAT(a, Catch::Contains("\"agent\":{\"points\":") && Catch::Contains("\"failures\":0,"));
  // Same metrics as sjf: the text from "jobs" to the end of sjf's run object.
  const std::string tail = s.substr(s.find("\"jobs\""), s.find("}]}") - s.find("\"jobs\""));
  CHECK_THAT(a, Catch::Contains(tail));
  CHECK(fs::exists(dir / "o.h5"));
  // A crashed agent: exit 1, the event time named; bad settings: exit 2, the option named.
  CHECK(run_in(exe, dir, "true", "run --trace t.swf --policy 'external:exit 4'") == 1);
  CHECK_THAT(slurp(dir / "err.txt"),
             Catch::Contains("event time") && Catch::Contains("exit status 4"));
  CHECK(run_in(exe, dir, "true", "run --trace t.swf " + agent + " --external-every 0") == 2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("--external-every"));
  CHECK(run_in(exe, dir, "true", "run --trace t.swf " + agent + " --time-parallel") == 2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("time-parallel"));
  fs::remove_all(dir);
}

TEST_CASE("any order an agent gives keeps the schedule invariants", "[replay][external]") {
  if (!have_python()) MLPRIO_SKIP("python3 is not installed");
  const std::vector<Job> jobs = mlprio_test::agent_workload(1500, 17);
  // A seeded random permutation of part of the queue (the rest in base order), new every pass.
  const std::string shuffle = agent_script("shuffle", R"(
import random
rng = random.Random(5)
for line in sys.stdin:
    ids = [j["id"] for j in json.loads(line)["queue"]]
    rng.shuffle(ids)
    print(json.dumps({"order": ids[: rng.randint(0, len(ids))]}), flush=True)
)");
  for (Backfill b : {Backfill::NONE, Backfill::EASY, Backfill::CONSERVATIVE}) {
    INFO("backfill " << backfill_name(b));
    const SimResult r =
        simulate(jobs, agent_policy_config("external:" + shuffle, b));  // invariant checks on
    CHECK(r.summary.jobs == static_cast<int64_t>(jobs.size()));
    CHECK(r.agent.answers == r.agent.calls);
    for (const auto& o : r.jobs) CHECK(o.start >= o.submit);
    const SimResult again = simulate(jobs, agent_policy_config("external:" + shuffle, b));
    require_same_schedule_and_bsld(r, again);  // a deterministic agent gives a deterministic run
  }
}
