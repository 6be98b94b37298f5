// The runtime model in the replayer: `--estimate model:FILE` feeds predictions to
// backfilling and `--policy ml` orders the queue by mlprio::model::score(). A synthetic trace with
// known structure (short-job users and long-job users who all request the same limit, so the
// request says nothing and each user's history says everything) is written as SWF, a model is
// trained on it in the test (`mlprio-model train` when it is built beside this binary, else the
// closed-form "formula" kind built here the way train_model builds it), and the replays are
// compared. Also: a hand-checked EASY case where predictions change a backfilling decision, the
// errors for `ml` without a model and for a corrupt model file, and the CLI's exit code 2.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../support/process.hpp"
#include "../support/skip.hpp"
#include "mlprio/jobs/lublin.hpp"
#include "mlprio/model/features.hpp"
#include "mlprio/model/model_file.hpp"
#include "mlprio/model/predictor.hpp"
#include "mlprio/replay/ml.hpp"
#include "mlprio/replay/segment.hpp"
#include "mlprio/replay/simulator.hpp"

using namespace mlprio;
using namespace mlprio::replay;
namespace fs = std::filesystem;

namespace {

constexpr double REQUEST = 7200.0;  // every job asks for the same limit: the request is useless

fs::path scratch_dir() {
  const fs::path d = fs::temp_directory_path() /
                     ("mlprio_test_ml_policy_" + std::to_string(static_cast<long>(::getpid())));
  fs::create_directories(d);
  return d;
}

// Users 1-3 run short wide jobs (30-120 s on 4-8 nodes: they rarely fit beside others, so
// backfilling cannot rescue them), users 4-5 long jobs (2000-4000 s on 1-8 nodes), all asking for
// REQUEST; Poisson arrivals (mean gap 600 s) load an 8-node machine at about 90 %.
std::vector<Job> synthetic_jobs(size_t n) {
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::exponential_distribution<double> gap(1.0 / 600.0);
  std::vector<Job> jobs;
  double t = 0;
  for (size_t i = 0; i < n; ++i) {
    Job j;
    j.id = static_cast<int64_t>(i + 1);
    t += gap(rng);
    j.submit = std::floor(t);
    j.wait = 0;
    const bool is_short = u(rng) < 0.7;
    j.user = is_short ? 1 + static_cast<int32_t>(i % 3) : 4 + static_cast<int32_t>(i % 2);
    j.run = is_short ? std::floor(30 + 90 * u(rng)) : std::floor(2000 + 2000 * u(rng));
    j.req_procs = j.alloc_procs =
        is_short ? 4 + static_cast<int64_t>(5 * u(rng)) : 1 + static_cast<int64_t>(8 * u(rng));
    j.req_time = REQUEST;
    j.status = JobStatus::COMPLETED;
    jobs.push_back(j);
  }
  return jobs;
}

fs::path write_trace(const fs::path& dir, const std::vector<Job>& jobs) {
  TraceHeader h;
  h.max_nodes = 8;
  h.max_procs = 8;
  h.unix_start_time = 1700000000;
  const fs::path p = dir / "synthetic.swf";
  std::ofstream out(p);
  write_swf(out, h, jobs);
  return p;
}

// Trains a model on the first 80 % of the trace: mlprio-model (XGBoost) when built beside this
// test, else the formula kind, written exactly as train_model writes it.
fs::path train_model_file(const fs::path& dir, const fs::path& trace_path) {
  const fs::path model = dir / "model.json";
  const fs::path tool = fs::path(MLPRIO_BIN_DIR) / "mlprio-model";
  if (fs::exists(tool)) {
    const std::string cmd = tool.string() + " train --trace " + trace_path.string() +
                            " --rounds 50 -o " + model.string() + " > " +
                            (dir / "train.log").string() + " 2>&1";
    REQUIRE(std::system(cmd.c_str()) == 0);
    return model;
  }
  WARN("mlprio-model is not built here: training the formula kind in the test");
  const Trace trace = load_trace(trace_path.string());
  const size_t n_train = trace.jobs.size() * 8 / 10;
  model::UserHistory history;
  model::build_features(std::span<const Job>(trace.jobs.data(), n_train), trace.names,
                        static_cast<double>(trace.header.unix_start_time), &history);
  std::vector<double> runs;
  for (size_t i = 0; i < n_train; ++i) runs.push_back(trace.jobs[i].run);
  std::nth_element(runs.begin(), runs.begin() + static_cast<long>(runs.size() / 2), runs.end());
  nlohmann::json doc = model::model_document_header("formula");
  doc["training"] = {{"trace", trace_path.filename().string()}, {"n_train", n_train}};
  doc["user_history"] = model::history_to_json(history);
  doc["formula"] = {{"name", "last2_capped_by_request"},
                    {"default_runtime", runs[runs.size() / 2]}};
  model::write_model_document(model.string(), doc);
  return model;
}

struct Fixture {
  fs::path dir = scratch_dir();
  std::vector<Job> jobs = synthetic_jobs(2000);
  fs::path trace_path = write_trace(dir, jobs);
  Trace trace = load_trace(trace_path.string());
  fs::path model_path = train_model_file(dir, trace_path);
  std::unique_ptr<model::Predictor> predictor = model::load_predictor(model_path.string());
  std::vector<model::Prediction> predictions = predict_trace(*predictor, trace);

