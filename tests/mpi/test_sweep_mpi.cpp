// Sweeps over MPI: the same tasks give bit-identical results and the same JSON whether run by 1,
// 2 or 3 ranks (sub-communicators of the world, so one mpiexec -n 3 covers N = 1, 2, 3 and the
// uneven hand-out), and window draws are reproducible (pinned values from an independent Python
// SplitMix64, and equal on every rank).
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>

#include "mlprio/replay/dist/mpi_support.hpp"
#include "mlprio/replay/dist/sweep_windows.hpp"
#include "mpi_test_util.hpp"

using namespace mlprio;
using namespace mlprio::replay::dist;

namespace {

SweepSpec test_spec(const std::string& trace) {
  SweepSpec s;
  s.traces = {trace};
  s.policies = {"fcfs", "sjf", "multifactor"};
  s.backfills = {"easy", "conservative"};
  s.windows = {{0, 3000}, {1000, 500}};
  s.random_count = 4;
  s.random_len = 800;
  s.seed = 11;
  s.weight_fairshare = {10000, 0};  // a 2-point grid for multifactor
  return s;
}

bool same_summary(const replay::Summary& a, const replay::Summary& b) {
  return a.jobs == b.jobs && a.skipped == b.skipped && a.killed == b.killed &&
         a.estimates_raised == b.estimates_raised &&
         std::memcmp(&a.avg_wait, &b.avg_wait, sizeof(double)) == 0 &&
         std::memcmp(&a.avg_bsld, &b.avg_bsld, sizeof(double)) == 0 &&
         std::memcmp(&a.avg_turnaround, &b.avg_turnaround, sizeof(double)) == 0 &&
         std::memcmp(&a.utilization, &b.utilization, sizeof(double)) == 0 &&
         std::memcmp(&a.makespan, &b.makespan, sizeof(double)) == 0 &&
         std::memcmp(&a.last_end, &b.last_end, sizeof(double)) == 0;
}

}  // namespace

TEST_CASE("window starts are reproducible and platform independent", "[mpi][sweep]") {
  // Reference values from a separate Python implementation of SplitMix64 + rejection sampling.
  CHECK(draw_window_starts(5, 100, 10000, 42) == std::vector<int64_t>{6260, 7413, 6159, 143, 7353});
  CHECK(draw_window_starts(5, 2000, 20000, 3) ==
        std::vector<int64_t>{12007, 15523, 8700, 6360, 7143});
  CHECK_THROWS_AS(draw_window_starts(1, 20001, 20000, 3), SweepError);
  // Every rank draws the same starts.
  const auto mine = draw_window_starts(50, 1000, 188041, 2026);
  std::vector<int64_t> root = mine;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_INT64_T, 0, MPI_COMM_WORLD);
  CHECK(root == mine);
}

TEST_CASE("sweep results are identical for N = 1, 2, 3 ranks", "[mpi][sweep]") {
  const std::string trace = test::shared_lublin_trace("sweep", 6000, 5, 1.3);
  const SweepPlan plan = make_sweep_plan(test_spec(trace));
  REQUIRE(plan.tasks.size() == (2 + 2 + 2 * 2) * 6);
  const int world = test::world_size();
  const int rank = test::world_rank();

  // Reference: the serial loop on rank 0.
  std::vector<TaskResult> ref;
  std::string ref_json;
  if (rank == 0) {
    SweepRunOptions o;
    o.out = std::string(MLPRIO_MPI_TEST_DIR) + "/sweep_serial.np" + std::to_string(world) + ".h5";
    std::remove((o.out + ".journal").c_str());
    const auto out = run_sweep_serial(plan, o);
    REQUIRE(out.failed == 0);
    REQUIRE(out.resumed == 0);
    ref = out.results;
    ref_json = sweep_json(plan, ref);
  }
  for (int n = 1; n <= world; ++n) {
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank < n ? 0 : MPI_UNDEFINED, rank, &sub);
    if (sub == MPI_COMM_NULL) continue;
    SweepRunOptions o;
    o.out = std::string(MLPRIO_MPI_TEST_DIR) + "/sweep_n" + std::to_string(n) + ".np" +
            std::to_string(world) + ".h5";
    if (rank == 0) std::remove((o.out + ".journal").c_str());
    MPI_Barrier(sub);
    const auto out = run_sweep_mpi(plan, o, sub);
    MPI_Comm_free(&sub);
    if (rank != 0) continue;
    INFO("N = " << n);
    REQUIRE(out.results.size() == ref.size());
    CHECK(out.failed == 0);
    for (size_t i = 0; i < ref.size(); ++i) {
      INFO("task " << plan.tasks[i].key);
      CHECK(out.results[i].ok);
      CHECK(same_summary(out.results[i].summary, ref[i].summary));
    }
    CHECK(sweep_json(plan, out.results) == ref_json);
    // A second run of the same sweep takes everything from the journal.
    MPI_Comm self = MPI_COMM_SELF;
    const auto again = run_sweep_mpi(plan, o, self);
    CHECK(again.resumed == static_cast<int64_t>(plan.tasks.size()));
    CHECK(sweep_json(plan, again.results) == ref_json);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("a failing task is reported by name and marked failed", "[mpi][sweep]") {
  const std::string trace = test::shared_lublin_trace("sweep_fail", 500, 9, 1.0);
  SweepSpec spec;
  spec.traces = {trace};
  spec.policies = {"fcfs"};
  spec.windows = {{0, 500}};
  spec.replay.nodes = 4;  // Lublin jobs up to 128 nodes: JobTooLargeError inside the task
  spec.replay.cores_per_node = 1;
  const SweepPlan plan = make_sweep_plan(spec);
  SweepRunOptions o;
  o.out = std::string(MLPRIO_MPI_TEST_DIR) + "/sweep_fail.np" + std::to_string(test::world_size()) +
          ".h5";
  if (test::world_rank() == 0) std::remove((o.out + ".journal").c_str());
  MPI_Barrier(MPI_COMM_WORLD);
  const auto out = run_sweep_mpi(plan, o, MPI_COMM_WORLD);
  if (test::world_rank() == 0) {
    CHECK(out.failed == 1);
    CHECK_FALSE(out.results[0].ok);
    CHECK(out.results[0].error.find("asks for") != std::string::npos);
    CHECK(sweep_json(plan, out.results).find("\"failed\":[\"trace=") != std::string::npos);
  }
}
