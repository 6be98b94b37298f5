// The deployed-stack replay (`run --slurm-conf`): the slurm.conf reader (syntax, Slurm's
// defaults and units, what is and is not modelled, errors naming file, line and key) and the
// engine (priority/basic + sched/builtin is first come, first served without backfilling;
// sched/backfill's plan on time limits and its reservations; kills at the limit on slurmctld's
// 30-s check; multifactor's job size factor; invariants on a generated workload).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../support/process.hpp"
#include "../support/skip.hpp"
#include "mlprio/io/hdf5.hpp"
#include "mlprio/jobs/lublin.hpp"
#include "mlprio/jobs/trace.hpp"
#include "mlprio/replay/output.hpp"
#include "mlprio/replay/simulator.hpp"
#include "mlprio/replay/slurm_conf.hpp"
#include "mlprio/replay/slurm_replay.hpp"

using namespace mlprio;
using namespace mlprio::replay;

namespace {

// The path of a program of this build, or an empty path when it is not built.
std::filesystem::path built_program(const char* name) {
  const std::filesystem::path p = std::filesystem::path(MLPRIO_BIN_DIR) / name;
  return std::filesystem::exists(p) ? p : std::filesystem::path();
}

Job stack_job(int64_t id, double submit, double run, int64_t procs, double req_time) {
  Job j;
  j.id = id;
  j.submit = submit;
  j.run = run;
  j.req_procs = procs;
  j.alloc_procs = procs;
  j.req_time = req_time;
  j.user = static_cast<int32_t>(id % 3);
  return j;
}

std::map<int64_t, double> starts(const SimResult& r) {
  std::map<int64_t, double> s;
  for (const auto& o : r.jobs) s[o.id] = o.start;
  return s;
}

// A seeded Lublin workload with requests at least the run time (as Lublin's FACTOR gives them).
std::vector<Job> lublin(int64_t nodes, uint64_t seed, double load_scale, size_t n) {
  LublinOptions o;
  o.nodes = nodes;
  o.seed = seed;
  o.load_scale = load_scale;
  o.req_time = LublinReqTime::FACTOR;
  return generate_lublin(o, n);
}

SimResult replay_conf(const std::string& text, const std::vector<Job>& jobs, Machine m,
                      double epoch = 0) {
  auto run = std::make_shared<SlurmRun>();
  run->conf = parse_slurm_conf(text, "test.conf");
  run->epoch = epoch;
  SimConfig cfg;
  cfg.machine = m;
  cfg.slurm = run;
  cfg.check_invariants = true;
  return simulate(jobs, cfg);
}

}  // namespace

