// `mlprio-replay tune`: searches the `ml` policy by replaying windows of the training part of a
// trace (mlprio/replay/tune.hpp) and writes the choice into a copy of the model file, so that
// `run --policy ml --estimate model:OUT` and site_factor/mlprio run what was measured. With
// `--slurm-conf site.conf` it searches what the site can deploy instead (tune_stack.hpp), scored
// by the deployed-stack replay against that stock configuration, and also writes the site's
// slurm.conf with the chosen lines (`--slurm-conf-out`). Under
// mpirun/srun every rank replays its share of the (candidate, window) pairs and the outcomes are
// summed (each pair computed by exactly one rank, the others contributing zeros), so the choice
// is the same for any number of ranks.
#include <unistd.h>

#include <algorithm>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "commands.hpp"
#include "mlprio/cli/trace_options.hpp"
#include "mlprio/model/model_file.hpp"
#include "mlprio/replay/dist/sweep_windows.hpp"
#include "mlprio/replay/slurm_replay.hpp"
#include "mlprio/replay/tune.hpp"
#include "mlprio/replay/tune_stack.hpp"
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
  // --slurm-conf: the deployable search.
  std::string slurm_conf, slurm_conf_out, slurm_release = "26.05";
  std::vector<double> site_weights = replay::DEFAULT_SITE_WEIGHTS;
  double tolerance = 0.02;
  uint64_t seed = 1;
  bool loads_given = false, stat_given = false;
};

