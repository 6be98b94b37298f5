// `mlprio-replay generate`: writes a synthetic SWF trace from a published workload model (today
// Lublin & Feitelson 2003, see core's lublin.hpp), seeded, so demos and tests need no external
// file. Jobs are written as they are generated, in chunks through write_swf, so memory does not
// grow with --jobs; the file appears under its name only once complete (written to a unique
// FILE.tmp.XXXXXX beside it, then renamed), so an interrupted run never leaves a trace that looks
// whole and two runs writing the same FILE never share a temporary.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "mlprio/jobs/lublin.hpp"
#include "mlprio/jobs/trace.hpp"
#include "mlprio/util/errors.hpp"

namespace mlprio::cli {

namespace {

constexpr size_t CHUNK_JOBS = 4096;  // jobs per write_swf call: ~0.5 MB of Job records

struct GenerateArgs {
  std::string model = "lublin";
  int64_t jobs = 0;
  std::string output;
  std::string types = "batch";
  std::string req_time = "auto";
  LublinOptions lublin;
  bool quiet = false;
};

std::string num_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

TraceHeader make_header(const GenerateArgs& a, const LublinOptions& o) {
  TraceHeader h;
  h.max_nodes = o.nodes;
  h.max_procs = o.nodes * o.procs_per_node;
  h.max_jobs = a.jobs;
  h.unix_start_time = 0;
  auto add = [&h](std::string k, std::string v) {
    h.fields.emplace_back(std::move(k), std::move(v));
  };
  add("Version", "2.2");
  add("Computer", "synthetic, " + std::to_string(o.nodes) + " nodes x " +
                      std::to_string(o.procs_per_node) + " processors");
  add("Acknowledge", "Uri Lublin and Dror G. Feitelson (workload model)");
  add("Information",
      "U. Lublin, D. G. Feitelson, The workload on parallel supercomputers: modeling the "
      "characteristics of rigid jobs, JPDC 63(11):1105-1122, 2003");
  add("Conversion", "mlprio-replay generate (mlprio lublin generator version " +
                        std::string(LUBLIN_GENERATOR_VERSION) + ")");
  // Empty values for the typed fields only fix their place: write_swf fills them in.
  add("MaxJobs", "");
  add("MaxRecords", std::to_string(a.jobs));
  add("UnixStartTime", "");
  add("MaxNodes", "");
  add("MaxProcs", "");
  add("MaxRuntime", std::to_string(static_cast<int64_t>(std::exp(LUBLIN_MAX_LOG_RUNTIME))));
  if (o.types != LublinJobTypes::TYPELESS) {
    add("MaxQueues", "2");
    add("Queue", "0 interactive jobs (model's interactive class)");
    add("Queue", "1 batch jobs (model's batch class)");
  }
  add("Note", "model lublin99, generator version " + std::string(LUBLIN_GENERATOR_VERSION) +
                  ", seed " + std::to_string(o.seed) + ", types " +
                  std::string(lublin_job_types_name(o.types)) + ", start hour " +
                  std::to_string(o.start_hour) + ", load scale " + num_text(o.load_scale));
  std::string req = "requested time " + std::string(lublin_req_time_name(o.req_time));
  if (o.req_time == LublinReqTime::FACTOR)
    req += " (run x " + num_text(o.req_time_factor) + " rounded up to " +
           num_text(o.req_time_round) + " s)";
  add("Note", req);
  if (o.user_model.users > 0) {
    const LublinUserModel& u = o.user_model;
    add("Note", "user model version " + std::string(LUBLIN_USER_MODEL_VERSION) + ": " +
                    std::to_string(u.users) + " users, activity exponent " +
                    num_text(u.activity_exponent) + ", stickiness " + num_text(u.stickiness) +
                    ", repeat " + num_text(u.repeat_prob) + ", new-application weight " +
                    num_text(u.new_app_weight) + ", burst mean " + num_text(u.burst_mean) +
                    ", run spread " + num_text(u.runtime_spread) + ", crash " +
                    num_text(u.crash_prob) + ", hang " + num_text(u.hang_prob) + ", limit habit " +
                    num_text(u.habit_share) + ", over-estimation " + num_text(u.factor_min) + ".." +
                    num_text(u.factor_max));
  }
  // No command line here: the options above are all there is, and leaving out the output name
  // keeps files from the same options byte-identical.
  return h;
}

// Writes the header and n jobs to `out`, a chunk at a time.
void write_trace(std::ostream& out, const GenerateArgs& a, LublinGenerator& gen) {
  write_swf(out, make_header(a, gen.options()), {});
  std::vector<Job> chunk;
  chunk.reserve(CHUNK_JOBS);
  const TraceHeader no_header;  // write_swf writes header lines only for what is set
  for (int64_t done = 0; done < a.jobs;) {
    const auto n =
        static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(CHUNK_JOBS), a.jobs - done));
    chunk.resize(n);
    for (auto& j : chunk) gen.next(j);
    write_swf(out, no_header, chunk);
    done += static_cast<int64_t>(n);
  }
}