TEST_CASE("slurm.conf: Slurm's defaults, units and syntax", "[replay][slurm_conf]") {
  const SlurmStack d = parse_slurm_conf("", "empty.conf");
  CHECK(d.multifactor);  // 23.11+ default
  CHECK(d.backfill);
  CHECK(d.max_age == 7 * 86400);
  CHECK(d.calc_period == 300);
  CHECK(d.bf_interval == 30);
  CHECK(d.bf_window == 86400);
  CHECK(d.bf_resolution == 60);
  CHECK(d.bf_max_job_test == 500);
  CHECK(d.sched_interval == 60);
  CHECK(d.batch_sched_delay == 3);
  CHECK(d.kill_wait == 30);
  CHECK(d.unmodeled.empty());

  const SlurmStack s = parse_slurm_conf(
      "# a site\n"
      "priorityweightage=1000   # keys in any case\n"
      "PriorityWeightFairshare=10000\n"
      "PriorityWeightJobSize=500\n"
      "PriorityMaxAge=2-12\n"
      "PriorityCalcPeriod=2\n"
      "PriorityFavorSmall=YES\n"
      "AccountingStorageType=accounting_storage/slurmdbd\n"
      "SchedulerParameters=bf_interval=45,bf_window=2880,bf_resolution=300,\\\n"
      "bf_max_job_test=100,bf_continue,default_queue_depth=50,some_new_knob=3\n"
      "PrioritySiteFactorPlugin=site_factor/mlprio\n"
      "PrioritySiteFactorParameters=model=/m.json,weight=5000,mode=shadow,scope_qos=Normal:high\n"
      "JobSubmitPlugins=lua,mlprio\n"
      "NodeName=DEFAULT CPUs=32 RealMemory=1000\n"
      "NodeName=n[01-10],m[1-2] State=UNKNOWN\n"
      "NodeName=gpu1 CPUs=32 Feature=x\n"
      "PartitionName=batch Nodes=ALL Default=YES MaxTime=2-00:00:00 DefaultTime=60\n"
      "PartitionName=short Nodes=n01 MaxTime=30 PriorityTier=2\n"
      "SlurmctldPort=6817\n"
      "PreemptType=preempt/qos\n",
      "site.conf");
  CHECK(s.weight_age == 1000);
  CHECK(s.weight_fairshare == 10000);
  CHECK(s.weight_job_size == 500);
  CHECK(s.max_age == 2 * 86400 + 12 * 3600);
  CHECK(s.calc_period == 120);
  CHECK(s.favor_small);
  CHECK(s.bf_interval == 45);
  CHECK(s.bf_window == 2880 * 60);
  CHECK(s.bf_resolution == 300);
  CHECK(s.bf_max_job_test == 100);
  CHECK(s.default_queue_depth == 50);
  CHECK(s.site.enabled);
  CHECK(s.site.shadow);
  CHECK(s.site.weight == 5000);
  CHECK(s.site.model == "/m.json");
  CHECK(s.site.scope_qos == std::vector<std::string>{"normal", "high"});
  CHECK(s.job_submit_mlprio);
  CHECK(s.nodes == 13);
  CHECK(s.cpus_per_node == 32);
  REQUIRE(s.partitions.size() == 2);
  CHECK(s.default_partition()->name == "batch");
  CHECK(s.partitions[0].max_time == 2 * 86400);
  CHECK(s.partitions[0].default_time == 3600);
  CHECK(s.partitions[1].max_time == 1800);
  // Every key that changes scheduling but is not modelled is named, once.
  const std::vector<std::string> expect = {"SchedulerParameters=some_new_knob",
                                           "JobSubmitPlugins=lua", "NodeName:Feature",
                                           "PartitionName:PriorityTier", "PreemptType"};
  CHECK(s.unmodeled == expect);
  CHECK(s.sha256.empty());  // text has no file checksum

  // The plugin's parameters are read by the plugin's own parser: a value it refuses keeps its
  // default in the replay too, with the plugin's warning.
  const SlurmStack refused = parse_slurm_conf(
      "PrioritySiteFactorPlugin=site_factor/mlprio\n"
      "PrioritySiteFactorParameters=model=/m.json,limit_margin=20,mode=Shadow,weight=2k\n",
      "site.conf");
  CHECK(refused.site.limit_margin == 0.25);
  CHECK(refused.site.shadow);
  CHECK(refused.site.weight == 2000);
  REQUIRE(refused.site.warnings.size() == 1);
  CHECK_THAT(refused.site.warnings[0], Catch::Contains("limit_margin='20' is not valid"));
  CHECK_THAT(slurm_conf_warnings(refused).at(0),
             Catch::StartsWith("PrioritySiteFactorParameters: parameter limit_margin='20'"));
}

TEST_CASE("slurm.conf: without slurmdbd multifactor drops age and fair share, as Slurm does",
          "[replay][slurm_conf]") {
  const SlurmStack s = parse_slurm_conf(
      "PriorityWeightAge=1000\nPriorityWeightFairshare=5\n"
      "PriorityWeightJobSize=7\n",
      "nodbd.conf");
  CHECK(s.weight_age == 0);
  CHECK(s.weight_fairshare == 0);
  CHECK(s.weight_job_size == 7);
}

