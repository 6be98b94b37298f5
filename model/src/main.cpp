// mlprio-model: train, evaluate, predict with and explain the priority model. Each subcommand is
// one src/cmd_*.cpp exporting add_<name>_command() (commands.hpp) that parses its arguments and
// calls the library (model_tool.hpp); main only wires them. The exit code is decided as in every
// mlprio program (mlprio/util/errors.hpp, mlprio/cli/program.hpp): 0 on success; 2 for usage or
// bad input (a parse error, a bad option value, a trace or model file that cannot be used); 1 for
// a runtime failure (writing the model or the plot failed, XGBoost failed), the message on stderr.
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "mlprio/cli/program.hpp"

int main(int argc, char** argv) {
  CLI::App app{"mlprio-model: the ML priority model (train, evaluate, predict, explain)"};
  app.require_subcommand(1);
  for (const auto& add : mlprio::model::cli::commands()) add(app);
  const mlprio::cli::ProgramStyle style{
      .name = "mlprio-model", .parse_errors = mlprio::cli::ProgramStyle::ParseErrors::BRIEF};
  return mlprio::cli::run_program(app, argc, argv, style);
}
