// The list of mlprio-fsdp subcommands. To add one: write src/cmd_<name>.cpp defining
// add_<name>_command(CLI::App&) and append it to commands() below; what several share (their
// arguments, the FSDP option group, settings from options) is in cli.hpp. The subcommands run in
// CLI11 callbacks and set mlprio::cli::exit_code() when they end other than with 0.
#pragma once

#include <CLI/CLI.hpp>
#include <vector>

namespace mlprio::fsdp::cli {

void add_replay_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_measure_command(CLI::App& app);
void add_table_command(CLI::App& app);

using AddCommand = void (*)(CLI::App&);
// In the order --help lists them.
inline const std::vector<AddCommand>& commands() {
  static const std::vector<AddCommand> list = {
      add_replay_command,
      add_sweep_command,
      add_measure_command,
      add_table_command,
  };
  return list;
}

}  // namespace mlprio::fsdp::cli
