// Time-parallel exact replay: one segment per rank must give every job the start time of the
// sequential replay, on a generated trace (several queue orders and backfilling rules, the
// fair-share order included, whose history never converges from a guess) and on a small real
// trace when /work/shared/data is present.
#include <catch2/catch.hpp>
#include <filesystem>

#include "mlprio/replay/simulator.hpp"
#include "mlprio/replay_dist/mpi_support.hpp"
#include "mpi_test_util.hpp"

using namespace mlprio;
using namespace mlprio::replay;

namespace {

void check_equal_to_sequential(const std::vector<Job>& jobs, SimConfig cfg) {
  cfg.record_jobs = true;
  cfg.record_series = false;
  const auto tp = dist::time_parallel_mpi(jobs, cfg, MPI_COMM_WORLD);
  if (test::world_rank() != 0) return;
  const SimResult seq = simulate(jobs, cfg);
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
  CHECK(tp.stats.rounds <= tp.stats.segments);
}

}  // namespace

TEST_CASE("time-parallel replay equals the sequential one on a generated trace", "[mpi][time]") {
  const auto jobs = test::lublin_jobs(8000, 3, 1.4);
  for (const char* policy : {"fcfs", "sjf", "multifactor"})
    for (Backfill b : {Backfill::EASY, Backfill::CONSERVATIVE, Backfill::NONE}) {
      SimConfig cfg;
      cfg.machine.nodes = 128;
      cfg.machine.cores_per_node = 1;
      cfg.policy = policy;
      cfg.backfill = b;
      check_equal_to_sequential(jobs, cfg);
    }
}

TEST_CASE("time-parallel replay equals the sequential one on a real trace", "[mpi][time]") {
  const std::string path = std::string(MLPRIO_SHARED_DATA) + "/swf/hpc2n_subset.swf";
  if (!std::filesystem::exists(path)) {
    WARN("skipped: " << path << " is absent (real traces live in ../shared/data)");
    return;
  }
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
