// `mlprio-model evaluate`: the model against the request and last-two on the last part of a
// trace, as a table or JSON; optionally a relative-error CDF plot and a per-job CSV.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>

#include "commands.hpp"
#include "mlprio/model/model_file.hpp"
#include "model_tool.hpp"

namespace mlprio::model::cli {

namespace {

struct EvaluateArgs {
  std::string model_path;
  std::string trace_path;
  std::string format = "auto";
  EvalOptions opt;
  bool json = false;
};

void run_evaluate(const EvaluateArgs& a) {
  const auto doc = read_model_document(a.model_path);
  const Trace t = read_trace(a.trace_path, a.format);
  const auto r = evaluate_model(doc, t, a.opt);
  if (a.json) {
    std::cout << r.dump(2) << "\n";
    return;
  }
  std::printf("%s: %zu test jobs (%s model)\n", r["trace"].get<std::string>().c_str(),
              r["n_test"].get<size_t>(), r["model_kind"].get<std::string>().c_str());
  for (const char* k : {"mae_model", "mae_request", "mae_last2", "within_2x_model",
                        "within_2x_request", "within_2x_last2", "underpredict_rate",
                        "underpredict_rate_upper", "fail_precision", "fail_recall"})
    std::printf("  %-24s %s%s\n", k, r[k].dump().c_str(),
                std::string_view(k).rfind("mae_", 0) == 0 ? " s" : "");
}

}  // namespace

void add_evaluate_command(CLI::App& app) {
  auto args = std::make_shared<EvaluateArgs>();
  auto* cmd =
      app.add_subcommand("evaluate", "model vs request vs last-two on the last F of a trace");
  cmd->add_option("--model", args->model_path, "model file")->required();
  cmd->add_option("--trace", args->trace_path, "trace file")->required();
  add_format_option(*cmd, args->format);
  cmd->add_option("--test-fraction", args->opt.test_fraction, "last fraction of jobs tested")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "print metrics as JSON");
  cmd->add_option("--plot", args->opt.plot_dir, "folder for the relative-error CDF (PNG)");
  cmd->add_option("--per-job", args->opt.per_job_csv,
                  "CSV of every measured test job: id, user, submit, end, run and the model's, "
                  "last-two's and the request's estimates (seconds)");
  cmd->callback([args] { run_evaluate(*args); });
}

}  // namespace mlprio::model::cli
