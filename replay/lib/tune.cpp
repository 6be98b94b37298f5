// The policy search behind `mlprio-replay tune` (see mlprio/replay/tune.hpp).
#include "mlprio/replay/tune.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mlprio::replay {

std::vector<TuneWindow> training_windows(int64_t train_jobs, int64_t count, int64_t len,
                                         const std::vector<double>& loads) {
  if (loads.empty()) throw ConfigError("tune: at least one load factor is needed");
  for (double l : loads)
    if (!(l >= 1.0 && l <= 4.0))
      throw ConfigError("tune: a load factor must lie in [1, 4] (1 = the recorded load)");
  if (count <= 0 || len <= 0) throw ConfigError("tune: windows need COUNT > 0 and LEN > 0");
  len = std::min(len, train_jobs / count);
  if (len < 50)
    throw ConfigError("tune: the training part (" + std::to_string(train_jobs) +
                      " jobs) is too small for " + std::to_string(count) +
                      " windows of at least 50 jobs");
  std::vector<TuneWindow> w;
  for (int64_t i = 0; i < count; ++i)
    for (double l : loads) w.push_back({train_jobs - (count - i) * len, len, l});
  return w;
}

std::vector<Job> scaled_window(std::span<const Job> jobs, const TuneWindow& w) {
  const std::span<const Job> s = select_window(jobs, w.start, w.len);
  std::vector<Job> out(s.begin(), s.end());
  if (out.empty() || w.load == 1.0) return out;
  const double t0 = out.front().submit;
  for (Job& j : out) j.submit = t0 + (j.submit - t0) / w.load;
  return out;
}

std::vector<model::PolicyParams> tune_stage1(const model::PolicyParams& base,
                                             const std::vector<double>& request_weights,
                                             const std::vector<std::string>& estimates) {
  if (estimates.empty()) throw ConfigError("tune: at least one backfill estimate is needed");
  for (const auto& e : estimates) (void)parse_estimate_quantile(e);  // names the valid values
  if (request_weights.empty()) throw ConfigError("tune: at least one request weight is needed");
  for (double r : request_weights)
    if (!(r >= 0.0 && r <= 1.0))
      throw ConfigError(
          "tune: a request weight must lie in [0, 1] (0 = rank by the prediction, "
          "1 = by the requested time)");
  // Prediction against waiting (a = 0: pure predicted-SJF; larger: closer to FCFS), the
  // starvation bound (1 s: everyone starved at once, i.e. FCFS with the EASY++ parts), which run
  // time the order ranks by (`request_weights`: the prediction, and where asked the request or
  // halfway, the family SJF and UNICEP belong to), and which prediction backfills.
  std::vector<model::PolicyParams> c;
  for (double limit : {1.0, 6 * 3600.0, 12 * 3600.0, 86400.0, 2 * 86400.0, 4 * 86400.0, 1e9})
    for (double age : {0.0, 0.25, 0.5, 1.0, 2.0})
      for (double request : request_weights)
        for (const std::string& q : estimates) {
          // All starved: the order is FCFS, whatever the age and request weights (one
          // candidate, with the first request weight).
          if (limit == 1.0 && (age != 0.0 || request != request_weights.front())) continue;
          model::PolicyParams p = base;
          p.score.starvation_limit = limit;
          p.score.age_weight = age;
          p.score.request_weight = request;
          p.score.size_weight = 0;
          p.backfill_estimate = q;
          p.correction = "tsafrir";
          p.backfill_order = "sjbf";
          c.push_back(p);
        }
  // Last (ties keep the others), the baseline itself: FCFS order (everyone starved at once)
  // backfilled on the requested times, without correction or SJBF, i.e. FCFS+EASY as the bound
  // measures it (up to the order of jobs submitted in the same second). On a trace where the
  // model's estimates make EASY worse (generated traces without users: every other candidate
  // broke the bound), tune then keeps FCFS+EASY instead of the least starving candidate.
  model::PolicyParams fcfs_easy = base;
  fcfs_easy.score.starvation_limit = 1.0;
  fcfs_easy.score.age_weight = 0;
  fcfs_easy.score.request_weight = request_weights.front();
  fcfs_easy.score.size_weight = 0;
  fcfs_easy.backfill_estimate = "request";
  fcfs_easy.correction = "none";
  fcfs_easy.backfill_order = "fcfs";
  c.push_back(fcfs_easy);
  return c;
}

