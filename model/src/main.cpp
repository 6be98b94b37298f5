// mlprio-model: train, evaluate, predict with and explain the priority model. Parses arguments,
// calls one library function (model_tool.hpp) per subcommand and decides the exit code as every
// mlprio program does (mlprio/util/errors.hpp): 0 on success; 2 for usage or bad input (a parse
// error, a bad option value, a trace or model file that cannot be used); 1 for a runtime failure
// (writing the model or the plot failed, XGBoost failed). The message goes to stderr
// (mlprio/cli/program.hpp).
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string_view>

#include "mlprio/cli/program.hpp"
#include "mlprio/cli/trace_options.hpp"
#include "mlprio/model/model_file.hpp"
#include "mlprio/util/errors.hpp"
#include "model_tool.hpp"

using namespace mlprio;
using namespace mlprio::model;

namespace {

Trace read_trace(const std::string& path, const std::string& format) {
  return cli::load_trace_reporting({.path = path, .format = format}, cli::TraceReport::BRIEF);
}

void print_prediction_csv_header() {
  std::cout << "id,submit,run,req_time,runtime,runtime_upper,fail_prob\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mlprio-model: the ML priority model (train, evaluate, predict, explain)"};
  app.require_subcommand(1);

  std::string trace_path, format = "auto", model_path, out_path, job_spec, plot_dir;
  TrainOptions topt;
  EvalOptions eopt;
  bool json = false;

  auto* train =
      app.add_subcommand("train", "train a model on a trace (first F of jobs by submit time)");
  train->add_option("--trace", trace_path, "trace file (SWF, sacct; plain or gzip)")->required();
  train->add_option("--format", format, "swf|sacct|alibaba|jobcomp|auto")->capture_default_str();
  train->add_option("--kind", topt.kind, "xgboost|formula")->capture_default_str();
  train
      ->add_option("--train-fraction", topt.train_fraction,
                   "fraction of jobs (by submit time) that train")
      ->capture_default_str();
  train
      ->add_option("--calib-fraction", topt.calib_fraction,
                   "tail of the training slice kept for calibration")
      ->capture_default_str();
  train
      ->add_option("--underpredict-penalty", topt.underpredict_penalty,
                   "cost of under- vs over-prediction; point = residual quantile X/(1+X)")
      ->capture_default_str();
  train->add_option("--upper-quantile", topt.upper_quantile, "residual quantile of runtime_upper")
      ->capture_default_str();
  train->add_option("--objective", topt.objective, "XGBoost objective on log run time")
      ->capture_default_str();
  train
      ->add_option("--blend", topt.blend,
                   "how the calibration slice picks the point (blend with last-two, shift, "
                   "candidate): both|mae|within2x|none")
      ->capture_default_str();
  train
      ->add_option("--anchor", topt.anchor,
                   "baseline the run-time trees correct: similar|last2|request|none")
      ->capture_default_str();
  bool no_modal = false, no_refit = false;
  train->add_flag("--no-modal", no_modal, "no mode-seeking continuation candidates");
  train->add_flag("--no-refit", no_refit, "keep the trees fitted without the calibration slice");
  train
      ->add_option("--rounds", topt.rounds,
                   "maximum boosting rounds (early stopping may keep fewer)")
      ->capture_default_str();
  train
      ->add_option("--early-stopping-rounds", topt.early_stopping_rounds,
                   "stop after N rounds without a better calibration loss, keep the best round's "
                   "trees (0 = off)")
      ->capture_default_str();
  bool no_tune = false;
  train->add_flag(
      "--no-tune", no_tune,
      "use --max-depth/--min-child-weight instead of choosing them on the calibration slice");
  train
      ->add_option("--max-depth", topt.max_depth,
                   "tree depth (with --no-tune; always for the failure classifier)")
      ->check(CLI::Range(1, MODEL_MAX_TREE_DEPTH))
      ->capture_default_str();
  train
      ->add_option("--min-child-weight", topt.min_child_weight,
                   "min_child_weight (with --no-tune; always for the failure classifier)")
      ->capture_default_str();
  train->add_option("--eta", topt.eta, "learning rate")->capture_default_str();
  train->add_option("--seed", topt.seed, "random seed")->capture_default_str();
  train->add_option("--nthread", topt.nthread, "XGBoost threads (1 = reproducible)")
      ->capture_default_str();
  train->add_option("-o,--output", out_path, "model file to write")->required();

  auto* eval =
      app.add_subcommand("evaluate", "model vs request vs last-two on the last F of a trace");
  eval->add_option("--model", model_path, "model file")->required();
  eval->add_option("--trace", trace_path, "trace file")->required();
  eval->add_option("--format", format, "swf|sacct|alibaba|jobcomp|auto")->capture_default_str();
  eval->add_option("--test-fraction", eopt.test_fraction, "last fraction of jobs tested")
      ->capture_default_str();
  eval->add_flag("--json", json, "print metrics as JSON");
  eval->add_option("--plot", eopt.plot_dir, "folder for the relative-error CDF (PNG)");
  eval->add_option("--per-job", eopt.per_job_csv,
                   "CSV of every measured test job: id, user, submit, end, run and the model's, "
                   "last-two's and the request's estimates (seconds)");

