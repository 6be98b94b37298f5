// The mlprio model file: one JSON document carrying format name and version, the kind of
// predictor, the feature schema it was trained on, training provenance and metrics, the frozen
// per-user history, the calibration shifts and (kind "xgboost") XGBoost's own saved model as
// base64. read_model_document() is the gate every load goes through: it refuses missing,
// oversized, group/world-writable, corrupt, wrong-format, wrong-version and wrong-schema files
// with a ModelError naming the file and the reason, because slurmctld loads it as root.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "mlprio/model/features.hpp"
#include "mlprio/model/predictor.hpp"

namespace mlprio::model {

inline constexpr const char* MODEL_FORMAT = "mlprio-model";
inline constexpr int MODEL_VERSION = 1;
inline constexpr uint64_t MODEL_MAX_BYTES = 256ULL << 20;
// How many times read_model_document() reads a file that changes while it is read before it
// refuses it (see model_file.cpp: a file rewritten in place must not load as a mix).
inline constexpr int MODEL_READ_ATTEMPTS = 5;
// Deepest booster tree a model file may hold (root at depth 0); `mlprio-model train --max-depth`
// is bounded by it. Training uses 6 by default; XGBoost's SHAP (explain) works per level.
inline constexpr int MODEL_MAX_TREE_DEPTH = 64;

// The schema array this build writes and expects.
nlohmann::json schema_json();
// A new document of `kind` with what every model file starts with: format, version, kind,
// schema_version and schema (the fields check_model_document() requires).
nlohmann::json model_document_header(const std::string& kind);

// Reads and checks a model file (see the file comment); throws ModelError. What it returns was
// read from one unchanging version of the file: a file rewritten in place while it is read is
// read again, and refused as "changed while it was being read" if it does not settle.
nlohmann::json read_model_document(const std::string& path);
namespace detail {
// Fault injection for tests only: when set, read_model_document() calls it after each piece it
// reads, with the attempt (0-based), the pass (0: the read it keeps, 1: the read it compares)
// and the bytes read so far in that pass. A test rewrites the file from it to tear a read at a
// chosen place. Null (the default) costs one atomic load per piece.
using ModelReadHook = void (*)(void* arg, int attempt, int pass, uint64_t offset);
void set_model_read_hook(ModelReadHook hook, void* arg);
}  // namespace detail

// Checks a parsed document (format, version, schema, kind present); throws ModelError whose
// message starts with `origin`.
void check_model_document(const nlohmann::json& doc, const std::string& origin);
// Writes atomically (temporary file + rename) with mode 0644; throws ModelError.
void write_model_document(const std::string& path, const nlohmann::json& doc);

// Builds the predictor a checked document describes (registered by "kind"), with the policy of
// its "policy" object (defaults when absent).
std::unique_ptr<Predictor> make_predictor(const nlohmann::json& doc);
std::unique_ptr<Predictor> make_predictor_of_kind(const nlohmann::json& doc);

// The "policy" object (`mlprio-replay tune` writes it): the score's parameters, the backfilling
// estimate, correction and candidate order. Reading checks every value's type and range and
// throws ModelError naming the field.
nlohmann::json policy_to_json(const PolicyParams& p);
PolicyParams policy_from_json(const nlohmann::json& j);

// Frozen user history <-> JSON (keys are hex user hashes: no user names in the file).
nlohmann::json history_to_json(const UserHistory& h);
UserHistory history_from_json(const nlohmann::json& j);

std::string base64_encode(std::string_view bytes);
// Throws ModelError on a character outside the alphabet or a bad length.
std::string base64_decode(std::string_view text);

// The run-time calibration applied on top of a log-run-time regressor: the point prediction is
// exp(margin + point_shift) and the upper one exp(margin + upper_shift), both capped by the
// request when there is one.
//
// Blend: with weight w < 1 the log prediction is
// w * margin + (1 - w) * log(baseline), baseline = the user's last-two mean capped by the request,
// else the request (see blend_baseline()); the shifts apply after blending. `mlprio-model train`
// learns w on the calibration slice (the past of every test job). w = 1 (and model files
// without "blend_weight") is the plain model, bit for bit.
//
// Margin anchor (schema 3, `margin_anchor`): the regressor's trees were fitted to
// log(run) - log(anchor) instead of log(run) - base_score, i.e. they correct a baseline per job
// (XGBoost's base_margin). The margin is then log(anchor) + the trees' sum, where the anchor is
// the request ("request") or the last-two baseline ("last2", see blend_baseline()), and a row
// without one falls back to the booster's base score. NONE (and model files without the field)
// is the usual base_score + trees.
enum class MarginAnchor { NONE, REQUEST, LAST2, SIMILAR };
struct Calibration {
  double point_shift = 0.0;
  double upper_shift = 0.0;
  double blend_weight = 1.0;
  MarginAnchor anchor = MarginAnchor::NONE;
};

// The baseline a blended model mixes in, in seconds: the row's last-two mean capped by
// `req_time` when both exist, else whichever exists; NaN when neither (the model alone then).
inline double blend_baseline(const float* row, double req_time) {
  const double l2 = row[F_HIST_LAST2_MEAN];
  if (std::isnan(l2)) return req_time > 0 ? req_time : std::numeric_limits<double>::quiet_NaN();
  return req_time > 0 ? std::min(l2, req_time) : l2;
}

// Blended log prediction before the calibration shift.
inline double blend_log(double margin, double baseline, double w) {
  if (w == 1.0 || std::isnan(baseline)) return margin;
  return w * margin + (1.0 - w) * std::log(std::max(baseline, 1.0));
}

// The anchor of a row in log seconds (see MarginAnchor); `fallback` (the base score) when the
// row has none. The value training gives XGBoost as base_margin (as a float).
inline double anchor_log(MarginAnchor a, const float* row, double req_time, double fallback) {
  double x = std::numeric_limits<double>::quiet_NaN();
  if (a == MarginAnchor::REQUEST && req_time > 0) x = req_time;
  if (a == MarginAnchor::LAST2) x = blend_baseline(row, req_time);
  if (a == MarginAnchor::SIMILAR) {
    // The user's latest similar jobs, else the latest run/request ratio times this request,
    // else last-two (else the request); capped by the request.
    x = row[F_SIM_LAST2_MEAN];
    if (std::isnan(x)) x = row[F_LAST_RATIO_TIMES_REQ];
    if (std::isnan(x)) x = blend_baseline(row, req_time);
    if (req_time > 0 && !std::isnan(x)) x = std::min(x, req_time);
  }
  return std::isnan(x) ? fallback : std::log(std::max(x, 1.0));
}
// The log prediction before the shift from the trees' margin (`margin`, which includes the
// booster's base score `base_score`): the anchor replaces the base score, then the blend with
// last-two. What the deployed predictor computes; tests use it to check the predictor.
inline double calibrated_log(double margin, double base_score, const float* row, double req_time,
                             const Calibration& c) {
  if (c.anchor != MarginAnchor::NONE)
    margin = margin - base_score + anchor_log(c.anchor, row, req_time, base_score);
  return blend_log(margin, blend_baseline(row, req_time), c.blend_weight);
}
// The "calibration" object of a model document (defaults when absent); throws ModelError for a
// value out of range.
Calibration calibration_from_json(const nlohmann::json& doc);
const char* anchor_name(MarginAnchor a);
// Throws ModelError for a name other than "none", "request" or "last2".
MarginAnchor anchor_from_name(const std::string& name);

// Builds an XGBoost-kind predictor from XGBoost's saved JSON model(s) without libxgboost (the
// trees are evaluated by our own allocation-free walker). `fail_json` may be empty.
std::unique_ptr<Predictor> make_tree_predictor(const std::string& runtime_json,
                                               const std::string& fail_json, Calibration cal,
                                               UserHistory history, double epoch_offset,
                                               std::string description);

// The closed-form model: the user's last-two mean capped by the request, else the request, else
// `default_runtime`; fail_prob is the user's past failure rate.
std::unique_ptr<Predictor> make_formula_predictor(UserHistory history, double default_runtime,
                                                  std::string description);

}  // namespace mlprio::model
