// The flattened tree walker (core/src/model/predictor_xgboost.cpp) against an independent,
// deliberately naive walk of XGBoost's saved JSON: the margins must be bit-identical (same float
// summation in tree order), on rows with missing values, whether rows come one at a time or in
// blocks of any size, and skipping the failure model must not change the run-time outputs.
// Models with non-finite thresholds (which the walker's missing-value trick cannot represent)
// are refused.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "mlprio/model/model_file.hpp"
#include "model_tool.hpp"
#include "synthetic.hpp"

using namespace mlprio;
using namespace mlprio::model;

// Internal switch of predictor_xgboost.cpp (no header on purpose): 0 automatic, 1 scalar walker,
// 2 AVX2 walker; returns whether this CPU can run the AVX2 one.
namespace mlprio::model::detail {
bool set_tree_walk_mode(int mode);
}

namespace {

// The textbook walk: recursive-free, original node numbering, isnan -> default direction.
double reference_margin(const nlohmann::json& booster, const float* row, bool logistic) {
  const auto& learner = booster["learner"];
  const double base = std::stod(learner["learner_model_param"]["base_score"].get<std::string>());
  float sum = 0.0f;
  for (const auto& t : learner["gradient_booster"]["model"]["trees"]) {
    size_t k = 0;
    while (t["left_children"][k].get<int>() >= 0) {
      const float v = row[t["split_indices"][k].get<int>()];
      const bool dl = t["default_left"][k].is_boolean() ? t["default_left"][k].get<bool>()
                                                        : t["default_left"][k].get<int>() != 0;
      const bool left = std::isnan(v) ? dl : v < t["split_conditions"][k].get<float>();
      k = static_cast<size_t>((left ? t["left_children"] : t["right_children"])[k].get<int>());
    }
    sum += t["split_conditions"][k].get<float>();
  }
  return (logistic ? -std::log(1.0 / base - 1.0) : base) + static_cast<double>(sum);
}

// The booster's base score, as the walker reads it (the anchor replaces it).
double base_score(const nlohmann::json& booster) {
  return std::stod(booster["learner"]["learner_model_param"]["base_score"].get<std::string>());
}

struct Trained {
  Trace trace = testing::synthetic_trace(1500, 11);
  nlohmann::json doc;
  FeatureMatrix X;
  Trained() {
    TrainOptions o;
    o.rounds = 40;
    std::vector<std::string> notes;
    doc = train_model(trace, "none", o, notes);
    X = build_features(trace.jobs, trace.names, trace_epoch_offset(trace));
  }
};

const Trained& trained() {
  static const Trained t;
  return t;
}

}  // namespace

TEST_CASE("the flat walker's margins are bit-identical to a naive walk", "[model][walker]") {
  const Trained& t = trained();
  REQUIRE(t.doc["booster_fail"].is_string());
  const auto rt = nlohmann::json::parse(base64_decode(t.doc["booster_runtime"].get<std::string>()));
  const auto fl = nlohmann::json::parse(base64_decode(t.doc["booster_fail"].get<std::string>()));
  const auto pred = make_predictor(t.doc);
  std::vector<Prediction> out(t.trace.jobs.size());
  pred->predict_rows(t.X.values, t.trace.jobs, out);
  const Calibration cal = calibration_from_json(t.doc);
  CHECK(cal.anchor == MarginAnchor::SIMILAR);  // the default
  const double base = base_score(rt);
  size_t missing = 0;
  for (size_t i = 0; i < t.trace.jobs.size(); ++i) {
    const float* row = t.X.values.data() + i * N_FEATURES;
    for (int f = 0; f < N_FEATURES; ++f) missing += std::isnan(row[f]) ? 1 : 0;
    const double m = reference_margin(rt, row, false);
    const double runtime = std::min(
        std::exp(calibrated_log(m, base, row, t.trace.jobs[i].req_time, cal) + cal.point_shift),
        t.trace.jobs[i].req_time);
    const double fail = 1.0 / (1.0 + std::exp(-reference_margin(fl, row, true)));
    INFO("job " << i);
    REQUIRE(out[i].runtime == runtime);  // exact, not approximate
    REQUIRE(out[i].fail_prob == fail);
  }
  CHECK(missing > 0);  // the default directions were exercised
}

