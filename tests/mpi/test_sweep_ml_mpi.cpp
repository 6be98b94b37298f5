// Sweeps with the runtime model: `--estimate model:FILE`, the `ml` queue order and `--per-job`
// detail give the same results for N = 1, 2, 3 ranks (sub-communicators of the world) as the
// serial loop, each task equals a direct simulate() set up by the code `run` uses
// (ReplaySetup::apply_window), the per-job tables carry the model's estimates, and a resumed
// per-job sweep recomputes the detail of journaled tasks bit for bit. The model is trained by
// mlprio-model when it is built beside the tests, else it is the closed-form "formula" kind.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mlprio/io/hdf5.hpp"
#include "mlprio/model/features.hpp"
#include "mlprio/model/model_file.hpp"
#include "mlprio/replay/dist/mpi_support.hpp"
#include "mpi_test_util.hpp"

using namespace mlprio;
using namespace mlprio::replay::dist;

namespace {

bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

bool same_detail(const TaskResult& a, const TaskResult& b) {
  if (a.has_detail != b.has_detail || a.jobs.size() != b.jobs.size() ||
      a.users.size() != b.users.size() || a.series.time.size() != b.series.time.size())
    return false;
  for (size_t i = 0; i < a.jobs.size(); ++i) {
    const auto &x = a.jobs[i], &y = b.jobs[i];
    if (x.id != y.id || x.user != y.user || x.procs != y.procs || x.killed != y.killed ||
        !same_bits(x.submit, y.submit) || !same_bits(x.start, y.start) ||
        !same_bits(x.end, y.end) || !same_bits(x.wait, y.wait) || !same_bits(x.run, y.run) ||
        !same_bits(x.bsld, y.bsld) || !same_bits(x.estimate, y.estimate))
      return false;
  }
  for (size_t i = 0; i < a.users.size(); ++i)
    if (a.users[i].user != b.users[i].user || a.users[i].jobs != b.users[i].jobs ||
        !same_bits(a.users[i].mean_wait, b.users[i].mean_wait) ||
        !same_bits(a.users[i].mean_bsld, b.users[i].mean_bsld) ||
        !same_bits(a.users[i].core_seconds, b.users[i].core_seconds))
      return false;
  return a.series.time == b.series.time && a.series.queue_length == b.series.queue_length &&
         a.series.busy_cores == b.series.busy_cores;
}

// Rank 0 writes the model; every rank gets its path.
std::string shared_model(const std::string& trace) {
  const std::string path = std::string(MLPRIO_MPI_TEST_DIR) + "/sweep_ml_model.np" +
                           std::to_string(test::world_size()) + ".json";
  int ok = 1;
  if (test::world_rank() == 0) {
    const std::string tool = std::string(MLPRIO_BIN_DIR) + "/mlprio-model";
    if (std::filesystem::exists(tool)) {
      const std::string cmd =
          tool + " train --trace " + trace + " --rounds 20 -o " + path + " > " + path + ".log 2>&1";
      ok = std::system(cmd.c_str()) == 0 ? 1 : 0;
    } else {
      const Trace t = load_trace(trace);
      const size_t n_train = t.jobs.size() * 8 / 10;
      model::UserHistory history;
      model::build_features(std::span<const Job>(t.jobs.data(), n_train), t.names, 0.0, &history);
      nlohmann::json doc = model::model_document_header("formula");
      doc["training"] = {{"trace", "sweep_ml"}, {"n_train", n_train}};
      doc["user_history"] = model::history_to_json(history);
      doc["formula"] = {{"name", "last2_capped_by_request"}, {"default_runtime", 600.0}};
      model::write_model_document(path, doc);
    }
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  REQUIRE(ok == 1);
  return path;
}

SweepSpec ml_spec(const std::string& trace, const std::string& model) {
  SweepSpec s;
  s.traces = {trace};
  s.policies = {"fcfs", "ml"};
  s.backfills = {"easy", "conservative"};
  s.windows = {{2400, 600}, {0, 1000}};
  s.replay.estimate = "model:" + model;
  s.replay.estimate_quantile = "upper";
  s.replay.ml_age_weight = 2.0;
  s.replay.ml_starvation_limit = 43200.0;
  s.per_job = true;
  return s;
}

}  // namespace

TEST_CASE("sweeps with model estimates, ml and per-job detail are identical for N = 1, 2, 3",
          "[mpi][sweep][ml]") {
  const std::string trace = test::shared_lublin_trace("sweep_ml", 3000, 7, 1.2);
  const std::string model_path = shared_model(trace);
  const SweepPlan plan = make_sweep_plan(ml_spec(trace, model_path));
  REQUIRE(plan.tasks.size() == 2 * 2 * 2);
  REQUIRE(plan.setup->predictor() != nullptr);
  REQUIRE(plan.fingerprint.find("model_sha256=") != std::string::npos);
  const int world = test::world_size();
  const int rank = test::world_rank();

  std::vector<TaskResult> ref;
  std::string ref_json;
  if (rank == 0) {
    SweepRunOptions o;
    o.out =
        std::string(MLPRIO_MPI_TEST_DIR) + "/sweep_ml_serial.np" + std::to_string(world) + ".h5";
    std::remove((o.out + ".journal").c_str());
    const auto out = run_sweep_serial(plan, o);
    REQUIRE(out.failed == 0);
    ref = out.results;
    ref_json = sweep_json(plan, ref);

    // Each task equals a replay set up the way `run` sets it up (the shared ReplaySetup code).
    const replay::ReplaySetup setup(plan.spec.replay);
    const std::span<const Job> jobs(plan.traces[0].jobs);
    for (const auto& t : plan.tasks) {
      INFO("task " << t.key);
      replay::SimConfig cfg = setup.base(plan.traces[0]);
      cfg.policy = t.policy;
      cfg.backfill = t.backfill;
      setup.apply_window(cfg, plan.traces[0], jobs, t.window_start, t.window_len);
      const auto direct = simulate(replay::select_window(jobs, t.window_start, t.window_len), cfg);
      const TaskResult& r = ref[static_cast<size_t>(t.id)];
      REQUIRE(r.has_detail);
      CHECK(same_bits(direct.summary.avg_bsld, r.summary.avg_bsld));
      CHECK(same_bits(direct.summary.avg_wait, r.summary.avg_wait));
      CHECK(same_bits(direct.summary.max_wait, r.summary.max_wait));
      CHECK(static_cast<int64_t>(r.jobs.size()) == r.summary.jobs);
      CHECK_FALSE(r.series.time.empty());
      // The per-job estimates are the model's (online: last-two of this schedule, capped by the
      // request), not the requests, for the jobs whose user had finished jobs.
      int64_t model_est = 0;
      for (const auto& j : r.jobs) {
        const auto it =
            std::find_if(jobs.begin(), jobs.end(), [&](const Job& x) { return x.id == j.id; });
        REQUIRE(it != jobs.end());
        if (j.estimate != it->req_time && j.estimate != j.run) ++model_est;
      }
      CHECK(model_est > 0);
    }
    // ml orders the queue differently from fcfs on this loaded window.
    CHECK_FALSE(same_bits(ref[0].summary.avg_wait, ref[4].summary.avg_wait));
  }
  for (int n = 1; n <= world; ++n) {
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank < n ? 0 : MPI_UNDEFINED, rank, &sub);
    if (sub == MPI_COMM_NULL) continue;
    SweepRunOptions o;
    o.out = std::string(MLPRIO_MPI_TEST_DIR) + "/sweep_ml_n" + std::to_string(n) + ".np" +
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
      CHECK(result_line(plan, out.results[i]) == result_line(plan, ref[i]));
      CHECK(same_detail(out.results[i], ref[i]));
    }
    CHECK(sweep_json(plan, out.results) == ref_json);
    {
      h5::ReadFile f(o.out, "sweep");
      CHECK(f.root().exists("tasks"));
      const h5::Group g = f.root().open_group("tasks").open_group("task_0005");
      CHECK(g.table_rows("jobs") == ref[5].jobs.size());
      CHECK(g.table_rows("users") == ref[5].users.size());
    }
    // Resume: every summary comes from the journal, the detail is recomputed and must match.
    const auto again = run_sweep_mpi(plan, o, MPI_COMM_SELF);
    CHECK(again.resumed == static_cast<int64_t>(plan.tasks.size()));
    for (size_t i = 0; i < ref.size(); ++i) CHECK(same_detail(again.results[i], ref[i]));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE(
    "deployed-stack tasks with the mlprio plugins are identical for N = 1, 2, 3 and equal "
    "run --slurm-conf",
    "[mpi][sweep][slurm]") {
  const std::string trace = test::shared_lublin_trace("sweep_ml", 3000, 7, 1.2);
  const std::string model_path = shared_model(trace);
  const int world = test::world_size();
  const int rank = test::world_rank();
  // The site's stock stack and the same with the mlprio plugins (SITE and filled limits).
  const std::string dir = std::string(MLPRIO_MPI_TEST_DIR);
  const std::string stock = dir + "/stock.np" + std::to_string(world) + ".conf";
  const std::string ml = dir + "/mlprio.np" + std::to_string(world) + ".conf";
  if (rank == 0) {
    const std::string base =
        "AccountingStorageType=accounting_storage/slurmdbd\nPriorityType=priority/multifactor\n"
        "PriorityWeightAge=1000\nPriorityWeightFairshare=10000\nPriorityWeightJobSize=1000\n"
        "SchedulerParameters=bf_interval=60,bf_resolution=120\n";
    std::ofstream(stock) << base;
    std::ofstream(ml) << base
                      << "PrioritySiteFactorPlugin=site_factor/mlprio\n"
                         "PrioritySiteFactorParameters=model="
                      << model_path << ",weight=20000\nJobSubmitPlugins=mlprio\n";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  SweepSpec spec;
  spec.traces = {trace};
  spec.policies.clear();
  spec.slurm_confs = {stock, ml};
  spec.windows = {{2400, 600}, {0, 1000}};
  spec.replay.too_large = "skip";
  spec.per_job = true;
  const SweepPlan plan = make_sweep_plan(spec);
  REQUIRE(plan.tasks.size() == 2 * 2);
  REQUIRE(plan.fingerprint.find("slurm_conf1=" + ml) != std::string::npos);

  std::vector<TaskResult> ref;
  std::string ref_json;
  if (rank == 0) {
    SweepRunOptions o;
    o.out = dir + "/sweep_slurm_serial.np" + std::to_string(world) + ".h5";
    std::remove((o.out + ".journal").c_str());
    const auto out = run_sweep_serial(plan, o);
    REQUIRE(out.failed == 0);
    ref = out.results;
    ref_json = sweep_json(plan, ref);
    CHECK(ref_json.find("\"scheduler\":\"slurm\"") != std::string::npos);
    // Each task equals the replay `run --slurm-conf` makes (the same preparation code).
    const replay::ReplaySetup setup(plan.spec.replay);
    replay::SlurmModelCache models;
    for (const auto& t : plan.tasks) {
      INFO("task " << t.key);
      const auto prepared = replay::prepare_slurm_replay(
          replay::read_slurm_conf(spec.slurm_confs[t.slurm]), replay::parse_slurm_release("26.05"),
          plan.traces[0], setup, "test", models, true, true);
      const auto direct =
          replay::replay_slurm_window(prepared, plan.traces[0], t.window_start, t.window_len);
      const TaskResult& r = ref[static_cast<size_t>(t.id)];
      CHECK(same_bits(direct.summary.avg_bsld, r.summary.avg_bsld));
      CHECK(same_bits(direct.summary.max_wait, r.summary.max_wait));
      CHECK(direct.jobs.size() == r.jobs.size());
    }
    // SITE and the filled limits change the schedule.
    CHECK_FALSE(same_bits(ref[0].summary.avg_wait, ref[2].summary.avg_wait));
  }
  for (int n = 1; n <= world; ++n) {
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank < n ? 0 : MPI_UNDEFINED, rank, &sub);
    if (sub == MPI_COMM_NULL) continue;
    SweepRunOptions o;
    o.out = dir + "/sweep_slurm_n" + std::to_string(n) + ".np" + std::to_string(world) + ".h5";
    if (rank == 0) std::remove((o.out + ".journal").c_str());
    MPI_Barrier(sub);
    const auto out = run_sweep_mpi(plan, o, sub);
    MPI_Comm_free(&sub);
    if (rank != 0) continue;
    INFO("N = " << n);
    REQUIRE(out.results.size() == ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      INFO("task " << plan.tasks[i].key);
      CHECK(result_line(plan, out.results[i]) == result_line(plan, ref[i]));
      CHECK(same_detail(out.results[i], ref[i]));
    }
    CHECK(sweep_json(plan, out.results) == ref_json);
    h5::ReadFile f(o.out, "sweep");
    const h5::Group g = f.root().open_group("tasks").open_group("task_0003");
    CHECK(g.attr_string("scheduler") == "slurm");
    CHECK(g.attr_string("backfill") == "sched/backfill");
    CHECK(g.attr_string("slurm_conf_sha256") == plan.slurm[1].sha256);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("per-job detail survives its byte encoding", "[mpi][sweep]") {
  TaskResult r;
  r.jobs.resize(3);
  r.jobs[1].id = 42;
  r.jobs[1].bsld = 2.5;
  r.users.resize(1);
  r.users[0].core_seconds = 7;
  r.series.time = {1, 2};
  r.series.queue_length = {3, 4};
  r.series.busy_cores = {5, 6};
  r.has_detail = true;
  const std::string bytes = encode_detail(r);
  TaskResult back;
  decode_detail(bytes, back);
  CHECK(same_detail(back, r));
  CHECK_THROWS_AS(decode_detail(std::string_view(bytes).substr(0, bytes.size() - 1), back),
                  SweepError);
}

TEST_CASE("ml without a model and a bad model file are refused before any replay",
          "[mpi][sweep][ml]") {
  const std::string trace = test::shared_lublin_trace("sweep_ml_bad", 200, 3, 1.0);
  SweepSpec s;
  s.traces = {trace};
  s.policies = {"ml"};
  s.windows = {{0, 100}};
  CHECK_THROWS_AS(make_sweep_plan(s), replay::ConfigError);
  s.replay.estimate = "model:" + std::string(MLPRIO_MPI_TEST_DIR) + "/no_such_model.json";
  CHECK_THROWS_AS(make_sweep_plan(s), replay::ConfigError);
  s.replay.estimate = "guess";
  CHECK_THROWS_AS(make_sweep_plan(s), replay::ConfigError);
}
