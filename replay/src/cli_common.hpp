// Pieces every mlprio-replay subcommand shares: the trace options (--trace, --format, --strict),
// loading a trace with the read report printed to stderr, and the exit-code convention
// (0 ok, 1 runtime failure, 2 bad input or usage).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "mlprio/jobs/trace.hpp"

namespace mlprio::cli {

struct TraceOptions {
  std::string path;
  std::string format = "auto";
  bool strict = false;
};

// Adds --trace FILE (required), --format and --strict to a subcommand.
void add_trace_options(CLI::App& cmd, TraceOptions& opts);

// Loads the trace; prints skipped-line and sorting notices to stderr unless quiet.
Trace load_trace_reporting(const TraceOptions& opts, bool quiet = false);

// The process exit code the running subcommand wants; set by subcommand callbacks.
int& exit_code();

// argv joined with spaces, for HDF5 provenance.
std::string& command_line();

}  // namespace mlprio::cli
