// The frame of every mlprio main(): parse the command line with CLI11, run the command, and turn
// whatever escapes into one message on stderr and the exit status of mlprio/util/errors.hpp
// (0 ok, 1 runtime failure, 2 usage or bad input, 3 no device, 128 + N stopped by signal N).
// Each program maps errors here, in one place, and nowhere else.
#pragma once

#include <CLI/CLI.hpp>
#include <exception>
#include <functional>
#include <string>

namespace mlprio::cli {

// How a program words its messages on stderr.
struct ProgramStyle {
  std::string name;  // "mlprio-replay": the prefix of every message
  // A command-line parse error: CLI11's own report (CLI11) or "<name>: <what>" and a hint to run
  // --help (BRIEF). Both exit 2; --help exits 0 either way.
  enum class ParseErrors { CLI11, BRIEF } parse_errors = ParseErrors::CLI11;
  // Bad input (exit 2) and a stop on a signal worded "<name>: <what>", without "error: ".
  bool plain_input_errors = false;
};

// argv joined with single spaces (HDF5 provenance).
std::string join_command_line(int argc, char** argv);

// The exit status the running subcommand wants, for programs whose subcommands do their work in
// CLI11 callbacks (mlprio-replay); run_program returns it when no `run` is given.
int& exit_code();

// argv joined with spaces (join_command_line), recorded by run_program before it parses.
const std::string& command_line();

// Writes "<name>: error: <what>" (see ProgramStyle) and returns exit_code_for(e).
int report_failure(const ProgramStyle& style, const std::exception& e);

// Parses argv into `app` (subcommand callbacks run inside the parse), then runs `run` if given.
// Returns CLI11's status for --help, 2 for a parse error, report_failure() for any exception out
// of the parse or `run`, else what `run` returned (or exit_code()).
int run_program(CLI::App& app, int argc, char** argv, const ProgramStyle& style,
                const std::function<int()>& run = {});

}  // namespace mlprio::cli
