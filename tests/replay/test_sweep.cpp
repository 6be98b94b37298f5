// The MPI-free half of `mlprio-replay sweep` (replay/dist/lib/sweep.cpp, sweep_config.cpp) on
// hand-made traces: random windows drawn without replacement (100x1024 on hpc2n_subset used to
// fail with "the sweep lists the same task twice"), a clear error when more distinct windows are
// asked for than exist, a resume of 5000 tasks read through the plan's one task index (it used
// to be rebuilt for every journal line), journal lines whose fields do not read back, a journal
// torn by a kill (header or last line), and sweep
// config numbers that are not finite or not exact. The MPI tests (tests/mpi) cover the rest.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "../support/process.hpp"
#include "mlprio/jobs/trace.hpp"
#include "mlprio/replay/dist/sweep_run.hpp"
#include "mlprio/replay/dist/sweep_windows.hpp"

using namespace mlprio;
using namespace mlprio::replay::dist;
namespace fs = std::filesystem;

namespace {

fs::path sweep_scratch(const std::string& name) {
  return mlprio::test::scratch("mlprio_sweep_", name);
}

// n one-processor jobs of 10 s, one a second, on a 4-processor machine.
std::string small_trace(const fs::path& dir, int64_t n) {
  const fs::path p = dir / "t.swf";
  std::ofstream out(p);
  out << "; MaxNodes: 4\n; MaxProcs: 4\n";
  for (int64_t i = 1; i <= n; ++i)
    out << i << " " << i << " 0 10 1 -1 -1 1 20 -1 1 1 1 -1 1 -1 -1 -1\n";
  return p.string();
}

SweepSpec random_spec(const std::string& trace, int64_t count, int64_t len, uint64_t seed) {
  SweepSpec s;
  s.traces = {trace};
  s.policies = {"fcfs"};
  s.backfills = {"none"};
  s.random_count = count;
  s.random_len = len;
  s.seed = seed;
  return s;
}

// The plain draw of earlier versions (with replacement), for comparison.
std::vector<int64_t> plain_draw(int64_t count, int64_t positions, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; ++i)
    out.push_back(static_cast<int64_t>(rng.below(static_cast<uint64_t>(positions))));
  return out;
}

}  // namespace

TEST_CASE("random windows are drawn without replacement", "[replay][sweep][windows]") {
  // 10 windows of 8 jobs in 20 jobs: 13 starts exist, and the plain draw repeats one.
  const auto plain = plain_draw(10, 13, 1);
  REQUIRE(std::set<int64_t>(plain.begin(), plain.end()).size() < plain.size());
  const auto starts = draw_window_starts(10, 8, 20, 1);
  CHECK(starts.size() == 10);
  CHECK(std::set<int64_t>(starts.begin(), starts.end()).size() == 10);
  for (int64_t s : starts) CHECK((s >= 0 && s <= 12));
  // Up to the first repeat the draw is the plain one, so earlier sweeps keep their windows.
  CHECK(starts.front() == plain.front());
  // Without a repeat it is exactly the plain draw (these are the MPI tests' pinned values).
  CHECK(draw_window_starts(5, 100, 10000, 42) == std::vector<int64_t>{6260, 7413, 6159, 143, 7353});
  CHECK(draw_window_starts(5, 100, 10000, 42) == plain_draw(5, 9901, 42));
  // Every start exists once when all are asked for; the same seed gives the same order.
  auto all = draw_window_starts(13, 8, 20, 5);
  CHECK(all == draw_window_starts(13, 8, 20, 5));
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 13; ++i) CHECK(all[static_cast<size_t>(i)] == i);
  // Starts already taken (explicit windows) are avoided.
  const auto avoid = draw_window_starts(11, 8, 20, 5, {0, 12, 99});
  CHECK(std::count(avoid.begin(), avoid.end(), 0) == 0);
  CHECK(std::count(avoid.begin(), avoid.end(), 12) == 0);
}

TEST_CASE("asking for more distinct windows than exist is a clear error",
          "[replay][sweep][windows]") {
  CHECK_THROWS_WITH(draw_window_starts(14, 8, 20, 1),
                    Catch::Contains("only 13 distinct windows of 8 jobs fit a trace of 20 jobs") &&
                        Catch::Contains("ask for at most 13"));
  CHECK_THROWS_WITH(draw_window_starts(12, 8, 20, 1, {3, 4}),
                    Catch::Contains("2 of them already given by --window") &&
                        Catch::Contains("ask for at most 11"));
  CHECK_THROWS_AS(draw_window_starts(1, 21, 20, 1), SweepError);
}