// Writes `path` through `fill` under a unique temporary name in the same folder (mkstemp:
// "<path>.tmp.XXXXXX", created exclusively, never through an existing file or link), then
// fsyncs and renames it; the temporary is removed on any failure.
template <class Fill>
void write_file_atomically(const std::string& path, Fill fill) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0)
    throw ::mlprio::RuntimeError("generate: cannot create a temporary file beside '" + path +
                                 "': " + std::strerror(errno));
  struct Cleanup {
    int fd;
    const std::string& tmp;
    bool keep = false;
    ~Cleanup() {
      if (fd >= 0) ::close(fd);
      if (!keep) ::unlink(tmp.c_str());
    }
  } guard{fd, tmp};
  const mode_t mask = ::umask(0);  // mkstemp makes 0600; give the file the usual 0666 & ~umask
  ::umask(mask);
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) throw ::mlprio::RuntimeError("generate: cannot open '" + tmp + "' for writing");
    fill(out);
    out.close();
    if (!out) throw ::mlprio::RuntimeError("generate: writing '" + path + "' failed (disk full?)");
  }
  if (::fchmod(fd, 0666 & ~mask) != 0 || ::fsync(fd) != 0 ||
      ::close(std::exchange(guard.fd, -1)) != 0)
    throw ::mlprio::RuntimeError("generate: writing '" + path +
                                 "' failed: " + std::strerror(errno));
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw ::mlprio::RuntimeError("generate: cannot rename '" + tmp + "' to '" + path +
                                 "': " + std::strerror(errno));
  guard.keep = true;
}

