// `mlprio-model explain`: the feature contributions behind one job's prediction, as JSON (a
// formula model says which branch it took).
#include <iostream>
#include <memory>
#include <string>

#include "commands.hpp"
#include "mlprio/model/model_file.hpp"
#include "model_tool.hpp"

namespace mlprio::model::cli {

namespace {

struct ExplainArgs {
  std::string model_path;
  std::string job_spec;
};

void run_explain(const ExplainArgs& a) {
  const auto doc = read_model_document(a.model_path);
  std::cout << explain_job(doc, job_from_spec(a.job_spec)).dump(2) << "\n";
}

}  // namespace

void add_explain_command(CLI::App& app) {
  auto args = std::make_shared<ExplainArgs>();
  auto* cmd = app.add_subcommand("explain", "feature contributions for one job");
  cmd->add_option("--model", args->model_path, "model file")->required();
  cmd->add_option("--job", args->job_spec, "key=value,...")->required();
  cmd->callback([args] { run_explain(*args); });
}

}  // namespace mlprio::model::cli
