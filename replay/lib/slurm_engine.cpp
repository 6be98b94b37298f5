// The deployed-stack engine (`mlprio-replay run --slurm-conf FILE`): what a slurmctld configured
// by FILE does with a trace, as read in Slurm's source (23.11-26.05; the replay README's
// "Deployed-stack replay" lists what is and is not modelled):
//  - priorities: priority/basic (submission order) or priority/multifactor's sum of weighted
//    factors (age since eligibility capped at PriorityMaxAge, fair share of decayed core-second
//    usage (Fair Tree ranks or classic 2^-U/S), job size, partition) plus SITE, truncated to an
//    integer of at least 1; set at submission (age 0 then) and recomputed for every pending job
//    every PriorityCalcPeriod, as the decay thread does;
//  - SITE: site_factor/mlprio's value, model::site_factor (the function the plugin calls) of the
//    model's prediction at submission, from the model file's history plus the jobs this replay
//    has finished by the plugin's last scan for ended jobs (every history_period_ms, and every
//    PriorityCalcPeriod with slurmdbd; none with history_period_ms=0); 0 in shadow mode or out
//    of scope;
//  - time limits: the job's request in whole minutes; without one, job_submit/mlprio's filled
//    limit when loaded (as the plugin computes it), else the partition's DefaultTime, else its
//    MaxTime; SITE is scored on the job as recorded, with the filled limit or DefaultTime; a job
//    still running at its limit (+ OverTimeLimit) is killed at the next 30-s tick of slurmctld's
//    time-limit check;
//  - the main scheduler: after a submission (batch_sched_delay after the last pass at the
//    earliest), after every job end, and every sched_interval; jobs in priority order (then
//    submit time, then job id) start while they fit, and the first that does not fit blocks
//    the rest of the partition for that pass;
//  - sched/backfill: a cycle bf_interval after the previous one when anything changed since; up
//    to bf_max_job_test jobs in priority order, each planned at its earliest start on the
//    running jobs' limits and the reservations of the jobs before it: started when that is now,
//    else reserved when the start lies within bf_window: whole nodes, from the start rounded
//    down to its bf_resolution slot of slurmctld's clock to the end rounded up (24.11 on) or
//    down (up to 24.05), at least one slot. The plan is rebuilt from scratch every cycle.
// Resources are counted, not named (cores, or nodes with select/linear), in one pool shared by
// all partitions.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>
#include <string>
#include <vector>

#include "engine_common.hpp"
#include "mlprio/model/predictor.hpp"
#include "mlprio/replay/slurm_conf.hpp"