TEST_CASE("batch size and the fail_prob option do not change predictions", "[model][walker]") {
  const Trained& t = trained();
  const auto pred = make_predictor(t.doc);
  const size_t n = t.trace.jobs.size();
  std::vector<Prediction> all(n);
  pred->predict_rows(t.X.values, t.trace.jobs, all);
  // Odd chunk sizes cross the walker's one-row, lane and block boundaries.
  for (size_t chunk : {size_t{1}, size_t{3}, size_t{7}, size_t{9}, size_t{65}, size_t{200}}) {
    for (size_t b = 0; b < n; b += chunk) {
      const size_t k = std::min(chunk, n - b);
      std::vector<Prediction> part(k);
      pred->predict_rows(std::span<const float>(t.X.values.data() + b * N_FEATURES, k * N_FEATURES),
                         std::span<const Job>(t.trace.jobs.data() + b, k), part);
      for (size_t i = 0; i < k; ++i) {
        INFO("chunk " << chunk << " job " << b + i);
        REQUIRE(part[i].runtime == all[b + i].runtime);
        REQUIRE(part[i].runtime_upper == all[b + i].runtime_upper);
        REQUIRE(part[i].fail_prob == all[b + i].fail_prob);
      }
    }
  }
  Predictor::Options opt;
  opt.fail_prob = false;
  std::vector<Prediction> fast(n);
  pred->predict_rows_with(t.X.values, t.trace.jobs, fast, opt);
  for (size_t i = 0; i < n; ++i) {
    REQUIRE(fast[i].runtime == all[i].runtime);
    REQUIRE(std::isnan(fast[i].fail_prob));
  }
}

TEST_CASE("a booster with a non-finite threshold is refused", "[model][walker]") {
  const Trained& t = trained();
  auto rt = nlohmann::json::parse(base64_decode(t.doc["booster_runtime"].get<std::string>()));
  auto& tree = rt["learner"]["gradient_booster"]["model"]["trees"][0];
  REQUIRE(tree["left_children"][0].get<int>() >= 0);  // root is a split
  tree["split_conditions"][0] = "-inf";  // not a number: refused as malformed either way
  nlohmann::json doc = t.doc;
  doc["booster_runtime"] = base64_encode(rt.dump());
  CHECK_THROWS_AS(make_predictor(doc), ModelError);
  tree["split_conditions"][0] = 1e300;  // finite in JSON, +inf as float32
  doc["booster_runtime"] = base64_encode(rt.dump());
  CHECK_THROWS_AS(make_predictor(doc), ModelError);
}

namespace {
// The model document with tree `tree` of the run-time booster changed by `edit`.
template <class Edit>
nlohmann::json with_tree_edit(const Trained& t, size_t tree, Edit edit) {
  auto rt = nlohmann::json::parse(base64_decode(t.doc["booster_runtime"].get<std::string>()));
  edit(rt["learner"]["gradient_booster"]["model"]["trees"][tree]);
  nlohmann::json doc = t.doc;
  doc["booster_runtime"] = base64_encode(rt.dump());
  return doc;
}
std::string refusal(const nlohmann::json& doc) {
  try {
    make_predictor(doc);
  } catch (const ModelError& e) {
    return e.what();
  }
  return "accepted";
}
}  // namespace

