// `mlprio-model predict`: run time, its upper bound and the failure probability, as CSV on
// stdout, for every job of a trace (history built causally from it) or for one job given as
// key=value pairs.
#include <cstdio>
#include <iostream>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"
#include "mlprio/model/model_file.hpp"
#include "mlprio/util/errors.hpp"
#include "model_tool.hpp"

namespace mlprio::model::cli {

namespace {

struct PredictArgs {
  std::string model_path;
  std::string trace_path;
  std::string job_spec;
  std::string format = "auto";
};

void print_prediction_csv_header() {
  std::cout << "id,submit,run,req_time,runtime,runtime_upper,fail_prob\n";
}

void run_predict(const PredictArgs& a) {
  const auto pred = load_predictor(a.model_path);
  if (!a.job_spec.empty()) {
    const Trace t = job_from_spec(a.job_spec);
    Prediction p;
    pred->predict(t.jobs, t.names, std::span<Prediction>(&p, 1));
    print_prediction_csv_header();
    std::printf("-,%g,,%g,%.1f,%.1f,%.4f\n", t.jobs[0].submit, t.jobs[0].req_time, p.runtime,
                p.runtime_upper, p.fail_prob);
  } else if (!a.trace_path.empty()) {
    const Trace t = read_trace(a.trace_path, a.format);
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
}

}  // namespace

void add_predict_command(CLI::App& app) {
  auto args = std::make_shared<PredictArgs>();
  auto* cmd = app.add_subcommand("predict", "predict run time and failure for a trace or one job");
  cmd->add_option("--model", args->model_path, "model file")->required();
  auto* trace =
      cmd->add_option("--trace", args->trace_path, "trace file (history built causally from it)");
  auto* job =
      cmd->add_option("--job", args->job_spec, "key=value,... (e.g. user=alice,req_time=3600)");
  trace->excludes(job);
  add_format_option(*cmd, args->format);
  cmd->callback([args] { run_predict(*args); });
}

}  // namespace mlprio::model::cli