namespace mlprio::replay::detail {

namespace {

constexpr double INF = std::numeric_limits<double>::infinity();
constexpr double TIME_LIMIT_TICK = 30;  // slurmctld's PERIODIC_TIMEOUT: job_time_limit() runs

struct SJob {
  const Job* job = nullptr;
  int64_t index = 0;
  int64_t procs = 0;
  int64_t units = 0;       // cores (nodes with whole_nodes) it runs on
  int64_t reserve = 0;     // units a backfill reservation takes: whole nodes
  int64_t nodes = 0;       // min_nodes, for the job size factor
  double limit = 0;        // seconds; INF = no limit
  double plan = 0;         // the length the schedulers plan with (a year for no limit)
  int64_t site = 0;        // SITE
  double static_prio = 0;  // job size, partition and SITE terms (fixed per job)
  double start = -1, end = -1;
  double accounted = 0;  // fair share: usage charged up to here
  bool killed = false;
  int32_t user_slot = 0;
};

// A pending job's entry in the queue: what priority() reads and the queue's order compares, kept
// contiguous so the decay thread's pass over a deep queue streams through memory.
struct Pending {
  int64_t prio;
  double submit;
  int64_t id, index;
  double static_prio;
  int32_t user_slot;
  int32_t slot;  // into the engine's job records
};

// Slurm's queue order: priority, then submit time, then job id (the trace position last).
bool ahead(const Pending& x, const Pending& y) {
  if (x.prio != y.prio) return x.prio > y.prio;
  if (x.submit != y.submit) return x.submit < y.submit;
  if (x.id != y.id) return x.id < y.id;
  return x.index < y.index;
}

// A step function of free units over [now, inf): points (t, free from t on), t ascending.
class Plan {
 public:
  void reset(double now, int64_t free) {
    pts_.clear();
    pts_.push_back({now, free});
  }
  // Units come back at t (a running job's planned end).
  void release_at(double t, int64_t units) {
    const size_t i = split(t);
    for (size_t k = i; k < pts_.size(); ++k) pts_[k].free += units;
  }
  // Units taken over [a, b).
  void take(double a, double b, int64_t units) {
    const size_t i = split(a);
    const size_t j = b == INF ? pts_.size() : split(b);
    for (size_t k = i; k < j; ++k) pts_[k].free -= units;
  }
  // The earliest t >= now with free >= need over [t, t + len); INF when never.
  double earliest(int64_t need, double len) const {
    size_t i = 0;
    while (i < pts_.size()) {
      if (pts_[i].free < need) {
        ++i;
        continue;
      }
      const double t = pts_[i].t;
      const double until = t + len;
      size_t k = i + 1;
      while (k < pts_.size() && pts_[k].t < until && pts_[k].free >= need) ++k;
      if (k >= pts_.size() || pts_[k].t >= until) return t;
      i = k + 1;
    }
    return INF;
  }

 private:
  struct Pt {
    double t;
    int64_t free;
  };
  // Index of the point starting at t, inserted when absent (t >= the first point's time).
  size_t split(double t) {
    auto it = std::lower_bound(pts_.begin(), pts_.end(), t,
                               [](const Pt& p, double x) { return p.t < x; });
    if (it != pts_.end() && it->t == t) return static_cast<size_t>(it - pts_.begin());
    const int64_t f = it == pts_.begin() ? pts_.front().free : std::prev(it)->free;
    const auto at = pts_.insert(it, Pt{t, f});  // may move the points: begin() after it
    return static_cast<size_t>(at - pts_.begin());
  }
  std::vector<Pt> pts_;
};

class SlurmEngine {
 public:
  SlurmEngine(std::span<const Job> jobs, const SimConfig& cfg)
      : jobs_(jobs), cfg_(cfg), run_(*cfg.slurm), conf_(cfg.slurm->conf), metrics_(cfg) {
    const Machine& m = cfg.machine;
    whole_nodes_ = m.allocation == Allocation::NODES;
    total_units_ = whole_nodes_ ? m.nodes : m.total_cores();
    free_ = total_units_;
    if (cfg.online) online_ = cfg.online();
    // site_factor/mlprio's live history: its applier scans slurmctld's job list for ended jobs
    // every history_period_ms, and with slurmdbd site_factor_p_update does too, every
    // PriorityCalcPeriod. Without the site factor plugin, or with history_period_ms=0, the model
    // file's snapshot is all there is.
    const SlurmSiteFactor& site = conf_.site;
    learns_ = conf_.multifactor && site.enabled && site.history_period_ms > 0;
    scan_period_ = static_cast<double>(site.history_period_ms) / 1000.0;
    update_period_ = conf_.accounting_dbd ? static_cast<double>(conf_.calc_period) : INF;
  }

