// `mlprio-replay tune`: chooses the `ml` policy (the score's parameters, the backfilling estimate,
// correction and candidate order) by replaying windows of a trace's *training part* only, against
// FCFS+EASY with requested times on the same windows. Objective: the lowest geometric-mean ratio
// of mean bounded slowdown to FCFS's, subject to every window's maximum wait staying within
// `max_wait_ratio` x FCFS's. Two stages of a fixed grid (stage 2 refines around stage 1's best),
// so the search is deterministic; each (candidate, window) replay is independent, which is what
// the MPI driver distributes (any rank count gives the same choice). Nothing here needs MPI.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mlprio/jobs/trace.hpp"
#include "mlprio/model/predictor.hpp"
#include "mlprio/replay/spec.hpp"

namespace mlprio::replay {

// A window of the training part, replayed at `load` times its recorded offered load: the gaps
// between its submissions are divided by `load` (Feitelson's load scaling by inter-arrival
// compression; 1 = as recorded). The period after training can be busier than the training part
// was; replaying the same windows at a higher load as well keeps tune from choosing what only
// pays at the recorded load.
struct TuneWindow {
  int64_t start = 0, len = 0;
  double load = 1.0;
};

// COUNT consecutive windows of LEN jobs ending at `train_jobs` (the last COUNT x LEN jobs of the
// training part); LEN is cut so they fit. Throws ConfigError when the training part is too small.
// With several `loads`, every window is listed once per load (window-major).
std::vector<TuneWindow> training_windows(int64_t train_jobs, int64_t count, int64_t len,
                                         const std::vector<double>& loads = {1.0});

// The jobs of `w` with submissions compressed to w.load (the first submission stays put);
// the jobs themselves (ids, sizes, run and requested times) are unchanged.
std::vector<Job> scaled_window(std::span<const Job> jobs, const TuneWindow& w);

// The candidates of each stage (stage 2 around `best`). Stage 1 tries each of
// `request_weights` (ScoreConfig::request_weight: 0 ranks by the prediction, 1 by the request).
// The default is the prediction alone: on development splits inside the training parts, adding
// 0.5 and 1 lowered the tails' mean bounded slowdown on 5 of 9 but raised their max wait past
// 1.5x FCFS's on 3 (replay/README.md, "Ordering by the request"), so it is opt-in.
inline const std::vector<double> DEFAULT_REQUEST_WEIGHTS = {0.0};
// `estimates`: the backfill estimates stage 1 tries (PolicyParams::backfill_estimate values).
inline const std::vector<std::string> DEFAULT_ESTIMATES = {"upper", "point"};
std::vector<model::PolicyParams> tune_stage1(
    const model::PolicyParams& base,
    const std::vector<double>& request_weights = DEFAULT_REQUEST_WEIGHTS,
    const std::vector<std::string>& estimates = DEFAULT_ESTIMATES);
// Stage 2 tries each of `size_weights` (ScoreConfig::size_weight, log2 units per doubling of
// processors; negative favours narrow jobs).
inline const std::vector<double> DEFAULT_SIZE_WEIGHTS = {-0.5, -0.25, 0.0, 0.25, 0.5};
std::vector<model::PolicyParams> tune_stage2(
    const model::PolicyParams& best,
    const std::vector<double>& size_weights = DEFAULT_SIZE_WEIGHTS);
// Stage 3 around stage 2's (or stage 1's) best: each of `fairshare_weights`
// (ScoreConfig::fairshare_weight, the user's U/S in the score). Empty or {0}: no stage 3.
inline const std::vector<double> DEFAULT_FAIRSHARE_WEIGHTS = {0.0};
std::vector<model::PolicyParams> tune_stage3(const model::PolicyParams& best,
                                             const std::vector<double>& fairshare_weights);

// One replay's outcome, as the search compares them.
struct TuneOutcome {
  double avg_bsld = 0, max_wait = 0;
};

// Replays `w` of `trace` with policy `ml` under `policy` (setup = the model and machine) with EASY.
TuneOutcome tune_replay(const ReplaySetup& setup, const model::PolicyParams& policy,
                        const Trace& trace, const TuneWindow& w);
// The baseline: FCFS + EASY, requested times.
TuneOutcome baseline_replay(const ReplaySetup& setup, const Trace& trace, const TuneWindow& w);

// How the windows' max-wait ratios are combined into the one figure the bound limits: the worst
// window's (one short-waiting window can then veto every reordering), or their mean (each
// window's max wait still counts, but one window's noise no longer decides alone).
enum class MaxWaitStat { WORST, MEAN };
std::string_view max_wait_stat_name(MaxWaitStat s);
// Throws ConfigError naming the valid values (worst, mean).
MaxWaitStat parse_max_wait_stat(std::string_view s);

struct TuneVerdict {
  size_t best = 0;                  // index into the candidates
  double bsld_ratio = 0;            // geometric mean over windows of avg_bsld / FCFS's
  double max_wait_ratio = 0;        // the windows' max_wait / FCFS's, combined by the MaxWaitStat
  double worst_max_wait_ratio = 0;  // the worst window's, whatever the statistic
  bool feasible =
      false;  // some candidate met the bound (else: the one whose worst window is least starved)
};
// outcomes[c * W + w] for candidate c, window w; base[w] FCFS's. A window's max-wait bound is
// max_wait_ratio x max(FCFS's max wait, max_wait_floor): on a window where FCFS keeps every wait
// short (minutes), a ratio alone would forbid any reordering at all, while a wait that stays
// below the floor is not starvation. The ratio reported is against that same reference. The
// bound applies to the windows' ratios combined by `stat`.
TuneVerdict pick_best(const std::vector<TuneOutcome>& outcomes,
                      const std::vector<TuneOutcome>& base, size_t windows, double max_wait_ratio,
                      double max_wait_floor = 0, MaxWaitStat stat = MaxWaitStat::WORST);

// The default floor of `tune --max-wait-floor` (seconds): the shortest starvation limit stage 1
// tries, 6 h.
inline constexpr double DEFAULT_MAX_WAIT_FLOOR = 6 * 3600.0;

// Evaluates tasks [0, n) where `mine(i)` is true (the caller's share); the others stay zero, so
// a sum over ranks gives every outcome exactly once.
using TaskFilter = std::function<bool(size_t)>;
std::vector<TuneOutcome> run_tune_stage(const ReplaySetup& setup, const Trace& trace,
                                        const std::vector<model::PolicyParams>& candidates,
                                        const std::vector<TuneWindow>& windows,
                                        const TaskFilter& mine,
                                        const std::function<void(size_t, size_t)>& progress = {});

}  // namespace mlprio::replay
