// The runtime model as the replayer's estimate (`--estimate model:FILE`): predicts a whole trace
// in one batch exactly as `mlprio-model evaluate` does (causal feature rows, predict_rows), so the
// replay of a trace's unseen tail uses the predictions whose accuracy model/README.md reports, and
// maps each submitted job back to its prediction. See mlprio/replay/ml.hpp.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "mlprio/model/features.hpp"
#include "mlprio/replay/ml.hpp"

namespace mlprio::replay {

std::string_view estimate_quantile_name(EstimateQuantile q) {
  switch (q) {
    case EstimateQuantile::POINT:
      return "point";
    case EstimateQuantile::UPPER:
      return "upper";
    case EstimateQuantile::REQUEST:
      return "request";
    case EstimateQuantile::LAST2:
      return "last2";
  }
  return "upper";
}

EstimateQuantile parse_estimate_quantile(std::string_view s) {
  if (s == "point") return EstimateQuantile::POINT;
  if (s == "upper") return EstimateQuantile::UPPER;
  if (s == "request") return EstimateQuantile::REQUEST;
  if (s == "last2") return EstimateQuantile::LAST2;
  throw ConfigError("--estimate-quantile '" + std::string(s) +
                    "': valid values are point (the predicted run time), upper (the model's "
                    "high quantile, runtime_upper), request (the requested time) and last2 (the "
                    "user's two latest finished runs, EASY++'s estimate)");
}

std::vector<model::Prediction> predict_trace(const model::Predictor& predictor,
                                             const Trace& trace) {
  // SWF submit times count from the header's UnixStartTime; the model's time-of-day features need
  // Unix seconds (the same offset mlprio-model's trace_epoch_offset() applies).
  const double epoch_offset =
      trace.header.unix_start_time > 0 ? static_cast<double>(trace.header.unix_start_time) : 0.0;
  const model::FeatureMatrix rows = model::build_features(trace.jobs, trace.names, epoch_offset);
  std::vector<model::Prediction> out(trace.jobs.size());
  predictor.predict_rows(rows.values, trace.jobs, out);
  return out;
}

MlPredictions::MlPredictions(std::span<const Job> replayed,
                             std::span<const model::Prediction> preds,
                             const model::ScoreConfig& score_config)
    : jobs(replayed.begin(), replayed.end()),
      predictions(preds.begin(), preds.end()),
      score(score_config) {
  if (jobs.size() != predictions.size())
    throw ConfigError("model predictions cover " + std::to_string(predictions.size()) +
                      " jobs but the replay has " + std::to_string(jobs.size()));
  by_id.reserve(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i)
    if (!by_id.emplace(jobs[i].id, i).second)
      throw ConfigError("--estimate model: job id " + std::to_string(jobs[i].id) +
                        " appears twice in the replayed jobs; model estimates need unique ids");
}

double model_estimate(const Job& job, const model::Prediction& p, EstimateQuantile q) {
  if (q == EstimateQuantile::REQUEST || q == EstimateQuantile::LAST2)  // LAST2: no history here
    return job.req_time >= 0 ? job.req_time : std::max(job.run, 0.0);
  const double first = q == EstimateQuantile::UPPER ? p.runtime_upper : p.runtime;
  const double second = q == EstimateQuantile::UPPER ? p.runtime : p.runtime_upper;
  if (std::isfinite(first) && first >= 0) return first;
  if (std::isfinite(second) && second >= 0) return second;
  return job.req_time >= 0 ? job.req_time : std::max(job.run, 0.0);
}

EstimateFn model_estimate_fn(std::shared_ptr<const MlPredictions> ml, EstimateQuantile q) {
  if (!ml) throw ConfigError("model_estimate_fn: no predictions");
  return [ml = std::move(ml), q](const Job& job) {
    const auto it = ml->by_id.find(job.id);
    if (it == ml->by_id.end())
      throw ConfigError("--estimate model: no prediction for job " + std::to_string(job.id));
    return model_estimate(job, ml->predictions[it->second], q);
  };
}

EstimateChoice parse_estimate_choice(std::string_view text) {
  EstimateChoice c;
  if (text == "request") {
    c.mode = EstimateMode::REQUEST;
  } else if (text == "actual") {
    c.mode = EstimateMode::ACTUAL;
  } else if (text.rfind("model:", 0) == 0 && text.size() > 6) {
    c.mode = EstimateMode::CUSTOM;
    c.model_path = std::string(text.substr(6));
  } else {
    throw ConfigError("--estimate '" + std::string(text) +
                      "': valid values are request, actual, last2 (the mean of the user's last "
                      "two run times) and model:FILE (a mlprio-model file)");
  }
  return c;
}

std::unique_ptr<model::Predictor> load_replay_model(const std::string& path) {
  try {
    return model::load_predictor(path);
  } catch (const model::ModelError& e) {
    throw ConfigError("--estimate model:" + path + ": cannot use the model file '" + path +
                      "': " + e.what());
  }
}

void TraceModel::apply_window(SimConfig& cfg, std::span<const Job> jobs, int64_t start,
                              int64_t len) const {
  const std::span<const Job> w = select_window(jobs, start, len);
  const auto first = static_cast<size_t>(w.empty() ? 0 : w.data() - jobs.data());
  auto ml = std::make_shared<const MlPredictions>(
      w, std::span<const model::Prediction>(predictions).subspan(first, w.size()), score);
  cfg.estimate = EstimateMode::CUSTOM;
  cfg.estimate_fn = model_estimate_fn(ml, quantile);
  cfg.policy_options.ml = std::move(ml);
}

TraceModel make_trace_model(const model::Predictor& predictor, const Trace& trace,
                            EstimateQuantile quantile, const model::ScoreConfig& score,
                            const std::string& what) {
  TraceModel m;
  m.quantile = quantile;
  m.score = score;
  try {
    m.predictions = predict_trace(predictor, trace);
  } catch (const model::ModelError& e) {
    throw ConfigError(what + ": " + e.what());
  }
  return m;
}

}  // namespace mlprio::replay