  SimResult run() {
    if (jobs_.empty()) return finish();
    t0_ = jobs_.front().submit;
    next_calc_ = conf_.multifactor && (conf_.weight_age > 0 || conf_.weight_fairshare > 0)
                     ? t0_ + static_cast<double>(conf_.calc_period)
                     : INF;
    size_t next = 0;
    while (true) {
      const double t_arr = next < jobs_.size() ? jobs_[next].submit : INF;
      const double t_end = ends_.empty() ? INF : ends_.top().first;
      const double t_sched = next_sched_tick();
      // The decay thread runs while there is anything to charge or reorder; over an idle
      // cluster its passes change nothing but the decay, which the next pass applies at once.
      const double t_calc = pending_.empty() && running_.empty() ? INF : next_calc_;
      const double t = std::min({t_arr, t_end, main_at_, bf_at_, t_calc, t_sched});
      if (t == INF) break;
      if (t < now_) throw InvariantError("slurm engine: time went back");
      now_ = t;
      // Job ends first (their nodes come back), then the decay thread, then arrivals; then
      // whichever scheduler is due.
      bool ended = false;
      while (!ends_.empty() && ends_.top().first <= now_) {
        finish_job(ends_.top().second);
        ends_.pop();
        ended = true;
      }
      if (now_ >= next_calc_) {
        if (!pending_.empty() || !running_.empty()) recalc();
        const double period = static_cast<double>(conf_.calc_period);
        next_calc_ = t0_ + (std::floor((now_ - t0_) / period) + 1) * period;
      }
      bool arrived = false;
      while (next < jobs_.size() && jobs_[next].submit <= now_) {
        if (next > 0 && jobs_[next].submit < jobs_[next - 1].submit)
          throw ConfigError("the deployed-stack replay needs jobs sorted by submit time");
        arrive(static_cast<int64_t>(next));
        ++next;
        arrived = true;
      }
      if (ended) {
        main_at_ = now_;  // epilog complete: schedule() at once
        changed();
      }
      if (arrived) {
        const double at = std::max(now_, last_main_ + static_cast<double>(conf_.batch_sched_delay));
        main_at_ = std::min(main_at_, at);
        changed();
      }
      if (now_ >= t_sched && order_changed_) main_at_ = std::min(main_at_, now_);
      if (now_ >= main_at_) {
        main_pass(now_ >= t_sched);
        main_at_ = INF;
      }
      if (now_ >= bf_at_) {
        bf_at_ = INF;
        backfill_cycle();
      }
      record_series();
    }
    return finish();
  }

 private:
  // When the live history learns a job that ended at `end`: at the first scan (history_period_ms
  // apart from the start) or decay-thread pass at or after it.
  double learn_time(double end) const {
    auto tick = [&](double period) {
      return t0_ + std::ceil((end - t0_) / period - 1e-9) * period;
    };
    return std::min(tick(scan_period_), update_period_ == INF ? INF : tick(update_period_));
  }

  double next_sched_tick() const {
    if (conf_.sched_interval <= 0 || !order_changed_ || pending_.empty()) return INF;
    const double iv = static_cast<double>(conf_.sched_interval);
    return t0_ + std::ceil((now_ - t0_) / iv + 1e-12) * iv;
  }

  // Something a backfill cycle would see changed (Slurm's last_job_update).
  void changed() {
    if (!conf_.backfill || conf_.bf_interval < 0) return;
    if (bf_at_ == INF) bf_at_ = std::max(now_, last_bf_ + static_cast<double>(conf_.bf_interval));
  }

  int32_t user_slot(int32_t user) {
    auto it = std::lower_bound(user_ids_.begin(), user_ids_.end(), user);
    if (it != user_ids_.end() && *it == user)
      return slot_of_[static_cast<size_t>(it - user_ids_.begin())];
    const int32_t slot = static_cast<int32_t>(usage_.size());
    slot_of_.insert(slot_of_.begin() + (it - user_ids_.begin()), slot);
    user_ids_.insert(it, user);
    usage_.push_back(0);
    fs_.push_back(conf_.fair_tree ? 1.0 : 0.5);
    return slot;
  }