TEST_CASE("booster trees are checked as XGBoost reads them: leaf iff left child is -1",
          "[model][walker]") {
  const Trained& t = trained();
  REQUIRE(t.doc["booster_runtime"].is_string());
  // -2 was taken for a leaf by the walker, but XGBoost follows it as an index (explain crashed).
  const auto minus_two =
      with_tree_edit(t, 3, [](nlohmann::json& tr) { tr["left_children"][0] = -2; });
  CHECK_THAT(refusal(minus_two), Catch::Contains("run-time booster, tree 3, node 0") &&
                                     Catch::Contains("not node indices"));
  const Trace one = job_from_spec("user=u1,req_time=7200,req_procs=4");
  CHECK_THROWS_AS(explain_job(minus_two, one), ModelError);
  // A right child out of range, and an inner node pointing back at the root.
  const auto out_of_range = with_tree_edit(t, 0, [](nlohmann::json& tr) {
    tr["right_children"][0] = static_cast<int>(tr["left_children"].size());
  });
  CHECK_THAT(refusal(out_of_range), Catch::Contains("tree 0, node 0") && Catch::Contains("[0, "));
  const auto cycle = with_tree_edit(t, 1, [](nlohmann::json& tr) {
    const int l = tr["left_children"][0].get<int>();
    REQUIRE(l > 0);
    REQUIRE(tr["left_children"][l].get<int>() >= 0);  // the root's left child is a split
    tr["right_children"][l] = 0;
  });
  CHECK_THAT(refusal(cycle), Catch::Contains("tree 1, node ") && Catch::Contains("reached twice"));
  // A leaf keeps -1 on the right too; only the left index decides (as in XGBoost).
  const auto leaf_right = with_tree_edit(t, 0, [](nlohmann::json& tr) {
    for (size_t k = 0; k < tr["left_children"].size(); ++k)
      if (tr["left_children"][k] == -1) tr["right_children"][k] = 7;
  });
  CHECK(refusal(leaf_right) == "accepted");
}

TEST_CASE("a booster whose base_score is not a finite number is refused", "[model][walker]") {
  const Trained& t = trained();
  auto with_base = [&t](const char* key, const nlohmann::json& base) {
    auto b = nlohmann::json::parse(base64_decode(t.doc[key].get<std::string>()));
    b["learner"]["learner_model_param"]["base_score"] = base;
    nlohmann::json doc = t.doc;
    doc[key] = base64_encode(b.dump());
    return doc;
  };
  // XGBoost writes base_score as a string; "nan" used to give NaN for every prediction.
  for (const char* bad : {"nan", "NaN", "inf", "-inf", "0.5abc", ""}) {
    INFO(bad);
    CHECK_THAT(refusal(with_base("booster_runtime", bad)),
               Catch::Contains("run-time booster: learner_model_param.base_score") &&
                   Catch::Contains("not a finite number"));
  }
  CHECK(refusal(with_base("booster_runtime", "5E-1")) == "accepted");
  CHECK(refusal(with_base("booster_runtime", 0.5)) == "accepted");
  // The failure model's base score is a probability: 1 would make its margin infinite.
  CHECK_THAT(refusal(with_base("booster_fail", "1")), Catch::Contains("not a probability"));
  // Accepted documents predict finite numbers.
  const auto pred = make_predictor(with_base("booster_runtime", "2.5E0"));
  std::vector<Prediction> out(t.trace.jobs.size());
  pred->predict_rows(t.X.values, t.trace.jobs, out);
  for (const auto& p : out) REQUIRE(std::isfinite(p.runtime));
}

TEST_CASE("booster trees deeper than 64 levels are refused", "[model][walker]") {
  const Trained& t = trained();
  // A chain: inner node 2i splits into leaf 2i+1 and the next inner node 2i+2.
  auto chain = [&t](int depth) {
    return with_tree_edit(t, 0, [depth](nlohmann::json& tr) {
      const int n = 2 * depth + 1;
      std::vector<int> l(n, -1), r(n, -1), f(n, 0), d(n, 1);
      std::vector<float> c(n, 0.5f);
      for (int i = 0; i < depth; ++i) {
        l[2 * i] = 2 * i + 1;
        r[2 * i] = 2 * i + 2;
      }
      tr["left_children"] = l;
      tr["right_children"] = r;
      tr["split_indices"] = f;
      tr["split_conditions"] = c;
      tr["default_left"] = d;
    });
  };
  CHECK(refusal(chain(MODEL_MAX_TREE_DEPTH)) == "accepted");
  CHECK_THAT(refusal(chain(MODEL_MAX_TREE_DEPTH + 1)),
             Catch::Contains("tree 0, node 128") && Catch::Contains("deeper than 64"));
}