TEST_CASE("a sweep whose random windows would collide builds distinct tasks",
          "[replay][sweep][windows]") {
  const fs::path dir = sweep_scratch("collide");
  const std::string trace = small_trace(dir, 20);
  // As `--windows 10x8 --seed 1`: this used to stop with "the sweep lists the same task twice".
  const SweepPlan plan = make_sweep_plan(random_spec(trace, 10, 8, 1));
  REQUIRE(plan.tasks.size() == 10);
  std::set<int64_t> starts;
  for (const auto& t : plan.tasks) starts.insert(t.window_start);
  CHECK(starts.size() == 10);
  CHECK(plan.task_ids.size() == 10);
  // An explicit window of the same length is never drawn again.
  SweepSpec with_explicit = random_spec(trace, 12, 8, 1);
  with_explicit.windows = {{0, 8}};
  CHECK(make_sweep_plan(with_explicit).tasks.size() == 13);
  // One window too many.
  CHECK_THROWS_WITH(make_sweep_plan(random_spec(trace, 14, 8, 1)),
                    Catch::Contains("only 13 distinct windows"));
  // A window given twice is still refused, and the message says how it can happen.
  SweepSpec twice = random_spec(trace, 0, 0, 1);
  twice.windows = {{2, 5}, {2, 5}};
  CHECK_THROWS_WITH(make_sweep_plan(twice),
                    Catch::Contains("the same task twice") && Catch::Contains("window=2:5"));
  fs::remove_all(dir);
}

TEST_CASE("resuming 5000 tasks reads each journal line once through the plan's index",
          "[replay][sweep][journal]") {
  const fs::path dir = sweep_scratch("resume");
  const std::string trace = small_trace(dir, 5010);
  SweepSpec spec = random_spec(trace, 0, 0, 1);
  for (int64_t i = 0; i < 5000; ++i) spec.windows.emplace_back(i, 10);
  SweepPlan plan = make_sweep_plan(spec);
  REQUIRE(plan.tasks.size() == 5000);
  REQUIRE(plan.task_ids.size() == 5000);
  for (const auto& t : plan.tasks) REQUIRE(find_task(plan, t.key) == t.id);
  CHECK(find_task(plan, "trace=nowhere") == -1);

  // A complete journal written as the sweep writes it (no replay needed): a start and a result
  // per task, the results' numbers distinct per task, plus a torn line.
  const std::string journal = (dir / "s.h5.journal").string();
  { Journal j(journal, plan); }  // writes the header
  {
    // Appended here without the journal's fdatasync per record (10,000 of them).
    std::ofstream j(journal, std::ios::app);
    for (const auto& t : plan.tasks) {
      TaskResult r;
      r.task = t.id;
      r.ok = true;
      r.summary.jobs = 10;
      r.summary.avg_wait = 0.5 * static_cast<double>(t.id);
      j << started_line(plan, t.id, 0) << result_line(plan, r);
    }
    j << "R\ttorn";
  }
  SweepOutcome out;
  {
    Journal j(journal, plan);
    REQUIRE(j.done().size() == 5000);
    CHECK(j.interrupted().empty());
    CHECK(resume_tasks(plan, j, out).empty());
  }
  CHECK(out.resumed == 5000);
  for (const auto& t : plan.tasks) {
    const TaskResult& r = out.results[static_cast<size_t>(t.id)];
    REQUIRE(r.ok);
    CHECK(r.summary.avg_wait == 0.5 * static_cast<double>(t.id));
  }
  // The reader looks keys up in plan.task_ids (built once by make_sweep_plan), not in an index
  // of its own: a key taken out of it is no longer recognised.
  const std::string gone = plan.tasks[1234].key;
  plan.task_ids.erase(gone);
  {
    Journal j(journal, plan);
    CHECK(j.done().size() == 4999);
    CHECK(j.done().count(1234) == 0);
  }
  fs::remove_all(dir);
}

