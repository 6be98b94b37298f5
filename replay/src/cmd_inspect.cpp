// `mlprio-replay inspect`: what a trace holds — jobs, time span, machine size from the header,
// how many jobs lack requested time or processors, skipped lines — as text or one JSON object;
// with --user-stats also how users behave (mlprio/jobs/user_stats.hpp), the figures the
// generator's user model is calibrated on.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "mlprio/cli/trace_options.hpp"
#include "mlprio/jobs/user_stats.hpp"
#include "mlprio/util/checked_cast.hpp"

namespace mlprio::cli {

namespace {

struct InspectArgs {
  TraceOptions trace;
  bool json = false;
  bool user_stats = false;
};

nlohmann::json user_stats_json(const UserBehaviourStats& u) {
  return {{"jobs", u.jobs},
          {"jobs_with_user", u.jobs_with_user},
          {"users", u.users},
          {"top10_share", u.top10_share},
          {"pairs", u.pairs},
          {"same_request_size", u.same_request_size},
          {"gap_within_10s", u.gap_within_10s},
          {"gap_within_1h", u.gap_within_1h},
          {"run_pairs", u.run_pairs},
          {"run_within_2x", u.run_within_2x},
          {"median_abs_log2_ratio", u.median_abs_log2_ratio},
          {"request_jobs", u.request_jobs},
          {"mean_run_over_request", u.mean_run_over_request},
          {"run_at_limit_share", u.run_at_limit_share},
          {"run_jobs", u.run_jobs},
          {"short_run_share", u.short_run_share}};
}

// "0.123", or "-" for a figure without data (NaN).
std::string figure(double v) {
  if (std::isnan(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

void print_user_stats(const UserBehaviourStats& u) {
  std::cout << "users        " << u.users << " (" << u.jobs_with_user << " of " << u.jobs
            << " jobs have a user id); top 10 % of users submit " << figure(u.top10_share)
            << " of them\n"
            << "repeats      of " << u.pairs
            << " jobs with a previous job by the same user: " << figure(u.same_request_size)
            << " same (request, size), submitted within 10 s " << figure(u.gap_within_10s)
            << ", within 1 h " << figure(u.gap_within_1h) << "\n"
            << "run locality of " << u.run_pairs
            << " such pairs with run times: " << figure(u.run_within_2x)
            << " within 2x of the previous run, median |log2(run / previous run)| "
            << figure(u.median_abs_log2_ratio) << "\n"
            << "requests     of " << u.request_jobs << " jobs with a request: mean run / request "
            << figure(u.mean_run_over_request) << ", run >= request "
            << figure(u.run_at_limit_share) << "\n"
            << "short runs   of " << u.run_jobs
            << " jobs with a run time: " << figure(u.short_run_share) << " ran under 60 s\n";
}

std::string duration_text(double s) {
  char buf[64];
  // Submit times are any finite number: a span too long for whole days is shown in seconds.
  const auto days = to_integer<int64_t>(s / 86400, 0, int64_t{1} << 40);
  if (!days) {
    std::snprintf(buf, sizeof buf, "%g s", s);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%lldd %02d:%02d:%02d", static_cast<long long>(*days),
                static_cast<int>(std::fmod(s, 86400) / 3600),
                static_cast<int>(std::fmod(s, 3600) / 60), static_cast<int>(std::fmod(s, 60)));
  return buf;
}

// What inspect prints about the jobs, gathered one job at a time.
struct JobCounts {
  int64_t jobs = 0, no_req_time = 0, no_procs = 0, no_run = 0, nonpositive_run = 0, with_gpus = 0;
  double first = 0, last = 0, max_procs_job = 0, cpu_seconds = 0;
  void add(const Job& j) {
    // The first and last submit of the trace sorted by submit time (load_trace's order).
    first = jobs == 0 ? j.submit : std::min(first, j.submit);
    last = jobs == 0 ? j.submit : std::max(last, j.submit);
    ++jobs;
    if (j.req_time <= 0) ++no_req_time;
    if (j.procs() <= 0) ++no_procs;
    if (j.run < 0)
      ++no_run;
    else if (j.run == 0)
      ++nonpositive_run;
    if (j.req_gpus > 0 || j.alloc_gpus > 0) ++with_gpus;
    max_procs_job = std::max(max_procs_job, static_cast<double>(j.procs()));
    if (j.run > 0 && j.procs() > 0) cpu_seconds += j.run * static_cast<double>(j.procs());
  }
};

void run_inspect(const InspectArgs& a) {
  // --user-stats needs the whole trace in submit order; the rest streams the jobs, so memory
  // does not grow with the trace.
  Trace t;
  JobCounts c;
  if (a.user_stats) {
    t = load_trace_reporting(a.trace, a.json);
    for (const Job& j : t.jobs) c.add(j);
  } else {
    auto reader = open_trace_reader(a.trace);
    Job job;
    while (reader->next(job)) c.add(job);
    t.path = a.trace.path;
    t.format = reader->format();
    t.header = reader->header();
    t.report = reader->report();
    t.names = std::move(reader->names());
    print_read_report(a.trace, t.report, a.json ? TraceReport::QUIET : TraceReport::DETAILED);
  }
  const int64_t no_req_time = c.no_req_time, no_procs = c.no_procs, no_run = c.no_run,
                nonpositive_run = c.nonpositive_run, with_gpus = c.with_gpus;
  const double first = c.first, last = c.last, max_procs_job = c.max_procs_job,
               cpu_seconds = c.cpu_seconds;
  const auto& r = t.report;
  nlohmann::json j = {
      {"trace", t.path},
      {"format", std::string(trace_format_name(t.format))},
      {"jobs", c.jobs},
      {"first_submit", first},
      {"last_submit", last},
      {"span_seconds", last - first},
      {"max_nodes", t.header.max_nodes},
      {"max_procs", t.header.max_procs},
      {"unix_start_time", t.header.unix_start_time},
      {"largest_job_procs", static_cast<int64_t>(max_procs_job)},
      {"jobs_without_requested_time", no_req_time},
      {"jobs_without_processors", no_procs},
      {"jobs_without_run_time", no_run},
      {"jobs_with_zero_run_time", nonpositive_run},
      {"jobs_with_gpus", with_gpus},
      {"users", static_cast<int64_t>(t.names.users.size())},
      {"cpu_seconds", cpu_seconds},
      {"lines", r.lines},
      {"skipped_lines", r.skipped},
      {"blank_lines", r.blank_lines},
      {"ignored_records", r.ignored},
      {"sorted_on_read", !r.was_sorted},
      {"out_of_order_records", r.out_of_order},
  };
  nlohmann::json errs = nlohmann::json::array();
  for (const auto& e : r.first_errors)
    errs.push_back(
        {{"file", e.file}, {"line", e.line}, {"field", e.field}, {"message", e.message}});
  j["first_errors"] = errs;
  const UserBehaviourStats ustats =
      a.user_stats ? user_behaviour_stats(t.jobs) : UserBehaviourStats{};
  if (a.user_stats) j["user_stats"] = user_stats_json(ustats);
  if (a.json) {
    std::cout << j.dump() << "\n";
    return;
  }
  std::cout << std::fixed << std::setprecision(0);
  std::cout << "trace        " << t.path << " (" << trace_format_name(t.format) << ")\n"
            << "jobs         " << c.jobs << "\n"
            << "time span    " << duration_text(last - first) << " (submit " << first << " .. "
            << last << " s)\n"
            << "machine      "
            << (t.header.max_nodes >= 0 ? std::to_string(t.header.max_nodes) : "?") << " nodes, "
            << (t.header.max_procs >= 0 ? std::to_string(t.header.max_procs) : "?")
            << " processors (from header)\n"
            << "largest job  " << static_cast<int64_t>(max_procs_job) << " processors\n"
            << "missing      " << no_req_time << " without requested time, " << no_procs
            << " without processors, " << no_run << " without run time, " << nonpositive_run
            << " with run time 0\n"
            << "GPU jobs     " << with_gpus << "\n"
            << "lines        " << r.lines << " read, " << r.skipped << " skipped, " << r.blank_lines
            << " blank, " << r.ignored << " ignored (job steps)\n"
            << "order        "
            << (r.was_sorted ? "sorted by submit time" : "was not sorted by submit time; sorted")
            << "\n";
  if (a.user_stats) print_user_stats(ustats);
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  auto* cmd = app.add_subcommand(
      "inspect",
      "Show what a trace holds: jobs, span, machine size, missing fields, skipped lines");
  add_trace_options(*cmd, args->trace);
  cmd->add_flag("--json", args->json, "Print one JSON object (at least \"jobs\")");
  cmd->add_flag(
      "--user-stats", args->user_stats,
      "Also how users behave: activity concentration, repeats of the previous job, run-time "
      "locality, run/request, short runs (JSON: \"user_stats\"; NaN figures are null)");
  cmd->callback([args]() { run_inspect(*args); });
}

}  // namespace mlprio::cli
