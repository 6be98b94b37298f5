// The trace options of a command (--trace, --format, --strict) and loading the trace they name
// with its read report (skipped lines, sorting) on stderr.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
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

// How much of the read report load_trace_reporting prints on stderr.
enum class TraceReport {
  QUIET,     // nothing (machine-readable output, or a rank other than 0)
  DETAILED,  // "mlprio: FILE: skipped N malformed lines ...", the first errors, the sorting notice
  BRIEF,     // one line, "note: N malformed lines skipped in FILE" (mlprio-model)
};

// Loads the trace (opts.format parsed by parse_trace_format; a bad name is std::invalid_argument)
// and reports what the reader skipped or sorted.
Trace load_trace_reporting(const TraceOptions& opts, TraceReport report);
// For commands that stream the jobs instead of loading them: the reader for opts, and the same
// report printed once it has read everything.
std::unique_ptr<JobReader> open_trace_reader(const TraceOptions& opts);
void print_read_report(const TraceOptions& opts, const ReadReport& r, TraceReport report);
// DETAILED, or QUIET when `quiet`.
inline Trace load_trace_reporting(const TraceOptions& opts, bool quiet = false) {
  return load_trace_reporting(opts, quiet ? TraceReport::QUIET : TraceReport::DETAILED);
}

}  // namespace mlprio::cli