void run_generate(const GenerateArgs& a) {
  // Option errors are usage errors (exit 2), found before any file is touched.
  LublinGenerator gen = [&a] {
    try {
      LublinOptions o = a.lublin;
      o.types = parse_lublin_job_types(a.types);
      o.req_time = a.req_time == "auto"
                       ? (o.user_model.users > 0 ? LublinReqTime::USER : LublinReqTime::NONE)
                       : parse_lublin_req_time(a.req_time);
      return LublinGenerator(o);
    } catch (const ::mlprio::UsageError& e) {
      throw CLI::ValidationError(std::string("generate: ") + e.what());
    }
  }();
  const LublinOptions& o = gen.options();

  const auto t0 = std::chrono::steady_clock::now();
  if (a.output == "-") {
    write_trace(std::cout, a, gen);
    std::cout.flush();
    if (!std::cout) throw ::mlprio::RuntimeError("generate: writing to standard output failed");
  } else {
    write_file_atomically(a.output, [&](std::ostream& out) { write_trace(out, a, gen); });
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!a.quiet)
    std::cerr << "mlprio-replay generate: wrote " << a.jobs << " jobs (lublin99 v"
              << LUBLIN_GENERATOR_VERSION << ", seed " << o.seed << ", "
              << lublin_job_types_name(o.types) << ", " << o.nodes << " nodes"
              << (o.user_model.users > 0 ? ", " + std::to_string(o.user_model.users) + " users"
                                         : "")
              << ") to " << (a.output == "-" ? "stdout" : a.output) << " in " << secs << " s ("
              << (secs > 0 ? static_cast<double>(a.jobs) / secs : 0.0) << " jobs/s)\n";
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate",
                                 "Write a synthetic SWF trace from a published workload model "
                                 "(seeded: same seed, same trace)");
  cmd->add_option("--model", args->model,
                  "Workload model: lublin (Lublin & Feitelson 2003, m_lublin99)")
      ->check(CLI::IsMember({"lublin", "lublin99"}))
      ->capture_default_str();
  cmd->add_option("--jobs", args->jobs, "Number of jobs to write")
      ->required()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-o,--output", args->output, "SWF file to write ('-' for standard output)")
      ->required();
  cmd->add_option("--nodes", args->lublin.nodes,
                  "System size in nodes; job sizes are scaled to it and never exceed it (the fits "
                  "are for 128)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--procs-per-node", args->lublin.procs_per_node,
                  "Processors per node: a job's processors = its model nodes x this")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seed", args->lublin.seed,
                  "Random seed (same seed and options, same trace everywhere)")
      ->capture_default_str();
  cmd->add_option(
         "--types", args->types,
         "Job classes: batch, interactive, both (two merged streams, SWF queue 1/0), or typeless "
         "(whole-sample fit)")
      ->check(CLI::IsMember({"batch", "interactive", "both", "typeless"}))
      ->capture_default_str();
  cmd->add_option("--start-hour", args->lublin.start_hour,
                  "Hour of day at time 0 (daily arrival cycle)")
      ->check(CLI::Range(0, 23))
      ->capture_default_str();
  cmd->add_option(
         "--load-scale", args->lublin.load_scale,
         "Multiply the arrival rate (1 = the published model; the daily cycle keeps its shape)")
      ->check(CLI::Range(1e-3, 1e3))
      ->capture_default_str();
  cmd->add_option(
         "--req-time", args->req_time,
         "Requested time: unknown (-1, as the published Lublin traces), exact (= run time), "
         "factor (run x --req-time-factor rounded up to --req-time-round), user (the user model's "
         "habits; needs --users), or auto (user with --users, else unknown)")
      ->check(CLI::IsMember({"auto", "unknown", "exact", "factor", "user"}))
      ->capture_default_str();
  cmd->add_option("--req-time-factor", args->lublin.req_time_factor,
                  "Over-estimation factor for --req-time factor (>= 1)")
      ->capture_default_str();
  cmd->add_option("--req-time-round", args->lublin.req_time_round,
                  "Round requested times up to this many seconds")
      ->capture_default_str();
  // The user model (core's lublin.hpp, LublinUserModel); its defaults are the calibrated ones.
  LublinUserModel& um = args->lublin.user_model;
  cmd->add_option(
         "--users", um.users,
         "Users with repeating behaviour (0 = none, the plain model): Zipf activity, sessions, "
         "resubmitted applications, bursts, request habits, crashes")
      ->check(CLI::Range(int64_t{0}, LUBLIN_MAX_USERS))
      ->capture_default_str();
  cmd->add_option("--user-activity", um.activity_exponent,
                  "Zipf exponent of the users' activity (with --users)")
      ->capture_default_str();
  cmd->add_option("--user-stickiness", um.stickiness,
                  "Probability that a submission is by the previous submission's user")
      ->capture_default_str();
  cmd->add_option("--app-repeat", um.repeat_prob,
                  "Probability that a submission resubmits the user's previous application")
      ->capture_default_str();
  cmd->add_option("--app-new-weight", um.new_app_weight,
                  "Concentration of a user's repertoire: a new application w.p. W / (W + "
                  "submissions so far)")
      ->capture_default_str();
  cmd->add_option("--burst-mean", um.burst_mean,
                  "Mean jobs per submission (copies at the same second)")
      ->capture_default_str();
  cmd->add_option(
         "--run-spread", um.runtime_spread,
         "Laplace scale of ln(run time) of a job around its application's (mean |deviation|)")
      ->capture_default_str();
  cmd->add_option("--crash-prob", um.crash_prob, "Probability that a job crashes within a minute")
      ->capture_default_str();
  cmd->add_option("--hang-prob", um.hang_prob,
                  "Probability that a job hangs until killed at its request (--req-time user)")
      ->capture_default_str();
  cmd->add_option("--limit-habit", um.habit_share,
                  "Share of users who keep a default time limit unless a job needs more")
      ->capture_default_str();
  cmd->add_option("--overestimate-min", um.factor_min,
                  "Smallest user over-estimation factor (>= 1)")
      ->capture_default_str();
  cmd->add_option("--overestimate-max", um.factor_max, "Largest user over-estimation factor")
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", args->quiet, "Do not print the summary line to stderr");
  cmd->callback([args]() { run_generate(*args); });
}

}  // namespace mlprio::cli