  // The time limit slurmctld's job record holds after submission, what site_factor/mlprio reads:
  // the request in whole minutes, else job_submit/mlprio's filled limit (clamped to the
  // partition's MaxTime), else the partition's DefaultTime (job_mgr.c); -1 when none of them.
  double record_limit(const Job& j, const model::Prediction* p, const SlurmPartition* part) const {
    if (j.req_time > 0) return std::ceil(j.req_time / 60.0) * 60.0;  // whole minutes
    if (conf_.job_submit_mlprio && !conf_.site.shadow && p != nullptr &&
        std::isfinite(p->runtime) && p->runtime > 0 &&
        (part == nullptr || part->default_time < 0 || conf_.site.override_default_time)) {
      // job_submit/mlprio's _fill_limit: max(run x (1 + margin), upper), whole minutes, >= 1.
      double s = p->runtime * (1.0 + conf_.site.limit_margin);
      double minutes = std::ceil(s / 60.0);
      if (std::isfinite(p->runtime_upper) && p->runtime_upper > s)
        minutes = std::ceil(p->runtime_upper / 60.0);
      double lim = std::max(1.0, minutes) * 60.0;
      if (part != nullptr && part->max_time >= 0)
        lim = std::min(lim, std::max(static_cast<double>(part->max_time), 60.0));
      return lim;
    }
    if (part != nullptr && part->default_time >= 0) return static_cast<double>(part->default_time);
    return -1;
  }

  // The limit the job runs under: the record's, else the partition's MaxTime, at most MaxTime,
  // at least a minute; INF for none.
  double limit_of(const Job& j, const model::Prediction* p, const SlurmPartition* part) const {
    double lim = record_limit(j, p, part);
    if (lim < 0 && part != nullptr && part->max_time >= 0)
      lim = static_cast<double>(part->max_time);
    if (part != nullptr && part->max_time >= 0 &&
        (lim < 0 || lim > static_cast<double>(part->max_time)))
      lim = static_cast<double>(part->max_time);
    return lim < 0 ? INF : std::max(lim, 60.0);
  }

