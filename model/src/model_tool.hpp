// The library behind mlprio-model (train, evaluate, predict, explain); main.cpp only parses
// arguments and calls these. Library functions throw (ModelError, InputError, XgbError,
// std::invalid_argument); main() decides the exit code.
#pragma once

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mlprio/jobs/trace.hpp"
#include "mlprio/model/features.hpp"

namespace mlprio::model {

struct TrainOptions {
  std::string kind = "xgboost";      // or "formula"
  double train_fraction = 0.8;       // first F of jobs by submit time
  double calib_fraction = 0.2;       // tail of the training slice held out for calibration
  double underpredict_penalty = 1.0; // cost of under- vs over-prediction; tau = X / (1 + X)
  double upper_quantile = 0.95;      // residual quantile behind runtime_upper
  std::string objective = "reg:squarederror";  // on log run time; or reg:absoluteerror (median)
  int rounds = 200;
  int max_depth = 6;
  double eta = 0.1;
  int seed = 42;
  int nthread = 1;                   // 1 = bit-for-bit reproducible
  // Blend with the last-two baseline, weight learned on the calibration slice by maximising
  // within-2x ("within2x") or minimising MAE ("mae"); "none" = the model alone.
  std::string blend = "none";
};

// Trains on an in-memory trace (sorted by submit, as load_trace returns it). `notes` receives
// human-readable remarks (e.g. classifier skipped). Returns the model document.
nlohmann::json train_model(const Trace& trace, const std::string& trace_sha256,
                           const TrainOptions& opt, std::vector<std::string>& notes);

struct EvalOptions {
  double test_fraction = 0.2;
  std::string plot_dir;  // empty: no plot
};

// Metrics of the model and the two baselines on the last `test_fraction` of the trace.
nlohmann::json evaluate_model(const nlohmann::json& model_doc, const Trace& trace,
                              const EvalOptions& opt);

// Parses "key=value,key=value" into a one-job trace (names interned into trace.names). Keys:
// user, group, account, partition, qos, queue, name, submit, req_procs, req_nodes, req_gpus,
// req_mem (bytes, or with K/M/G/T suffix), req_time (seconds), and the LLM feature keys.
Trace job_from_spec(const std::string& spec);

// Feature contributions (XGBoost pred_contribs, log-seconds) of one job; formula models say
// which branch they took.
nlohmann::json explain_job(const nlohmann::json& model_doc, const Trace& one_job);

// Epoch offset for time-of-day features: SWF's UnixStartTime, else 0 (times already absolute).
double trace_epoch_offset(const Trace& t);

}  // namespace mlprio::model
