// Model-file refusals: load_predictor must refuse missing, corrupt, wrong-format, wrong-version,
// wrong-schema and group/world-writable files with a ModelError that says why, because
// slurmctld loads the file as root. Also base64 round trips.
#include <sys/stat.h>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "mlprio/model/model_file.hpp"
#include "model_tool.hpp"
#include "synthetic.hpp"

using namespace mlprio;
using namespace mlprio::model;

namespace {
std::string tmp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("mlprio_mf_" + name)).string();
}
void write_text(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::filesystem::remove(path);
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
}
nlohmann::json formula_doc() {
  const Trace t = testing::synthetic_trace(300, 2);
  TrainOptions o;
  o.kind = "formula";
  std::vector<std::string> notes;
  return train_model(t, "none", o, notes);
}
void expect_refusal(const std::string& path, const std::string& reason) {
  try {
    load_predictor(path);
    FAIL("loaded " << path << " although it should be refused for: " << reason);
  } catch (const ModelError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(reason) != std::string::npos);
    CHECK(std::string(e.what()).find(path) != std::string::npos);
  }
}
}  // namespace

TEST_CASE("a good formula model file loads", "[model][file]") {
  const std::string p = tmp("good.json");
  write_model_document(p, formula_doc());
  CHECK(load_predictor(p)->kind() == "formula");
  std::filesystem::remove(p);
}

TEST_CASE("a model file that cannot be renamed into place says why", "[model][file]") {
  // The target is a non-empty directory: rename() fails with EISDIR. The message used to be
  // "write failed: Is a directory", without saying which step failed.
  const std::string p = tmp("rename_target.json");
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p + "/inside");
  try {
    write_model_document(p, formula_doc());
    FAIL("wrote over a directory");
  } catch (const ModelError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("cannot rename " + p + ".tmp.") != std::string::npos);
    CHECK(what.find(" to " + p + ": Is a directory") != std::string::npos);
  }
  // The temporary was removed.
  for (const auto& f : std::filesystem::directory_iterator(std::filesystem::path(p).parent_path()))
    CHECK(f.path().string().rfind(p + ".tmp.", 0) == std::string::npos);
  std::filesystem::remove_all(p);
}

TEST_CASE("model files are refused with a reason", "[model][file]") {
  const auto doc = formula_doc();
  const std::string p = tmp("bad.json");
  SECTION("missing") {
    expect_refusal(tmp("does_not_exist.json"), "cannot open");
  }
  SECTION("corrupt JSON") {
    write_text(p, doc.dump().substr(0, 200));
    expect_refusal(p, "not valid JSON");
  }
  SECTION("empty") {
    write_text(p, "");
    expect_refusal(p, "not valid JSON");
  }
  SECTION("wrong format") {
    auto d = doc;
    d["format"] = "something-else";
    write_text(p, d.dump());
    expect_refusal(p, "\"format\"");
  }
  SECTION("wrong version") {
    auto d = doc;
    d["version"] = MODEL_VERSION + 1;
    write_text(p, d.dump());
    expect_refusal(p, "version 2 is not supported");
  }
  SECTION("schema column renamed") {
    auto d = doc;
    d["schema"][3] = "req_mem_mib";
    write_text(p, d.dump());
    expect_refusal(p, "column 3");
  }
  SECTION("schema column missing") {
    auto d = doc;
    d["schema"].erase(d["schema"].size() - 1);
    write_text(p, d.dump());
    expect_refusal(p, "schema does not match");
  }
  SECTION("unknown kind") {
    auto d = doc;
    d["kind"] = "oracle";
    write_text(p, d.dump());
    expect_refusal(p, "unknown model kind");
  }
  SECTION("group-writable") {
    write_text(p, doc.dump(), 0664);
    expect_refusal(p, "writable by group or others");
  }
  SECTION("world-writable") {
    write_text(p, doc.dump(), 0646);
    expect_refusal(p, "writable by group or others");
  }
  SECTION("a directory") {
    expect_refusal(std::filesystem::temp_directory_path().string(), "not a regular file");
  }
  SECTION("xgboost kind with a corrupt booster") {
    auto d = doc;
    d["kind"] = "xgboost";
    d["booster_runtime"] = base64_encode("{\"learner\": 3}");
    write_text(p, d.dump());
    expect_refusal(p, "booster is malformed");
  }
  SECTION("xgboost kind with bad base64") {
    auto d = doc;
    d["kind"] = "xgboost";
    d["booster_runtime"] = "@@@@";
    write_text(p, d.dump());
    expect_refusal(p, "base64");
  }
  std::filesystem::remove(p);
}

