// The runtime model inside the replayer: predictions for a trace made the way `mlprio-model
// evaluate` makes them (features built causally over the whole trace in submit order, then
// Predictor::predict_rows), turned into the simulator's estimate hook (SimConfig::estimate =
// CUSTOM, `--estimate model:FILE`) and handed to the `ml` queue order, which ranks jobs with
// mlprio::model::score() — the same function the Slurm plugin calls. Predictions are made once,
// before the simulation, from what was known at each job's submission; nothing here depends on
// the simulated schedule.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mlprio/jobs/job.hpp"
#include "mlprio/jobs/trace.hpp"
#include "mlprio/model/predictor.hpp"
#include "mlprio/replay/simulator.hpp"

namespace mlprio::replay {

// Which run time backfilling uses: the point prediction, the high quantile (runtime_upper), the
// user's request (classic EASY's guarantee for the head job, with the model only ordering the
// queue), or Tsafrir's last-two (the mean of the user's two latest finished runs in this
// schedule, capped by the request; the request without history: EASY++'s estimate, with the
// model ordering the queue). LAST2 needs the online history (`--estimate model:FILE`); fixed
// predictions carry none, so there it is the request.
enum class EstimateQuantile { POINT, UPPER, REQUEST, LAST2 };
std::string_view estimate_quantile_name(EstimateQuantile q);
// Throws ConfigError naming the valid values (point, upper, request, last2).
EstimateQuantile parse_estimate_quantile(std::string_view s);

// Predictions for every job of `trace` (same order as trace.jobs, which must be sorted by
// submit): rows from build_features with the trace's UnixStartTime as epoch offset, as
// `mlprio-model evaluate` does, so a job's user history only holds jobs that had finished (in the
// recorded schedule) by its submit time. Throws model::ModelError from the predictor.
std::vector<model::Prediction> predict_trace(const model::Predictor& predictor, const Trace& trace);

// The predictions of one replayed job list, aligned with it (index i = the i-th job handed to
// simulate(), which is JobView::index), for the estimate hook and the `ml` order.
struct MlPredictions {
  std::vector<Job> jobs;
  std::vector<model::Prediction> predictions;
  model::ScoreConfig score;                   // the `ml` order's settings
  std::unordered_map<int64_t, size_t> by_id;  // job id -> index, for the estimate hook

  // Throws ConfigError when the sizes differ or two jobs share an id (the estimate hook only
  // sees the job record, so it finds the prediction by id).
  MlPredictions(std::span<const Job> replayed, std::span<const model::Prediction> preds,
                const model::ScoreConfig& score_config);
};

// The estimate used for backfilling: the chosen prediction, else the other one, else (no
// prediction at all) the request rule of EstimateMode::REQUEST. Never negative.
double model_estimate(const Job& job, const model::Prediction& p, EstimateQuantile q);

// An EstimateFn over `ml` (kept alive by the function). Throws ConfigError for a job id it has no
// prediction for.
EstimateFn model_estimate_fn(std::shared_ptr<const MlPredictions> ml, EstimateQuantile q);

// The `--estimate` value of `run` and `sweep`: request, actual, or model:FILE (mode CUSTOM,
// `model_path` = FILE). Throws ConfigError naming the valid values.
struct EstimateChoice {
  EstimateMode mode = EstimateMode::REQUEST;
  std::string model_path;  // non-empty exactly for model:FILE
};
EstimateChoice parse_estimate_choice(std::string_view text);

// Loads a mlprio-model file for the replayer. Throws ConfigError naming the file (a bad model
// file is bad input, exit code 2).
std::unique_ptr<model::Predictor> load_replay_model(const std::string& path);

// `--estimate model:FILE` over one trace, the setup `run` and `sweep` share: every job's
// prediction made once, in one batch (predict_trace), plus the settings that turn a window of
// them into the simulator's estimate hook and the `ml` order's input. Deterministic: every MPI
// rank that builds it from the same model and trace gets the same bits.
struct TraceModel {
  std::vector<model::Prediction> predictions;  // aligned with the trace's jobs
  EstimateQuantile quantile = EstimateQuantile::UPPER;
  model::ScoreConfig score;
  // Sets cfg.estimate = CUSTOM, cfg.estimate_fn and cfg.policy_options.ml for the jobs
  // select_window(jobs, start, len) replays; `jobs` is the list the predictions are aligned with.
  void apply_window(SimConfig& cfg, std::span<const Job> jobs, int64_t start, int64_t len) const;
};

// Predicts every job of `trace`. Throws ConfigError (the predictor's ModelError, prefixed with
// `what`, e.g. "--estimate model:m.json").
TraceModel make_trace_model(const model::Predictor& predictor, const Trace& trace,
                            EstimateQuantile quantile, const model::ScoreConfig& score,
                            const std::string& what);

}  // namespace mlprio::replay
