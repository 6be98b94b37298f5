// `mlprio-model shadow-report`: what site_factor/mlprio in mode=shadow would have done (its
// slurmctld log lines) against what the jobs did (a trace), as text or JSON.
#include <iostream>
#include <memory>
#include <string>

#include "commands.hpp"
#include "model_tool.hpp"

namespace mlprio::model::cli {

namespace {

struct ShadowReportArgs {
  std::string log_path;
  std::string trace_path;
  std::string format = "auto";
  bool json = false;
};

void run_shadow_report(const ShadowReportArgs& a) {
  const ShadowLog log = read_shadow_log(a.log_path);
  const Trace t = read_trace(a.trace_path, a.format);
  const auto r = shadow_report(log, t);
  if (a.json)
    std::cout << r.dump(2) << "\n";
  else
    std::cout << format_shadow_report(r);
}

}  // namespace

void add_shadow_report_command(CLI::App& app) {
  auto args = std::make_shared<ShadowReportArgs>();
  auto* cmd = app.add_subcommand(
      "shadow-report",
      "what mode=shadow would have done (slurmctld log) against what happened (trace)");
  cmd->add_option("--log", args->log_path, "slurmctld log with site_factor/mlprio shadow lines")
      ->required();
  cmd->add_option("--trace", args->trace_path,
                  "what the jobs did: sacct dump (or any trace with job ids)")
      ->required();
  add_format_option(*cmd, args->format);
  cmd->add_flag("--json", args->json, "print the figures as JSON");
  cmd->callback([args] { run_shadow_report(*args); });
}

}  // namespace mlprio::model::cli
