// The trace options and the trace loader with its read report (see trace_options.hpp).
#include "mlprio/cli/trace_options.hpp"

#include <cstdint>
#include <iostream>

namespace mlprio::cli {

void add_trace_options(CLI::App& cmd, TraceOptions& opts) {
  cmd.add_option("--trace", opts.path,
                 "Job trace to read (SWF, sacct --parsable2, Alibaba pod CSV; plain or gzip)")
      ->required();
  cmd.add_option("--format", opts.format, "Trace format: auto, swf, sacct, alibaba")
      ->check(CLI::IsMember({"auto", "swf", "sacct", "alibaba", "jobcomp"}))
      ->capture_default_str();
  cmd.add_flag(
      "--strict", opts.strict,
      "Stop at the first malformed line (error names file, line and field) instead of skipping it");
}

namespace {

void report_detailed(const std::string& path, const ReadReport& r) {
  if (r.skipped > 0) {
    std::cerr << "mlprio: " << path << ": skipped " << r.skipped << " malformed line"
              << (r.skipped == 1 ? "" : "s") << " (use --strict to stop at the first):\n";
    for (const auto& e : r.first_errors) std::cerr << "  " << e.what() << "\n";
    if (r.skipped > static_cast<int64_t>(r.first_errors.size()))
      std::cerr << "  ... and " << (r.skipped - static_cast<int64_t>(r.first_errors.size()))
                << " more\n";
  }
  if (!r.was_sorted)
    std::cerr << "mlprio: " << path << ": not sorted by submit time (" << r.out_of_order
              << " records out of order); sorted it (stable)\n";
}

}  // namespace

namespace {
ReadOptions read_options(const TraceOptions& opts) {
  ReadOptions ro;
  ro.format = parse_trace_format(opts.format);
  ro.strict = opts.strict;
  return ro;
}
}  // namespace

std::unique_ptr<JobReader> open_trace_reader(const TraceOptions& opts) {
  return open_job_reader(opts.path, read_options(opts));
}

void print_read_report(const TraceOptions& opts, const ReadReport& r, TraceReport report) {
  switch (report) {
    case TraceReport::QUIET:
      break;
    case TraceReport::DETAILED:
      report_detailed(opts.path, r);
      break;
    case TraceReport::BRIEF:
      if (r.skipped > 0)
        std::cerr << "note: " << r.skipped << " malformed lines skipped in " << opts.path << "\n";
      break;
  }
}

Trace load_trace_reporting(const TraceOptions& opts, TraceReport report) {
  Trace t = load_trace(opts.path, read_options(opts));
  print_read_report(opts, t.report, report);
  return t;
}

}  // namespace mlprio::cli
