// Predictor::explain_fail, the per-feature contributions job_submit/mlprio names when it refuses
// a job: our TreeSHAP over the saved failure trees (core/src/model/predictor_xgboost.cpp, no
// libxgboost) against XGBoost's own pred_contribs on the same rows and against what
// `mlprio-model explain` prints; they must sum to the predicted log-odds and point at the cause
// the synthetic trace builds in (a large LoRA rank on few GPUs fails).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>

#include "mlprio/model/model_file.hpp"
#include "model_tool.hpp"
#include "synthetic.hpp"
#include "xgb.hpp"

using namespace mlprio;
using namespace mlprio::model;

namespace {

struct Fixture {
  Trace trace = testing::synthetic_trace(2000, 23);
  nlohmann::json doc;
  Fixture() {
    TrainOptions o;
    o.rounds = 40;
    std::vector<std::string> notes;
    doc = train_model(trace, "none", o, notes);
  }
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

double logit(double p) {
  return std::log(p / (1.0 - p));
}

}  // namespace

TEST_CASE("explain_fail equals XGBoost's pred_contribs and sums to the prediction",
          "[model][explain]") {
  const Fixture& fx = fixture();
  REQUIRE(fx.doc["booster_fail"].is_string());
  const auto pred = make_predictor(fx.doc);
  Booster b;
  b.load_json(base64_decode(fx.doc["booster_fail"].get<std::string>()));
  std::vector<double> c(N_FEATURES + 1);
  std::vector<float> row(N_FEATURES);
  size_t checked = 0, missing = 0;
  for (size_t i = 0; i < fx.trace.jobs.size(); i += 7) {
    const Job& job = fx.trace.jobs[i];
    INFO("job " << i);
    REQUIRE(pred->explain_fail(job, fx.trace.names, c, row));
    for (float v : row) missing += std::isnan(v) ? 1 : 0;
    DMatrix d(row.data(), 1, N_FEATURES);
    const std::vector<float> ref = b.predict(d, 4);
    REQUIRE(ref.size() == static_cast<size_t>(N_FEATURES) + 1);
    for (int f = 0; f <= N_FEATURES; ++f) {
      INFO("column " << f);
      CHECK(c[static_cast<size_t>(f)] == Approx(ref[static_cast<size_t>(f)]).margin(2e-5));
    }
    Prediction p;
    pred->predict({&job, 1}, fx.trace.names, {&p, 1});
    double sum = 0;
    for (double v : c) sum += v;
    CHECK(sum == Approx(logit(p.fail_prob)).margin(1e-4));
    ++checked;
  }
  CHECK(checked > 200);
  CHECK(missing > 0);  // default directions were exercised
}

TEST_CASE("explain_fail names the synthetic trace's cause of failure", "[model][explain]") {
  const Fixture& fx = fixture();
  const auto pred = make_predictor(fx.doc);
  // The trace's rule: LoRA rank 64 on a 13B+ model with fewer than 4 GPUs runs out of memory.
  const Trace one = job_from_spec(
      "user=user3,req_time=7200,req_procs=4,req_gpus=1,model_size=70,epochs=2,"
      "lora_rank=64,partition=gpu");
  std::vector<double> c(N_FEATURES + 1);
  std::vector<float> row(N_FEATURES);
  REQUIRE(pred->explain_fail(one.jobs[0], one.names, c, row));
  std::vector<int> by(N_FEATURES);
  for (int f = 0; f < N_FEATURES; ++f) by[static_cast<size_t>(f)] = f;
  std::sort(by.begin(), by.end(), [&](int a, int b) { return c[a] > c[b]; });
  const std::string top = std::string(feature_names()[by[0]]);
  INFO("top contribution: " << top << " " << c[by[0]]);
  CHECK((top == "llm_lora_rank" || top == "req_gpus" || top == "llm_model_size"));
  CHECK(c[by[0]] > 0);
  // `mlprio-model explain` prints the same numbers (XGBoost's), largest first.
  const auto ex = explain_job(fx.doc, one);
  REQUIRE(ex["fail_features"].is_array());
  REQUIRE(ex["fail_features"].size() == static_cast<size_t>(N_FEATURES));
  for (const auto& f : ex["fail_features"]) {
    const std::string name = f["feature"].get<std::string>();
    const auto at = std::find(feature_names().begin(), feature_names().end(), name);
    REQUIRE(at != feature_names().end());
    INFO(name);
    CHECK(c[static_cast<size_t>(at - feature_names().begin())] ==
          Approx(f["logodds_contribution"].get<double>()).margin(2e-5));
  }
  CHECK(ex["fail_features"][0]["feature"].get<std::string>() == top);
}

TEST_CASE("a formula model's failure is all the user's failure rate", "[model][explain]") {
  TrainOptions o;
  o.kind = "formula";
  std::vector<std::string> notes;
  const Fixture& fx = fixture();
  const auto pred = make_predictor(train_model(fx.trace, "none", o, notes));
  std::vector<double> c(N_FEATURES + 1);
  std::vector<float> row(N_FEATURES);
  const Job& job = fx.trace.jobs.back();
  REQUIRE(pred->explain_fail(job, fx.trace.names, c, row));
  Prediction p;
  pred->predict({&job, 1}, fx.trace.names, {&p, 1});
  CHECK(c[F_HIST_FAIL_RATE] == Approx(p.fail_prob));
  double others = 0;
  for (int f = 0; f <= N_FEATURES; ++f)
    if (f != F_HIST_FAIL_RATE) others += std::abs(c[static_cast<size_t>(f)]);
  CHECK(others == 0);
}
