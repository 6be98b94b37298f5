// The library behind mlprio-model (train, evaluate, predict, explain); the src/cmd_*.cpp files
// only parse arguments and call these. Library functions throw (ModelError, InputError, XgbError,
// std::invalid_argument); main() decides the exit code.
#pragma once

#include <iosfwd>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mlprio/jobs/trace.hpp"
#include "mlprio/model/features.hpp"

namespace mlprio::model {

struct TrainOptions {
  std::string kind = "xgboost";       // or "formula"
  double train_fraction = 0.8;        // first F of jobs by submit time
  double calib_fraction = 0.2;        // tail of the training slice held out for calibration
  double underpredict_penalty = 1.0;  // cost of under- vs over-prediction; tau = X / (1 + X)
  double upper_quantile = 0.95;       // residual quantile behind runtime_upper
  std::string objective = "reg:squarederror";  // on log run time; or reg:absoluteerror (median)
  int rounds = 200;                            // the maximum: early stopping may keep fewer trees
  // Stop when the calibration loss has not improved for this many rounds and keep the trees up
  // to the best round (0 = no early stopping: all `rounds` trees, and no modal rounds). The
  // regressor's loss is its own objective on the calibration slice (squared error of log run
  // time; absolute error for the other objectives); the failure classifier's is log loss on the
  // calibration slice's jobs with a final state.
  int early_stopping_rounds = 20;
  int max_depth = 6;              // used when tune is false (and always by the classifier)
  double min_child_weight = 3.0;  // likewise
  // Choose max_depth x min_child_weight for the regressor on the calibration slice from
  // TUNE_DEPTHS x TUNE_MIN_CHILD_WEIGHTS (the lowest calibration loss after early stopping and
  // blending; ties keep the earlier, shallower, more regularised candidate).
  bool tune = true;
  double eta = 0.1;
  int seed = 42;
  int nthread = 1;  // 1 = bit-for-bit reproducible
  // How the point prediction is chosen on the calibration slice: blend weight with last-two,
  // shift or not, and the tuning candidate. "both" (default): the lowest
  // max(pinball / best baseline pinball, (1 - within2x) / (1 - best baseline within2x)), below 1
  // exactly when it beats the request and last-two on both the MAE (pinball loss at penalty
  // != 1) and within-2x; "mae": the lowest pinball loss; "within2x": the highest within-2x;
  // "none": the plain shifted model (w = 1).
  std::string blend = "both";
  // The per-job baseline the run-time trees correct (XGBoost base_margin, see MarginAnchor):
  // "similar" (default: the user's latest similar jobs, else the latest run/request ratio times
  // the request, else last-two, else the request), "last2", "request" or "none" (base score).
  std::string anchor = "similar";
  // With early stopping, each tuning candidate is also continued by mode-seeking rounds (see
  // fit_modal in training.cpp) and both versions compete in the selection.
  bool modal = true;
  // Refit the chosen configuration on the whole training slice (calibration slice included).
  bool refit = true;
};

inline constexpr int TUNE_DEPTHS[] = {2, 3, 4, 6};
inline constexpr double TUNE_MIN_CHILD_WEIGHTS[] = {3.0, 10.0, 30.0};

// Trains on an in-memory trace (sorted by submit, as load_trace returns it). `notes` receives
// human-readable remarks (e.g. classifier skipped). Returns the model document.
nlohmann::json train_model(const Trace& trace, const std::string& trace_sha256,
                           const TrainOptions& opt, std::vector<std::string>& notes);

struct EvalOptions {
  double test_fraction = 0.2;
  std::string plot_dir;  // empty: no plot
  // CSV of every measured test job (id, user, submit, end, run, model, last2, request); empty:
  // none. For offline analysis of where the model and the baselines differ.
  std::string per_job_csv;
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

// mode=shadow records (shadow_report.cpp): one per job from site_factor/mlprio's
// "shadow: JobId=N user=U would_site=F [mlprio_shadow_limit=HH:MM:SS] [mlprio_shadow_refuse=P |
// mlprio_shadow_warn=P]" log lines (the first line of a job wins).
struct ShadowRecord {
  int64_t job_id = 0;
  std::string user;
  double site = std::numeric_limits<double>::quiet_NaN();     // the SITE it would have had
  double limit_s = std::numeric_limits<double>::quiet_NaN();  // the limit it would have got
  double fail_prob = std::numeric_limits<double>::quiet_NaN();
  bool flagged = false;  // would be refused or warned
};
struct ShadowLog {
  std::vector<ShadowRecord> records;
  size_t malformed = 0;
  std::string first_malformed;  // "file:line: field F"
};
ShadowLog read_shadow_log(const std::string& path);
// The records joined with the trace by job id: refusals vs failures, limits vs run times, and
// Spearman's rho between SITE and run time.
nlohmann::json shadow_report(const ShadowLog& log, const Trace& trace);
std::string format_shadow_report(const nlohmann::json& report);

}  // namespace mlprio::model