  // The unseen 20 %, the same split as training.
  int64_t test_start() const { return static_cast<int64_t>(trace.jobs.size() * 8 / 10); }

  SimResult replay(const std::string& policy, bool use_model,
                   EstimateQuantile q = EstimateQuantile::UPPER) const {
    const int64_t start = test_start();
    const auto len = static_cast<int64_t>(trace.jobs.size()) - start;
    const std::span<const Job> w = select_window(trace.jobs, start, len);
    SimConfig cfg;
    cfg.machine = {8, 1, 0, Allocation::NODES};
    cfg.policy = policy;
    cfg.backfill = Backfill::EASY;
    if (use_model) {
      auto ml = std::make_shared<const MlPredictions>(
          w, std::span<const model::Prediction>(predictions).subspan(static_cast<size_t>(start)),
          model::ScoreConfig{});
      cfg.estimate = EstimateMode::CUSTOM;
      cfg.estimate_fn = model_estimate_fn(ml, q);
      cfg.policy_options.ml = ml;
    }
    return simulate(w, cfg);
  }
};

int run_cli(const std::string& args, const fs::path& err) {
  const fs::path exe = fs::path(MLPRIO_BIN_DIR) / "mlprio-replay";
  const std::string cmd = exe.string() + " run " + args + " > /dev/null 2> " + err.string();
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

using mlprio::test::slurp;

}  // namespace

TEST_CASE("model predictions change an EASY backfilling decision (hand-checked)",
          "[replay][ml][exact]") {
  // Two nodes. J1 (1 node, run 100, asks 1000) runs; J2 (2 nodes) is blocked until J1 ends; J3
  // (1 node, run 200, asks 500) arrives at 2. Requests: shadow = 1000, 2 + 500 <= 1000, J3
  // backfills at 2 and, as J1 really ends at 100, delays J2 to 202. Exact predictions: shadow =
  // 100, 2 + 200 > 100 and no extra node, so J3 waits: J2 runs 100-200, J3 200-400.
  std::vector<Job> jobs(3);
  const double submit[] = {0, 1, 2}, run[] = {100, 100, 200}, req[] = {1000, 1000, 500};
  const int64_t procs[] = {1, 2, 1};
  for (size_t i = 0; i < 3; ++i) {
    jobs[i].id = static_cast<int64_t>(i + 1);
    jobs[i].submit = submit[i];
    jobs[i].run = run[i];
    jobs[i].req_time = req[i];
    jobs[i].req_procs = procs[i];
  }
  SimConfig cfg;
  cfg.machine = {2, 1, 0, Allocation::NODES};
  cfg.backfill = Backfill::EASY;
  auto starts = [](const SimResult& r) {
    std::vector<double> s(3);
    for (const auto& o : r.jobs) s[static_cast<size_t>(o.id - 1)] = o.start;
    return s;
  };
  CHECK(starts(simulate(jobs, cfg)) == std::vector<double>{0, 202, 2});

  std::vector<model::Prediction> preds(3);
  for (size_t i = 0; i < 3; ++i) preds[i].runtime = preds[i].runtime_upper = run[i];
  auto ml = std::make_shared<const MlPredictions>(jobs, preds, model::ScoreConfig{});
  cfg.estimate = EstimateMode::CUSTOM;
  cfg.estimate_fn = model_estimate_fn(ml, EstimateQuantile::UPPER);
  CHECK(starts(simulate(jobs, cfg)) == std::vector<double>{0, 100, 200});

  // A prediction far below the run time (J1 predicted 10 s) must not break EASY: J1 overruns its
  // estimate, counts as ending now, and the schedule still completes with every job once.
  preds[0].runtime = preds[0].runtime_upper = 10;
  ml = std::make_shared<const MlPredictions>(jobs, preds, model::ScoreConfig{});
  cfg.estimate_fn = model_estimate_fn(ml, EstimateQuantile::UPPER);
  cfg.check_invariants = true;
  const SimResult under = simulate(jobs, cfg);
  CHECK(under.summary.jobs == 3);
  cfg.backfill = Backfill::CONSERVATIVE;
  const SimResult cons = simulate(jobs, cfg);
  CHECK(cons.summary.jobs == 3);
  CHECK(cons.summary.estimates_raised >= 1);
}

TEST_CASE("a trained model changes backfilling and ml beats FCFS on predictable short jobs",
          "[replay][ml]") {
  const Fixture f;
  REQUIRE(f.predictions.size() == f.trace.jobs.size());
  // The model learned the structure: short users' jobs predicted far below the request.
  size_t short_ok = 0, short_n = 0;
  for (size_t i = static_cast<size_t>(f.test_start()); i < f.trace.jobs.size(); ++i)
    if (f.trace.jobs[i].run < 200) {
      ++short_n;
      short_ok += f.predictions[i].runtime < 600 ? 1 : 0;
    }
  REQUIRE(short_n > 100);
  CHECK(short_ok > short_n * 9 / 10);

  const SimResult fcfs_request = f.replay("fcfs", false);
  const SimResult fcfs_model = f.replay("fcfs", true, EstimateQuantile::POINT);
  const SimResult ml = f.replay("ml", true);
  INFO("bsld fcfs+request " << fcfs_request.summary.avg_bsld << ", fcfs+model "
                            << fcfs_model.summary.avg_bsld << ", ml+model " << ml.summary.avg_bsld);
  REQUIRE(fcfs_request.jobs.size() == fcfs_model.jobs.size());
  size_t moved = 0;
  for (size_t k = 0; k < fcfs_request.jobs.size(); ++k)
    moved += fcfs_request.jobs[k].id != fcfs_model.jobs[k].id ||
             fcfs_request.jobs[k].start != fcfs_model.jobs[k].start;
  CHECK(moved > 0);  // predictions changed what EASY backfilled
  CHECK(ml.summary.jobs == fcfs_request.summary.jobs);
  CHECK(ml.summary.avg_bsld < 0.8 * fcfs_request.summary.avg_bsld);

  // Backfilling on the requested times (`--estimate-quantile request`): the model no longer
  // changes what EASY backfills, so FCFS with it is FCFS+EASY on requests, job by job.
  const SimResult fcfs_req_q = f.replay("fcfs", true, EstimateQuantile::REQUEST);
  REQUIRE(fcfs_req_q.jobs.size() == fcfs_request.jobs.size());
  for (size_t k = 0; k < fcfs_request.jobs.size(); ++k) {
    INFO("job " << k);
    CHECK(fcfs_req_q.jobs[k].id == fcfs_request.jobs[k].id);
    CHECK(fcfs_req_q.jobs[k].start == fcfs_request.jobs[k].start);
  }
  CHECK(parse_estimate_quantile("request") == EstimateQuantile::REQUEST);
  CHECK(estimate_quantile_name(EstimateQuantile::REQUEST) == "request");
  CHECK_THROWS_AS(parse_estimate_quantile("median"), ConfigError);
}

TEST_CASE("policy ml without a model is a clear error", "[replay][ml]") {
  REQUIRE_THROWS_AS(make_policy("ml"), ConfigError);
  REQUIRE_THROWS_WITH(make_policy("ml"), Catch::Contains("--estimate model:FILE"));
  std::vector<Job> jobs = synthetic_jobs(5);
  SimConfig cfg;
  cfg.machine = {8, 1, 0, Allocation::NODES};
  cfg.policy = "ml";
  CHECK_THROWS_AS(simulate(jobs, cfg), ConfigError);
  CHECK_THROWS_AS(parse_estimate_quantile("median"), ConfigError);
}

TEST_CASE("the CLI refuses ml without a model and a corrupt model file (exit 2)",
          "[replay][ml][cli]") {
  if (!fs::exists(fs::path(MLPRIO_BIN_DIR) / "mlprio-replay"))
    MLPRIO_SKIP("mlprio-replay is not built beside this test: CLI checks not run");
  const fs::path dir = scratch_dir();
  const fs::path trace = write_trace(dir, synthetic_jobs(50));
  const fs::path err = dir / "err.txt";

  CHECK(run_cli("--trace " + trace.string() + " --policy ml", err) == 2);
  CHECK_THAT(slurp(err), Catch::Contains("--estimate model:FILE"));

  const fs::path bad = dir / "corrupt.json";
  std::ofstream(bad) << "{\"format\": \"mlprio-model\", \"version\": 1, \"kind\": ";
  ::chmod(bad.c_str(), 0644);
  CHECK(run_cli("--trace " + trace.string() + " --estimate model:" + bad.string(), err) == 2);
  const std::string msg = slurp(err);
  CHECK_THAT(msg, Catch::Contains(bad.string()));
  CHECK_THAT(msg, Catch::Contains("error"));
  CHECK_THROWS_AS(model::load_predictor(bad.string()), model::ModelError);

  CHECK(run_cli("--trace " + trace.string() + " --estimate model:" + (dir / "none.json").string(),
                err) == 2);
}

TEST_CASE("the CLI replays with a model file under every backfilling rule", "[replay][ml][cli]") {
  if (!fs::exists(fs::path(MLPRIO_BIN_DIR) / "mlprio-replay"))
    MLPRIO_SKIP("mlprio-replay is not built beside this test: CLI checks not run");
  const Fixture f;
  const fs::path err = f.dir / "err_ok.txt";
  for (const char* b : {"none", "easy", "conservative"})
    for (const char* q : {"point", "upper", "request"}) {
      INFO(b << " " << q);
      CHECK(run_cli("--trace " + f.trace_path.string() + " --policy ml,fcfs --backfill " + b +
                        " --estimate model:" + f.model_path.string() + " --estimate-quantile " + q +
                        " --window 1600:1000",
                    err) == 0);
    }
}

TEST_CASE("the ml order's kept terms rank as the whole score does", "[replay][ml][exact]") {
  // The engine works out a job's score terms once, when it is queued with its prediction
  // (QueuePolicy::prepare), and hands them back at every pass. Scoring a view with them must give
  // the very number scoring it without them gives, and the replay must follow the predictions.
  std::vector<Job> jobs(7);
  std::vector<model::Prediction> preds(7);
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].id = static_cast<int64_t>(i + 1);
    jobs[i].submit = static_cast<double>(i);
    jobs[i].run = i == 0 ? 1000.0 : 100.0;
    jobs[i].req_time = 5000;  // the same request: only the predictions tell the jobs apart
    jobs[i].req_procs = 1 + static_cast<int64_t>(i % 3);
    preds[i].runtime = preds[i].runtime_upper = 60.0 * static_cast<double>(8 - i);
    preds[i].fail_prob = 0.01 * static_cast<double>(i);
  }
  for (double age : {0.0, 1.0}) {
    model::ScoreConfig sc;
    sc.age_weight = age;
    sc.size_weight = -0.25;
    PolicyOptions opts;
    opts.ml = std::make_shared<const MlPredictions>(jobs, preds, sc);
    const auto policy = make_policy("ml", opts);
    REQUIRE(policy->prepares());
    ClusterState st;
    for (size_t i = 0; i < jobs.size(); ++i) {
      JobView v;
      v.index = static_cast<int64_t>(i);
      v.submit = jobs[i].submit;
      v.procs = jobs[i].req_procs;
      v.req_time = jobs[i].req_time;
      v.pred_runtime = preds[i].runtime;
      v.pred_upper = preds[i].runtime_upper;
      v.fail_prob = preds[i].fail_prob;
      JobView kept = v;
      kept.terms = policy->prepare(v);
      kept.terms_set = true;
      for (double now : {10.0, 500.0, 9e4, 2e5}) {
        st.now = now;
        const double fresh = policy->score(v, st);
        const double reused = policy->score(kept, st);
        INFO("age weight " << age << ", job " << i << ", now " << now);
        REQUIRE(std::memcmp(&fresh, &reused, sizeof fresh) == 0);
      }
    }
    // One node, one job at a time: job 1 runs while the others queue; each time the node frees,
    // the queued job with the highest model::score() then (the whole formula, prediction and
    // all) starts. Without its prediction a job would fall back to the request, the same for all.
    std::vector<int64_t> want{1};
    std::vector<size_t> queued{1, 2, 3, 4, 5, 6};
    for (double t = jobs[0].run; !queued.empty(); t += 100.0) {
      auto best = queued.begin();
      for (auto it = queued.begin(); it != queued.end(); ++it)
        if (model::score(jobs[*it], preds[*it], t, {}, sc) >
            model::score(jobs[*best], preds[*best], t, {}, sc))
          best = it;
      want.push_back(jobs[*best].id);
      queued.erase(best);
    }
    SimConfig cfg;
    cfg.machine = {1, 4, 0, Allocation::NODES};
    cfg.policy = "ml";
    cfg.policy_options = opts;
    cfg.check_invariants = true;
    const SimResult r = simulate(jobs, cfg);
    std::vector<std::pair<double, int64_t>> by_start;
    for (const auto& o : r.jobs) by_start.emplace_back(o.start, o.id);
    std::sort(by_start.begin(), by_start.end());
    std::vector<int64_t> order;
    for (const auto& [start, id] : by_start) order.push_back(id);
    INFO("age weight " << age);
    CHECK(order == want);
    CHECK(want != std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7});  // the predictions reorder it
  }
}

