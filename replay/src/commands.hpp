// The list of mlprio-replay subcommands. To add one: write src/cmd_<name>.cpp defining
// add_<name>_command(CLI::App&) and append it to commands() below.
#pragma once

#include <CLI/CLI.hpp>
#include <vector>

namespace mlprio::cli {

void add_inspect_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_tune_command(CLI::App& app);
void add_fsdp_advice_command(CLI::App& app);

using AddCommand = void (*)(CLI::App&);
inline const std::vector<AddCommand>& commands() {
  static const std::vector<AddCommand> list = {
      add_inspect_command, add_run_command,  add_generate_command,
      add_sweep_command,   add_tune_command, add_fsdp_advice_command,
  };
  return list;
}

}  // namespace mlprio::cli