TEST_CASE("a model file nested 100,000 levels deep is refused, not a stack overflow",
          "[model][file][json]") {
  // 200 KB of brackets in a field the loader used to re-serialise (training.window, a schema
  // column): recursing once per level overflowed the stack.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string p = tmp("deep.json");
  for (const char* field : {"window", "schema"}) {
    auto d = formula_doc();
    if (std::string(field) == "window")
      d["training"]["window"] = "@DEEP@";
    else
      d["schema"] = nlohmann::json::array({"@DEEP@"});
    std::string text = d.dump();
    text.replace(text.find("\"@DEEP@\""), 8, deep);
    write_text(p, text);
    INFO(field);
    expect_refusal(p, "nested deeper than 64 levels");
  }
  // The XGBoost booster inside the file goes through the same guard.
  auto d = formula_doc();
  d["kind"] = "xgboost";
  d["booster_runtime"] = base64_encode("{\"learner\": " + deep + "}");
  write_text(p, d.dump());
  expect_refusal(p, "booster is nested deeper than 64 levels");
  std::filesystem::remove(p);
}

TEST_CASE("non-finite or malformed numbers in a model file are refused", "[model][file]") {
  const auto doc = formula_doc();
  REQUIRE(doc["user_history"].is_object());
  REQUIRE(!doc["user_history"].empty());
  const std::string user = doc["user_history"].begin().key();
  const std::string p = tmp("nonfinite.json");
  auto refused = [&](nlohmann::json d, const std::string& reason) {
    write_text(p, d.dump());
    expect_refusal(p, reason);
  };
  SECTION("a run time written as the string \"nan\"") {
    auto d = doc;
    d["user_history"][user][0] = "nan";
    refused(d, "expected a finite number or null");
  }
  SECTION("a count too large for an integer") {
    auto d = doc;
    d["user_history"][user][4] = 1e300;
    refused(d, "expected an integer >= 0");
  }
  SECTION("a user key that is not hex") {
    auto d = doc;
    d["user_history"]["not-hex"] = d["user_history"][user];
    refused(d, "not a 64-bit hex user hash");
  }
  SECTION("a negative default run time") {
    auto d = doc;
    d["formula"]["default_runtime"] = -5.0;
    refused(d, "default_runtime");
  }
  SECTION("NaN and infinity in a document built in memory") {
    // JSON text cannot hold them, but make_predictor() also takes documents from code.
    auto d = doc;
    d["formula"]["default_runtime"] = std::nan("");
    CHECK_THROWS_AS(make_predictor(d), ModelError);
    d = doc;
    d["user_history"][user][2] = std::numeric_limits<double>::infinity();
    CHECK_THROWS_AS(make_predictor(d), ModelError);
  }
  std::filesystem::remove(p);
}

TEST_CASE("the similar-job memory round-trips through the model file", "[model][file]") {
  const Trace t = testing::synthetic_trace(800, 4);
  UserHistory h;
  build_features(t.jobs, t.names, 0.0, &h);
  const nlohmann::json j = history_to_json(h);
  const UserHistory back = history_from_json(j);
  CHECK(history_to_json(back) == j);
  REQUIRE(back.by_user.size() == h.by_user.size());
  size_t full = 0;
  for (const auto& [key, s] : h.by_user) {
    const UserStats& b = back.by_user.at(key);
    REQUIRE(b.recent_n == s.recent_n);
    full += s.recent_n == RECENT_JOBS ? 1 : 0;
    for (int k = 0; k < s.recent_n; ++k) {
      CHECK(b.recent_at(k).req_time == s.recent_at(k).req_time);
      CHECK(b.recent_at(k).procs == s.recent_at(k).procs);
      CHECK(b.recent_at(k).run == s.recent_at(k).run);
    }
  }
  CHECK(full > 0);  // the ring wrapped for some users
  // The frozen history encodes exactly as the live one.
  const Trace one = job_from_spec("user=user3,req_time=7200,req_procs=4");
  std::vector<float> a(N_FEATURES), c(N_FEATURES);
  // user3 of the job spec and of the synthetic trace are the same name, so the same key.
  encode_with_history(one.jobs, one.names, h, 0.0, a);
  encode_with_history(one.jobs, one.names, back, 0.0, c);
  for (int f = 0; f < N_FEATURES; ++f)
    CHECK(((std::isnan(a[f]) && std::isnan(c[f])) || a[f] == c[f]));
  CHECK(a[F_SIM_COUNT] >= 0.0f);
}

