// The deployable-configuration search behind `mlprio-replay tune --slurm-conf` (see
// mlprio/replay/tune_stack.hpp).
#include "mlprio/replay/tune_stack.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>

#include "mlprio/util/errors.hpp"

namespace mlprio::replay {

namespace {

constexpr int64_t DAY = 86400;

double round_weight(double w) {
  return std::max(0.0, std::round(w));  // Slurm's weights are whole numbers
}

int count_changes(const SlurmStack& stock, const model::ScoreConfig& score,
                  const StackCandidate& c) {
  const double stock_site = stock.site.enabled && !stock.site.shadow ? stock.site.weight : 0.0;
  int n = 0;
  n += c.site_weight != stock_site;
  n += c.weight_age != stock.weight_age;
  n += c.max_age != stock.max_age;
  n += c.weight_fairshare != stock.weight_fairshare;
  n += c.weight_job_size != stock.weight_job_size;
  n += c.score.size_weight != score.size_weight;
  n += c.score.request_weight != score.request_weight;
  n += c.score.fail_weight != score.fail_weight;
  return n;
}

bool same_settings(const StackCandidate& a, const StackCandidate& b) {
  return a.site_weight == b.site_weight && a.weight_age == b.weight_age && a.max_age == b.max_age &&
         a.weight_fairshare == b.weight_fairshare && a.weight_job_size == b.weight_job_size &&
         a.score.size_weight == b.score.size_weight &&
         a.score.request_weight == b.score.request_weight &&
         a.score.fail_weight == b.score.fail_weight;
}

// Adds `c` unless a listed candidate has its settings (the first listed keeps its place).
void add_unique(std::vector<StackCandidate>& list, StackCandidate c, const SlurmStack& stock,
                const model::ScoreConfig& score) {
  for (const auto& x : list)
    if (same_settings(x, c)) return;
  c.changes = count_changes(stock, score, c);
  c.stock = false;
  list.push_back(c);
}

std::string slurm_time_text(int64_t seconds) {
  if (seconds % DAY == 0) return std::to_string(seconds / DAY) + "-0";
  return std::to_string((seconds + 59) / 60);  // minutes
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string weight_text(double w) {
  std::ostringstream o;
  o.precision(0);
  o << std::fixed << round_weight(w);
  return o.str();
}

}  // namespace

std::string describe(const StackCandidate& c) {
  std::ostringstream o;
  if (c.stock) o << "stock ";
  o << "site_weight=" << c.site_weight << " age=" << c.weight_age << "/"
    << slurm_time_text(c.max_age) << " fairshare=" << c.weight_fairshare
    << " job_size=" << c.weight_job_size;
  if (c.site_weight > 0)
    o << " size=" << c.score.size_weight << " fail=" << c.score.fail_weight
      << " request=" << c.score.request_weight;
  return o.str();
}

StackCandidate stock_candidate(const SlurmStack& stock, const model::ScoreConfig& score) {
  StackCandidate c;
  c.site_weight = stock.site.enabled && !stock.site.shadow ? stock.site.weight : 0.0;
  c.weight_age = stock.weight_age;
  c.weight_fairshare = stock.weight_fairshare;
  c.weight_job_size = stock.weight_job_size;
  c.max_age = stock.max_age;
  c.score = score;
  c.changes = 0;
  c.stock = true;
  return c;
}

SlurmStack candidate_stack(const SlurmStack& stock, const StackCandidate& c,
                           const std::string& model_path) {
  if (c.stock) return stock;
  SlurmStack s = stock;
  s.weight_age = c.weight_age;
  s.max_age = c.max_age;
  s.weight_fairshare = c.weight_fairshare;
  s.weight_job_size = c.weight_job_size;
  if (c.site_weight > 0) {
    s.site.enabled = true;
    s.site.shadow = false;
    s.site.model = model_path;
    s.site.weight = c.site_weight;
    s.site.max_boost =
        std::max<int64_t>(s.site.max_boost, static_cast<int64_t>(std::ceil(c.site_weight)));
  } else {
    s.site.enabled = false;
  }
  if (s.job_submit_mlprio && s.site.model.empty()) s.site.model = model_path;
  return s;
}

std::vector<StackCandidate> stack_stage1(const SlurmStack& stock, const StackCandidate& base,
                                         const std::vector<double>& site_weights) {
  if (site_weights.empty()) throw ConfigError("tune: at least one SITE weight is needed");
  for (double w : site_weights)
    if (!(w >= 0 && w <= 1e7))
      throw ConfigError("tune: a SITE weight must lie in [0, 10000000] (0: no SITE term)");
  const model::ScoreConfig& score = base.score;
  std::vector<StackCandidate> c{base};
  for (double w : site_weights) {
    StackCandidate x = base;
    x.site_weight = round_weight(w);
    x.weight_age = stock.weight_age;
    x.max_age = stock.max_age;
    add_unique(c, x, stock, score);
    if (!stock.accounting_dbd) continue;  // Slurm forces the age weight to 0 without slurmdbd
    // An age weight at least SITE's lets any job overtake any SITE difference once it has
    // waited PriorityMaxAge: the deployable form of a starvation limit.
    for (int64_t days : {1, 3, 7}) {
      x.weight_age = std::max(stock.weight_age, x.site_weight);
      x.max_age = days * DAY;
      add_unique(c, x, stock, score);
    }
  }
  return c;
}

std::vector<StackCandidate> stack_stage2(const SlurmStack& stock, const StackCandidate& best,
                                         const model::ScoreConfig& score) {
  std::vector<StackCandidate> c{best};
  std::vector<double> fairshare{stock.weight_fairshare};
  if (stock.accounting_dbd && stock.weight_fairshare > 0)
    fairshare.push_back(round_weight(stock.weight_fairshare / 2));
  std::vector<double> job_size{stock.weight_job_size};
  if (stock.weight_job_size > 0) job_size.push_back(0);
  for (double f : fairshare)
    for (double j : job_size) {
      StackCandidate x = best;
      x.weight_fairshare = f;
      x.weight_job_size = j;
      add_unique(c, x, stock, score);
    }
  return c;
}

std::vector<StackCandidate> stack_stage3(const SlurmStack& stock, const StackCandidate& best,
                                         const model::ScoreConfig& score) {
  if (best.site_weight <= 0) return {};  // no SITE: its shape changes nothing
  std::vector<StackCandidate> c{best};
  for (double size : {-0.5, 0.0, 0.5})
    for (double request : {0.0, 0.5}) {
      StackCandidate x = best;
      x.score.size_weight = size;
      x.score.request_weight = request;
      add_unique(c, x, stock, score);
    }
  return c;
}

StackOutcome replay_stack(const StackTuneContext& ctx, const StackCandidate& c,
                          const TuneWindow& w) {
  const SlurmStack conf = candidate_stack(*ctx.stock, c, ctx.model_path);
  std::optional<model::ScoreConfig> score;
  if (!c.stock) score = c.score;
  const SlurmReplay prepared = prepare_slurm_replay(conf, ctx.release, *ctx.trace, *ctx.setup,
                                                    "tune --slurm-conf " + ctx.stock->path,
                                                    *ctx.models, false, false, score);
  const std::span<const Job> jobs(ctx.trace->jobs);
  const SimResult r =
      w.load == 1.0 ? replay_slurm_window(prepared, *ctx.trace, w.start, w.len)
                    : replay_slurm_jobs(prepared, *ctx.trace, w.start, scaled_window(jobs, w));
  return {r.summary.avg_bsld, r.summary.max_wait, r.summary.p99_wait};
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 1.0;
  std::sort(v.begin(), v.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  const double f = pos - static_cast<double>(lo);
  return v[lo] * (1 - f) + v[hi] * f;
}

std::vector<bool> deciding_windows(const std::vector<StackOutcome>& outcomes,
                                   const std::vector<StackOutcome>& stock, size_t windows) {
  std::vector<bool> keep(windows, false);
  for (size_t i = 0; windows > 0 && i < outcomes.size(); ++i) {
    const size_t w = i % windows;
    if (outcomes[i].avg_bsld != stock[w].avg_bsld) keep[w] = true;
  }
  return keep;
}

std::vector<double> bsld_ratios(const std::vector<StackOutcome>& outcomes,
                                const std::vector<StackOutcome>& stock, size_t windows, size_t c,
                                const std::vector<bool>& keep) {
  std::vector<double> r;
  for (size_t w = 0; w < windows; ++w)
    if (keep.empty() || keep[w])
      r.push_back(std::max(outcomes[c * windows + w].avg_bsld, 1.0) /
                  std::max(stock[w].avg_bsld, 1.0));
  return r;
}

std::vector<double> max_wait_ratios(const std::vector<StackOutcome>& outcomes,
                                    const std::vector<StackOutcome>& stock, size_t windows,
                                    size_t c, double floor) {
  std::vector<double> r;
  for (size_t w = 0; w < windows; ++w) {
    const double ref = std::max(stock[w].max_wait, std::max(floor, 0.0));
    const double mw = outcomes[c * windows + w].max_wait;
    r.push_back(ref > 0 ? mw / ref : (mw > 0 ? mw : 1.0));
  }
  return r;
}

StackVerdict pick_stack(const std::vector<StackOutcome>& outcomes,
                        const std::vector<StackOutcome>& stock, size_t windows,
                        const std::vector<StackCandidate>& candidates, double max_wait_ratio,
                        double max_wait_floor, double tolerance, double max_wait_quantile) {
  StackVerdict v;
  const size_t n = windows == 0 ? 0 : outcomes.size() / windows;
  if (n != candidates.size()) throw InvariantError("tune: outcomes and candidates differ");
  std::vector<double> med(n), mwq(n), worst(n), p25(n), p75(n);
  double best_ratio = std::numeric_limits<double>::infinity();
  const std::vector<bool> keep = deciding_windows(outcomes, stock, windows);
  v.deciding = static_cast<size_t>(std::count(keep.begin(), keep.end(), true));
  for (size_t c = 0; c < n; ++c) {
    const auto r = v.deciding >= MIN_DECIDING_WINDOWS
                       ? bsld_ratios(outcomes, stock, windows, c, keep)
                       : std::vector<double>{};
    const auto m = max_wait_ratios(outcomes, stock, windows, c, max_wait_floor);
    med[c] = quantile(r, 0.5);
    p25[c] = quantile(r, 0.25);
    p75[c] = quantile(r, 0.75);
    mwq[c] = quantile(m, max_wait_quantile);
    worst[c] = m.empty() ? 1.0 : *std::max_element(m.begin(), m.end());
    if (mwq[c] <= max_wait_ratio) {
      ++v.feasible;
      best_ratio = std::min(best_ratio, med[c]);
    }
  }
  size_t pick = n;
  if (v.feasible > 0) {
    for (size_t c = 0; c < n; ++c) {
      if (!(mwq[c] <= max_wait_ratio) || med[c] > best_ratio * (1.0 + tolerance)) continue;
      if (pick == n || candidates[c].changes < candidates[pick].changes ||
          (candidates[c].changes == candidates[pick].changes && med[c] < med[pick]))
        pick = c;
    }
  } else {
    for (size_t c = 0; c < n; ++c)
      if (pick == n || mwq[c] < mwq[pick]) pick = c;
  }
  if (pick == n) return v;
  v.best = pick;
  v.bsld_ratio = med[pick];
  v.bsld_p25 = p25[pick];
  v.bsld_p75 = p75[pick];
  v.max_wait_ratio = mwq[pick];
  v.worst_max_wait_ratio = worst[pick];
  return v;
}

std::string tuned_conf_text(const std::string& site_text, const SlurmStack& stock,
                            const StackCandidate& c, const std::string& model_path,
                            const std::string& provenance) {
  std::vector<std::pair<std::string, std::string>> set;  // key, value ("" = remove the line)
  if (c.weight_age != stock.weight_age)
    set.emplace_back("PriorityWeightAge", weight_text(c.weight_age));
  if (c.max_age != stock.max_age) set.emplace_back("PriorityMaxAge", slurm_time_text(c.max_age));
  if (c.weight_fairshare != stock.weight_fairshare)
    set.emplace_back("PriorityWeightFairshare", weight_text(c.weight_fairshare));
  if (c.weight_job_size != stock.weight_job_size)
    set.emplace_back("PriorityWeightJobSize", weight_text(c.weight_job_size));
  if (c.site_weight > 0) {
    // The site's other plugin parameters stay; model, weight, max_boost and mode are the choice.
    std::string params = "model=" + model_path + ",weight=" + weight_text(c.site_weight) +
                         ",max_boost=" +
                         std::to_string(std::max<int64_t>(
                             stock.site.max_boost, static_cast<int64_t>(std::ceil(c.site_weight))));
    std::istringstream items(stock.site.params);
    for (std::string item; std::getline(items, item, ',');) {
      const std::string k = lower(item.substr(0, item.find('=')));
      if (item.empty() || k == "model" || k == "weight" || k == "max_boost" || k == "mode")
        continue;
      params += "," + item;
    }
    set.emplace_back("PrioritySiteFactorPlugin", "site_factor/mlprio");
    set.emplace_back("PrioritySiteFactorParameters", params);
  } else if (stock.site.enabled) {
    set.emplace_back("PrioritySiteFactorPlugin", "");
  }
  std::ostringstream out;
  std::istringstream in(site_text);
  for (std::string line; std::getline(in, line);) {
    size_t b = 0;
    while (b < line.size() && std::isspace(static_cast<unsigned char>(line[b]))) ++b;
    const size_t eq = line.find('=', b);
    const std::string key = eq == std::string::npos ? "" : lower(line.substr(b, eq - b));
    bool replaced = false;
    for (const auto& [k, v] : set) replaced = replaced || lower(k) == key;
    if (replaced)
      out << "#" << line << "   # mlprio-replay tune: set below\n";
    else
      out << line << "\n";
  }
  out << "\n# mlprio-replay tune: " << provenance << "\n";
  if (set.empty()) out << "# (the site's configuration was kept: nothing changed)\n";
  for (const auto& [k, v] : set)
    if (!v.empty()) out << k << "=" << v << "\n";
  return out.str();
}

}  // namespace mlprio::replay
