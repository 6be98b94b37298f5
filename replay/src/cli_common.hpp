// Pieces every mlprio-replay subcommand shares: the trace options (--trace, --format, --strict),
// loading a trace with the read report printed to stderr, and the exit-code convention
// (0 ok, 1 runtime failure, 2 bad input or usage).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "mlprio/jobs/trace.hpp"
#include "mlprio/replay/spec.hpp"

namespace mlprio::cli {

struct TraceOptions {
  std::string path;
  std::string format = "auto";
  bool strict = false;
};

// Adds --trace FILE (required), --format and --strict to a subcommand.
void add_trace_options(CLI::App& cmd, TraceOptions& opts);

// Adds the options every replay command shares (mlprio/replay/spec.hpp): --estimate,
// --estimate-quantile, --correction, --backfill-order, --ml-*, the machine, --kill-at-limit,
// --too-large, --bsld-threshold. One place, so run, sweep and tune cannot drift apart.
void add_replay_spec_options(CLI::App& cmd, replay::ReplaySpec& spec);
// Copies into `dst` the options of add_replay_spec_options that were given on `cmd`'s command
// line (sweep: the command line wins over the config file, option by option).
void merge_given(const CLI::App& cmd, const replay::ReplaySpec& given, replay::ReplaySpec& dst);

// Loads the trace; prints skipped-line and sorting notices to stderr unless quiet.
Trace load_trace_reporting(const TraceOptions& opts, bool quiet = false);

// The process exit code the running subcommand wants; set by subcommand callbacks.
int& exit_code();

// argv joined with spaces, for HDF5 provenance.
std::string& command_line();

}  // namespace mlprio::cli
