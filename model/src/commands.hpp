// The list of mlprio-model subcommands, and what more than one of them uses. To add one: write
// src/cmd_<name>.cpp defining add_<name>_command(CLI::App&) and append it to commands() below.
// The subcommands run in CLI11 callbacks; errors they throw become messages and exit statuses in
// mlprio/cli/program.hpp (0 ok, 1 runtime failure, 2 usage or bad input).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "mlprio/cli/trace_options.hpp"
#include "mlprio/jobs/trace.hpp"

namespace mlprio::model::cli {

void add_train_command(CLI::App& app);
void add_evaluate_command(CLI::App& app);
void add_predict_command(CLI::App& app);
void add_explain_command(CLI::App& app);
void add_shadow_report_command(CLI::App& app);

using AddCommand = void (*)(CLI::App&);
// In the order --help lists them.
inline const std::vector<AddCommand>& commands() {
  static const std::vector<AddCommand> list = {
      add_train_command,   add_evaluate_command,      add_predict_command,
      add_explain_command, add_shadow_report_command,
  };
  return list;
}

// --format NAME, as every subcommand that reads a trace declares it.
inline void add_format_option(CLI::App& cmd, std::string& format) {
  cmd.add_option("--format", format, "swf|sacct|alibaba|jobcomp|auto")->capture_default_str();
}

// The trace a subcommand names, with a one-line note on stderr for skipped lines.
inline Trace read_trace(const std::string& path, const std::string& format) {
  return mlprio::cli::load_trace_reporting({.path = path, .format = format},
                                           mlprio::cli::TraceReport::BRIEF);
}

}  // namespace mlprio::model::cli