TEST_CASE("slurm.conf: errors name the file, the line and the key", "[replay][slurm_conf]") {
  auto msg = [](const std::string& text) {
    try {
      parse_slurm_conf(text, "bad.conf");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(msg("# ok\nPriorityMaxAge=7-x\n") ==
        std::string("bad.conf:2: PriorityMaxAge: '7-x' is not a Slurm time (MIN, MIN:SEC, "
                    "H:MIN:SEC, D-H, D-H:MIN or D-H:MIN:SEC)"));
  CHECK(msg("PriorityWeightAge=-3\n").rfind("bad.conf:1: PriorityWeightAge:", 0) == 0);
  CHECK(msg("\n\nSchedulerParameters=bf_interval=0\n")
            .rfind("bad.conf:3: SchedulerParameters=bf_interval:", 0) == 0);
  CHECK(msg("PriorityType=priority/fancy\n").find("priority/basic and priority/multifactor") !=
        std::string::npos);
  CHECK(msg("NodeName=a[1-2] CPUs=4\nNodeName=b1 CPUs=8\n").rfind("bad.conf:2: NodeName:", 0) == 0);
  CHECK(msg("Include other.conf\n").rfind("bad.conf:1: Include:", 0) == 0);
}

TEST_CASE("slurm.conf: Slurm's time values and host lists", "[replay][slurm_conf]") {
  CHECK(slurm_time_seconds("30") == 1800);
  CHECK(slurm_time_seconds("30:15") == 1815);
  CHECK(slurm_time_seconds("1:00:00") == 3600);
  CHECK(slurm_time_seconds("7-0") == 7 * 86400);
  CHECK(slurm_time_seconds("1-2:03") == 86400 + 2 * 3600 + 180);
  CHECK(slurm_time_seconds("1-2:03:04") == 86400 + 2 * 3600 + 184);
  CHECK(slurm_time_seconds("UNLIMITED") == -1);
  CHECK(slurm_time_seconds("x") == -2);
  CHECK(slurm_time_seconds("1:2:3:4") == -2);
  CHECK(slurm_hostlist_count("n[1-4,7],gpu01") == 6);
  CHECK(slurm_hostlist_count("rack[1-2]n[01-10]") == 20);
  CHECK(slurm_hostlist_count("a") == 1);
  CHECK(slurm_hostlist_count("a[3-1]") == -1);
}

TEST_CASE("slurm.conf: a file and its Include are read and checksummed", "[replay][slurm_conf]") {
  const std::string dir = "slurm_conf_include_test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir + "/slurm.conf") << "SchedulerType=sched/builtin\nInclude prio.conf\n";
    std::ofstream(dir + "/prio.conf") << "PriorityType=priority/basic\n";
  }
  const SlurmStack s = read_slurm_conf(dir + "/slurm.conf");
  CHECK_FALSE(s.backfill);
  CHECK_FALSE(s.multifactor);
  CHECK(s.sha256.size() == 64);
  CHECK(s.describe().find("scheduler=slurm priority=basic") == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("priority/basic with sched/builtin is FCFS without backfilling, start for start",
          "[replay][slurm_engine]") {
  std::vector<Job> jobs = lublin(64, 11, 1.3, 2000);
  // Slurm's limits are whole minutes and a job past its limit is killed: keep every run
  // within its request so that neither rule applies.
  for (Job& j : jobs) j.req_time = std::max(j.req_time, j.run);

  SimConfig fcfs;
  fcfs.machine = {64, 1, 0, Allocation::NODES};
  fcfs.policy = "fcfs";
  fcfs.backfill = Backfill::NONE;
  const SimResult ref = simulate(jobs, fcfs);
  // batch_sched_delay=0: the main scheduler runs at the submission itself.
  const SimResult got = replay_conf(
      "PriorityType=priority/basic\nSchedulerType=sched/builtin\n"
      "SchedulerParameters=batch_sched_delay=0\n",
      jobs, fcfs.machine);
  REQUIRE(got.summary.jobs == ref.summary.jobs);
  CHECK(starts(got) == starts(ref));
  CHECK(got.summary.avg_bsld == Approx(ref.summary.avg_bsld));

  // With Slurm's default delay of 3 s after a submission, no job starts earlier and none more
  // than a few seconds later per job queued before it.
  const SimResult delayed =
      replay_conf("PriorityType=priority/basic\nSchedulerType=sched/builtin\n", jobs, fcfs.machine);
  const auto a = starts(ref), b = starts(delayed);
  for (const auto& [id, t] : a) CHECK(b.at(id) >= t);
  CHECK(delayed.summary.avg_wait <= ref.summary.avg_wait + 3.0);
}

TEST_CASE("sched/backfill starts a job only where it delays no reservation of a job before it",
          "[replay][slurm_engine]") {
  const Machine m{1, 4, 0, Allocation::CORES};
  const std::string conf = "PriorityType=priority/basic\nSchedulerParameters=batch_sched_delay=0\n";
  // A runs on 2 of 4 cores until its limit at 100 (120: Slurm's limits are whole minutes); B
  // needs all 4 (blocked: the main scheduler stops there); C needs 2 for 50 s.
  {
    const std::vector<Job> jobs = {stack_job(1, 0, 100, 2, 100), stack_job(2, 1, 100, 4, 100),
                                   stack_job(3, 2, 50, 2, 60)};
    const auto s = starts(replay_conf(conf, jobs, m));
    // The backfill cycle 30 s after the first (at 0): C's 60 s limit ends before B's
    // reservation at 120.
    CHECK(s.at(1) == 0);
    CHECK(s.at(3) == 30);
    CHECK(s.at(2) == 100);
    // sched/builtin never backfills: C waits for B.
    const auto b = starts(replay_conf(conf + "SchedulerType=sched/builtin\n", jobs, m));
    CHECK(b.at(3) == 200);
  }
  {
    // C's limit of 120 s would overrun B's reservation: it waits behind B.
    const std::vector<Job> jobs = {stack_job(1, 0, 100, 2, 100), stack_job(2, 1, 100, 4, 100),
                                   stack_job(3, 2, 50, 2, 120)};
    const auto s = starts(replay_conf(conf, jobs, m));
    CHECK(s.at(2) == 100);
    CHECK(s.at(3) == 200);
  }
}

TEST_CASE("sched/backfill reserves whole bf_resolution slots of slurmctld's clock",
          "[replay][slurm_engine]") {
  const Machine m{1, 4, 0, Allocation::CORES};
  const std::string conf = "PriorityType=priority/basic\nSchedulerParameters=batch_sched_delay=0\n";
  // A runs from 10 on 2 of 4 cores, limit 180 s; B needs all 4 and is reserved from 190 in the
  // slot [180, 240); C, submitted at 50, is tested by the backfill cycle at 70 (cycles at 10,
  // 40, 70): its 120 s limit ends at 190, not after B's start, but inside the slot that the
  // reservation takes whole. Slurm leaves it waiting (slurmctld's DebugFlags=Backfill log shows
  // such jobs planned after the reservation); it starts when B ends at 290.
  const std::vector<Job> jobs = {stack_job(1, 10, 180, 2, 180), stack_job(2, 11, 100, 4, 100),
                                 stack_job(3, 50, 50, 2, 120)};
  const auto s = starts(replay_conf(conf, jobs, m));
  CHECK(s.at(1) == 10);
  CHECK(s.at(2) == 190);
  CHECK(s.at(3) == 290);
  // With the trace's time 0 at 10 s past a minute, the slots begin at 50, 110, 170, 230 of the
  // trace's time; with it at 50 s past, at 10, 70, 130, 190: B's reservation then begins at 190
  // itself and C fits before it.
  for (const auto& [past_minute, c_start] : {std::pair{10, 290.0}, std::pair{50, 70.0}}) {
    const auto e =
        starts(replay_conf(conf, jobs, m, 1'700'000'000 - 1'700'000'000 % 60 + past_minute));
    INFO("time 0 at " << past_minute << " s past a minute");
    CHECK(e.at(3) == c_start);
    CHECK(e.at(2) == 190);
  }
}

TEST_CASE("a job is killed at slurmctld's first time-limit check past its limit",
          "[replay][slurm_engine]") {
  const Machine m{1, 4, 0, Allocation::CORES};
  // A requests 61 s: Slurm's limit is 2 minutes. It would run 500 s; the check every 30 s from
  // the start of the replay (t = 10, the first submission) kills it at 10 + 30 k >= 5 + 120.
  const std::vector<Job> jobs = {stack_job(1, 10, 1, 1, 60), stack_job(2, 15, 500, 1, 61)};
  const SimResult r = replay_conf("SchedulerParameters=batch_sched_delay=0\n", jobs, m);
  REQUIRE(r.jobs.size() == 2);
  const auto& k = r.jobs[1].id == 2 ? r.jobs[1] : r.jobs[0];
  CHECK(k.start == 15);
  CHECK(k.end == 160);
  CHECK(k.killed == 1);
  CHECK(r.summary.killed == 1);
}

TEST_CASE("multifactor's job size factor with PriorityFavorSmall orders small jobs first",
          "[replay][slurm_engine]") {
  const Machine m{1, 4, 0, Allocation::CORES};
  // A fills the machine; B (4 cores) and C (1 core) wait; when A ends, the higher priority
  // starts first: C with PriorityFavorSmall, B without.
  const std::vector<Job> jobs = {stack_job(1, 0, 100, 4, 100), stack_job(2, 1, 10, 4, 100),
                                 stack_job(3, 2, 10, 1, 100)};
  const std::string base =
      "PriorityWeightJobSize=1000\nSchedulerType=sched/builtin\n"
      "SchedulerParameters=batch_sched_delay=0\n";
  const auto small = starts(replay_conf(base + "PriorityFavorSmall=YES\n", jobs, m));
  CHECK(small.at(3) == 100);
  CHECK(small.at(2) == 110);
  const auto large = starts(replay_conf(base, jobs, m));
  CHECK(large.at(2) == 100);
  CHECK(large.at(3) == 110);
}

TEST_CASE("the deployed-stack replay keeps the schedule invariants on a generated workload",
          "[replay][slurm_engine]") {
  std::vector<Job> jobs = lublin(32, 5, 1.6, 3000);
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].user = static_cast<int32_t>(i % 7);
  const Machine m{8, 4, 0, Allocation::CORES};
  for (const std::string conf :
       {"AccountingStorageType=accounting_storage/slurmdbd\nPriorityWeightAge=1000\n"
        "PriorityWeightFairshare=10000\nPriorityWeightJobSize=1000\nPriorityCalcPeriod=1\n",
        "AccountingStorageType=accounting_storage/slurmdbd\nPriorityWeightFairshare=10000\n"
        "PriorityFlags=NO_FAIR_TREE\nSchedulerParameters=bf_max_job_test=5,bf_resolution=600\n",
        "PriorityType=priority/basic\nSchedulerType=sched/builtin\n"}) {
    const SimResult r = replay_conf(conf, jobs, m);
    CHECK(r.summary.jobs + r.summary.skipped == static_cast<int64_t>(jobs.size()));
    std::vector<std::pair<double, int64_t>> ev;
    for (const auto& j : r.jobs) {
      CHECK(j.start >= j.submit);
      ev.emplace_back(j.start, j.procs);
      ev.emplace_back(j.end, -j.procs);
    }
    std::sort(ev.begin(), ev.end());
    int64_t busy = 0, peak = 0;
    for (const auto& [t, d] : ev) peak = std::max(peak, busy += d);
    CHECK(peak <= m.total_cores());
    // Deterministic.
    const SimResult again = replay_conf(conf, jobs, m);
    CHECK(starts(again) == starts(r));
    // priority/basic: every job one below the one submitted before it.
    if (conf.find("priority/basic") != std::string::npos) {
      std::vector<std::pair<int64_t, double>> by_prio;
      for (const auto& j : r.jobs) by_prio.emplace_back(-j.priority, j.submit);
      std::sort(by_prio.begin(), by_prio.end());
      for (size_t k = 1; k < by_prio.size(); ++k) {
        CHECK(by_prio[k].first == by_prio[k - 1].first + 1);
        CHECK(by_prio[k].second >= by_prio[k - 1].second);
      }
    }
  }
}

TEST_CASE(
    "run --slurm-conf: JSON and HDF5 name the scheduler and the file's checksum; bad "
    "files are usage errors naming file, line and key",
    "[replay][slurm_engine][cli]") {
  namespace fs = std::filesystem;
  const fs::path exe = fs::path(MLPRIO_BIN_DIR) / "mlprio-replay";
  if (!fs::exists(exe)) MLPRIO_SKIP(exe << " is not built");
  const fs::path dir = mlprio::test::scratch("mlprio_slurm_conf_cli_", "run");
  {
    std::ofstream(dir / "site.conf")
        << "PriorityWeightJobSize=1000\nSchedulerParameters=bf_interval=60,some_knob=1\n"
           "NodeName=n[1-16] CPUs=8\nPartitionName=batch Nodes=ALL Default=YES MaxTime=1-0\n"
           "PreemptMode=REQUEUE\n";
    std::ofstream(dir / "bad.conf") << "PriorityWeightAge=10\nPriorityMaxAge=soon\n";
  }
  auto run = [&](const std::string& args) {
    return mlprio::test::run_in(exe, dir, "true", args, "out.txt");
  };
  REQUIRE(run("generate --jobs 400 --seed 4 -q -o t.swf") == 0);
  REQUIRE(run("run --trace t.swf --slurm-conf site.conf --too-large skip --json --out r.h5") == 0);
  const std::string out = mlprio::test::slurp(dir / "out.txt");
  const std::string err = mlprio::test::slurp(dir / "err.txt");
  INFO(out << err);
  CHECK_THAT(out, Catch::Contains("\"policy\":\"site.conf\",\"backfill\":\"sched/backfill\"") &&
                      Catch::Contains("\"scheduler\":\"slurm\"") &&
                      Catch::Contains("\"slurm_conf_sha256\":\"" +
                                      file_sha256((dir / "site.conf").string()) + "\""));
  // One warning names what is not modelled.
  CHECK_THAT(err,
             Catch::Contains("not modelled, ignored: SchedulerParameters=some_knob PreemptMode"));
  h5::ReadFile f((dir / "r.h5").string(), "replay");
  CHECK(f.root().attr_int("nodes") == 16);
  CHECK(f.root().attr_int("cores_per_node") == 8);
  const h5::Group g = f.root().open_group("runs").open_group("run_0000");
  CHECK(g.attr_string("scheduler") == "slurm");
  CHECK(g.attr_string("backfill") == "sched/backfill");
  CHECK(g.attr_string("slurm_conf_sha256") == file_sha256((dir / "site.conf").string()));
  CHECK(g.attr_int("jobs") + g.attr_int("skipped") == 400);
  CHECK(g.attr_int("jobs") > 300);
  // Each job's priority when it started, as sprio shows it; no SITE without the plugin.
  const std::vector<JobOutcome> rows = g.read_table("jobs", job_table_type());
  REQUIRE(static_cast<int64_t>(rows.size()) == g.attr_int("jobs"));
  CHECK(std::all_of(rows.begin(), rows.end(), [](const JobOutcome& o) { return o.priority >= 1; }));
  CHECK(std::all_of(rows.begin(), rows.end(), [](const JobOutcome& o) { return o.site == 0; }));

  CHECK(run("run --trace t.swf --slurm-conf bad.conf") == 2);
  CHECK_THAT(mlprio::test::slurp(dir / "err.txt"),
             Catch::Contains("bad.conf:2: PriorityMaxAge: 'soon' is not a Slurm time"));
  CHECK(run("run --trace t.swf --slurm-conf missing.conf") == 2);
  CHECK_THAT(mlprio::test::slurp(dir / "err.txt"), Catch::Contains("missing.conf: cannot read"));
  CHECK(run("run --trace t.swf --slurm-conf site.conf --time-parallel --segments 2") == 2);
  // A release whose backfill rounds reservations' ends down; a malformed one is refused.
  CHECK(run("run --trace t.swf --slurm-conf site.conf --too-large skip --slurm-release 22.05") ==
        0);
  CHECK(run("run --trace t.swf --slurm-conf site.conf --slurm-release 2205") == 2);
  CHECK_THAT(mlprio::test::slurp(dir / "err.txt"),
             Catch::Contains("--slurm-release '2205': a Slurm release is YY.MM"));
  // A sweep replays the file as run does: the same run record, beside the --policy tasks.
  REQUIRE(run("run --trace t.swf --slurm-conf site.conf --too-large skip --window 100:200 "
              "--json") == 0);
  std::string one = mlprio::test::slurp(dir / "out.txt");
  one = one.substr(one.find('[') + 1);
  one = one.substr(0, one.rfind(']'));
  REQUIRE(run("sweep --trace t.swf --slurm-conf site.conf --policy fcfs --too-large skip "
              "--window 100:200 --json --no-progress --out s.h5") == 0);
  CHECK_THAT(mlprio::test::slurp(dir / "out.txt"),
             Catch::Contains("\"backfill\":\"easy\"") && Catch::Contains(one));
  CHECK_THAT(mlprio::test::slurp(dir / "err.txt"),
             Catch::Contains("--slurm-conf site.conf: not modelled, ignored:"));
  fs::remove_all(dir);
}

TEST_CASE(
    "SITE sees the ended jobs site_factor/mlprio's live history has learned: none with "
    "history_period_ms=0, whatever the schedule",
    "[replay][slurm_engine][cli]") {
  namespace fs = std::filesystem;
  const fs::path replay = built_program("mlprio-replay"), trainer = built_program("mlprio-model");
  if (replay.empty() || trainer.empty()) MLPRIO_SKIP("mlprio-replay and mlprio-model are needed");
  const fs::path dir = mlprio::test::scratch("mlprio_slurm_live_history_", "run");
  REQUIRE(mlprio::test::run_in(replay, dir, "true",
                               "generate --jobs 1500 --seed 9 --users 8 -q -o t.swf") == 0);
  // A model whose prediction is the user's last two runs (capped by the request).
  REQUIRE(mlprio::test::run_in(trainer, dir, "true",
                               "train --trace t.swf --kind formula -o " + (dir / "m.json").string(),
                               "train.txt") == 0);
  // Two schedulers (so two different schedules) under each history period.
  auto sites = [&](const std::string& scheduler, int64_t period_ms) {
    const std::string name = scheduler + std::to_string(period_ms) + ".conf";
    std::ofstream(dir / name) << "SchedulerType=sched/" << scheduler
                              << "\nPrioritySiteFactorPlugin=site_factor/mlprio\n"
                                 "PrioritySiteFactorParameters=model="
                              << (dir / "m.json").string() << ",history_period_ms=" << period_ms
                              << "\n";
    REQUIRE(mlprio::test::run_in(replay, dir, "true",
                                 "run --trace t.swf --slurm-conf " + name +
                                     " --too-large skip --out " + name + ".h5") == 0);
    h5::ReadFile f((dir / (name + ".h5")).string(), "replay");
    std::map<int64_t, int64_t> site;
    for (const JobOutcome& o :
         f.root().open_group("runs").open_group("run_0000").read_table("jobs", job_table_type()))
      site[o.id] = o.site;
    return site;
  };
  const auto snap_a = sites("backfill", 0), snap_b = sites("builtin", 0);
  const auto live_a = sites("backfill", 1000), live_b = sites("builtin", 1000);
  REQUIRE(snap_a.size() > 1000);
  REQUIRE(snap_a.size() == live_a.size());
  // Without live history each job's SITE is its own, whatever ran before it.
  CHECK(snap_a == snap_b);
  // With it, the jobs that ended before a submission change that job's SITE, and the two
  // schedules end different jobs first.
  CHECK(live_a != snap_a);
  CHECK(live_a != live_b);
  fs::remove_all(dir);
}

TEST_CASE(
    "SITE of a job that gave no limit is scored on the limit job_submit/mlprio filled, as "
    "slurmctld's job record holds it",
    "[replay][slurm_engine][cli]") {
  namespace fs = std::filesystem;
  const fs::path replay = built_program("mlprio-replay"), trainer = built_program("mlprio-model");
  if (replay.empty() || trainer.empty()) MLPRIO_SKIP("mlprio-replay and mlprio-model are needed");
  const fs::path dir = mlprio::test::scratch("mlprio_slurm_filled_site_", "run");
  auto run = [&](const std::string& exe_args, const fs::path& exe) {
    return mlprio::test::run_in(exe, dir, "true", exe_args, "out.txt");
  };
  REQUIRE(run("generate --jobs 800 --seed 12 --users 6 --req-time factor -q -o with.swf", replay) ==
          0);
  REQUIRE(run("train --trace with.swf --kind formula -o " + (dir / "m.json").string(), trainer) ==
          0);
  // The same jobs without a limit: job_submit/mlprio fills one for each.
  Trace with = load_trace((dir / "with.swf").string());
  std::vector<Job> bare = with.jobs;
  for (Job& j : bare) j.req_time = -1;
  {
    std::ofstream out(dir / "bare.swf");
    write_swf(out, with.header, bare);
  }
  const std::string params =
      "PrioritySiteFactorParameters=model=" + (dir / "m.json").string() + ",history_period_ms=0\n";
  std::ofstream(dir / "filled.conf") << "PrioritySiteFactorPlugin=site_factor/mlprio\n"
                                     << params << "JobSubmitPlugins=mlprio\n";
  std::ofstream(dir / "site.conf") << "PrioritySiteFactorPlugin=site_factor/mlprio\n" << params;
  auto jobs_of = [&](const std::string& h5) {
    h5::ReadFile f((dir / h5).string(), "replay");
    return f.root().open_group("runs").open_group("run_0000").read_table("jobs", job_table_type());
  };
  REQUIRE(run("run --trace bare.swf --slurm-conf filled.conf --too-large skip --out a.h5",
              replay) == 0);
  const std::vector<JobOutcome> a = jobs_of("a.h5");
  // The jobs again, now asking for exactly the limits that were filled (the `estimate` column).
  std::map<int64_t, double> filled;
  for (const auto& o : a) filled[o.id] = o.estimate;
  std::vector<Job> asked = bare;
  for (Job& j : asked)
    if (filled.count(j.id)) j.req_time = filled[j.id];
  {
    std::ofstream out(dir / "asked.swf");
    write_swf(out, with.header, asked);
  }
  REQUIRE(run("run --trace asked.swf --slurm-conf site.conf --too-large skip --out b.h5", replay) ==
          0);
  const std::vector<JobOutcome> b = jobs_of("b.h5");
  REQUIRE(a.size() > 500);
  REQUIRE(a.size() == b.size());
  std::map<int64_t, int64_t> site_a, site_b;
  for (const auto& o : a) site_a[o.id] = o.site;
  for (const auto& o : b) site_b[o.id] = o.site;
  CHECK(site_a == site_b);
  fs::remove_all(dir);
}
