// mlprio-fsdp: predicts CUDA caching-allocator retries and fragmentation for FSDP training on a
// simulated device, or measures them on GPUs (measure, built with CUDA). Each subcommand is one
// src/cmd_*.cpp exporting add_<name>_command() (commands.hpp); main only wires them. Errors become
// one message on stderr and the exit status of mlprio/util/errors.hpp (mlprio/cli/program.hpp):
// 2 for usage or bad input, 1 for a runtime failure, 3 for no CUDA device (measure), 128 + signo
// for a sweep stopped by SIGTERM/SIGINT.
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "mlprio/cli/program.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "mlprio-fsdp: CUDA caching-allocator model for FSDP training (simulated device; measure on "
      "GPUs)"};
  app.require_subcommand(1);
  for (const auto& add : mlprio::fsdp::cli::commands()) add(app);
  // Bad input (SettingsError, SnapshotError, ModelConfigError, ...) is reported without the
  // "error:" prefix, as this program always has.
  return mlprio::cli::run_program(app, argc, argv,
                                  {.name = "mlprio-fsdp", .plain_input_errors = true});
}