TEST_CASE("journal records whose fields do not read back are ignored, not fatal",
          "[replay][sweep][journal]") {
  const fs::path dir = sweep_scratch("fields");
  SweepSpec spec = random_spec(small_trace(dir, 20), 0, 0, 1);
  spec.windows = {{0, 10}};
  const SweepPlan plan = make_sweep_plan(spec);
  TaskResult r;
  r.task = 0;
  r.ok = true;
  r.summary.jobs = 10;
  const std::string good = result_line(plan, r);
  REQUIRE(Journal::parse_result(plan, good));
  // Sealed (so the checksum passes) but with a count or a number that is not one: std::stoll
  // used to throw a bare "stoll" out of the reader.
  const auto seal_body = [&](std::string body) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (unsigned char c : body) h = (h ^ c) * 0x100000001b3ULL;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    return body + "\t" + hex + "\n";
  };
  std::string body = good.substr(0, good.rfind('\t'));
  const auto field = [&](const std::string& b, size_t k, const std::string& v) {
    std::vector<std::string> f;
    size_t at = 0;
    for (size_t next; (next = b.find('\t', at)) != std::string::npos; at = next + 1)
      f.push_back(b.substr(at, next - at));
    f.push_back(b.substr(at));
    f.at(k) = v;
    std::string out;
    for (const auto& x : f) out += (out.empty() ? "" : "\t") + x;
    return out;
  };
  REQUIRE(Journal::parse_result(plan, seal_body(body)));
  for (const auto& [k, v] : std::vector<std::pair<size_t, std::string>>{
           {3, "ten"}, {3, ""}, {4, "99999999999999999999"}, {7, "0x1p0junk"}, {8, ""}}) {
    INFO("field " << k << " = '" << v << "'");
    CHECK_FALSE(Journal::parse_result(plan, seal_body(field(body, k, v))));
  }
  fs::remove_all(dir);
}

TEST_CASE("a journal torn by a kill: its header is started again, its last line ended",
          "[replay][sweep][journal]") {
  const fs::path dir = sweep_scratch("torn");
  SweepSpec spec = random_spec(small_trace(dir, 40), 0, 0, 1);
  spec.windows = {{0, 10}, {10, 10}, {20, 10}};
  const SweepPlan plan = make_sweep_plan(spec);
  const auto slurp = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const auto put = [](const std::string& p, const std::string& text) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
  };
  const auto result = [&](int64_t task) {
    TaskResult r;
    r.task = task;
    r.ok = true;
    r.summary.jobs = 10;
    r.summary.avg_wait = 1.5 + static_cast<double>(task);
    return result_line(plan, r);
  };
  const std::string journal = (dir / "s.h5.journal").string();
  { Journal j(journal, plan); }
  const std::string header = slurp(journal);
  REQUIRE(header.size() > 20);
  REQUIRE(header.back() == '\n');

  // Every cut of the header (a kill or a full disk while it was written) starts it again.
  for (size_t cut = 1; cut < header.size(); cut += 7) {
    INFO("header cut at " << cut);
    put(journal, header.substr(0, cut));
    {
      Journal j(journal, plan);
      CHECK(j.done().empty());
      j.append(result(1));
    }
    CHECK(slurp(journal) == header + result(1));
  }
  // A first line that is not a prefix of this sweep's header is another sweep's: refused.
  put(journal, "MLPRIO-SOMETHING-ELSE\n");
  CHECK_THROWS_AS(Journal(journal, plan), SweepError);
  put(journal, header.substr(0, 10) + "X");
  CHECK_THROWS_AS(Journal(journal, plan), SweepError);

  // A last record cut mid-write: ignored, and ended before the next append, which used to be
  // glued onto it and lost with it (task 2 ran again on every resume). Cut just before its
  // newline, the record is whole (its checksum holds) and is kept.
  const std::string r0 = result(0), r1 = result(1);
  for (size_t cut : {size_t{1}, r1.size() / 2, r1.size() - 1}) {
    INFO("record cut at " << cut);
    put(journal, header + r0 + r1.substr(0, cut));
    const size_t whole = cut == r1.size() - 1 ? 1 : 0;
    {
      Journal j(journal, plan);
      CHECK(j.done().size() == 1 + whole);
      CHECK(j.done().count(0) == 1);
      j.append(result(2));
    }
    Journal again(journal, plan);
    CHECK(again.done().size() == 2 + whole);
    REQUIRE(again.done().count(2) == 1);
    CHECK(again.done().at(2).summary.avg_wait == 3.5);
    CHECK(slurp(journal).back() == '\n');
  }
  fs::remove_all(dir);
}

