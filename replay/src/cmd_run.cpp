// `mlprio-replay run`: replays a trace under one or more queue orders and one backfilling rule,
// over the whole trace or over windows of it, and reports per-run metrics as a table, as JSON
// (--json, a contract with scripts) and/or as an HDF5 file (--out). All the work is in the replay
// library (simulate(), output.hpp); this file only turns options into a SimConfig.
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "mlprio/cli/program.hpp"
#include "mlprio/cli/trace_options.hpp"
#include "mlprio/io/hdf5.hpp"
#include "mlprio/model/predictor.hpp"
#include "mlprio/replay/dist/sweep_windows.hpp"
#include "mlprio/replay/dist/time_parallel.hpp"
#include "mlprio/replay/ml.hpp"
#include "mlprio/replay/output.hpp"
#include "mlprio/replay/rlscheduler.hpp"
#include "mlprio/replay/simulator.hpp"
#include "mlprio/replay/slurm_conf.hpp"
#include "mlprio/replay/slurm_replay.hpp"
#include "mlprio/replay/spec.hpp"
#include "replay_options.hpp"
#ifdef MLPRIO_REPLAY_HAVE_MPI
#include <memory>

#include "mlprio/replay/dist/mpi_support.hpp"
#endif

namespace mlprio::cli {

namespace {

struct RunArgs {
  TraceOptions trace;
  std::vector<std::string> policies{"fcfs"};
  std::string backfill = "easy";
  std::string profile = "standard";
  std::vector<std::string> windows;
  replay::ReplaySpec spec;  // estimate, EASY++ parts, ml score, machine: shared with sweep/tune
  std::string out;
  bool json = false;
  bool no_series = false;
  bool time_parallel = false;
  int segments = 0;
  replay::PolicyOptions prio;
  std::string slurm_conf;               // --slurm-conf: the deployed-stack replay
  std::string slurm_release = "26.05";  // --slurm-release: the slurmctld it stands for
  bool order_given = false;             // --policy or --backfill on the command line
};

// --time-parallel: one segment per MPI rank (or --segments N emulated in one process), repaired
// until every boundary state matches, so the schedule equals the sequential one exactly. Returns
// false on ranks other than 0, which have nothing to print.
bool time_parallel_run(const RunArgs& a, std::span<const Job> jobs, const replay::SimConfig& cfg,
                       replay::SimResult& result) {
  replay::dist::TimeParallelResult tp;
#ifdef MLPRIO_REPLAY_HAVE_MPI
  util::MpiSession mpi(nullptr, nullptr);
  if (mpi.size() == 1 && a.segments > 1) {
    tp = replay::dist::time_parallel_serial(jobs, cfg, a.segments);
  } else {
    try {
      tp = replay::dist::time_parallel_mpi(jobs, cfg, MPI_COMM_WORLD);
    } catch (const std::exception& e) {
      if (mpi.size() > 1) {
        std::cerr << "mlprio-replay run: error on rank " << mpi.rank() << ": " << e.what() << "\n";
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      throw;
    }
  }
  if (mpi.rank() != 0) return false;
#else
  tp = replay::dist::time_parallel_serial(jobs, cfg, std::max(1, a.segments));
#endif
  const auto& st = tp.stats;
  std::cerr << "mlprio-replay run: time-parallel: " << replay::dist::describe(st) << "\n";
  result = std::move(tp.result);
  return true;
}

std::string config_text(const RunArgs& a, const replay::ReplaySetup& setup,
                        const replay::Machine& m) {
  std::ostringstream s;
  s << "policy=";
  for (size_t i = 0; i < a.policies.size(); ++i) s << (i ? "," : "") << a.policies[i];
  s << " backfill=" << a.backfill << " profile=" << a.profile << " " << setup.describe()
    << " nodes=" << m.nodes << " cores_per_node=" << m.cores_per_node
    << " gpus_per_node=" << m.gpus_per_node << " priority_weight_age=" << a.prio.weight_age
    << " priority_weight_job_size=" << a.prio.weight_job_size
    << " priority_weight_fairshare=" << a.prio.weight_fairshare
    << " priority_max_age=" << a.prio.max_age
    << " priority_decay_half_life=" << a.prio.decay_half_life
    << " priority_favor_small=" << (a.prio.favor_small ? 1 : 0);
  for (const auto& w : a.windows) s << " window=" << w;
  bool agent = false;
  for (const auto& p : a.policies) agent |= replay::is_agent_policy(p);
  if (agent) {
    const replay::AgentOptions& o = a.prio.agent;
    s << " external_base=" << o.base << " external_timeout=" << o.timeout
      << " external_every=" << o.every << " llm_prompt=" << o.llm_prompt_file
      << " llm_top=" << o.llm_top << " llm_model=" << o.llm_model;
  }
  return s.str();
}

// What an --out file records of the run that made it.
h5::Provenance run_provenance(const RunArgs& a, const replay::ReplaySetup& setup,
                              const replay::Machine& machine, const std::string& trace_path,
                              const std::string& config_suffix) {
  h5::Provenance prov;
  prov.kind = "replay";
  prov.command_line = command_line();
  prov.config = config_text(a, setup, machine) + config_suffix;
  prov.input_sha256 = file_sha256(trace_path);
  return prov;
}

// Prints the runs as --json or the table ask.
void print_runs(const RunArgs& a, const std::vector<replay::RunRecord>& runs) {
  if (a.json)
    std::cout << replay::runs_json(runs) << "\n";
  else
    replay::print_runs_table(std::cout, runs);
}

// Writes the runs as --out, --json or the table ask.
void emit_runs(const RunArgs& a, const replay::ReplaySetup& setup, const replay::Machine& machine,
               const std::string& trace_path, const std::vector<replay::RunRecord>& runs,
               const std::string& config_suffix) {
  if (!a.out.empty())
    replay::write_runs_hdf5(a.out, runs,
                            run_provenance(a, setup, machine, trace_path, config_suffix), machine);
  print_runs(a, runs);
}

// One policy over the whole trace in the standard profile with estimates fixed in advance: the
// jobs go from the reader straight into the engine, and with --out the jobs table and the series
// go from the engine into the file as they are made, so memory follows the queue (and the
// compressed file), not the trace. The header is complete with the first job.
// Returns false, with nothing written, when the trace turns out not to be sorted by submit time
// (the loading path then sorts it as before) or its header comes late. Only regular files
// stream: the fallback reads the file again.
bool streamed_run(const RunArgs& a, const replay::ReplaySetup& setup, replay::Profile profile,
                  replay::Backfill backfill) {
  using namespace mlprio::replay;
  auto reader = open_trace_reader(a.trace);
  Job first;
  bool pending = reader->next(first);
  Trace head;  // the header only, for the machine
  head.path = a.trace.path;
  head.format = reader->format();
  head.header = reader->header();
  // No machine in the header before the first job: let the loading path decide (a later header
  // line, or its error).
  if (head.header.max_nodes < 0 && head.header.max_procs < 0) return false;
  SimConfig cfg = setup.base(head, profile);
  cfg.backfill = backfill;
  cfg.policy_options = a.prio;
  cfg.record_series = !a.no_series && !a.out.empty();  // only the HDF5 file holds it
  cfg.record_jobs = !a.out.empty();
  cfg.policy = a.policies.front();
  std::optional<RunFileWriter> file;
  if (!a.out.empty()) {
    file.emplace(a.out, run_provenance(a, setup, cfg.machine, a.trace.path, ""), cfg.machine);
    cfg.sink = &*file;
  }
  bool unsorted = false;
  double last_submit = -std::numeric_limits<double>::infinity();
  int64_t count = 0;
  // A header line after the first job would have changed the machine the loading path sees.
  const auto header_moved = [&]() {
    const TraceHeader& h = reader->header();
    return h.max_nodes != head.header.max_nodes || h.max_procs != head.header.max_procs;
  };
  SimResult result;
  try {
    result = simulate_stream(
        [&](Job& out) {
          if (pending) {
            out = std::move(first);
            pending = false;
          } else if (!reader->next(out)) {
            return false;
          }
          if (out.submit < last_submit) {
            unsorted = true;
            return false;
          }
          last_submit = out.submit;
          ++count;
          return true;
        },
        cfg);
  } catch (const std::exception&) {
    if (header_moved()) return false;  // e.g. a job too large for the early machine
    throw;
  }
  if (unsorted || header_moved()) return false;
  print_read_report(a.trace, reader->report(), a.json ? TraceReport::QUIET : TraceReport::DETAILED);
  RunRecord r;
  r.policy = cfg.policy;
  r.backfill = cfg.backfill;
  r.profile = cfg.profile;
  r.window_start = 0;
  r.window_len = count;
  r.result = std::move(result);
  std::vector<RunRecord> runs;
  runs.push_back(std::move(r));
  if (file) file->finish(runs.front());
  print_runs(a, runs);
  return true;
}

// --slurm-conf: what a slurmctld configured by that file would do with the trace (one run per
// window), the site model's predictions made from the history this replay finishes.
void run_slurm_conf(const RunArgs& a, const replay::ReplaySetup& setup,
                    const std::vector<std::pair<int64_t, int64_t>>& windows_in) {
  using namespace mlprio::replay;
  if (a.time_parallel)
    throw ConfigError("--slurm-conf replays one event loop; it cannot run with --time-parallel");
  if (a.profile != "standard")
    throw ConfigError("--slurm-conf replays what slurmctld does, not the rlscheduler profile");
  SlurmStack conf = read_slurm_conf(a.slurm_conf);
  const int release = parse_slurm_release(a.slurm_release);
  const std::string label = "--slurm-conf " + a.slurm_conf;
  if (a.order_given)
    std::cerr << "mlprio-replay run: " << label
              << ": --policy and --backfill are not used; the file's PriorityType and "
                 "SchedulerType decide\n";
  for (const auto& w : slurm_conf_warnings(conf))
    std::cerr << "mlprio-replay run: " << label << ": " << w << "\n";
  SlurmModelCache models;
  const std::string describe = conf.describe(), sha256 = conf.sha256;
  const bool backfill = conf.backfill;
  // The plugins' model is loaded (a bad file refused) before the trace; prepare reuses it.
  if (((conf.multifactor && conf.site.enabled) || conf.job_submit_mlprio) &&
      !conf.site.model.empty())
    models.get(conf.site.model);
  const Trace trace = load_trace_reporting(a.trace, a.json);
  const SlurmReplay prepared =
      prepare_slurm_replay(std::move(conf), release, trace, setup, label, models, !a.out.empty(),
                           !a.no_series && !a.out.empty());

  std::vector<std::pair<int64_t, int64_t>> windows = windows_in;
  if (windows.empty()) windows.emplace_back(0, static_cast<int64_t>(trace.jobs.size()));
  std::vector<RunRecord> runs;
  for (const auto& [start, len] : windows) {
    RunRecord r;
    r.policy = std::filesystem::path(a.slurm_conf).filename().string();
    r.profile = Profile::STANDARD;
    r.window_start = start;
    r.window_len = len;
    r.scheduler = "slurm";
    r.slurm_conf = a.slurm_conf;
    r.slurm_conf_sha256 = sha256;
    r.slurm_sched = backfill ? "sched/backfill" : "sched/builtin";
    r.result = replay_slurm_window(prepared, trace, start, len);
    runs.push_back(std::move(r));
  }
  emit_runs(a, setup, prepared.cfg.machine, trace.path, runs, " " + describe);
}

void run_run(const RunArgs& a) {
  using namespace mlprio::replay;
  const Profile profile = parse_profile(a.profile);
  const Backfill backfill = parse_backfill(a.backfill);
  // Checks every option and loads --estimate model:FILE before the trace, so bad input fails fast.
  const ReplaySetup setup(a.spec);
  if (setup.online() && (profile == Profile::RLSCHEDULER || backfill == Backfill::RLSCHEDULER))
    throw ConfigError("--estimate " + a.spec.estimate +
                      " replays in the standard profile with none, easy or conservative "
                      "backfilling (the rlscheduler profile copies RLScheduler)");
  for (const auto& p : a.policies)  // fail before loading the trace ('ml' without a model throws)
    if (p != "ml" || !setup.online()) make_policy(p, a.prio);

  std::vector<std::pair<int64_t, int64_t>> windows;
  for (const auto& w : a.windows) windows.push_back(replay::dist::parse_window_arg(w));
  if (!a.slurm_conf.empty()) return run_slurm_conf(a, setup, windows);
  if (profile == Profile::STANDARD && backfill != Backfill::RLSCHEDULER && a.policies.size() == 1 &&
      windows.empty() && !a.time_parallel && !setup.online() &&
      std::filesystem::is_regular_file(a.trace.path) && streamed_run(a, setup, profile, backfill))
    return;

  const Trace trace = load_trace_reporting(a.trace, a.json);
  std::vector<Job> prepared;
  std::span<const Job> jobs(trace.jobs);
  if (profile == Profile::RLSCHEDULER) {
    RlschedulerPrepareReport rep;
    prepared = prepare_rlscheduler_jobs(trace.jobs, &rep);
    jobs = prepared;
    if (!a.json && (rep.dropped_zero_run > 0 || rep.fixed_negative_run > 0))
      std::cerr << "mlprio-replay: rlscheduler profile: dropped " << rep.dropped_zero_run
                << " jobs with run time 0, set " << rep.fixed_negative_run
                << " negative run times to 10 s\n";
  }
  SimConfig cfg = setup.base(trace, profile);
  cfg.backfill = backfill;
  cfg.policy_options = a.prio;
  cfg.record_series = !a.no_series && !a.out.empty();  // only the HDF5 file holds it
  cfg.record_jobs = !a.out.empty();
  if (windows.empty()) windows.emplace_back(0, static_cast<int64_t>(jobs.size()));

  if (a.time_parallel) {
    if (cfg.profile != Profile::STANDARD || a.policies.size() != 1 || windows.size() != 1)
      throw ConfigError(
          "--time-parallel replays one policy over one window (or the whole trace) "
          "in the standard profile");
    if (setup.online())
      throw ConfigError(
          "--time-parallel needs estimates fixed in advance (request or actual): "
          "with --estimate " +
          a.spec.estimate + " a job's estimate depends on the replayed schedule before it");
    cfg.policy = a.policies.front();
    RunRecord r;
    r.policy = cfg.policy;
    r.backfill = cfg.backfill;
    r.profile = cfg.profile;
    r.window_start = windows.front().first;
    r.window_len = windows.front().second;
    if (!time_parallel_run(a, select_window(jobs, r.window_start, r.window_len), cfg, r.result))
      return;
    r.result.series = {};
    if (!cfg.record_jobs) r.result.jobs.clear();
    std::vector<RunRecord> one;
    one.push_back(std::move(r));
    emit_runs(a, setup, cfg.machine, trace.path, one, " time_parallel=1");
    return;
  }

  std::vector<RunRecord> runs;
  for (const auto& policy : a.policies) {
    for (const auto& [start, len] : windows) {
      cfg.policy = policy;
      RunRecord r;
      r.policy = policy;
      r.backfill = cfg.backfill;
      r.profile = cfg.profile;
      r.window_start = start;
      r.window_len = len;
      setup.apply_window(cfg, trace, jobs, start, len);
      r.result = simulate(select_window(jobs, start, len), cfg);
      if (r.result.agent.failures > 0)  // the run went on, on the base order: say so
        std::cerr << "mlprio-replay run: policy " << policy << ": " << r.result.agent.failures
                  << " of " << r.result.agent.calls
                  << " asks got no usable answer (the base order ran instead); last: "
                  << r.result.agent_error << "\n";
      runs.push_back(std::move(r));
    }
  }
  emit_runs(a, setup, cfg.machine, trace.path, runs, "");
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Replay a trace under scheduling policies");
  add_trace_options(*cmd, args->trace);
  cmd->add_option("--policy", args->policies,
                  "Queue order(s), comma separated: fcfs, sjf, smallest, f1..f4, wfp3, unicep, "
                  "multifactor, ml (model score; needs --estimate model:FILE), external:CMD (an "
                  "outside program decides; CMD must not contain a comma), llm:URL (an "
                  "OpenAI-compatible chat endpoint decides)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--backfill", args->backfill,
                  "Backfilling: none, easy, conservative, rlscheduler")
      ->check(CLI::IsMember({"none", "easy", "conservative", "rlscheduler"}))
      ->capture_default_str();
  cmd->add_option("--profile", args->profile,
                  "Job handling: standard, or rlscheduler (RLScheduler SC20's protocol)")
      ->check(CLI::IsMember({"standard", "rlscheduler"}))
      ->capture_default_str();
  cmd->add_option("--window", args->windows,
                  "START:LEN, repeatable: replay jobs START..START+LEN-1 from an empty cluster")
      ->take_all();
  add_replay_spec_options(*cmd, args->spec);
  add_agent_options(*cmd, args->prio.agent);
  cmd->add_option("--priority-weight-age", args->prio.weight_age, "multifactor: PriorityWeightAge")
      ->capture_default_str();
  cmd->add_option("--priority-weight-job-size", args->prio.weight_job_size,
                  "multifactor: PriorityWeightJobSize")
      ->capture_default_str();
  cmd->add_option("--priority-weight-fairshare", args->prio.weight_fairshare,
                  "multifactor: PriorityWeightFairshare")
      ->capture_default_str();
  cmd->add_option("--priority-max-age", args->prio.max_age, "multifactor: PriorityMaxAge, seconds")
      ->capture_default_str();
  cmd->add_option("--priority-decay-half-life", args->prio.decay_half_life,
                  "multifactor: PriorityDecayHalfLife, seconds (0: no decay)")
      ->capture_default_str();
  cmd->add_flag("--priority-favor-small", args->prio.favor_small,
                "multifactor: PriorityFavorSmall (smaller jobs get the larger size factor)");
  cmd->add_option("--slurm-conf", args->slurm_conf,
                  "Replay what a slurmctld configured by this slurm.conf does: its PriorityType "
                  "and weights, site_factor/mlprio and job_submit/mlprio with the model they "
                  "name, SchedulerType and SchedulerParameters, nodes and partitions (replaces "
                  "--policy and --backfill)");
  cmd->add_option("--slurm-release", args->slurm_release,
                  "With --slurm-conf: the Slurm release (YY.MM) whose scheduler to replay, where "
                  "releases differ (backfill rounds a reservation's end down up to 24.05, up "
                  "from 24.11)")
      ->capture_default_str();
  cmd->add_option("--out", args->out, "Write every run to this HDF5 file");
  cmd->add_flag("--json", args->json, "Print {\"runs\":[...]} on stdout instead of the table");
  cmd->add_flag("--no-series", args->no_series,
                "Do not record queue-length/busy-core series (recorded only for --out)");
  cmd->add_flag("--time-parallel", args->time_parallel,
                "Exact replay split in time across MPI ranks (mpirun -np N), repaired until "
                "every segment boundary matches; equals the sequential schedule");
  cmd->add_option("--segments", args->segments,
                  "--time-parallel in one process: emulate N segments (rounds run one after "
                  "the other; for testing and for builds without MPI)")
      ->check(CLI::Range(0, replay::dist::MAX_TIME_SEGMENTS))
      ->capture_default_str();
  cmd->callback([args, cmd]() {
    args->order_given = cmd->count("--policy") > 0 || cmd->count("--backfill") > 0;
    run_run(*args);
  });
}

}  // namespace mlprio::cli