TEST_CASE("the AVX2 and scalar batch walkers agree bit for bit", "[model][walker][avx2]") {
  const Trained& t = trained();
  const auto rt = nlohmann::json::parse(base64_decode(t.doc["booster_runtime"].get<std::string>()));
  const auto fl = nlohmann::json::parse(base64_decode(t.doc["booster_fail"].get<std::string>()));
  const auto pred = make_predictor(t.doc);
  const size_t n = t.trace.jobs.size();
  // Random rows: each feature taken from a random job (so values fall on both sides of real
  // thresholds), a fifth of them missing, some pushed to extremes.
  std::mt19937 rng(5);
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> rows(n * N_FEATURES);
  for (size_t i = 0; i < n; ++i)
    for (int f = 0; f < N_FEATURES; ++f) {
      const float p = u(rng);
      float v = t.X.values[pick(rng) * N_FEATURES + static_cast<size_t>(f)];
      if (p < 0.2f)
        v = std::nanf("");
      else if (p < 0.23f)
        v = -1e30f;
      else if (p < 0.26f)
        v = 1e30f;
      rows[i * N_FEATURES + static_cast<size_t>(f)] = v;
    }
  struct Reset {
    ~Reset() { detail::set_tree_walk_mode(0); }
  } reset;
  const bool has_avx2 = detail::set_tree_walk_mode(1);
  if (!has_avx2) WARN("this CPU has no AVX2: both runs use the scalar walker");
  // Chunk sizes cover the one-row path, 8-row vectors alone, 32-row groups plus vectors, and
  // the scalar tail after the vectors.
  const std::vector<size_t> chunks{3, 8, 13, 40, 64, 71};
  auto run = [&](std::vector<Prediction>& out) {
    for (size_t c = 0; c < chunks.size(); ++c)
      for (size_t b = 0; b < n; b += chunks[c]) {
        const size_t k = std::min(chunks[c], n - b);
        pred->predict_rows(std::span<const float>(rows.data() + b * N_FEATURES, k * N_FEATURES),
                           std::span<const Job>(t.trace.jobs.data() + b, k),
                           std::span<Prediction>(out.data() + c * n + b, k));
      }
  };
  std::vector<Prediction> scalar(chunks.size() * n), avx2(chunks.size() * n);
  run(scalar);
  detail::set_tree_walk_mode(2);
  run(avx2);
  const Calibration cal = calibration_from_json(t.doc);
  const double base = base_score(rt);
  for (size_t c = 0; c < chunks.size(); ++c)
    for (size_t i = 0; i < n; ++i) {
      INFO("chunk " << chunks[c] << " row " << i);
      const Prediction& a = scalar[c * n + i];
      const Prediction& b = avx2[c * n + i];
      REQUIRE(a.runtime == b.runtime);
      REQUIRE(a.runtime_upper == b.runtime_upper);
      REQUIRE(a.fail_prob == b.fail_prob);
      if (c == 0) continue;
      const float* row = rows.data() + i * N_FEATURES;
      const double m = reference_margin(rt, row, false);
      const double runtime = std::min(
          std::exp(calibrated_log(m, base, row, t.trace.jobs[i].req_time, cal) + cal.point_shift),
          t.trace.jobs[i].req_time);
      REQUIRE(b.runtime == runtime);
      REQUIRE(b.fail_prob == 1.0 / (1.0 + std::exp(-reference_margin(fl, row, true))));
    }
}
