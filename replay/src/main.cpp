// mlprio-replay: inspect traces, generate workloads and replay them under schedulers.
// Each subcommand is one src/cmd_*.cpp exporting add_<name>_command(); main only wires them.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>

#include "cli_common.hpp"
#include "commands.hpp"
#include "mlprio/util/errors.hpp"

int main(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    if (i) mlprio::cli::command_line() += ' ';
    mlprio::cli::command_line() += argv[i];
  }
  CLI::App app{"mlprio-replay: replay job traces under scheduling policies"};
  app.require_subcommand(1);
  for (const auto& add : mlprio::cli::commands()) add(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    // One mapping for every tool (mlprio/util/errors.hpp): 2 bad input, 1 runtime failure.
    std::cerr << "mlprio-replay: error: " << e.what() << "\n";
    return mlprio::exit_code_for(e);
  }
  return mlprio::cli::exit_code();
}