std::vector<model::PolicyParams> tune_stage2(const model::PolicyParams& best,
                                             const std::vector<double>& size_weights) {
  if (size_weights.empty()) throw ConfigError("tune: at least one size weight is needed");
  for (double s : size_weights)
    if (!(std::abs(s) <= 64.0))
      throw ConfigError("tune: a size weight must lie in [-64, 64] (log2 units per doubling)");
  // The failure weight: how far a predicted failure sinks a job (the model file's value first, so
  // a model without a failure part, where it changes nothing, keeps it), then none and strong.
  std::vector<double> fail = {best.score.fail_weight};
  for (double f : {0.0, 1.0, 4.0})
    if (f != best.score.fail_weight) fail.push_back(f);
  std::vector<model::PolicyParams> c;
  for (double size : size_weights)
    for (const char* order : {"sjbf", "fcfs"})
      for (const char* corr : {"tsafrir", "none"})
        for (double f : fail) {
          model::PolicyParams p = best;
          p.score.size_weight = size;
          p.score.fail_weight = f;
          p.backfill_order = order;
          p.correction = corr;
          c.push_back(p);
        }
  return c;
}

std::vector<model::PolicyParams> tune_stage3(const model::PolicyParams& best,
                                             const std::vector<double>& fairshare_weights) {
  for (double f : fairshare_weights)
    if (!(f >= 0.0 && f <= 64.0))
      throw ConfigError("tune: a fair-share weight must lie in [0, 64] (0 = no fair-share term)");
  std::vector<model::PolicyParams> c;
  // The incoming weight first, so a tie keeps it.
  for (double f : fairshare_weights)
    if (f == best.score.fairshare_weight) c.push_back(best);
  for (double f : fairshare_weights) {
    if (f == best.score.fairshare_weight) continue;
    bool seen = false;
    for (const auto& p : c) seen = seen || p.score.fairshare_weight == f;
    if (seen) continue;
    model::PolicyParams p = best;
    p.score.fairshare_weight = f;
    c.push_back(p);
  }
  if (c.size() <= 1) c.clear();  // nothing to choose between
  return c;
}

namespace {
TuneOutcome replay_one(const ReplaySetup& setup, const Trace& trace, const TuneWindow& w,
                       const std::string& policy) {
  SimConfig cfg = setup.base(trace);
  cfg.backfill = Backfill::EASY;
  cfg.policy = policy;
  cfg.record_jobs = false;
  cfg.record_series = false;
  const std::span<const Job> jobs(trace.jobs);
  setup.apply_window(cfg, trace, jobs, w.start, w.len);
  const SimResult r = w.load == 1.0 ? simulate(select_window(jobs, w.start, w.len), cfg)
                                    : simulate(scaled_window(jobs, w), cfg);
  return {r.summary.avg_bsld, r.summary.max_wait};
}
}  // namespace

TuneOutcome tune_replay(const ReplaySetup& setup, const model::PolicyParams& policy,
                        const Trace& trace, const TuneWindow& w) {
  return replay_one(setup.with_policy(policy), trace, w, "ml");
}

TuneOutcome baseline_replay(const ReplaySetup& setup, const Trace& trace, const TuneWindow& w) {
  ReplaySpec spec = setup.spec();
  spec.estimate = "request";
  spec.correction = "none";
  spec.backfill_order = "fcfs";
  return replay_one(ReplaySetup(spec), trace, w, "fcfs");
}

