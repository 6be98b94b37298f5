// Rows handed to a ResultSink while the run goes (so a streamed replay writing --out keeps
// memory that follows the queue): the sink must receive exactly the jobs and series a run without
// one keeps, in the same order, and the run must keep none of them itself; RunFileWriter must
// write the file write_runs_hdf5 writes, table by table.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "../support/same_bits.hpp"
#include "mlprio/io/hdf5.hpp"
#include "mlprio/jobs/lublin.hpp"
#include "mlprio/replay/output.hpp"
#include "mlprio/replay/simulator.hpp"

using mlprio::test::same_bits;

using namespace mlprio;
using namespace mlprio::replay;
namespace fs = std::filesystem;

namespace {

// More jobs than one sink block (65536 rows), so rows arrive in several blocks.
std::vector<Job> sink_workload() {
  LublinOptions o;
  o.nodes = 256;
  o.seed = 11;
  o.req_time = LublinReqTime::FACTOR;
  std::vector<Job> jobs = generate_lublin(o, 150000);
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].user = static_cast<int32_t>(i % 13);
  return jobs;
}

SimConfig config() {
  SimConfig cfg;
  cfg.machine.nodes = 256;
  cfg.machine.cores_per_node = 1;
  cfg.backfill = Backfill::EASY;
  cfg.record_jobs = true;
  cfg.record_series = true;
  return cfg;
}

bool same_outcome(const JobOutcome& a, const JobOutcome& b) {
  return a.id == b.id && a.user == b.user && same_bits(a.submit, b.submit) &&
         same_bits(a.start, b.start) && same_bits(a.end, b.end) && same_bits(a.wait, b.wait) &&
         same_bits(a.run, b.run) && same_bits(a.bsld, b.bsld) &&
         same_bits(a.estimate, b.estimate) && a.procs == b.procs && a.killed == b.killed;
}

struct Collect final : ResultSink {
  std::vector<JobOutcome> jobs_seen;
  TimeSeries series_seen;
  int job_blocks = 0, series_blocks = 0;
  void jobs(std::span<const JobOutcome> rows) override {
    ++job_blocks;
    jobs_seen.insert(jobs_seen.end(), rows.begin(), rows.end());
  }
  void series(const TimeSeries& s, size_t n) override {
    ++series_blocks;
    series_seen.time.insert(series_seen.time.end(), s.time.begin(), s.time.begin() + n);
    series_seen.queue_length.insert(series_seen.queue_length.end(), s.queue_length.begin(),
                                    s.queue_length.begin() + n);
    series_seen.busy_cores.insert(series_seen.busy_cores.end(), s.busy_cores.begin(),
                                  s.busy_cores.begin() + n);
    series_seen.mean_bsld.insert(series_seen.mean_bsld.end(), s.mean_bsld.begin(),
                                 s.mean_bsld.begin() + n);
  }
};

std::vector<JobOutcome> read_jobs(const h5::Group& g) {
  return g.read_table("jobs", job_table_type());
}

bool same_doubles(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_bits(a[i], b[i])) return false;
  return true;
}

}  // namespace

TEST_CASE("a result sink receives every row a run would keep, in order, and the run keeps none",
          "[replay][sink]") {
  const std::vector<Job> jobs = sink_workload();
  const SimConfig kept_cfg = config();
  const SimResult kept = simulate(jobs, kept_cfg);
  REQUIRE(kept.jobs.size() == jobs.size());
  REQUIRE(kept.series.time.size() > 70000);  // more than one block of series points too

  Collect sink;
  SimConfig cfg = config();
  cfg.sink = &sink;
  const SimResult streamed = simulate(jobs, cfg);
  CHECK(streamed.jobs.empty());
  CHECK(streamed.series.time.empty());
  CHECK(sink.job_blocks >= 3);
  CHECK(sink.series_blocks >= 2);
  REQUIRE(sink.jobs_seen.size() == kept.jobs.size());
  for (size_t i = 0; i < kept.jobs.size(); ++i)
    if (!same_outcome(sink.jobs_seen[i], kept.jobs[i])) FAIL("job row " << i << " differs");
  CHECK(same_doubles(sink.series_seen.time, kept.series.time));
  CHECK(sink.series_seen.queue_length == kept.series.queue_length);
  CHECK(sink.series_seen.busy_cores == kept.series.busy_cores);
  CHECK(same_doubles(sink.series_seen.mean_bsld, kept.series.mean_bsld));
  CHECK(same_bits(streamed.summary.avg_bsld, kept.summary.avg_bsld));
  CHECK(same_bits(streamed.summary.p99_wait, kept.summary.p99_wait));

  // The profile that keeps its own rows refuses a sink instead of dropping them.
  SimConfig rl = cfg;
  rl.profile = Profile::RLSCHEDULER;
  rl.backfill = Backfill::RLSCHEDULER;
  CHECK_THROWS_AS(simulate(jobs, rl), ConfigError);
}

TEST_CASE("RunFileWriter writes the tables write_runs_hdf5 writes", "[replay][sink][hdf5]") {
  const std::vector<Job> jobs = sink_workload();
  const fs::path dir = fs::temp_directory_path() / ("mlprio_sink_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string whole = (dir / "whole.h5").string(), streamed = (dir / "streamed.h5").string();
  const h5::Provenance prov{"replay", "test", "", ""};

  RunRecord r;
  r.policy = "fcfs";
  r.window_len = static_cast<int64_t>(jobs.size());
  const SimConfig kept_cfg = config();
  r.result = simulate(jobs, kept_cfg);
  write_runs_hdf5(whole, {r}, prov, kept_cfg.machine);

  SimConfig cfg = config();
  RunRecord s = r;
  {
    RunFileWriter writer(streamed, prov, cfg.machine);
    cfg.sink = &writer;
    s.result = simulate(jobs, cfg);
    CHECK_FALSE(fs::exists(streamed));  // nothing under the final name before finish()
    writer.finish(s);
  }
  REQUIRE(fs::exists(streamed));

  h5::ReadFile a(whole, "replay"), b(streamed, "replay");
  for (const char* attr : {"replay_layout_version", "nodes", "cores_per_node", "gpus_per_node"})
    CHECK(a.root().attr_int(attr) == b.root().attr_int(attr));
  const h5::Group ga = a.root().open_group("runs").open_group("run_0000");
  const h5::Group gb = b.root().open_group("runs").open_group("run_0000");
  for (const char* attr : {"jobs", "window_len", "skipped", "killed"})
    CHECK(ga.attr_int(attr) == gb.attr_int(attr));
  for (const char* attr : {"avg_wait", "avg_bsld", "utilization", "max_wait", "p99_wait"})
    CHECK(same_bits(ga.attr_double(attr), gb.attr_double(attr)));
  const auto ja = read_jobs(ga), jb = read_jobs(gb);
  REQUIRE(ja.size() == jobs.size());
  REQUIRE(jb.size() == ja.size());
  for (size_t i = 0; i < ja.size(); ++i)
    if (!same_outcome(ja[i], jb[i])) FAIL("file row " << i << " differs");
  CHECK(ga.table_rows("users") == gb.table_rows("users"));
  const h5::Group sa = ga.open_group("series"), sb = gb.open_group("series");
  for (const char* col : {"time", "mean_bsld"})
    CHECK(same_doubles(sa.read_column_double(col), sb.read_column_double(col)));
  for (const char* col : {"queue_length", "busy_cores"})
    CHECK(sa.read_column_int(col) == sb.read_column_int(col));
  fs::remove_all(dir);
}
