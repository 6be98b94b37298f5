// Shared option handling for mlprio-replay subcommands (see cli_common.hpp).
#include "cli_common.hpp"

#include <iostream>

namespace mlprio::cli {

void add_trace_options(CLI::App& cmd, TraceOptions& opts) {
  cmd.add_option("--trace", opts.path, "Job trace to read (SWF, sacct --parsable2, Alibaba pod CSV; plain or gzip)")
      ->required();
  cmd.add_option("--format", opts.format, "Trace format: auto, swf, sacct, alibaba")
      ->check(CLI::IsMember({"auto", "swf", "sacct", "alibaba"}))
      ->capture_default_str();
  cmd.add_flag("--strict", opts.strict,
               "Stop at the first malformed line (error names file, line and field) instead of skipping it");
}

Trace load_trace_reporting(const TraceOptions& opts, bool quiet) {
  ReadOptions ro;
  ro.format = parse_trace_format(opts.format);
  ro.strict = opts.strict;
  Trace t = load_trace(opts.path, ro);
  if (!quiet) {
    const auto& r = t.report;
    if (r.skipped > 0) {
      std::cerr << "mlprio: " << opts.path << ": skipped " << r.skipped << " malformed line"
                << (r.skipped == 1 ? "" : "s") << " (use --strict to stop at the first):\n";
      for (const auto& e : r.first_errors) std::cerr << "  " << e.what() << "\n";
      if (r.skipped > static_cast<int64_t>(r.first_errors.size()))
        std::cerr << "  ... and " << (r.skipped - static_cast<int64_t>(r.first_errors.size())) << " more\n";
    }
    if (!r.was_sorted)
      std::cerr << "mlprio: " << opts.path << ": not sorted by submit time (" << r.out_of_order
                << " records out of order); sorted it (stable)\n";
  }
  return t;
}

int& exit_code() {
  static int code = 0;
  return code;
}

std::string& command_line() {
  static std::string line;
  return line;
}

}  // namespace mlprio::cli
