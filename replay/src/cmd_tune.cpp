// `mlprio-replay tune`: searches the `ml` policy by replaying windows of the training part of a
// trace (mlprio/replay/tune.hpp) and writes the choice into a copy of the model file, so that
// `run --policy ml --estimate model:OUT` and site_factor/mlprio run what was measured. Under
// mpirun/srun every rank replays its share of the (candidate, window) pairs and the outcomes are
// summed (each pair computed by exactly one rank, the others contributing zeros), so the choice
// is the same for any number of ranks.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "commands.hpp"
#include "mlprio/cli/trace_options.hpp"
#include "mlprio/model/model_file.hpp"
#include "mlprio/replay/dist/sweep_windows.hpp"
#include "mlprio/replay/tune.hpp"
#include "replay_options.hpp"
#ifdef MLPRIO_REPLAY_HAVE_MPI
#include "mlprio/replay/dist/mpi_support.hpp"
#endif

namespace mlprio::cli {
namespace {

struct TuneArgs {
  TraceOptions trace;
  std::string model, out, windows;  // windows: empty = 4 x the held-out length
  double train_fraction = 0.8;
  double max_wait_ratio = 1.25;
  double max_wait_floor = replay::DEFAULT_MAX_WAIT_FLOOR;
  std::string max_wait_stat = "mean";
  std::vector<double> loads = {1.0};
  std::vector<double> request_weights = replay::DEFAULT_REQUEST_WEIGHTS;
  std::vector<double> fairshare_weights = replay::DEFAULT_FAIRSHARE_WEIGHTS;
  std::vector<double> size_weights = replay::DEFAULT_SIZE_WEIGHTS;
  std::vector<std::string> estimates = replay::DEFAULT_ESTIMATES;
  bool json = false;
  replay::ReplaySpec spec;
};

struct Comm {
  int rank = 0, size = 1;
  // Sums the outcomes over ranks (each computed by exactly one rank).
  std::function<void(std::vector<replay::TuneOutcome>&)> sum;
};

std::vector<replay::TuneOutcome> stage(const char* name, const replay::ReplaySetup& setup,
                                       const Trace& trace,
                                       const std::vector<model::PolicyParams>& cands,
                                       const std::vector<replay::TuneWindow>& windows,
                                       const Comm& comm, bool quiet) {
  const auto t0 = std::chrono::steady_clock::now();
  auto out = replay::run_tune_stage(
      setup, trace, cands, windows,
      [&](size_t i) { return static_cast<int>(i % static_cast<size_t>(comm.size)) == comm.rank; },
      [&](size_t done, size_t total) {
        if (comm.rank == 0 && !quiet && (done % 10 == 0 || done == total))
          std::cerr << "\rmlprio-replay tune: " << name << ": " << done << "/" << total
                    << " replays on rank 0 (" << comm.size << " ranks)" << std::flush;
      });
  comm.sum(out);
  if (comm.rank == 0 && !quiet) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cerr << "\rmlprio-replay tune: " << name << ": " << cands.size() << " candidates x "
              << windows.size() << " windows in " << s << " s            \n";
  }
  return out;
}

std::string loads_text(const std::vector<double>& loads) {
  std::ostringstream s;
  for (size_t i = 0; i < loads.size(); ++i) s << (i ? "," : "") << loads[i];
  return s.str();
}

void run_tune(const TuneArgs& a, const Comm& comm) {
  using namespace mlprio::replay;
  if (!(a.train_fraction > 0 && a.train_fraction < 1))
    throw ConfigError("--train-fraction must lie strictly between 0 and 1");
  if (!(a.max_wait_ratio >= 1) || !std::isfinite(a.max_wait_ratio))
    throw ConfigError("--max-wait-ratio must be a number >= 1");
  if (!(a.max_wait_floor >= 0) || !std::isfinite(a.max_wait_floor))
    throw ConfigError("--max-wait-floor must be a number of seconds >= 0");
  const MaxWaitStat stat = parse_max_wait_stat(a.max_wait_stat);
  ReplaySpec spec = a.spec;
  spec.estimate = "model:" + a.model;
  const ReplaySetup setup(spec);
  int64_t count = 2, len_arg = 0;
  if (!a.windows.empty()) std::tie(count, len_arg) = dist::parse_windows_arg(a.windows);
  const Trace trace = load_trace_reporting(a.trace, a.json || comm.rank != 0);
  const auto n = static_cast<int64_t>(trace.jobs.size());
  const auto n_train = static_cast<int64_t>(std::floor(a.train_fraction * static_cast<double>(n)));
  // Default: the training part in two halves. Long windows carry the backlog a busy period
  // builds up (every window starts from an empty cluster); four windows as long as the held-out
  // tail were the default before and chose policies that did not carry over to busier tails.
  const int64_t len = a.windows.empty() ? std::max<int64_t>(n_train, 1) : len_arg;
  const std::vector<TuneWindow> windows = training_windows(n_train, count, len, a.loads);

  std::vector<TuneOutcome> base(windows.size());
  for (size_t w = 0; w < windows.size(); ++w) base[w] = baseline_replay(setup, trace, windows[w]);

  const bool quiet = a.json;
  const auto c1 = tune_stage1(setup.policy(), a.request_weights, a.estimates);
  const auto o1 =
      stage("stage 1 (score, starvation, estimate)", setup, trace, c1, windows, comm, quiet);
  const TuneVerdict v1 =
      pick_best(o1, base, windows.size(), a.max_wait_ratio, a.max_wait_floor, stat);
  const auto c2 = tune_stage2(c1[v1.best], a.size_weights);
  const auto o2 =
      stage("stage 2 (size, order, correction)", setup, trace, c2, windows, comm, quiet);
  const TuneVerdict v2 =
      pick_best(o2, base, windows.size(), a.max_wait_ratio, a.max_wait_floor, stat);
  const bool second = v2.feasible && (!v1.feasible || v2.bsld_ratio <= v1.bsld_ratio);
  TuneVerdict v = second ? v2 : v1;
  model::PolicyParams best = second ? c2[v2.best] : c1[v1.best];
  const std::vector<TuneOutcome>* chosen = second ? &o2 : &o1;
  // Stage 3 (only with --fairshare-weights beyond one value): the fair-share weight around the
  // choice, which is its first candidate, so the stage can only keep or improve it.
  const auto c3 = tune_stage3(best, a.fairshare_weights);
  std::vector<TuneOutcome> o3;
  if (!c3.empty()) {
    o3 = stage("stage 3 (fair share)", setup, trace, c3, windows, comm, quiet);
    v = pick_best(o3, base, windows.size(), a.max_wait_ratio, a.max_wait_floor, stat);
    best = c3[v.best];
    chosen = &o3;
  }
  const size_t ci = v.best;
  if (comm.rank != 0) return;

  std::ostringstream by;
  by << "mlprio-replay tune: trace sha256 " << file_sha256(trace.path) << ", training jobs 0.."
     << n_train - 1 << ", " << windows.size() / a.loads.size() << " windows of "
     << windows.front().len << " at load x" << loads_text(a.loads) << ", "
     << max_wait_stat_name(stat) << " window max wait <= " << a.max_wait_ratio
     << " x max(FCFS+EASY's, " << a.max_wait_floor << " s); train bsld ratio " << v.bsld_ratio
     << ", max wait ratio " << v.max_wait_ratio << " (worst window " << v.worst_max_wait_ratio
     << ")" << (v.feasible ? "" : " (no candidate met the bound)");
  best.tuned_by = by.str();
  nlohmann::json doc = model::read_model_document(a.model);
  doc["policy"] = model::policy_to_json(best);
  model::write_model_document(a.out, doc);

  nlohmann::ordered_json j;
  j["model"] = a.out;
  j["feasible"] = v.feasible;
  j["policy"] = model::policy_to_json(best);
  j["train_bsld_ratio"] = v.bsld_ratio;
  j["train_max_wait_ratio"] = v.max_wait_ratio;
  j["train_worst_max_wait_ratio"] = v.worst_max_wait_ratio;
  j["max_wait_ratio"] = a.max_wait_ratio;
  j["max_wait_stat"] = a.max_wait_stat;
  j["loads"] = a.loads;
  j["request_weights"] = a.request_weights;
  j["max_wait_floor"] = a.max_wait_floor;
  j["fairshare_weights"] = a.fairshare_weights;
  j["size_weights"] = a.size_weights;
  j["estimates"] = a.estimates;
  j["candidates"] = c1.size() + c2.size() + c3.size();
  nlohmann::ordered_json ws = nlohmann::ordered_json::array();
  for (size_t w = 0; w < windows.size(); ++w) {
    const TuneOutcome& o = (*chosen)[ci * windows.size() + w];
    ws.push_back({{"window", {windows[w].start, windows[w].len}},
                  {"load", windows[w].load},
                  {"fcfs_bsld", base[w].avg_bsld},
                  {"fcfs_max_wait", base[w].max_wait},
                  {"ml_bsld", o.avg_bsld},
                  {"ml_max_wait", o.max_wait}});
  }
  j["windows"] = ws;
  // Every candidate's outcome per window (both stages), so a choice can be checked by hand.
  nlohmann::ordered_json grid = nlohmann::ordered_json::array();
  const auto add_grid = [&](int stage_no, const std::vector<model::PolicyParams>& cands,
                            const std::vector<TuneOutcome>& outs) {
    for (size_t c = 0; c < cands.size(); ++c) {
      nlohmann::ordered_json bsld = nlohmann::ordered_json::array();
      nlohmann::ordered_json maxw = nlohmann::ordered_json::array();
      for (size_t w = 0; w < windows.size(); ++w) {
        bsld.push_back(outs[c * windows.size() + w].avg_bsld);
        maxw.push_back(outs[c * windows.size() + w].max_wait);
      }
      grid.push_back({{"stage", stage_no},
                      {"policy", model::policy_to_json(cands[c])},
                      {"bsld", bsld},
                      {"max_wait", maxw}});
    }
  };
  add_grid(1, c1, o1);
  add_grid(2, c2, o2);
  add_grid(3, c3, o3);
  j["grid"] = grid;
  if (a.json) {
    std::cout << j.dump() << "\n";
  } else {
    std::cout << "chosen policy: " << model::policy_to_json(best).dump() << "\n";
    std::printf("%-14s %6s %10s %10s %12s %12s\n", "window", "load", "fcfs_bsld", "ml_bsld",
                "fcfs_maxw_h", "ml_maxw_h");
    for (const auto& w : ws)
      std::printf("%-14s %6.2f %10.2f %10.2f %12.1f %12.1f\n",
                  (std::to_string(w["window"][0].get<int64_t>()) + ":" +
                   std::to_string(w["window"][1].get<int64_t>()))
                      .c_str(),
                  w["load"].get<double>(), w["fcfs_bsld"].get<double>(), w["ml_bsld"].get<double>(),
                  w["fcfs_max_wait"].get<double>() / 3600, w["ml_max_wait"].get<double>() / 3600);
    std::cout << "wrote " << a.out
              << (v.feasible
                      ? ""
                      : " (WARNING: no candidate met the max-wait bound; kept the least starving)")
              << "\n";
  }
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto args = std::make_shared<TuneArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tune",
      "Choose the ml policy by replaying the training part of a trace; writes it into "
      "a copy of the model file (runs under mpirun)");
  add_trace_options(*cmd, args->trace);
  cmd->add_option("--model", args->model, "Model file (mlprio-model train)")->required();
  cmd->add_option("-o,--out", args->out, "Model file to write, with the chosen policy")->required();
  cmd->add_option("--train-fraction", args->train_fraction,
                  "Replays only jobs before floor(F x jobs): use the model's own training "
                  "fraction so no tuning window overlaps the test part")
      ->capture_default_str();
  cmd->add_option("--windows", args->windows,
                  "COUNTxLEN: COUNT consecutive windows ending at the training boundary "
                  "(default 2 windows: the training part in two halves)");
  cmd->add_option("--max-wait-ratio", args->max_wait_ratio,
                  "Bound: every window's max wait <= this x FCFS+EASY's (requested times), or x "
                  "the floor when FCFS's is shorter")
      ->capture_default_str();
  cmd->add_option("--max-wait-floor", args->max_wait_floor,
                  "Seconds: the max-wait bound is ratio x max(FCFS's max wait, this); a wait "
                  "under it never counts as starvation (0: the ratio alone)")
      ->capture_default_str();
  // A comma-separated list with its default shown.
  const auto list_option = [cmd](const char* name, auto& values, const char* help) {
    return cmd->add_option(name, values, help)->delimiter(',')->capture_default_str();
  };
  list_option("--loads", args->loads,
              "Load factors each window is replayed at (inter-arrival gaps divided by the "
              "factor; 1 = as recorded), comma separated, each in [1, 4]");
  list_option("--request-weights", args->request_weights,
              "Stage 1's run-time keys, comma separated, each in [0, 1]: 0 ranks by the "
              "model's prediction, 1 by the requested time (SJF's key), between blends them "
              "(default 0: the prediction's order only)");
  list_option("--estimates", args->estimates,
              "Stage 1's backfill estimates, comma separated: upper, point (the model's), "
              "request, last2 (the user's two latest finished runs, EASY++'s)")
      ->check(CLI::IsMember({"point", "upper", "request", "last2"}));
  list_option("--size-weights", args->size_weights,
              "Stage 2's size weights, comma separated, each in [-64, 64]: log2 units of "
              "score per doubling of processors (negative favours narrow jobs)");
  list_option("--fairshare-weights", args->fairshare_weights,
              "Stage 3's fair-share weights, comma separated, each in [0, 64]: how much the "
              "user's usage over an equal share (U/S, multifactor's) lowers the score "
              "(default 0: no stage 3, no fair-share term)");
  cmd->add_option("--max-wait-stat", args->max_wait_stat,
                  "How the windows' max-wait ratios meet the bound: mean (their average) or "
                  "worst (every window)")
      ->check(CLI::IsMember({"worst", "mean"}))
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print the choice and the per-window figures as JSON");
  add_replay_spec_options(*cmd, args->spec);
  cmd->callback([args]() {
    Comm comm;
    comm.sum = [](std::vector<replay::TuneOutcome>&) {};
#ifdef MLPRIO_REPLAY_HAVE_MPI
    util::MpiSession mpi(nullptr, nullptr);
    comm.rank = mpi.rank();
    comm.size = mpi.size();
    comm.sum = [](std::vector<replay::TuneOutcome>& v) {
      static_assert(sizeof(replay::TuneOutcome) == 2 * sizeof(double));
      MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(2 * v.size()), MPI_DOUBLE, MPI_SUM,
                    MPI_COMM_WORLD);
    };
    try {
      run_tune(*args, comm);
    } catch (const std::exception& e) {
      if (mpi.size() > 1) {
        std::cerr << "mlprio-replay tune: error on rank " << mpi.rank() << ": " << e.what() << "\n";
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      throw;
    }
#else
    run_tune(*args, comm);
#endif
  });
}

}  // namespace mlprio::cli
