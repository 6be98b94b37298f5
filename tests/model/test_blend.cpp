// The last-two blend of `mlprio-model train --blend`: its weight is learned from the training
// slice only (changing every job after it changes nothing in the model), it is a valid weight,
// a model file without a weight predicts exactly as before, and an invalid weight is refused.
#include <catch2/catch.hpp>
#include <cmath>

#include "mlprio/model/model_file.hpp"
#include "model_tool.hpp"
#include "synthetic.hpp"

using namespace mlprio;
using namespace mlprio::model;

namespace {
TrainOptions blended() {
  TrainOptions o;
  o.rounds = 30;
  o.blend = "within2x";
  return o;
}
}  // namespace

TEST_CASE("the blend weight is learned only from the past", "[model][blend]") {
  Trace t = testing::synthetic_trace(3000, 21);
  std::vector<std::string> notes;
  const auto a = train_model(t, "none", blended(), notes);
  const double w = a["calibration"]["blend_weight"].get<double>();
  CHECK(w >= 0.0);
  CHECK(w <= 1.0);
  CHECK(a["calibration"]["blend_trials"].size() >= 21);
  // Rewrite the future (the test slice): run times and requests after the training fraction.
  const auto n_train = static_cast<size_t>(std::floor(0.8 * static_cast<double>(t.jobs.size())));
  for (size_t i = n_train; i < t.jobs.size(); ++i) {
    t.jobs[i].run = 1.0 + static_cast<double>(i % 7) * 5000.0;
    t.jobs[i].req_time = 99999.0;
  }
  const auto b = train_model(t, "none", blended(), notes);
  CHECK(b["calibration"] == a["calibration"]);
  CHECK(b["booster_runtime"] == a["booster_runtime"]);
}

TEST_CASE("a model without a blend weight predicts as the plain model", "[model][blend]") {
  const Trace t = testing::synthetic_trace(1500, 22);
  std::vector<std::string> notes;
  TrainOptions o = blended();
  auto doc = train_model(t, "none", o, notes);
  const FeatureMatrix X = build_features(t.jobs, t.names, trace_epoch_offset(t));
  doc["calibration"]["blend_weight"] = 1.0;
  const auto one = make_predictor(doc);
  doc["calibration"].erase("blend_weight");
  const auto absent = make_predictor(doc);
  std::vector<Prediction> p1(t.jobs.size()), p2(t.jobs.size());
  one->predict_rows(X.values, t.jobs, p1);
  absent->predict_rows(X.values, t.jobs, p2);
  for (size_t i = 0; i < t.jobs.size(); ++i) REQUIRE(p1[i].runtime == p2[i].runtime);
  // w = 0 gives the baseline times exp(point_shift) for jobs with history or a request.
  doc["calibration"]["blend_weight"] = 0.0;
  doc["calibration"]["point_shift"] = 0.0;
  const auto base = make_predictor(doc);
  std::vector<Prediction> p0(t.jobs.size());
  base->predict_rows(X.values, t.jobs, p0);
  size_t checked = 0;
  for (size_t i = 0; i < t.jobs.size(); ++i) {
    const double b = blend_baseline(X.values.data() + i * N_FEATURES, t.jobs[i].req_time);
    if (std::isnan(b) || b < 1.0) continue;
    ++checked;
    REQUIRE(p0[i].runtime == Approx(b).epsilon(1e-12));
  }
  CHECK(checked > 1000);
  doc["calibration"]["blend_weight"] = 1.5;
  CHECK_THROWS_AS(make_predictor(doc), ModelError);
  o.blend = "bogus";
  CHECK_THROWS_AS(train_model(t, "none", o, notes), mlprio::UsageError);
}