struct Comm {
  int rank = 0, size = 1;
  // Sums the outcomes over ranks (each computed by exactly one rank).
  std::function<void(std::vector<replay::TuneOutcome>&)> sum;
  std::function<void(std::vector<double>&)> sum_doubles;
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

// The option checks both searches make first, in this order.
void check_tune_bounds(const TuneArgs& a) {
  using namespace mlprio::replay;
  if (!(a.train_fraction > 0 && a.train_fraction < 1))
    throw ConfigError("--train-fraction must lie strictly between 0 and 1");
  if (!(a.max_wait_ratio >= 1) || !std::isfinite(a.max_wait_ratio))
    throw ConfigError("--max-wait-ratio must be a number >= 1");
  if (!(a.max_wait_floor >= 0) || !std::isfinite(a.max_wait_floor))
    throw ConfigError("--max-wait-floor must be a number of seconds >= 0");
}

// The ml policy search's candidates and outcomes per stage, the FCFS+EASY baseline per window and
// the choice: stage 2's when it is feasible and no worse than stage 1's, then stage 3's (when
// --fairshare-weights gives more than one value).
struct TuneSearch {
  std::vector<replay::TuneOutcome> base;
  std::vector<model::PolicyParams> c1, c2, c3;
  std::vector<replay::TuneOutcome> o1, o2, o3;
  replay::TuneVerdict v;
  model::PolicyParams best;
  const std::vector<replay::TuneOutcome>* chosen = nullptr;
};

void search_tune(TuneSearch& s, const TuneArgs& a, const Comm& comm,
                 const replay::ReplaySetup& setup, const Trace& trace,
                 const std::vector<replay::TuneWindow>& windows, replay::MaxWaitStat stat) {
  using namespace mlprio::replay;
  s.base.resize(windows.size());
  for (size_t w = 0; w < windows.size(); ++w) s.base[w] = baseline_replay(setup, trace, windows[w]);

  const bool quiet = a.json;
  s.c1 = tune_stage1(setup.policy(), a.request_weights, a.estimates);
  s.o1 = stage("stage 1 (score, starvation, estimate)", setup, trace, s.c1, windows, comm, quiet);
  const TuneVerdict v1 =
      pick_best(s.o1, s.base, windows.size(), a.max_wait_ratio, a.max_wait_floor, stat);
  s.c2 = tune_stage2(s.c1[v1.best], a.size_weights);
  s.o2 = stage("stage 2 (size, order, correction)", setup, trace, s.c2, windows, comm, quiet);
  const TuneVerdict v2 =
      pick_best(s.o2, s.base, windows.size(), a.max_wait_ratio, a.max_wait_floor, stat);
  const bool second = v2.feasible && (!v1.feasible || v2.bsld_ratio <= v1.bsld_ratio);
  s.v = second ? v2 : v1;
  s.best = second ? s.c2[v2.best] : s.c1[v1.best];
  s.chosen = second ? &s.o2 : &s.o1;
  // Stage 3 (only with --fairshare-weights beyond one value): the fair-share weight around the
  // choice, which is its first candidate, so the stage can only keep or improve it.
  s.c3 = tune_stage3(s.best, a.fairshare_weights);
  if (!s.c3.empty()) {
    s.o3 = stage("stage 3 (fair share)", setup, trace, s.c3, windows, comm, quiet);
    s.v = pick_best(s.o3, s.base, windows.size(), a.max_wait_ratio, a.max_wait_floor, stat);
    s.best = s.c3[s.v.best];
    s.chosen = &s.o3;
  }
}

// The report of tune: the choice, its training ratios, its windows against FCFS+EASY and every
// candidate's outcome per window (every stage), so a choice can be checked by hand.
nlohmann::ordered_json tune_report(const TuneArgs& a, const TuneSearch& s,
                                   const std::vector<replay::TuneWindow>& windows) {
  using namespace mlprio::replay;
  const TuneVerdict& v = s.v;
  nlohmann::ordered_json j;
  j["model"] = a.out;
  j["feasible"] = v.feasible;
  j["policy"] = model::policy_to_json(s.best);
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
  j["candidates"] = s.c1.size() + s.c2.size() + s.c3.size();
  nlohmann::ordered_json ws = nlohmann::ordered_json::array();
  for (size_t w = 0; w < windows.size(); ++w) {
    const TuneOutcome& o = (*s.chosen)[v.best * windows.size() + w];
    ws.push_back({{"window", {windows[w].start, windows[w].len}},
                  {"load", windows[w].load},
                  {"fcfs_bsld", s.base[w].avg_bsld},
                  {"fcfs_max_wait", s.base[w].max_wait},
                  {"ml_bsld", o.avg_bsld},
                  {"ml_max_wait", o.max_wait}});
  }
  j["windows"] = ws;
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
  add_grid(1, s.c1, s.o1);
  add_grid(2, s.c2, s.o2);
  add_grid(3, s.c3, s.o3);
  j["grid"] = grid;
  return j;
}

// The text form of tune's report: the policy, a table of its windows, the file written.
void print_tune_report(const TuneArgs& a, const TuneSearch& s, const nlohmann::ordered_json& j) {
  std::cout << "chosen policy: " << model::policy_to_json(s.best).dump() << "\n";
  std::printf("%-14s %6s %10s %10s %12s %12s\n", "window", "load", "fcfs_bsld", "ml_bsld",
              "fcfs_maxw_h", "ml_maxw_h");
  for (const auto& w : j["windows"])
    std::printf("%-14s %6.2f %10.2f %10.2f %12.1f %12.1f\n",
                (std::to_string(w["window"][0].get<int64_t>()) + ":" +
                 std::to_string(w["window"][1].get<int64_t>()))
                    .c_str(),
                w["load"].get<double>(), w["fcfs_bsld"].get<double>(), w["ml_bsld"].get<double>(),
                w["fcfs_max_wait"].get<double>() / 3600, w["ml_max_wait"].get<double>() / 3600);
  std::cout << "wrote " << a.out
            << (s.v.feasible
                    ? ""
                    : " (WARNING: no candidate met the max-wait bound; kept the least starving)")
            << "\n";
}

void run_tune(const TuneArgs& a, const Comm& comm) {
  using namespace mlprio::replay;
  check_tune_bounds(a);
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

  TuneSearch s;
  search_tune(s, a, comm, setup, trace, windows, stat);
  if (comm.rank != 0) return;
  const TuneVerdict& v = s.v;

  std::ostringstream by;
  by << "mlprio-replay tune: trace sha256 " << file_sha256(trace.path) << ", training jobs 0.."
     << n_train - 1 << ", " << windows.size() / a.loads.size() << " windows of "
     << windows.front().len << " at load x" << loads_text(a.loads) << ", "
     << max_wait_stat_name(stat) << " window max wait <= " << a.max_wait_ratio
     << " x max(FCFS+EASY's, " << a.max_wait_floor << " s); train bsld ratio " << v.bsld_ratio
     << ", max wait ratio " << v.max_wait_ratio << " (worst window " << v.worst_max_wait_ratio
     << ")" << (v.feasible ? "" : " (no candidate met the bound)");
  s.best.tuned_by = by.str();
  nlohmann::json doc = model::read_model_document(a.model);
  doc["policy"] = model::policy_to_json(s.best);
  model::write_model_document(a.out, doc);

  const nlohmann::ordered_json j = tune_report(a, s, windows);
  if (a.json)
    std::cout << j.dump() << "\n";
  else
    print_tune_report(a, s, j);
}

// The deployable search: candidates x windows replayed with the deployed-stack replay, each pair
// by one rank, summed.
std::vector<replay::StackOutcome> stack_stage(const char* name, const replay::StackTuneContext& ctx,
                                              const std::vector<replay::StackCandidate>& cands,
                                              const std::vector<replay::TuneWindow>& windows,
                                              const Comm& comm, bool quiet) {
  static_assert(sizeof(replay::StackOutcome) == 3 * sizeof(double));
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = cands.size() * windows.size();
  std::vector<replay::StackOutcome> out(n);
  size_t done = 0;
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<int>(i % static_cast<size_t>(comm.size)) != comm.rank) continue;
    out[i] = replay::replay_stack(ctx, cands[i / windows.size()], windows[i % windows.size()]);
    if (comm.rank == 0 && !quiet && isatty(STDERR_FILENO) != 0 && (++done % 10 == 0))
      std::cerr << "\rmlprio-replay tune: " << name << ": " << done << " replays on rank 0 ("
                << comm.size << " ranks)" << std::flush;
  }
  std::vector<double> flat(3 * n);
  for (size_t i = 0; i < n; ++i) {
    flat[3 * i] = out[i].avg_bsld;
    flat[3 * i + 1] = out[i].max_wait;
    flat[3 * i + 2] = out[i].p99_wait;
  }
  comm.sum_doubles(flat);
  for (size_t i = 0; i < n; ++i) out[i] = {flat[3 * i], flat[3 * i + 1], flat[3 * i + 2]};
  if (comm.rank == 0 && !quiet) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cerr << "\rmlprio-replay tune: " << name << ": " << cands.size() << " candidates x "
              << windows.size() << " windows in " << s << " s            \n";
  }
  return out;
}

