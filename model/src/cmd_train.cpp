// `mlprio-model train`: fits a model (XGBoost or the formula) on the first part of a trace by
// submit time and writes the model file; notes and the calibration slice's figures go to stderr.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "mlprio/model/model_file.hpp"
#include "mlprio/util/errors.hpp"
#include "model_tool.hpp"

namespace mlprio::model::cli {

namespace {

struct TrainArgs {
  std::string trace_path;
  std::string format = "auto";
  std::string out_path;
  TrainOptions opt;
  bool no_modal = false;
  bool no_refit = false;
  bool no_tune = false;
};

void run_train(TrainArgs& a) {
  a.opt.tune = !a.no_tune;
  a.opt.modal = !a.no_modal;
  a.opt.refit = !a.no_refit;
  const Trace t = read_trace(a.trace_path, a.format);
  std::vector<std::string> notes;
  const auto doc = train_model(t, file_sha256(a.trace_path), a.opt, notes);
  for (const auto& n : notes) std::cerr << "note: " << n << "\n";
  try {
    write_model_document(a.out_path, doc);
  } catch (const ModelError& e) {
    // Writing failed (folder missing, disk full, ...): a runtime failure, not bad input.
    throw RuntimeError(e.what());
  }
  std::cerr << "wrote " << a.out_path << " (" << doc["kind"].get<std::string>() << ", "
            << doc["training"]["n_train"] << " training jobs)\n";
  // The quality figures, measured on the calibration tail of the training slice (the test part
  // is never read by train; `evaluate` measures it).
  if (doc["training"].contains("metrics")) {
    const auto& m = doc["training"]["metrics"];
    std::fprintf(stderr, "calibration slice: MAE %.0f s, under-predicted %.0f %% of jobs\n",
                 m.value("calib_mae", std::nan("")),
                 100.0 * m.value("calib_underpredict_rate", std::nan("")));
  }
}

// The options of the trees and their tuning (--rounds ... --nthread).
void add_tree_options(CLI::App& cmd, TrainArgs& a) {
  TrainOptions& o = a.opt;
  cmd.add_option("--rounds", o.rounds, "maximum boosting rounds (early stopping may keep fewer)")
      ->capture_default_str();
  cmd.add_option("--early-stopping-rounds", o.early_stopping_rounds,
                 "stop after N rounds without a better calibration loss, keep the best round's "
                 "trees (0 = off)")
      ->capture_default_str();
  cmd.add_flag(
      "--no-tune", a.no_tune,
      "use --max-depth/--min-child-weight instead of choosing them on the calibration slice");
  cmd.add_option("--max-depth", o.max_depth,
                 "tree depth (with --no-tune; always for the failure classifier)")
      ->check(CLI::Range(1, MODEL_MAX_TREE_DEPTH))
      ->capture_default_str();
  cmd.add_option("--min-child-weight", o.min_child_weight,
                 "min_child_weight (with --no-tune; always for the failure classifier)")
      ->capture_default_str();
  cmd.add_option("--eta", o.eta, "learning rate")->capture_default_str();
  cmd.add_option("--seed", o.seed, "random seed")->capture_default_str();
  cmd.add_option("--nthread", o.nthread, "XGBoost threads (1 = reproducible)")
      ->capture_default_str();
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  TrainOptions& o = args->opt;
  auto* cmd =
      app.add_subcommand("train", "train a model on a trace (first F of jobs by submit time)");
  cmd->add_option("--trace", args->trace_path, "trace file (SWF, sacct; plain or gzip)")
      ->required();
  add_format_option(*cmd, args->format);
  cmd->add_option("--kind", o.kind, "xgboost|formula")->capture_default_str();
  cmd->add_option("--train-fraction", o.train_fraction,
                  "fraction of jobs (by submit time) that train")
      ->capture_default_str();
  cmd->add_option("--calib-fraction", o.calib_fraction,
                  "tail of the training slice kept for calibration")
      ->capture_default_str();
  cmd->add_option("--underpredict-penalty", o.underpredict_penalty,
                  "cost of under- vs over-prediction; point = residual quantile X/(1+X)")
      ->capture_default_str();
  cmd->add_option("--upper-quantile", o.upper_quantile, "residual quantile of runtime_upper")
      ->capture_default_str();
  cmd->add_option("--objective", o.objective, "XGBoost objective on log run time")
      ->capture_default_str();
  cmd->add_option("--blend", o.blend,
                  "how the calibration slice picks the point (blend with last-two, shift, "
                  "candidate): both|mae|within2x|none")
      ->capture_default_str();
  cmd->add_option("--anchor", o.anchor,
                  "baseline the run-time trees correct: similar|last2|request|none")
      ->capture_default_str();
  cmd->add_flag("--no-modal", args->no_modal, "no mode-seeking continuation candidates");
  cmd->add_flag("--no-refit", args->no_refit,
                "keep the trees fitted without the calibration slice");
  add_tree_options(*cmd, *args);
  cmd->add_option("-o,--output", args->out_path, "model file to write")->required();
  cmd->callback([args] { run_train(*args); });
}

}  // namespace mlprio::model::cli