std::string_view max_wait_stat_name(MaxWaitStat s) {
  return s == MaxWaitStat::MEAN ? "mean" : "worst";
}

MaxWaitStat parse_max_wait_stat(std::string_view s) {
  if (s == "worst") return MaxWaitStat::WORST;
  if (s == "mean") return MaxWaitStat::MEAN;
  throw ConfigError("--max-wait-stat '" + std::string(s) +
                    "': valid values are worst (every window within the bound) and mean (the "
                    "windows' max-wait ratios on average within the bound)");
}

TuneVerdict pick_best(const std::vector<TuneOutcome>& outcomes,
                      const std::vector<TuneOutcome>& base, size_t windows, double max_wait_ratio,
                      double max_wait_floor, MaxWaitStat stat) {
  TuneVerdict v;
  const size_t n = windows == 0 ? 0 : outcomes.size() / windows;
  double best_key = std::numeric_limits<double>::infinity();
  double least_starving = std::numeric_limits<double>::infinity();
  size_t least_idx = 0;
  double least_worst = std::numeric_limits<double>::infinity();
  for (size_t c = 0; c < n; ++c) {
    double log_sum = 0, worst = 0, sum = 0;
    for (size_t w = 0; w < windows; ++w) {
      const TuneOutcome& o = outcomes[c * windows + w];
      const double b = std::max(base[w].avg_bsld, 1.0);
      log_sum += std::log(std::max(o.avg_bsld, 1.0) / b);
      const double ref = std::max(base[w].max_wait, std::max(max_wait_floor, 0.0));
      const double mw = ref > 0 ? o.max_wait / ref : (o.max_wait > 0 ? o.max_wait : 1.0);
      worst = std::max(worst, mw);
      sum += mw;
    }
    const double ratio = std::exp(log_sum / static_cast<double>(windows));
    const double bound_stat =
        stat == MaxWaitStat::MEAN ? sum / static_cast<double>(windows) : worst;
    // The fallback when nothing qualifies is the safest candidate: the least starving by its
    // worst window, whatever the statistic (a mean could hide one window starved 3x).
    if (worst < least_worst) {
      least_worst = worst;
      least_idx = c;
      least_starving = bound_stat;
    }
    // Strict '<' keeps the earliest of equal candidates: the grid order breaks ties.
    if (bound_stat <= max_wait_ratio && ratio < best_key) {
      best_key = ratio;
      v.best = c;
      v.bsld_ratio = ratio;
      v.max_wait_ratio = bound_stat;
      v.worst_max_wait_ratio = worst;
      v.feasible = true;
    }
  }
  if (!v.feasible && n > 0) {
    v.best = least_idx;
    v.max_wait_ratio = least_starving;
    v.worst_max_wait_ratio = least_worst;
    double log_sum = 0;
    for (size_t w = 0; w < windows; ++w)
      log_sum += std::log(std::max(outcomes[least_idx * windows + w].avg_bsld, 1.0) /
                          std::max(base[w].avg_bsld, 1.0));
    v.bsld_ratio = std::exp(log_sum / static_cast<double>(windows));
  }
  return v;
}

std::vector<TuneOutcome> run_tune_stage(const ReplaySetup& setup, const Trace& trace,
                                        const std::vector<model::PolicyParams>& candidates,
                                        const std::vector<TuneWindow>& windows,
                                        const TaskFilter& mine,
                                        const std::function<void(size_t, size_t)>& progress) {
  const size_t n = candidates.size() * windows.size();
  std::vector<TuneOutcome> out(n);
  size_t done = 0, total = 0;
  for (size_t i = 0; i < n; ++i) total += mine(i) ? 1 : 0;
  for (size_t i = 0; i < n; ++i) {
    if (!mine(i)) continue;
    out[i] = tune_replay(setup, candidates[i / windows.size()], trace, windows[i % windows.size()]);
    if (progress) progress(++done, total);
  }
  return out;
}

}  // namespace mlprio::replay