// What the site's configuration allows tune --slurm-conf to vary: its warnings (rank 0), and
// priority/multifactor required.
void check_stock(const replay::SlurmStack& stock, const TuneArgs& a, const Comm& comm) {
  using namespace mlprio::replay;
  if (comm.rank == 0)
    for (const auto& w : replay::slurm_conf_warnings(stock))
      std::cerr << "mlprio-replay tune: --slurm-conf " << a.slurm_conf << ": " << w << "\n";
  if (!stock.multifactor)
    throw ConfigError("--slurm-conf " + a.slurm_conf +
                      ": PriorityType is priority/basic; SITE and the weights tune chooses need "
                      "priority/multifactor");
  if (!stock.accounting_dbd && comm.rank == 0)
    std::cerr << "mlprio-replay tune: --slurm-conf " << a.slurm_conf
              << ": no accounting_storage/slurmdbd, so Slurm forces the age and fair-share "
                 "weights to 0; tune varies SITE and the job size weight only\n";
}

struct StackWindows {
  int64_t count = 0, len = 0;
  std::vector<double> loads;
  std::vector<replay::TuneWindow> windows;  // every drawn start at every load
};

// Many windows drawn from the training part (default 16 of a quarter of it), each at every load.
StackWindows stack_windows(const TuneArgs& a, int64_t n_train) {
  using namespace mlprio::replay;
  StackWindows sw;
  int64_t count = 16, len = std::max<int64_t>(n_train / 4, 1);
  if (!a.windows.empty()) std::tie(count, len) = replay::dist::parse_windows_arg(a.windows);
  if (len > n_train || len < 50)
    throw ConfigError("tune: windows of " + std::to_string(len) +
                      " jobs do not fit a training "
                      "part of " +
                      std::to_string(n_train) + " jobs (at least 50 each)");
  count = std::min(count, n_train - len + 1);
  sw.loads = a.loads_given ? a.loads : std::vector<double>{1.0, 1.25};
  for (double l : sw.loads)
    if (!(l >= 1.0 && l <= 4.0))
      throw ConfigError("tune: a load factor must lie in [1, 4] (1 = the recorded load)");
  for (int64_t s : replay::dist::draw_window_starts(count, len, n_train, a.seed))
    for (double l : sw.loads) sw.windows.push_back({s, len, l});
  sw.count = count;
  sw.len = len;
  return sw;
}

// The max-wait statistic: the upper quartile of the windows' ratios unless --max-wait-stat
// names worst (every window) or p75.
std::string stack_max_wait_stat(const TuneArgs& a) {
  using namespace mlprio::replay;
  const std::string stat = a.stat_given ? a.max_wait_stat : "p75";
  if (stat != "p75" && stat != "worst")
    throw ConfigError("tune --slurm-conf: --max-wait-stat '" + stat +
                      "': valid values are p75 (the windows' upper quartile) and worst");
  return stat;
}