TEST_CASE("sweep config numbers must be finite and exact", "[replay][sweep][config]") {
  const fs::path dir = sweep_scratch("config");
  const auto read = [&](const std::string& text) {
    std::ofstream(dir / "s.toml") << text;
    SweepSpec spec;
    apply_sweep_config((dir / "s.toml").string(), spec);
    return spec;
  };
  CHECK(read("[multifactor]\nweight_age = [1_000, 2.5e3]\n").weight_age ==
        std::vector<double>{1000, 2500});
  CHECK(read("[random_windows]\nseed = 9007199254740991\n").seed == 9007199254740991ULL);
  for (const char* bad :
       {"[multifactor]\nweight_age = nan\n", "[multifactor]\nweight_age = inf\n",
        "[multifactor]\nweight_age = [1, -inf]\n", "[multifactor]\nweight_age = 0x10\n"}) {
    INFO(bad);
    CHECK_THROWS_WITH(read(bad),
                      Catch::Contains("s.toml:2") && Catch::Contains("cannot read value"));
  }
  CHECK_THROWS_WITH(read("[multifactor]\nweight_age = 1e999\n"),
                    Catch::Contains("s.toml:2") && Catch::Contains("out of range"));
  // 2^53 + 1 is not a double: the seed would silently have been 2^53.
  CHECK_THROWS_WITH(read("[random_windows]\nseed = 9007199254740993\n"),
                    Catch::Contains("s.toml:2") && Catch::Contains("9007199254740991"));
  SweepSpec spec;
  CHECK_THROWS_WITH(apply_sweep_config((dir / "missing.toml").string(), spec),
                    Catch::Contains("missing.toml") && Catch::Contains("No such file"));
  fs::remove_all(dir);
}

TEST_CASE("the sweep config maps every key onto the SweepSpec", "[replay][sweep][config]") {
  const fs::path dir = sweep_scratch("config_keys");
  std::ofstream(dir / "s.toml") << R"(# a comment line
traces = ["a.swf", "b.swf"]   # trailing comment
policies = ["fcfs", "sjf", "ml"]
backfill = ["easy", "none"]
windows = ["0:100", "1981:1024"]
estimate = "model:m.json"
estimate_quantile = "point"
correction = "tsafrir"
backfill_order = "sjbf"
allocation = "cores"
too_large = "skip"
kill_at_limit = true
per_job = true
slurm_confs = ["stock.conf", "mlprio.conf"]
slurm_release = "22.05"

[random_windows]
count = 12
len = 1_024
seed = 7

[machine]
nodes = 128
cores_per_node = 32

[ml]
age_weight = 0.5
starvation_limit = 86400
size_weight = -1.5
fail_weight = 2
request_weight = 0.5
fairshare_weight = 0.75

[multifactor]
weight_age = [100, 200]
weight_job_size = 300
weight_fairshare = [1e4]
max_age = [3600, 7200]
decay_half_life = 86400
favor_small = true
)";
  SweepSpec spec;
  apply_sweep_config((dir / "s.toml").string(), spec);
  CHECK(spec.traces == std::vector<std::string>{"a.swf", "b.swf"});
  CHECK(spec.policies == std::vector<std::string>{"fcfs", "sjf", "ml"});
  CHECK(spec.backfills == std::vector<std::string>{"easy", "none"});
  CHECK(spec.windows == std::vector<std::pair<int64_t, int64_t>>{{0, 100}, {1981, 1024}});
  CHECK(spec.replay.estimate == "model:m.json");
  CHECK(spec.replay.estimate_quantile == std::optional<std::string>("point"));
  CHECK(spec.replay.correction == std::optional<std::string>("tsafrir"));
  CHECK(spec.replay.backfill_order == std::optional<std::string>("sjbf"));
  CHECK(spec.replay.allocation == "cores");
  CHECK(spec.replay.too_large == "skip");
  CHECK(spec.replay.kill_at_limit);
  CHECK(spec.per_job);
  CHECK(spec.slurm_confs == std::vector<std::string>{"stock.conf", "mlprio.conf"});
  CHECK(spec.slurm_release == "22.05");
  CHECK(spec.random_count == 12);
  CHECK(spec.random_len == 1024);
  CHECK(spec.seed == 7u);
  CHECK(spec.replay.nodes == 128);
  CHECK(spec.replay.cores_per_node == 32);
  CHECK(spec.replay.ml_age_weight == std::optional<double>(0.5));
  CHECK(spec.replay.ml_starvation_limit == std::optional<double>(86400));
  CHECK(spec.replay.ml_size_weight == std::optional<double>(-1.5));
  CHECK(spec.replay.ml_fail_weight == std::optional<double>(2));
  CHECK(spec.replay.ml_request_weight == std::optional<double>(0.5));
  CHECK(spec.replay.ml_fairshare_weight == std::optional<double>(0.75));
  CHECK(spec.weight_age == std::vector<double>{100, 200});
  CHECK(spec.weight_job_size == std::vector<double>{300});
  CHECK(spec.weight_fairshare == std::vector<double>{10000});
  CHECK(spec.max_age == std::vector<double>{3600, 7200});
  CHECK(spec.decay_half_life == std::vector<double>{86400});
  CHECK(spec.favor_small);
  fs::remove_all(dir);
}