TEST_CASE("malformed similar-job memories are refused", "[model][file]") {
  auto doc = formula_doc();
  const std::string user = doc["user_history"].begin().key();
  REQUIRE(doc["user_history"][user].size() == 12);
  const std::string p = tmp("recent.json");
  auto refused = [&](const nlohmann::json& recent, const std::string& reason) {
    auto d = doc;
    d["user_history"][user][11] = recent;
    write_text(p, d.dump());
    expect_refusal(p, reason);
  };
  refused("x", "expected an array of at most");
  refused(nlohmann::json::array({nlohmann::json::array({3600, 4})}),
          "is not [req_time, procs, run]");
  refused(nlohmann::json::array({nlohmann::json::array({0, 4, 10})}), "req_time");
  refused(nlohmann::json::array({nlohmann::json::array({3600, 2.5, 10})}), "procs");
  refused(nlohmann::json::array({nlohmann::json::array({3600, 4, -1})}), "run");
  nlohmann::json many = nlohmann::json::array();
  for (int k = 0; k <= RECENT_JOBS; ++k) many.push_back({3600, 4, 10});
  refused(many, "expected an array of at most");
  // Entries written without the memory (11 values) still load: no similar jobs yet.
  auto d = doc;
  d["user_history"][user].erase(11);
  write_text(p, d.dump());
  CHECK(load_predictor(p)->kind() == "formula");
  std::filesystem::remove(p);
}

TEST_CASE("an unknown margin anchor is refused", "[model][file]") {
  nlohmann::json doc = {{"calibration", {{"margin_anchor", "median"}}}};
  CHECK_THROWS_WITH(calibration_from_json(doc), Catch::Contains("margin_anchor"));
  doc["calibration"]["margin_anchor"] = 3;
  CHECK_THROWS_AS(calibration_from_json(doc), ModelError);
  doc["calibration"]["margin_anchor"] = "similar";
  CHECK(calibration_from_json(doc).anchor == MarginAnchor::SIMILAR);
  CHECK(calibration_from_json(nlohmann::json::object()).anchor == MarginAnchor::NONE);
}

TEST_CASE("base64 round-trips every length", "[model][file]") {
  std::string s;
  for (int n = 0; n < 70; ++n) {
    CHECK(base64_decode(base64_encode(s)) == s);
    s += static_cast<char>((n * 37 + 11) & 0xff);
  }
  CHECK(base64_encode("foobar") == "Zm9vYmFy");
  CHECK(base64_encode("fo") == "Zm8=");
  CHECK_THROWS_AS(base64_decode("Zm9"), ModelError);
}

TEST_CASE("predict/explain --job sizes out of range are refused, not wrapped", "[model][file]") {
  CHECK(job_from_spec("req_procs=4,req_mem=64G").jobs[0].req_mem == 64LL << 30);
  CHECK_THROWS_WITH(job_from_spec("req_procs=1e300"),
                    Catch::Contains("--job req_procs") && Catch::Contains("out of range"));
  CHECK_THROWS_WITH(job_from_spec("req_mem=9e18"), Catch::Contains("--job req_mem"));
  CHECK_THROWS_WITH(job_from_spec("req_gpus=1e300"), Catch::Contains("--job req_gpus"));
}

TEST_CASE("the policy object round-trips, request weight included, and refuses out of range",
          "[model][file]") {
  PolicyParams p;
  p.score.age_weight = 0.25;
  p.score.request_weight = 0.5;
  p.backfill_order = "fcfs";
  p.backfill_estimate = "last2";
  const PolicyParams back = policy_from_json(policy_to_json(p));
  CHECK(back.backfill_estimate == "last2");
  CHECK(back.score.age_weight == 0.25);
  CHECK(back.score.request_weight == 0.5);
  CHECK(back.backfill_order == "fcfs");
  // A policy written before the request weight existed ranks by the prediction.
  nlohmann::json old = policy_to_json(p);
  old.erase("request_weight");
  CHECK(policy_from_json(old).score.request_weight == 0.0);
  for (const nlohmann::json& bad :
       {nlohmann::json(1.5), nlohmann::json(-0.1), nlohmann::json("1")}) {
    nlohmann::json j = policy_to_json(p);
    j["request_weight"] = bad;
    CHECK_THROWS_WITH(policy_from_json(j), Catch::Contains("policy.request_weight"));
  }
  // The fair-share weight: round trip, absent = 0 (no term), range [0, 64].
  p.score.fairshare_weight = 0.5;
  CHECK(policy_from_json(policy_to_json(p)).score.fairshare_weight == 0.5);
  old = policy_to_json(p);
  old.erase("fairshare_weight");
  CHECK(policy_from_json(old).score.fairshare_weight == 0.0);
  for (const nlohmann::json& bad : {nlohmann::json(65), nlohmann::json(-1), nlohmann::json("x")}) {
    nlohmann::json j = policy_to_json(p);
    j["fairshare_weight"] = bad;
    CHECK_THROWS_WITH(policy_from_json(j), Catch::Contains("policy.fairshare_weight"));
  }
}