TEST_CASE("the ml order left unsorted where nothing can start gives the sorted order's schedule",
          "[replay][ml][exact]") {
  // Under EASY, a pass where fewer units are free than any queued job needs starts nothing, so
  // the `ml` order (finite scores: its sort does not depend on the queue's incoming order) is not
  // re-sorted there. A segment run sorts at every pass (segment mode keeps queues as they stand
  // for its checkpoints): on a queue two and a half times overloaded, with predictions off by up
  // to 2x either way, an age term or none and a starvation limit that most waits pass or none
  // does, the two schedules must be the same.
  LublinOptions o;
  o.nodes = 256;
  o.seed = 7;
  o.load_scale = 2.5;
  o.req_time = LublinReqTime::FACTOR;
  const std::vector<Job> jobs = generate_lublin(o, 3000);
  std::vector<model::Prediction> preds(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i)
    preds[i].runtime = preds[i].runtime_upper =
        jobs[i].run * (0.5 + 1.5 * static_cast<double>((i * 7919) % 100) / 100.0);
  for (const auto& [age, limit] : {std::pair{0.0, 1e7}, {1.0, 2e4}, {1.0, 1e7}}) {
    model::ScoreConfig sc;
    sc.age_weight = age;
    sc.starvation_limit = limit;
    SimConfig cfg;
    cfg.machine = {256, 1, 0, Allocation::NODES};
    cfg.policy = "ml";
    cfg.policy_options.ml = std::make_shared<const MlPredictions>(jobs, preds, sc);
    cfg.backfill = Backfill::EASY;
    cfg.record_jobs = true;
    cfg.check_invariants = true;  // also: no job fits at a pass left unsorted
    const SimResult seq = simulate(jobs, cfg);
    const SegmentResult whole =
        simulate_segment(jobs, 0, static_cast<int64_t>(jobs.size()), jobs.front().submit,
                         std::numeric_limits<double>::infinity(), idle_state(cfg), cfg);
    INFO("age weight " << age << ", starvation limit " << limit);
    REQUIRE(seq.jobs.size() == whole.jobs.size());
    REQUIRE(seq.jobs.size() > 2900);
    size_t same = 0;
    for (size_t k = 0; k < seq.jobs.size(); ++k)
      same += seq.jobs[k].id == whole.jobs[k].id && seq.jobs[k].start == whole.jobs[k].start;
    CHECK(same == seq.jobs.size());
    CHECK(seq.summary.avg_wait > 3600);  // the queue was deep
    // Cut in two at an arrival, the second segment resumed from the first's final state: its
    // carried queue gets its predictions (and terms) back, as at submission.
    const double t = jobs[1500].submit;
    int64_t cut = 1500;
    while (cut > 0 && jobs[static_cast<size_t>(cut) - 1].submit == t) --cut;
    const SegmentResult a =
        simulate_segment(jobs, 0, cut, jobs.front().submit, t, idle_state(cfg), cfg);
    const SegmentResult b =
        simulate_segment(jobs, cut, static_cast<int64_t>(jobs.size()), t,
                         std::numeric_limits<double>::infinity(), a.final_state, cfg);
    REQUIRE(a.jobs.size() + b.jobs.size() == seq.jobs.size());
    REQUIRE(!a.final_state.queue.empty());  // queued jobs cross the cut
    size_t joined = 0;
    for (size_t k = 0; k < seq.jobs.size(); ++k) {
      const JobOutcome& out = k < a.jobs.size() ? a.jobs[k] : b.jobs[k - a.jobs.size()];
      joined += out.id == seq.jobs[k].id && out.start == seq.jobs[k].start;
    }
    CHECK(joined == seq.jobs.size());
  }
}