  bool in_scope(const Job& j) const {
    const auto& s = conf_.site;
    auto listed = [](const std::vector<std::string>& names, const std::vector<std::string>& table,
                     int32_t id) {
      if (names.empty()) return true;
      if (id < 0 || static_cast<size_t>(id) >= table.size()) return false;
      std::string low = table[static_cast<size_t>(id)];  // the plugin compares case-blind
      for (char& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return std::find(names.begin(), names.end(), low) != names.end();
    };
    return listed(s.scope_partitions, run_.partition_names, j.partition) &&
           listed(s.scope_qos, run_.qos_names, j.qos) &&
           listed(s.scope_accounts, run_.account_names, j.account);
  }

  const SlurmPartition* partition_of(const Job& j) const {
    if (j.partition >= 0 && static_cast<size_t>(j.partition) < run_.partition_names.size())
      if (const auto* p = conf_.partition(run_.partition_names[static_cast<size_t>(j.partition)]))
        return p;
    return conf_.default_partition();
  }

  void arrive(int64_t index) {
    const Job& j = jobs_[static_cast<size_t>(index)];
    const int64_t procs = j.procs();
    if (!(j.run >= 0) || procs <= 0) {
      ++skipped_;
      return;
    }
    const Machine& m = cfg_.machine;
    SJob s;
    s.job = &j;
    s.index = index;
    s.procs = procs;
    s.nodes = (procs + m.cores_per_node - 1) / m.cores_per_node;
    s.units = whole_nodes_ ? s.nodes : procs;
    s.reserve = whole_nodes_ ? s.nodes : std::min(s.nodes * m.cores_per_node, total_units_);
    if (s.units > total_units_) {
      if (cfg_.too_large == TooLarge::SKIP) {
        ++skipped_;
        return;
      }
      throw JobTooLargeError("job " + std::to_string(j.id) + " needs " + std::to_string(procs) +
                             " cores; the machine has " + std::to_string(m.total_cores()));
    }
    model::Prediction pred;
    bool have_pred = false;
    // The jobs the plugin's live history has learned by now (learn times rise with the ends).
    while (!to_learn_.empty() && to_learn_.front().first <= now_) {
      const SJob& done = jobs_state_[static_cast<size_t>(to_learn_.front().second)];
      online_->finish(*done.job, done.start, done.end);
      to_learn_.pop_front();
    }
    if (online_) {
      pred = online_->submit(j, index, j.submit).prediction;
      have_pred = true;
    }
    const SlurmPartition* part = partition_of(j);
    s.limit = limit_of(j, have_pred ? &pred : nullptr, part);
    s.plan = s.limit == INF ? static_cast<double>(SLURM_YEAR_SECONDS) : s.limit;
    if (conf_.multifactor && conf_.site.enabled && !conf_.site.shadow && have_pred && in_scope(j)) {
      // site_factor/mlprio scores the job as slurmctld recorded it: with the limit job_submit
      // filled (or the partition's DefaultTime) where the job gave none, in whole minutes.
      Job recorded = j;
      recorded.req_time = record_limit(j, &pred, part);
      const model::Prediction seen =
          recorded.req_time == j.req_time || (recorded.req_time < 0 && !(j.req_time > 0))
              ? pred
              : online_->submit(recorded, index, j.submit).prediction;
      s.site = model::site_factor(recorded, seen, run_.site_score, conf_.site.weight,
                                  conf_.site.max_boost);
    }
    s.user_slot = user_slot(j.user);
    s.static_prio = static_terms(s, part);
    const int32_t slot = static_cast<int32_t>(jobs_state_.size());
    jobs_state_.push_back(s);
    Pending p{0, j.submit, j.id, index, s.static_prio, s.user_slot, slot};
    // priority/basic: each job one below the last.
    p.prio = conf_.multifactor ? priority(p, /*age=*/0) : basic_next_--;
    // Insert in order: the newest job goes after every job of the same priority.
    pending_.insert(std::upper_bound(pending_.begin(), pending_.end(), p, ahead), p);
  }

  double static_terms(const SJob& s, const SlurmPartition* part) const {
    if (!conf_.multifactor) return 0;
    double v = static_cast<double>(s.site);
    if (conf_.weight_job_size > 0) {
      const double N = static_cast<double>(cfg_.machine.nodes);
      const double C = static_cast<double>(cfg_.machine.total_cores());
      const double n = static_cast<double>(s.nodes), cpu = static_cast<double>(s.procs);
      double f;
      if (conf_.small_relative_to_time) {
        double size = std::max(n * C / N, cpu);
        const double minutes = s.limit == INF ? 365.0 * 24 * 60 : s.limit / 60.0;
        size /= minutes;
        size /= C;
        f = conf_.favor_small ? 1.0 - size : size;
      } else if (conf_.favor_small) {
        f = ((N > n ? (N - n) / N : 0.0) + (C - cpu) / C) / 2.0;
      } else {
        f = (n / N + cpu / C) / 2.0;
      }
      v += conf_.weight_job_size * std::clamp(f, 0.0, 1.0);
    }
    if (conf_.weight_partition > 0 && part != nullptr) {
      double mx = 0;
      for (const auto& p : conf_.partitions) mx = std::max(mx, p.job_factor);
      if (mx > 0) v += conf_.weight_partition * part->job_factor / mx;
    }
    return v;
  }

  int64_t priority(const Pending& s, double age) const {
    double p = s.static_prio;
    if (conf_.weight_age > 0) {
      const double f =
          conf_.max_age > 0 ? std::min(age / static_cast<double>(conf_.max_age), 1.0) : 1.0;
      p += conf_.weight_age * f;
    }
    if (conf_.weight_fairshare > 0)
      p += conf_.weight_fairshare * fs_[static_cast<size_t>(s.user_slot)];
    if (!(p >= 1)) return 1;
    if (p > 4294967295.0) return 4294967295LL;
    return static_cast<int64_t>(p);
  }

  // The decay thread: usage decays and running jobs are charged, fair share is recomputed, and
  // every pending job's priority with it.
  void recalc() {
    const double dt = now_ - last_calc_;
    if (conf_.weight_fairshare > 0) {
      if (conf_.decay_half_life > 0 && dt > 0) {
        const double d = std::pow(1.0 - 0.693 / static_cast<double>(conf_.decay_half_life), dt);
        for (double& u : usage_) u *= d;
      }
      for (int32_t slot : running_) charge(jobs_state_[static_cast<size_t>(slot)], now_);
      fair_share();
    }
    last_calc_ = now_;
    for (Pending& p : pending_) p.prio = priority(p, std::max(0.0, now_ - p.submit));
    reorder();
    order_changed_ = true;
  }

  // The queue back in ahead()'s order after new priorities. They mostly keep it (an age term
  // that grows alike for every job) or move jobs a few places (its integer truncation, one
  // user's fair share): insertion sort costs the moves, and a queue that needs more than a few
  // per job is sorted outright. The order is total, so both give the same queue.
  void reorder() {
    const size_t n = pending_.size();
    size_t moves = 0;
    const size_t budget = 8 * n + 64;
    for (size_t i = 1; i < n; ++i) {
      if (!ahead(pending_[i], pending_[i - 1])) continue;
      const Pending x = pending_[i];
      size_t j = i;
      while (j > 0 && ahead(x, pending_[j - 1]) && moves <= budget) {
        pending_[j] = pending_[j - 1];
        --j;
        ++moves;
      }
      pending_[j] = x;
      if (moves > budget) {
        std::sort(pending_.begin(), pending_.end(), ahead);
        return;
      }
    }
  }

  void charge(SJob& s, double until) {
    const double from = std::max(s.accounted, s.start);
    if (until > from)
      usage_[static_cast<size_t>(s.user_slot)] += (until - from) * static_cast<double>(s.procs);
    s.accounted = std::max(s.accounted, until);
  }

  void fair_share() {
    const size_t n = usage_.size();
    if (n == 0) return;
    if (conf_.fair_tree) {
      // One account, every user with the same shares: users rank by usage, ties share a rank;
      // the factor is the rank over the number of users (zero usage ranks first, factor 1).
      std::vector<size_t> idx(n);
      for (size_t i = 0; i < n; ++i) idx[i] = i;
      std::sort(idx.begin(), idx.end(),
                [this](size_t a, size_t b) { return usage_[a] < usage_[b]; });
      size_t ahead = 0;
      for (size_t k = 0; k < n; ++k) {
        if (k > 0 && usage_[idx[k]] != usage_[idx[k - 1]]) ahead = k;
        fs_[idx[k]] = static_cast<double>(n - ahead) / static_cast<double>(n);
      }
    } else {
      double total = 0;
      for (double u : usage_) total += u;
      const double N = static_cast<double>(n);
      for (size_t i = 0; i < n; ++i) {
        const double u = total > 0 ? usage_[i] / total : 0.0;
        fs_[i] = std::exp2(-(N * u + 1.0 - u));
      }
    }
  }

  bool can_start_now(const SJob& s) const { return s.units <= free_; }

  // prio: the job's priority when it starts (sprio's PRIORITY), recorded with its SITE.
  void start(int32_t slot, int64_t prio) {
    SJob& s = jobs_state_[static_cast<size_t>(slot)];
    s.start = now_;
    s.accounted = now_;
    const double run = s.job->run;
    if (run <= s.limit) {
      s.end = now_ + run;
    } else {
      // Killed by the first time-limit check at or after the limit (+ OverTimeLimit).
      if (conf_.over_time_limit < 0) {
        s.end = now_ + run;
      } else {
        const double due = now_ + s.limit + static_cast<double>(conf_.over_time_limit);
        s.end = t0_ + std::ceil((due - t0_) / TIME_LIMIT_TICK) * TIME_LIMIT_TICK;
        s.end = std::min(s.end, now_ + run);
        s.killed = s.end < now_ + run;
      }
    }
    free_ -= s.units;
    busy_cores_ += s.procs;
    running_.push_back(slot);
    ends_.push({s.end, slot});
    metrics_.started(*s.job, s.start, s.end, s.limit == INF ? s.plan : s.limit, s.procs, s.killed,
                     s.site, prio);
    changed();
  }

  void finish_job(int32_t slot) {
    SJob& s = jobs_state_[static_cast<size_t>(slot)];
    free_ += s.units;
    busy_cores_ -= s.procs;
    if (conf_.weight_fairshare > 0) charge(s, s.end);
    running_.erase(std::find(running_.begin(), running_.end(), slot));
    if (online_ && learns_) to_learn_.push_back({learn_time(s.end), slot});
    ++finished_;
    sum_bsld_ += bounded_slowdown(s.start - s.job->submit, s.end - s.start, cfg_.bsld_threshold);
  }

  // The main scheduler: priority order, start while jobs fit; the first that does not fit
  // blocks the partition (one pool here) for the rest of the pass.
  void main_pass(bool full) {
    last_main_ = now_;
    order_changed_ = false;
    const int64_t depth = full || conf_.default_queue_depth <= 0
                              ? std::numeric_limits<int64_t>::max()
                              : conf_.default_queue_depth;
    int64_t tested = 0;
    size_t i = 0;
    while (i < pending_.size() && tested++ < depth) {
      const int32_t slot = pending_[i].slot;
      const int64_t prio = pending_[i].prio;
      SJob& s = jobs_state_[static_cast<size_t>(slot)];
      if (can_start_now(s)) {
        start(slot, prio);
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      // bf_min_age_reserve / bf_min_prio_reserve: such a job does not block the partition.
      const bool no_block =
          (conf_.bf_min_age_reserve > 0 &&
           now_ - s.job->submit < static_cast<double>(conf_.bf_min_age_reserve)) ||
          (conf_.bf_min_prio_reserve > 0 && prio < conf_.bf_min_prio_reserve);
      if (!no_block) break;
      ++i;
    }
  }

  // One sched/backfill cycle, planned from scratch.
  void backfill_cycle() {
    last_bf_ = now_;
    if (pending_.empty()) return;
    plan_.reset(now_, free_);
    for (int32_t slot : running_) {
      const SJob& s = jobs_state_[static_cast<size_t>(slot)];
      double end = s.start + s.plan;
      if (end <= now_)  // past its limit, waiting for the kill: Slurm's _guess_job_end
        end = now_ + static_cast<double>(conf_.kill_wait) +
              static_cast<double>(std::max<int64_t>(conf_.over_time_limit, 0));
      plan_.release_at(end, s.units);
    }
    const double res = static_cast<double>(conf_.bf_resolution);
    const double window_end = now_ + static_cast<double>(conf_.bf_window);
    int64_t tested = 0, started = 0;
    size_t i = 0;
    while (i < pending_.size() && tested < conf_.bf_max_job_test) {
      const int32_t slot = pending_[i].slot;
      const int64_t prio = pending_[i].prio;
      SJob& s = jobs_state_[static_cast<size_t>(slot)];
      ++tested;
      const double t = plan_.earliest(s.units, s.plan);
      if (t <= now_) {
        if (conf_.bf_max_job_start > 0 && started >= conf_.bf_max_job_start) break;
        plan_.take(now_, now_ + s.plan, s.units);
        start(slot, prio);
        ++started;
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      const bool no_reserve =
          (conf_.bf_min_age_reserve > 0 &&
           now_ - s.job->submit < static_cast<double>(conf_.bf_min_age_reserve)) ||
          (conf_.bf_min_prio_reserve > 0 && prio < conf_.bf_min_prio_reserve);
      if (t != INF && t <= window_end && !no_reserve) {
        // Whole nodes over slots of bf_resolution on slurmctld's clock (_set_slot_time, and
        // _add_reservation's bounds): the slot the start falls in is taken whole, so a job that
        // would still run at that slot's beginning cannot start now on those nodes however many
        // cores they have free.
        const double e = run_.epoch;
        const double a = std::max(now_, std::floor((e + t) / res) * res - e);
        const double b = (run_.reservation_end_up ? std::ceil((e + t + s.plan) / res)
                                                  : std::floor((e + t + s.plan) / res)) *
                             res -
                         e;
        plan_.take(a, std::max(b, std::floor((e + t) / res) * res - e + res), s.reserve);
      }
      ++i;
    }
    // Starting jobs changed the state: the next cycle comes bf_interval after this one.
    if (started > 0) bf_at_ = std::max(now_, last_bf_ + static_cast<double>(conf_.bf_interval));
  }

  void record_series() {
    if (!cfg_.record_series) return;
    const auto q = static_cast<int64_t>(pending_.size());
    if (!series_.time.empty() && series_.queue_length.back() == q &&
        series_.busy_cores.back() == busy_cores_)
      return;
    series_.time.push_back(now_);
    series_.queue_length.push_back(q);
    series_.busy_cores.push_back(busy_cores_);
    series_.mean_bsld.push_back(finished_ > 0 ? sum_bsld_ / static_cast<double>(finished_)
                                              : std::numeric_limits<double>::quiet_NaN());
  }

  SimResult finish() {
    if (!pending_.empty() || !running_.empty())
      throw InvariantError("slurm engine: " + std::to_string(pending_.size()) +
                           " jobs never started");
    SimResult r;
    r.summary.skipped = skipped_;
    metrics_.finish(r, static_cast<double>(cfg_.machine.total_cores()));
    if (!cfg_.record_jobs) r.jobs.clear();
    r.series = std::move(series_);
    return r;
  }

  std::span<const Job> jobs_;
  const SimConfig& cfg_;
  const SlurmRun& run_;
  const SlurmStack& conf_;
  MetricsAccumulator metrics_;
  std::unique_ptr<OnlineEstimator> online_;
  bool learns_ = false;  // the live history learns ended jobs (see the constructor)
  double scan_period_ = 0, update_period_ = INF;
  std::deque<std::pair<double, int32_t>> to_learn_;  // (learn time, slot) of ended jobs
  bool whole_nodes_ = false;
  int64_t total_units_ = 0, free_ = 0, busy_cores_ = 0;
  double t0_ = 0, now_ = -INF;
  double main_at_ = INF, bf_at_ = INF, next_calc_ = INF;
  double last_main_ = -INF, last_bf_ = -INF, last_calc_ = 0;
  bool order_changed_ = false;
  int64_t basic_next_ = 0xffff0000LL - 1;
  std::vector<SJob> jobs_state_;
  std::vector<Pending> pending_;  // in scheduling order
  std::vector<int32_t> running_;
  std::priority_queue<std::pair<double, int32_t>, std::vector<std::pair<double, int32_t>>,
                      std::greater<>>
      ends_;
  std::vector<int32_t> user_ids_, slot_of_;  // sorted user ids -> usage slot
  std::vector<double> usage_, fs_;
  Plan plan_;
  int64_t skipped_ = 0, finished_ = 0;
  double sum_bsld_ = 0;
  TimeSeries series_;
};

}  // namespace

SimResult simulate_slurm(std::span<const Job> jobs, const SimConfig& config) {
  if (!config.slurm) throw ConfigError("simulate_slurm: no slurm.conf");
  if (config.sink != nullptr)
    throw ConfigError("the deployed-stack replay keeps its rows: run it without a result sink");
  check_machine_bounds(config.machine, "the deployed-stack replay's machine");
  SlurmEngine engine(jobs, config);
  return engine.run();
}

}  // namespace mlprio::replay::detail