// The stages' candidates and outcomes, the stock's outcomes (stage 1's first candidate) and the
// choice after the last stage.
struct StackSearch {
  std::vector<replay::StackOutcome> base;
  replay::StackVerdict v;
  replay::StackCandidate best;
  std::vector<std::vector<replay::StackCandidate>> stages;
  std::vector<std::vector<replay::StackOutcome>> outs;
};

StackSearch search_stack(const TuneArgs& a, const Comm& comm, const replay::StackTuneContext& ctx,
                         const model::ScoreConfig& score,
                         const std::vector<replay::TuneWindow>& windows, double q) {
  using namespace mlprio::replay;
  const SlurmStack& stock = *ctx.stock;
  const bool quiet = a.json;
  const size_t W = windows.size();
  const auto pick = [&](const std::vector<StackOutcome>& o, const std::vector<StackOutcome>& st,
                        const std::vector<StackCandidate>& c) {
    return pick_stack(o, st, W, c, a.max_wait_ratio, a.max_wait_floor, a.tolerance, q);
  };
  StackSearch s;
  const auto c1 = stack_stage1(stock, stock_candidate(stock, score), a.site_weights);
  const auto o1 = stack_stage("stage 1 (SITE weight, age)", ctx, c1, windows, comm, quiet);
  s.base.assign(o1.begin(), o1.begin() + static_cast<std::ptrdiff_t>(W));
  s.v = pick(o1, s.base, c1);
  s.best = c1[s.v.best];
  s.stages = {c1};
  s.outs = {o1};
  const auto c2 = stack_stage2(stock, s.best, score);
  if (c2.size() > 1) {
    auto o2 = stack_stage("stage 2 (fair share, job size)", ctx, c2, windows, comm, quiet);
    s.v = pick(o2, s.base, c2);
    s.best = c2[s.v.best];
    s.stages.push_back(c2);
    s.outs.push_back(std::move(o2));
  }
  const auto c3 = stack_stage3(stock, s.best, score);
  if (c3.size() > 1) {
    auto o3 = stack_stage("stage 3 (SITE's shape)", ctx, c3, windows, comm, quiet);
    s.v = pick(o3, s.base, c3);
    s.best = c3[s.v.best];
    s.stages.push_back(c3);
    s.outs.push_back(std::move(o3));
  }
  return s;
}

