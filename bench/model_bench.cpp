// Benchmarks of the deployed prediction path (Predictor::predict with the frozen user history:
// feature encoding + tree walk + calibration) for one job (goal < 20 us) and a 10,000-job batch
// (goal < 10 ms), and of score(). Before timing, the predictions are checked against XGBoost's
// own XGBoosterPredict on the same rows; a mismatch exits non-zero (nccl-tests' #wrong habit).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "mlprio/model/model_file.hpp"
#include "model_tool.hpp"
#include "synthetic.hpp"
#include "xgb.hpp"

using namespace mlprio;
using namespace mlprio::model;

namespace {

struct Fixture {
  Trace trace = testing::synthetic_trace(20000, 42);
  nlohmann::json doc;
  std::unique_ptr<Predictor> pred;
  Fixture() {
    // The defaults a site would deploy: at most 200 rounds, early stopping and depth /
    // min_child_weight chosen on the calibration slice, blend with last-two chosen by MAE.
    TrainOptions o;
    std::vector<std::string> notes;
    doc = train_model(trace, "bench", o, notes);
    pred = make_predictor(doc);
    std::fprintf(stderr, "model: %s\n", pred->describe().c_str());
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

// Deployed path vs XGBoost on rows encoded with the same frozen history.
bool check_against_xgboost() {
  Fixture& f = fixture();
  const UserHistory hist = history_from_json(f.doc["user_history"]);
  const size_t n = 10000;
  std::span<const Job> jobs(f.trace.jobs.data(), n);
  std::vector<float> rows(n * N_FEATURES);
  encode_with_history(jobs, f.trace.names, hist, 0.0, rows);
  Booster reg;
  reg.load_json(base64_decode(f.doc["booster_runtime"].get<std::string>()));
  DMatrix d(rows.data(), n, N_FEATURES);
  const auto margin = reg.predict(d, 1);
  std::vector<Prediction> out(n);
  f.pred->predict(jobs, f.trace.names, out);
  // XGBoost's margin starts from the base score; the predictor replaces it by the anchor.
  const Calibration cal = calibration_from_json(f.doc);
  const auto saved =
      nlohmann::json::parse(base64_decode(f.doc["booster_runtime"].get<std::string>()));
  const double base =
      std::stod(saved["learner"]["learner_model_param"]["base_score"].get<std::string>());
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    const double z = calibrated_log(static_cast<double>(margin[i]), base,
                                    rows.data() + i * N_FEATURES, jobs[i].req_time, cal);
    const double expect = std::min(std::exp(z + cal.point_shift), jobs[i].req_time);
    if (!(std::abs(out[i].runtime - expect) <= 1e-4 * expect)) ++wrong;
  }
  std::fprintf(stderr, "correctness: %zu of %zu predictions differ from XGBoost (tolerance 1e-4)\n",
               wrong, n);
  return wrong == 0;
}

void BM_predict_single(benchmark::State& state) {
  Fixture& f = fixture();
  Prediction p;
  size_t i = 0;
  for (auto _ : state) {
    f.pred->predict(std::span<const Job>(&f.trace.jobs[i], 1), f.trace.names,
                    std::span<Prediction>(&p, 1));
    benchmark::DoNotOptimize(p);
    i = (i + 1) % 10000;
  }
}
BENCHMARK(BM_predict_single)->Unit(benchmark::kMicrosecond);

void BM_predict_batch(benchmark::State& state) {
  Fixture& f = fixture();
  const auto n = static_cast<size_t>(state.range(0));
  std::vector<Prediction> out(n);
  for (auto _ : state) {
    f.pred->predict(std::span<const Job>(f.trace.jobs.data(), n), f.trace.names, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_predict_batch)->Arg(10000)->Unit(benchmark::kMillisecond);

// The same batch for a caller that orders jobs and needs no fail_prob (skips the failure trees).
void BM_predict_batch_runtime_only(benchmark::State& state) {
  Fixture& f = fixture();
  const auto n = static_cast<size_t>(state.range(0));
  std::vector<Prediction> out(n);
  Predictor::Options opt;
  opt.fail_prob = false;
  for (auto _ : state) {
    f.pred->predict_with(std::span<const Job>(f.trace.jobs.data(), n), f.trace.names, out, opt);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_predict_batch_runtime_only)->Arg(10000)->Unit(benchmark::kMillisecond);

void BM_score(benchmark::State& state) {
  Fixture& f = fixture();
  Prediction p;
  p.runtime = 1234;
  const ClusterState c{1024, 100, 50};
  const ScoreConfig cfg;
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(score(f.trace.jobs[i], p, 1.8e9, c, cfg));
    i = (i + 1) % 10000;
  }
}
BENCHMARK(BM_score)->Unit(benchmark::kNanosecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (!check_against_xgboost()) return 1;
  benchmark::AddCustomContext("build_type", MLPRIO_BUILD_TYPE);
  benchmark::AddCustomContext("model", fixture().pred->describe());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
