// `mlprio-replay run`: replays a trace under one or more queue orders and one backfilling rule,
// over the whole trace or over windows of it, and reports per-run metrics as a table, as JSON
// (--json, a contract with scripts) and/or as an HDF5 file (--out). All the work is in the replay
// library (simulate(), output.hpp); this file only turns options into a SimConfig.
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "commands.hpp"
#include "mlprio/io/hdf5.hpp"
#include "mlprio/model/predictor.hpp"
#include "mlprio/replay/ml.hpp"
#include "mlprio/replay/output.hpp"
#include "mlprio/replay/rlscheduler.hpp"
#include "mlprio/replay/simulator.hpp"
#include "mlprio/replay_dist/time_parallel.hpp"
#ifdef MLPRIO_REPLAY_HAVE_MPI
#include <memory>

#include "mlprio/replay_dist/mpi_support.hpp"
#endif

namespace mlprio::cli {

namespace {

struct RunArgs {
  TraceOptions trace;
  std::vector<std::string> policies{"fcfs"};
  std::string backfill = "easy";
  std::string profile = "standard";
  std::vector<std::string> windows;
  std::string estimate = "request";
  std::string estimate_quantile = "upper";  // --estimate model:FILE: which prediction backfills
  model::ScoreConfig ml_score;              // --policy ml: the score's settings
  int64_t nodes = 0;
  int64_t cores_per_node = 0;
  int64_t gpus_per_node = 0;
  std::string allocation = "nodes";
  bool kill_at_limit = false;
  std::string too_large = "error";
  double bsld_threshold = 10.0;
  std::string out;
  bool json = false;
  bool no_series = false;
  bool time_parallel = false;
  int segments = 0;
  replay::PolicyOptions prio;
};

// --time-parallel: one segment per MPI rank (or --segments N emulated in one process), repaired
// until every boundary state matches, so the schedule equals the sequential one exactly. Returns
// false on ranks other than 0, which have nothing to print.
bool time_parallel_run(const RunArgs& a, std::span<const Job> jobs, const replay::SimConfig& cfg,
                       replay::SimResult& result) {
  replay::dist::TimeParallelResult tp;
#ifdef MLPRIO_REPLAY_HAVE_MPI
  replay::dist::MpiSession mpi(nullptr, nullptr);
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

std::pair<int64_t, int64_t> parse_window(const std::string& w) {
  const auto colon = w.find(':');
  try {
    if (colon == std::string::npos) throw std::invalid_argument("no colon");
    size_t used1 = 0, used2 = 0;
    const std::string a = w.substr(0, colon), b = w.substr(colon + 1);
    const int64_t start = std::stoll(a, &used1);
    const int64_t len = std::stoll(b, &used2);
    if (used1 != a.size() || used2 != b.size() || start < 0 || len <= 0)
      throw std::invalid_argument("range");
    return {start, len};
  } catch (const std::exception&) {
    throw replay::ConfigError("--window '" + w +
                              "': expected START:LEN with START >= 0 and LEN > 0, e.g. 1981:1024");
  }
}

std::string config_text(const RunArgs& a, const replay::Machine& m) {
  std::ostringstream s;
  s << "policy=";
  for (size_t i = 0; i < a.policies.size(); ++i) s << (i ? "," : "") << a.policies[i];
  s << " backfill=" << a.backfill << " profile=" << a.profile << " estimate=" << a.estimate
    << " nodes=" << m.nodes << " cores_per_node=" << m.cores_per_node
    << " gpus_per_node=" << m.gpus_per_node << " allocation=" << a.allocation
    << " kill_at_limit=" << (a.kill_at_limit ? 1 : 0) << " too_large=" << a.too_large
    << " bsld_threshold=" << a.bsld_threshold << " priority_weight_age=" << a.prio.weight_age
    << " priority_weight_job_size=" << a.prio.weight_job_size
    << " priority_weight_fairshare=" << a.prio.weight_fairshare
    << " priority_max_age=" << a.prio.max_age
    << " priority_decay_half_life=" << a.prio.decay_half_life
    << " priority_favor_small=" << (a.prio.favor_small ? 1 : 0);
  s << " estimate_quantile=" << a.estimate_quantile << " ml_age_weight=" << a.ml_score.age_weight
    << " ml_starvation_limit=" << a.ml_score.starvation_limit
    << " ml_size_weight=" << a.ml_score.size_weight;
  for (const auto& w : a.windows) s << " window=" << w;
  return s.str();
}

void run_run(const RunArgs& a) {
  using namespace mlprio::replay;
  SimConfig cfg;
  cfg.profile = parse_profile(a.profile);
  cfg.backfill = parse_backfill(a.backfill);
  const EstimateChoice estimate = parse_estimate_choice(a.estimate);
  cfg.estimate = estimate.mode;
  // --estimate model:FILE: load before the trace so a bad model fails fast.
  std::unique_ptr<model::Predictor> predictor;
  const EstimateQuantile quantile = parse_estimate_quantile(a.estimate_quantile);
  if (!estimate.model_path.empty()) {
    if (cfg.profile == Profile::RLSCHEDULER || cfg.backfill == Backfill::RLSCHEDULER)
      throw ConfigError("--estimate model: replays in the standard profile with none, easy or "
                        "conservative backfilling (the rlscheduler profile copies RLScheduler)");
    predictor = load_replay_model(estimate.model_path);
  }
  cfg.kill_at_limit = a.kill_at_limit;
  cfg.too_large = a.too_large == "skip" ? TooLarge::SKIP : TooLarge::ERROR;
  cfg.bsld_threshold = a.bsld_threshold;
  cfg.policy_options = a.prio;
  cfg.record_series = !a.no_series;
  cfg.record_jobs = !a.out.empty();
  for (const auto& p : a.policies)  // fail before loading the trace ('ml' without a model throws)
    if (p != "ml" || !predictor) make_policy(p, a.prio);

  std::vector<std::pair<int64_t, int64_t>> windows;
  for (const auto& w : a.windows) windows.push_back(parse_window(w));

  const Trace trace = load_trace_reporting(a.trace, a.json);
  std::vector<Job> prepared;
  std::span<const Job> jobs(trace.jobs);
  if (cfg.profile == Profile::RLSCHEDULER) {
    RlschedulerPrepareReport rep;
    prepared = prepare_rlscheduler_jobs(trace.jobs, &rep);
    jobs = prepared;
    if (!a.json && (rep.dropped_zero_run > 0 || rep.fixed_negative_run > 0))
      std::cerr << "mlprio-replay: rlscheduler profile: dropped " << rep.dropped_zero_run
                << " jobs with run time 0, set " << rep.fixed_negative_run
                << " negative run times to 10 s\n";
  }
  if (a.nodes > 0) {
    cfg.machine.nodes = a.nodes;
    cfg.machine.cores_per_node = a.cores_per_node > 0 ? a.cores_per_node : 1;
  } else if (cfg.profile == Profile::RLSCHEDULER) {
    cfg.machine = rlscheduler_machine(trace.header);
  } else {
    cfg.machine = machine_from_header(trace.header);
  }
  cfg.machine.gpus_per_node = a.gpus_per_node;
  cfg.machine.allocation = a.allocation == "cores" ? Allocation::CORES : Allocation::NODES;
  check_machine_bounds(cfg.machine, a.nodes > 0 ? "--nodes/--cores-per-node/--gpus-per-node"
                                                : "the machine from " + trace.path +
                                                      "'s header (MaxNodes, MaxProcs) and "
                                                      "--gpus-per-node");
  if (windows.empty()) windows.emplace_back(0, static_cast<int64_t>(jobs.size()));

  // One batch prediction for the whole trace (features causal in submit order, as mlprio-model
  // evaluate builds them), sliced per window so JobView::index finds its job's prediction.
  std::optional<TraceModel> trace_model;
  if (predictor)
    trace_model = make_trace_model(*predictor, trace, quantile, a.ml_score,
                                   "--estimate " + a.estimate);
  if (trace_model && a.time_parallel)
    trace_model->apply_window(cfg, jobs, windows.front().first, windows.front().second);

  if (a.time_parallel) {
    if (cfg.profile != Profile::STANDARD || a.policies.size() != 1 || windows.size() != 1)
      throw ConfigError("--time-parallel replays one policy over one window (or the whole trace) "
                        "in the standard profile");
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
    if (!a.out.empty()) {
      h5::Provenance prov;
      prov.kind = "replay";
      prov.command_line = command_line();
      prov.config = config_text(a, cfg.machine) + " time_parallel=1";
      prov.input_sha256 = file_sha256(trace.path);
      write_runs_hdf5(a.out, one, prov, cfg.machine);
    }
    if (a.json)
      std::cout << runs_json(one) << "\n";
    else
      print_runs_table(std::cout, one);
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
      if (trace_model) trace_model->apply_window(cfg, jobs, start, len);
      r.result = simulate(select_window(jobs, start, len), cfg);
      runs.push_back(std::move(r));
    }
  }
  if (!a.out.empty()) {
    h5::Provenance prov;
    prov.kind = "replay";
    prov.command_line = command_line();
    prov.config = config_text(a, cfg.machine);
    prov.input_sha256 = file_sha256(trace.path);
    write_runs_hdf5(a.out, runs, prov, cfg.machine);
  }
  if (a.json)
    std::cout << runs_json(runs) << "\n";
  else
    print_runs_table(std::cout, runs);
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Replay a trace under scheduling policies");
  add_trace_options(*cmd, args->trace);
  cmd->add_option("--policy", args->policies,
                  "Queue order(s), comma separated: fcfs, sjf, smallest, f1..f4, wfp3, unicep, "
                  "multifactor, ml (model score; needs --estimate model:FILE)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--backfill", args->backfill, "Backfilling: none, easy, conservative, rlscheduler")
      ->check(CLI::IsMember({"none", "easy", "conservative", "rlscheduler"}))
      ->capture_default_str();
  cmd->add_option("--profile", args->profile,
                  "Job handling: standard, or rlscheduler (RLScheduler SC20's protocol)")
      ->check(CLI::IsMember({"standard", "rlscheduler"}))
      ->capture_default_str();
  cmd->add_option("--window", args->windows,
                  "START:LEN, repeatable: replay jobs START..START+LEN-1 from an empty cluster")
      ->take_all();
  cmd->add_option("--estimate", args->estimate,
                  "Runtime estimate for backfilling and policies: request (requested time, or run "
                  "time when absent), actual, or model:FILE (a mlprio-model file's predictions)")
      ->capture_default_str();
  cmd->add_option("--estimate-quantile", args->estimate_quantile,
                  "With --estimate model:FILE, backfill with the model's upper quantile "
                  "(runtime_upper) or its point run time")
      ->check(CLI::IsMember({"point", "upper"}))
      ->capture_default_str();
  cmd->add_option("--ml-age-weight", args->ml_score.age_weight,
                  "ml: how fast waiting raises the score (ScoreConfig::age_weight)")
      ->capture_default_str();
  cmd->add_option("--ml-starvation-limit", args->ml_score.starvation_limit,
                  "ml: wait in seconds after which a job outranks any fresh job")
      ->capture_default_str();
  cmd->add_option("--ml-size-weight", args->ml_score.size_weight,
                  "ml: favour (>0) or penalise (<0) wide jobs")
      ->capture_default_str();
  cmd->add_option("--nodes", args->nodes, "Nodes (default: trace header MaxNodes)");
  cmd->add_option("--cores-per-node", args->cores_per_node,
                  "Cores per node (default: MaxProcs / MaxNodes, or 1 with --nodes)");
  cmd->add_option("--gpus-per-node", args->gpus_per_node, "GPUs per node")->capture_default_str();
  cmd->add_option("--allocation", args->allocation, "Jobs take whole nodes or single cores")
      ->check(CLI::IsMember({"nodes", "cores"}))
      ->capture_default_str();
  cmd->add_flag("--kill-at-limit", args->kill_at_limit,
                "End jobs at their requested time, as Slurm does");
  cmd->add_option("--too-large", args->too_large,
                  "Jobs larger than the machine: error (stop) or skip (count them)")
      ->check(CLI::IsMember({"error", "skip"}))
      ->capture_default_str();
  cmd->add_option("--bsld-threshold", args->bsld_threshold,
                  "Bounded-slowdown run-time floor, seconds")
      ->capture_default_str();
  cmd->add_option("--priority-weight-age", args->prio.weight_age,
                  "multifactor: PriorityWeightAge")
      ->capture_default_str();
  cmd->add_option("--priority-weight-job-size", args->prio.weight_job_size,
                  "multifactor: PriorityWeightJobSize")
      ->capture_default_str();
  cmd->add_option("--priority-weight-fairshare", args->prio.weight_fairshare,
                  "multifactor: PriorityWeightFairshare")
      ->capture_default_str();
  cmd->add_option("--priority-max-age", args->prio.max_age,
                  "multifactor: PriorityMaxAge, seconds")
      ->capture_default_str();
  cmd->add_option("--priority-decay-half-life", args->prio.decay_half_life,
                  "multifactor: PriorityDecayHalfLife, seconds (0: no decay)")
      ->capture_default_str();
  cmd->add_flag("--priority-favor-small", args->prio.favor_small,
                "multifactor: PriorityFavorSmall (smaller jobs get the larger size factor)");
  cmd->add_option("--out", args->out, "Write every run to this HDF5 file");
  cmd->add_flag("--json", args->json, "Print {\"runs\":[...]} on stdout instead of the table");
  cmd->add_flag("--no-series", args->no_series, "Do not record queue-length/busy-core series");
  cmd->add_flag("--time-parallel", args->time_parallel,
                "Exact replay split in time across MPI ranks (mpirun -np N), repaired until "
                "every segment boundary matches; equals the sequential schedule");
  cmd->add_option("--segments", args->segments,
                  "--time-parallel in one process: emulate N segments (rounds run one after "
                  "the other; for testing and for builds without MPI)")
      ->check(CLI::Range(0, replay::dist::MAX_TIME_SEGMENTS))
      ->capture_default_str();
  cmd->callback([args]() { run_run(*args); });
}

}  // namespace mlprio::cli