  auto* predict =
      app.add_subcommand("predict", "predict run time and failure for a trace or one job");
  predict->add_option("--model", model_path, "model file")->required();
  auto* pt =
      predict->add_option("--trace", trace_path, "trace file (history built causally from it)");
  auto* pj =
      predict->add_option("--job", job_spec, "key=value,... (e.g. user=alice,req_time=3600)");
  pt->excludes(pj);
  predict->add_option("--format", format, "swf|sacct|alibaba|jobcomp|auto")->capture_default_str();

  auto* explain = app.add_subcommand("explain", "feature contributions for one job");
  explain->add_option("--model", model_path, "model file")->required();
  explain->add_option("--job", job_spec, "key=value,...")->required();

  std::string log_path;
  auto* shadow = app.add_subcommand(
      "shadow-report",
      "what mode=shadow would have done (slurmctld log) against what happened (trace)");
  shadow->add_option("--log", log_path, "slurmctld log with site_factor/mlprio shadow lines")
      ->required();
  shadow
      ->add_option("--trace", trace_path,
                   "what the jobs did: sacct dump (or any trace with job ids)")
      ->required();
  shadow->add_option("--format", format, "swf|sacct|alibaba|jobcomp|auto")->capture_default_str();
  shadow->add_flag("--json", json, "print the figures as JSON");

  const cli::ProgramStyle style{.name = "mlprio-model",
                                .parse_errors = cli::ProgramStyle::ParseErrors::BRIEF};
  return cli::run_program(app, argc, argv, style, [&] {
    if (*train) {
      topt.tune = !no_tune;
      topt.modal = !no_modal;
      topt.refit = !no_refit;
      const Trace t = read_trace(trace_path, format);
      std::vector<std::string> notes;
      const auto doc = train_model(t, file_sha256(trace_path), topt, notes);
      for (const auto& n : notes) std::cerr << "note: " << n << "\n";
      try {
        write_model_document(out_path, doc);
      } catch (const ModelError& e) {
        // Writing failed (folder missing, disk full, ...): a runtime failure, not bad input.
        throw ::mlprio::RuntimeError(e.what());
      }
      std::cerr << "wrote " << out_path << " (" << doc["kind"].get<std::string>() << ", "
                << doc["training"]["n_train"] << " training jobs)\n";
      // The quality figures, measured on the calibration tail of the training slice (the test
      // part is never read by train; `evaluate` measures it).
      if (doc["training"].contains("metrics")) {
        const auto& m = doc["training"]["metrics"];
        std::fprintf(stderr, "calibration slice: MAE %.0f s, under-predicted %.0f %% of jobs\n",
                     m.value("calib_mae", std::nan("")),
                     100.0 * m.value("calib_underpredict_rate", std::nan("")));
      }
    } else if (*eval) {
      const auto doc = read_model_document(model_path);
      const Trace t = read_trace(trace_path, format);
      const auto r = evaluate_model(doc, t, eopt);
      if (json) {
        std::cout << r.dump(2) << "\n";
      } else {
        std::printf("%s: %zu test jobs (%s model)\n", r["trace"].get<std::string>().c_str(),
                    r["n_test"].get<size_t>(), r["model_kind"].get<std::string>().c_str());
        for (const char* k : {"mae_model", "mae_request", "mae_last2", "within_2x_model",
                              "within_2x_request", "within_2x_last2", "underpredict_rate",
                              "underpredict_rate_upper", "fail_precision", "fail_recall"})
          std::printf("  %-24s %s%s\n", k, r[k].dump().c_str(),
                      std::string_view(k).rfind("mae_", 0) == 0 ? " s" : "");
      }
    } else if (*predict) {
      const auto pred = load_predictor(model_path);
      if (!job_spec.empty()) {
        const Trace t = job_from_spec(job_spec);
        Prediction p;
        pred->predict(t.jobs, t.names, std::span<Prediction>(&p, 1));
        print_prediction_csv_header();
        std::printf("-,%g,,%g,%.1f,%.1f,%.4f\n", t.jobs[0].submit, t.jobs[0].req_time, p.runtime,
                    p.runtime_upper, p.fail_prob);
      } else if (!trace_path.empty()) {
        const Trace t = read_trace(trace_path, format);
        const FeatureMatrix X = build_features(t.jobs, t.names, trace_epoch_offset(t));
        std::vector<Prediction> out(t.jobs.size());
        pred->predict_rows(X.values, t.jobs, out);
        print_prediction_csv_header();
        for (size_t i = 0; i < t.jobs.size(); ++i)
          std::printf("%lld,%.0f,%.0f,%.0f,%.1f,%.1f,%.4f\n", static_cast<long long>(t.jobs[i].id),
                      t.jobs[i].submit, t.jobs[i].run, t.jobs[i].req_time, out[i].runtime,
                      out[i].runtime_upper, out[i].fail_prob);
      } else {
        throw ::mlprio::UsageError("predict needs --trace FILE or --job key=value,...");
      }
    } else if (*shadow) {
      const ShadowLog log = read_shadow_log(log_path);
      const Trace t = read_trace(trace_path, format);
      const auto r = shadow_report(log, t);
      if (json)
        std::cout << r.dump(2) << "\n";
      else
        std::cout << format_shadow_report(r);
    } else if (*explain) {
      const auto doc = read_model_document(model_path);
      std::cout << explain_job(doc, job_from_spec(job_spec)).dump(2) << "\n";
    }
    return 0;
  });
}
