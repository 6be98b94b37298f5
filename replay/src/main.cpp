// mlprio-replay: inspect traces, generate workloads and replay them under schedulers.
// Each subcommand is one src/cmd_*.cpp exporting add_<name>_command(); main only wires them. The
// subcommands run in CLI11 callbacks and set mlprio::cli::exit_code(); mlprio/cli/program.hpp
// turns errors into messages and exit statuses.
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "mlprio/cli/program.hpp"

int main(int argc, char** argv) {
  CLI::App app{"mlprio-replay: replay job traces under scheduling policies"};
  app.require_subcommand(1);
  for (const auto& add : mlprio::cli::commands()) add(app);
  return mlprio::cli::run_program(app, argc, argv, {.name = "mlprio-replay"});
}