// Writes the tuned slurm.conf: the site's text with the chosen lines, through a temporary file.
void write_tuned_conf(const TuneArgs& a, const replay::SlurmStack& stock,
                      const replay::StackCandidate& best, const std::string& by) {
  namespace fs = std::filesystem;
  std::string site_text;
  {
    std::ifstream in(a.slurm_conf, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    site_text = ss.str();
  }
  const std::string model_abs = fs::absolute(a.out).lexically_normal().string();
  {
    const std::string tmp = a.slurm_conf_out + ".tmp";
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << replay::tuned_conf_text(site_text, stock, best, model_abs, by);
    out.close();
    if (!out) throw mlprio::RuntimeError("--slurm-conf-out " + a.slurm_conf_out + ": cannot write");
    fs::rename(tmp, a.slurm_conf_out);
  }
}

// The report of tune --slurm-conf: the choice, its training ratios, the chosen candidate's
// windows and every candidate's ratios.
nlohmann::ordered_json stack_report(const TuneArgs& a, const StackSearch& s,
                                    const model::PolicyParams& policy, const std::string& stat,
                                    double q, const StackWindows& sw) {
  using namespace mlprio::replay;
  const StackVerdict& v = s.v;
  const StackCandidate& best = s.best;
  const std::vector<TuneWindow>& windows = sw.windows;
  const size_t W = windows.size();
  nlohmann::ordered_json j;
  j["model"] = a.out;
  j["slurm_conf"] = a.slurm_conf_out;
  j["stock"] = a.slurm_conf;
  j["chosen"] = describe(best);
  j["changes"] = best.changes;
  j["site_weight"] = best.site_weight;
  j["weight_age"] = best.weight_age;
  j["max_age"] = best.max_age;
  j["weight_fairshare"] = best.weight_fairshare;
  j["weight_job_size"] = best.weight_job_size;
  j["policy"] = model::policy_to_json(policy);
  j["train_bsld_ratio"] = v.bsld_ratio;
  j["train_bsld_ratio_p25"] = v.bsld_p25;
  j["train_bsld_ratio_p75"] = v.bsld_p75;
  j["train_deciding_windows"] = v.deciding;
  j["train_max_wait_ratio"] = v.max_wait_ratio;
  j["max_wait_stat"] = stat;
  j["train_worst_max_wait_ratio"] = v.worst_max_wait_ratio;
  j["max_wait_ratio"] = a.max_wait_ratio;
  j["max_wait_floor"] = a.max_wait_floor;
  j["tolerance"] = a.tolerance;
  j["loads"] = sw.loads;
  j["seed"] = a.seed;
  size_t total = 0;
  for (const auto& st : s.stages) total += st.size();
  j["candidates"] = total;
  const auto& last_o = s.outs.back();
  nlohmann::ordered_json ws = nlohmann::ordered_json::array();
  for (size_t w = 0; w < W; ++w) {
    const StackOutcome& o = last_o[v.best * W + w];
    ws.push_back({{"window", {windows[w].start, windows[w].len}},
                  {"load", windows[w].load},
                  {"stock_bsld", s.base[w].avg_bsld},
                  {"stock_max_wait", s.base[w].max_wait},
                  {"tuned_bsld", o.avg_bsld},
                  {"tuned_max_wait", o.max_wait}});
  }
  j["windows"] = ws;
  nlohmann::ordered_json grid = nlohmann::ordered_json::array();
  for (size_t st = 0; st < s.stages.size(); ++st) {
    const std::vector<bool> keep = deciding_windows(s.outs[st], s.base, W);
    const bool any =
        static_cast<size_t>(std::count(keep.begin(), keep.end(), true)) >= MIN_DECIDING_WINDOWS;
    for (size_t c = 0; c < s.stages[st].size(); ++c) {
      const auto r = any ? bsld_ratios(s.outs[st], s.base, W, c, keep) : std::vector<double>{};
      const auto m = max_wait_ratios(s.outs[st], s.base, W, c, a.max_wait_floor);
      grid.push_back({{"stage", st + 1},
                      {"candidate", describe(s.stages[st][c])},
                      {"changes", s.stages[st][c].changes},
                      {"bsld_ratio", quantile(r, 0.5)},
                      {"max_wait_ratio", quantile(m, q)}});
    }
  }
  j["grid"] = grid;
  return j;
}

void run_tune_stack(const TuneArgs& a, const Comm& comm) {
  using namespace mlprio::replay;
  check_tune_bounds(a);
  if (!(a.tolerance >= 0 && a.tolerance < 1)) throw ConfigError("--tolerance must lie in [0, 1)");
  if (a.slurm_conf_out.empty())
    throw ConfigError("tune --slurm-conf needs --slurm-conf-out FILE (the tuned slurm.conf)");
  const SlurmStack stock = read_slurm_conf(a.slurm_conf);
  const int release = parse_slurm_release(a.slurm_release);
  check_stock(stock, a, comm);
  const ReplaySetup setup(a.spec);
  SlurmModelCache models;
  const model::ScoreConfig score = models.get(a.model)->policy().score;
  const Trace trace = load_trace_reporting(a.trace, a.json || comm.rank != 0);
  const auto n = static_cast<int64_t>(trace.jobs.size());
  const auto n_train = static_cast<int64_t>(std::floor(a.train_fraction * static_cast<double>(n)));
  const StackWindows sw = stack_windows(a, n_train);

  StackTuneContext ctx;
  ctx.stock = &stock;
  ctx.release = release;
  ctx.trace = &trace;
  ctx.setup = &setup;
  ctx.models = &models;
  ctx.model_path = a.model;
  const std::string stat = stack_max_wait_stat(a);
  const double q = stat == "worst" ? 1.0 : 0.75;
  const StackSearch s = search_stack(a, comm, ctx, score, sw.windows, q);
  if (comm.rank != 0) return;
  const StackVerdict& v = s.v;

  std::ostringstream by;
  by << "trace sha256 " << file_sha256(trace.path) << ", training jobs 0.." << n_train - 1 << ", "
     << sw.count << " windows of " << sw.len << " (seed " << a.seed << ") at load x"
     << loads_text(sw.loads) << ", against " << a.slurm_conf << " (sha256 " << stock.sha256
     << "), Slurm " << a.slurm_release << "; median bsld ratio " << v.bsld_ratio << " (IQR "
     << v.bsld_p25 << ".." << v.bsld_p75 << ", over the " << v.deciding << " of "
     << sw.windows.size() << " windows where the candidates differ), max wait ratio " << stat << " "
     << v.max_wait_ratio << " (worst " << v.worst_max_wait_ratio << ")";
  model::PolicyParams policy = models.get(a.model)->policy();
  policy.score = s.best.score;
  policy.tuned_by = "mlprio-replay tune --slurm-conf: " + by.str();
  nlohmann::json doc = model::read_model_document(a.model);
  doc["policy"] = model::policy_to_json(policy);
  model::write_model_document(a.out, doc);
  write_tuned_conf(a, stock, s.best, by.str());

  const nlohmann::ordered_json j = stack_report(a, s, policy, stat, q, sw);
  if (a.json) {
    std::cout << j.dump() << "\n";
  } else {
    std::cout << "chosen: " << describe(s.best) << " (" << s.best.changes << " settings changed)\n"
              << "training windows: median mean-bsld ratio to " << a.slurm_conf << " "
              << v.bsld_ratio << " (IQR " << v.bsld_p25 << ".." << v.bsld_p75 << ", over the "
              << v.deciding << " of " << sw.windows.size()
              << " windows where the candidates differ), " << stat << " max-wait ratio "
              << v.max_wait_ratio << " (worst " << v.worst_max_wait_ratio << ")\n"
              << "wrote " << a.out << " and " << a.slurm_conf_out << "\n";
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
              "factor; 1 = as recorded), comma separated, each in [1, 4] (with --slurm-conf "
              "the default is 1,1.25)")
      ->each([args](const std::string&) { args->loads_given = true; });
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
                  "worst (every window); with --slurm-conf p75 (their upper quartile, its "
                  "default) or worst")
      ->check(CLI::IsMember({"worst", "mean", "p75"}))
      ->each([args](const std::string&) { args->stat_given = true; })
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print the choice and the per-window figures as JSON");
  cmd->add_option("--slurm-conf", args->slurm_conf,
                  "The site's slurm.conf: search what it can deploy (SITE's weight and shape, "
                  "the age, fair-share and job size weights) with the deployed-stack replay, "
                  "against this configuration; --windows defaults to 16 random windows of a "
                  "quarter of the training part");
  cmd->add_option("--slurm-conf-out", args->slurm_conf_out,
                  "With --slurm-conf: write the site's slurm.conf with the chosen lines here "
                  "(they name -o's model file by its absolute path)");
  cmd->add_option("--slurm-release", args->slurm_release,
                  "With --slurm-conf: the Slurm release (YY.MM) whose scheduler to replay")
      ->capture_default_str();
  list_option("--site-weights", args->site_weights,
              "With --slurm-conf: stage 1's SITE weights (site_factor/mlprio weight=), comma "
              "separated; 0 = the plugin not loaded");
  cmd->add_option("--tolerance", args->tolerance,
                  "With --slurm-conf: a candidate with fewer changed settings wins when its "
                  "median ratio is within this fraction of the best's")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "With --slurm-conf: seed of the random window draw")
      ->capture_default_str();
  add_replay_spec_options(*cmd, args->spec);
  cmd->callback([args]() {
    Comm comm;
    comm.sum = [](std::vector<replay::TuneOutcome>&) {};
    comm.sum_doubles = [](std::vector<double>&) {};
#ifdef MLPRIO_REPLAY_HAVE_MPI
    util::MpiSession mpi(nullptr, nullptr);
    comm.rank = mpi.rank();
    comm.size = mpi.size();
    comm.sum = [](std::vector<replay::TuneOutcome>& v) {
      static_assert(sizeof(replay::TuneOutcome) == 2 * sizeof(double));
      MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(2 * v.size()), MPI_DOUBLE, MPI_SUM,
                    MPI_COMM_WORLD);
    };
    comm.sum_doubles = [](std::vector<double>& v) {
      MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM,
                    MPI_COMM_WORLD);
    };
    try {
      if (!args->slurm_conf.empty())
        run_tune_stack(*args, comm);
      else
        run_tune(*args, comm);
    } catch (const std::exception& e) {
      if (mpi.size() > 1) {
        std::cerr << "mlprio-replay tune: error on rank " << mpi.rank() << ": " << e.what() << "\n";
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      throw;
    }
#else
    if (!args->slurm_conf.empty())
      run_tune_stack(*args, comm);
    else
      run_tune(*args, comm);
#endif
  });
}

}  // namespace mlprio::cli
