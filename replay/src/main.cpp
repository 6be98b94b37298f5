// mlprio-replay: inspect traces, generate workloads and replay them under schedulers.
// Each subcommand is one src/cmd_*.cpp exporting add_<name>_command(); main only wires them.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <stdexcept>

#include "cli_common.hpp"
#include "commands.hpp"
#include "mlprio/jobs/trace.hpp"
#include "mlprio/replay/simulator.hpp"
#include "mlprio/replay_dist/sweep.hpp"

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
  } catch (const mlprio::InputError& e) {
    std::cerr << "mlprio-replay: error: " << e.what() << "\n";
    return 2;
  } catch (const std::invalid_argument& e) {
    // Bad configuration or an unknown policy name (replay::ConfigError, UnknownPolicyError).
    std::cerr << "mlprio-replay: error: " << e.what() << "\n";
    return 2;
  } catch (const mlprio::replay::JobTooLargeError& e) {
    std::cerr << "mlprio-replay: error: " << e.what() << "\n";
    return 2;
  } catch (const mlprio::replay::dist::SweepError& e) {
    std::cerr << "mlprio-replay: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "mlprio-replay: error: " << e.what() << "\n";
    return 1;
  }
  return mlprio::cli::exit_code();
}