TEST_CASE("sweep config values replace the spec's, keys left out keep it",
          "[replay][sweep][config]") {
  const fs::path dir = sweep_scratch("config_keep");
  std::ofstream(dir / "s.toml") << "windows = [\"5:10\"]\n\n[ml]\nfail_weight = 1\n";
  SweepSpec spec;
  spec.traces = {"kept.swf"};
  spec.windows = {{1, 2}, {3, 4}};
  apply_sweep_config((dir / "s.toml").string(), spec);
  CHECK(spec.traces == std::vector<std::string>{"kept.swf"});
  CHECK(spec.windows ==
        std::vector<std::pair<int64_t, int64_t>>{{5, 10}});  // replaced, not appended
  CHECK(spec.policies == std::vector<std::string>{"fcfs"});
  CHECK(spec.replay.estimate == "request");
  CHECK_FALSE(spec.replay.estimate_quantile.has_value());
  CHECK_FALSE(spec.replay.ml_age_weight.has_value());
  CHECK(spec.replay.ml_fail_weight == std::optional<double>(1));
  CHECK(spec.weight_age == std::vector<double>{1000});
  fs::remove_all(dir);
}

TEST_CASE("sweep config errors name the file, the line and the key", "[replay][sweep][config]") {
  const fs::path dir = sweep_scratch("config_errors");
  const auto read = [&](const std::string& text) {
    std::ofstream(dir / "s.toml") << text;
    SweepSpec spec;
    apply_sweep_config((dir / "s.toml").string(), spec);
    return spec;
  };
  SECTION("an unknown top-level key") {
    CHECK_THROWS_WITH(read("traces = [\"a.swf\"]\npolicy = [\"fcfs\"]\n"),
                      Catch::Contains("s.toml:2") && Catch::Contains("unknown key 'policy'") &&
                          Catch::Contains("policies"));
  }
  SECTION("an unknown table") {
    CHECK_THROWS_WITH(read("# header\n\n[machines]\nnodes = 4\n"),
                      Catch::Contains("s.toml:3") && Catch::Contains("unknown table [machines]") &&
                          Catch::Contains("[machine]"));
  }
  SECTION("a table header that does not close") {
    CHECK_THROWS_WITH(read("[machine\n"),
                      Catch::Contains("s.toml:1") && Catch::Contains("[multifactor]"));
  }
  SECTION("an unknown key inside each table") {
    CHECK_THROWS_WITH(
        read("[machine]\nnodes = 4\ngpus = 8\n"),
        Catch::Contains("s.toml:3") && Catch::Contains("unknown key 'gpus' in [machine]"));
    CHECK_THROWS_WITH(
        read("[random_windows]\nlength = 8\n"),
        Catch::Contains("s.toml:2") && Catch::Contains("unknown key 'length' in [random_windows]"));
    CHECK_THROWS_WITH(read("[ml]\nage = 1\n"),
                      Catch::Contains("s.toml:2") && Catch::Contains("unknown key 'age' in [ml]"));
    CHECK_THROWS_WITH(read("[multifactor]\nweight_qos = 1\n"),
                      Catch::Contains("s.toml:2") &&
                          Catch::Contains("unknown key 'weight_qos' in [multifactor]"));
  }
  SECTION("a key of one table is unknown in another") {
    CHECK_THROWS_WITH(
        read("[ml]\nnodes = 4\n"),
        Catch::Contains("s.toml:2") && Catch::Contains("unknown key 'nodes' in [ml]"));
    CHECK_THROWS_WITH(
        read("[machine]\ntraces = [\"a.swf\"]\n"),
        Catch::Contains("s.toml:2") && Catch::Contains("unknown key 'traces' in [machine]"));
  }
  SECTION("a line that is not key = value") {
    CHECK_THROWS_WITH(read("traces\n"),
                      Catch::Contains("s.toml:1") && Catch::Contains("key = value"));
    CHECK_THROWS_WITH(read("estimate =\n"),
                      Catch::Contains("s.toml:1") && Catch::Contains("missing value"));
    CHECK_THROWS_WITH(read("traces = [\"a.swf\",\n"),
                      Catch::Contains("s.toml:1") && Catch::Contains("close on the same line"));
  }
  SECTION("a value of the wrong type") {
    CHECK_THROWS_WITH(read("traces = [1, 2]\n"),
                      Catch::Contains("s.toml:1") && Catch::Contains("traces takes strings"));
    CHECK_THROWS_WITH(read("policies = \"fcfs\"\nbackfill = [true]\n"),
                      Catch::Contains("s.toml:2") && Catch::Contains("backfill takes strings"));
    CHECK_THROWS_WITH(read("estimate = [\"request\", \"actual\"]\n"),
                      Catch::Contains("s.toml:1") && Catch::Contains("estimate takes one string"));
    CHECK_THROWS_WITH(
        read("estimate_quantile = 0.9\n"),
        Catch::Contains("s.toml:1") && Catch::Contains("estimate_quantile takes strings"));
    CHECK_THROWS_WITH(
        read("kill_at_limit = \"yes\"\n"),
        Catch::Contains("s.toml:1") && Catch::Contains("kill_at_limit takes true or false"));
    CHECK_THROWS_WITH(read("per_job = 1\n"), Catch::Contains("s.toml:1") &&
                                                 Catch::Contains("per_job takes true or false"));
    CHECK_THROWS_WITH(read("[machine]\nnodes = \"64\"\n"),
                      Catch::Contains("s.toml:2") && Catch::Contains("nodes takes numbers"));
    CHECK_THROWS_WITH(
        read("[machine]\nnodes = 1.5\n"),
        Catch::Contains("s.toml:2") && Catch::Contains("nodes takes one whole number"));
    CHECK_THROWS_WITH(
        read("[random_windows]\ncount = [1, 2]\n"),
        Catch::Contains("s.toml:2") && Catch::Contains("count takes one whole number"));
    CHECK_THROWS_WITH(read("[random_windows]\nlen = -5\n"),
                      Catch::Contains("s.toml:2") && Catch::Contains("len takes one whole number"));
    CHECK_THROWS_WITH(
        read("[ml]\nage_weight = [1, 2]\n"),
        Catch::Contains("s.toml:2") && Catch::Contains("age_weight takes one number"));
    CHECK_THROWS_WITH(read("[ml]\nfail_weight = false\n"),
                      Catch::Contains("s.toml:2") && Catch::Contains("fail_weight takes numbers"));
    CHECK_THROWS_WITH(
        read("[multifactor]\nmax_age = []\n"),
        Catch::Contains("s.toml:2") && Catch::Contains("max_age needs at least one number"));
    CHECK_THROWS_WITH(
        read("[multifactor]\nfavor_small = [true, false]\n"),
        Catch::Contains("s.toml:2") && Catch::Contains("favor_small takes true or false"));
    CHECK_THROWS_WITH(read("[multifactor]\nweight_age = [\"1000\"]\n"),
                      Catch::Contains("s.toml:2") && Catch::Contains("weight_age takes numbers"));
    CHECK_THROWS_WITH(read("policies = [fcfs]\n"),
                      Catch::Contains("s.toml:1") && Catch::Contains("cannot read value 'fcfs'"));
  }
  SECTION("a window that does not read") {
    CHECK_THROWS_WITH(read("\nwindows = [\"0:100\", \"100\"]\n"),
                      Catch::Contains("s.toml:2") && Catch::Contains("window '100'") &&
                          Catch::Contains("START:LEN"));
    CHECK_THROWS_WITH(read("windows = [\"5:0\"]\n"),
                      Catch::Contains("s.toml:1") && Catch::Contains("window '5:0'"));
  }
  SECTION("a count above the sweep's task bound") {
    CHECK_THROWS_WITH(
        read("[random_windows]\ncount = 1e12\n"),
        Catch::Contains("s.toml:2") && Catch::Contains("count takes one whole number"));
  }
  fs::remove_all(dir);
}
