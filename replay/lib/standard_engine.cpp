// StandardEngine's event loop (standard_engine.hpp): construction, the loop from event instant to
// event instant, submits with their checks and scores, starts and ends, --correction's new
// estimates, and the time series. Each instant's scheduling pass is schedule_pass.cpp's.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>

#include "mlprio/replay/ml.hpp"
#include "mlprio/util/checked_cast.hpp"
#include "standard_engine.hpp"

namespace mlprio::replay::standard {

StandardEngine::StandardEngine(const SimConfig& c, QueuePolicy& p)
    : cfg_(c), policy_(p), metrics_(c) {
  const Machine& m = cfg_.machine;
  if (m.nodes <= 0 || m.cores_per_node <= 0 || m.gpus_per_node < 0)
    throw ConfigError("the machine needs nodes > 0 and cores per node > 0 (got " +
                      std::to_string(m.nodes) + " x " + std::to_string(m.cores_per_node) + ")");
  total_.units = m.allocation == Allocation::NODES ? m.nodes : m.total_cores();
  total_.gpus = m.nodes * m.gpus_per_node;
  free_ = total_;
  unit_cores_ = m.allocation == Allocation::NODES ? m.cores_per_node : 1;
  correction_ = cfg_.correction;
  if (cfg_.online) {
    online_ = cfg_.online();
    if (!online_) throw ConfigError("the online estimator factory returned nothing");
  }
  // Corrections and the candidate order are EASY's: conservative backfilling raises estimates
  // to the run time instead, and NONE has no reservation (replay/README.md, "EASY++").
  if (cfg_.backfill != Backfill::EASY) correction_ = Correction::NONE;
}

// Returns true when the job ended before its estimated end (conservative must replan).
inline bool StandardEngine::finish(int32_t slot) {
  easy_kept_.valid = false;
  SimJob& j = slab_[static_cast<size_t>(slot)];
  free_ += j.need;
  MLPRIO_REPLAY_CHECK(free_.units <= total_.units && free_.gpus <= total_.gpus,
                      "more resources free than exist");
  running_by_est_.erase(j.est_end, j.seq);
  if (cfg_.record_series) {
    done_bsld_sum_ +=
        detail::bounded_slowdown(j.start - j.job.submit, now_ - j.start, cfg_.bsld_threshold);
    ++done_;
  }
  if (traits_.tracks_job_ends) policy_.on_job_end(view(j), j.start, now_, j.job.procs());
  if (online_) online_->finish(j.job, j.start, now_);
  bool early = false;
  if (cfg_.backfill == Backfill::CONSERVATIVE) {
    // Its booking ends at est_end = start + estimate, or just after the start where that sum
    // rounds to it (slot_end): a job that ran 0 s then ends early too.
    const double booked_end = FreeProfile::slot_end(j.start, j.estimate);
    if (now_ < booked_end) {
      profile_.advance(now_);
      profile_.unbook(now_, booked_end, j.need);
      proofs_.gave_back(now_, j.need);
      early = true;
    }
  }
  release_slot(slot);
  return early;
}

SimResult StandardEngine::run(const JobSource& next) {
  // The next job is read straight into a spare slot's record, which submit() then takes over
  // (no copy of the record); a job it skips leaves the slot spare for the next read.
  int32_t spare = alloc_slot();
  Job* incoming = &slab_[static_cast<size_t>(spare)].job;
  bool have_next = next(*incoming);
  double last_submit = -INF;
  if (cfg_.backfill == Backfill::CONSERVATIVE && !resumed_)
    profile_.reset(have_next ? incoming->submit : 0, total_);
  while (have_next || !queue_.empty() || !completions_.empty()) {
    double t = INF;
    if (!completions_.empty()) t = completions_.top().end;
    if (have_next) t = std::min(t, incoming->submit);
    if (wakeup_ > now_) t = std::min(t, wakeup_);
    if (!expiries_.empty()) t = std::min(t, expiries_.top().end);
    // Segment mode only: a repair re-run rejoined its recorded path, the rest is known.
    if ((recorded_ != nullptr || checkpoint_every_ > 0) && at_instant(t)) break;
    if (stop_ < INF && t >= stop_) break;  // a segment ends before its boundary's events
    MLPRIO_REPLAY_CHECK(t < INF, "queued jobs but nothing running and nothing to arrive");
    MLPRIO_REPLAY_CHECK(t >= now_, "time went backwards");
    now_ = t;
    ++events_;
    bool early_end = false;
    while (!completions_.empty() && completions_.top().end <= now_) {
      const int32_t slot = completions_.top().slot;
      completions_.pop();
      early_end |= finish(slot);
    }
    correct_estimates();
    while (have_next && incoming->submit <= now_) {
      if (incoming->submit < last_submit)
        throw ConfigError("jobs must be sorted by submit time (job " +
                          std::to_string(incoming->id) + " submitted at " +
                          std::to_string(incoming->submit) + " after one at " +
                          std::to_string(last_submit) + ")");
      last_submit = incoming->submit;
      if (submit(spare)) spare = alloc_slot();  // (the slab may move)
      incoming = &slab_[static_cast<size_t>(spare)].job;
      have_next = next(*incoming);
    }
    schedule(early_end);
    record_series();
  }
  release_slot(spare);
  // Nothing left to happen: the state is final, and is the state at every recorded instant
  // still ahead (a repair may rejoin there too).
  if (recorded_ != nullptr && !rejoined_) at_instant(INF);
  SimResult r;
  r.summary.skipped = skipped_;
  r.summary.estimates_raised = raised_;
  metrics_.finish(r, static_cast<double>(cfg_.machine.total_cores()));
  if (cfg_.sink != nullptr) {
    if (!series_.time.empty()) cfg_.sink->series(series_, series_.time.size());
    series_ = {};
  } else {
    r.series = std::move(series_);
  }
  return r;
}

void StandardEngine::hand_series_to_sink() {
  const size_t n = series_.time.size() - 1;
  cfg_.sink->series(series_, n);
  const auto drop = [n](auto& v) { v.erase(v.begin(), v.begin() + static_cast<ptrdiff_t>(n)); };
  drop(series_.time);
  drop(series_.queue_length);
  drop(series_.busy_cores);
  drop(series_.mean_bsld);
}

// The next estimate of a job that reached `est_end` still running (see Correction).
double StandardEngine::corrected_end(const SimJob& j) const {
  static constexpr double STEPS[] = {60,    300,   900,   1800,   3600,  7200,
                                     18000, 36000, 72000, 180000, 360000};
  const double req = j.job.req_time;
  const double elapsed = now_ - j.start;
  if (req > 0 && elapsed < req) return j.start + req;
  if (correction_ == Correction::REQUEST) return now_;  // past the request: ends "now"
  // Tsafrir: past the request (or none given), add the increments in turn: the next estimate is
  // the first of req, req + 1 min, req + 6 min, ... beyond the time already run.
  double est = req > 0 ? req : 0.0;
  for (double step : STEPS) {
    if (est > elapsed) break;
    est += step;
  }
  // Then 100 h at a time, up to MAX_LONG_STEPS of them (114 years past the table): a job that
  // runs longer still is taken to end now, as under REQUEST. Each step is an event, so without
  // the bound a trace's absurd run time (10^16 s) would stall the replay; so would adding 100 h
  // to an estimate so large that the sum rounds back to it.
  const double last = STEPS[std::size(STEPS) - 1];
  if (est <= elapsed && !((elapsed - est) / last < MAX_LONG_STEPS)) return now_;
  while (est <= elapsed) {
    const double next = est + last;
    if (!(next > est)) return now_;
    est = next;
  }
  return j.start + est;
}

// Applies the corrections due now: each expired job gets its next estimate and, when it is
// still short of the job's end, a new expiry. The following scheduling pass sees the new ends.
inline void StandardEngine::correct_estimates() {
  while (!expiries_.empty() && expiries_.top().end <= now_) {
    const Completion e = expiries_.top();
    expiries_.pop();
    SimJob& j = slab_[static_cast<size_t>(e.slot)];
    // Stale entries: the job ended (the slot may hold another job) or was corrected already.
    if (j.start < 0 || j.seq != e.seq || j.est_end != e.end || !(j.start + j.duration > now_))
      continue;
    const double next = corrected_end(j);
    if (!(next > j.est_end)) continue;  // REQUEST past the request: EASY's "ends now" rule
    running_by_est_.erase(j.est_end, j.seq);
    j.est_end = next;
    running_by_est_.insert(j.est_end, j.seq, e.slot, j.need);
    easy_kept_.valid = false;
    ++corrections_;
    watch_expiry(j, e.slot);
  }
}

int32_t StandardEngine::alloc_slot() {
  if (free_head_ >= 0) {
    const int32_t s = free_head_;
    free_head_ = slab_[static_cast<size_t>(s)].next_free;
    return s;
  }
  slab_.emplace_back();
  needs_.emplace_back();
  if (traits_.dynamic) views_.emplace_back();
  return static_cast<int32_t>(slab_.size() - 1);
}

// Queues the job whose record was read into `slot` (a spare slot) and returns true, or skips
// it (no run time or no size, or too large with --too-large skip) and returns false, leaving
// the slot spare.
bool StandardEngine::submit(int32_t slot) {
  const Job& job = slab_[static_cast<size_t>(slot)].job;
  const int64_t index = next_index_++;
  const int64_t procs = job.procs();
  if (!(job.run >= 0) || procs <= 0) {  // no run time or no size: cannot be replayed
    ++skipped_;
    return false;
  }
  const Machine& m = cfg_.machine;
  Res need;
  need.units =
      m.allocation == Allocation::NODES ? (procs + m.cores_per_node - 1) / m.cores_per_node : procs;
  const double gpus = job.req_gpus > 0 ? job.req_gpus : (job.alloc_gpus > 0 ? job.alloc_gpus : 0);
  // Range-checked: a cast of 1e300 GPUs is undefined (in practice INT64_MIN: no GPUs at all).
  const auto gpu_need = to_integer<int64_t>(std::ceil(gpus), 0, JOB_MAX_COUNT);
  need.gpus = gpu_need.value_or(0);
  if (need.gpus > 0 && m.allocation == Allocation::NODES && m.gpus_per_node > 0)
    need.units = std::max(need.units, (need.gpus + m.gpus_per_node - 1) / m.gpus_per_node);
  if (!gpu_need || !need.fits_in(total_)) {
    if (cfg_.too_large == TooLarge::SKIP) {
      ++skipped_;
      return false;
    }
    if (!gpu_need)
      throw JobTooLargeError("job " + std::to_string(job.id) + " asks for " + number_text(gpus) +
                             " GPUs, more than any job may ask for (" +
                             std::to_string(JOB_MAX_COUNT) + "); use --too-large skip");
    throw JobTooLargeError(
        "job " + std::to_string(job.id) + " asks for " + std::to_string(procs) + " processors" +
        (need.gpus > 0 ? " and " + std::to_string(need.gpus) + " GPUs" : std::string()) +
        " but the machine has " + std::to_string(m.nodes) + " nodes x " +
        std::to_string(m.cores_per_node) + " cores" +
        (m.gpus_per_node > 0 ? " x " + std::to_string(m.gpus_per_node) + " GPUs" : std::string()) +
        "; give a larger machine (--nodes/--cores-per-node) or --too-large skip");
  }
  SimJob& j = slab_[static_cast<size_t>(slot)];
  static_cast<SimState&>(j) = SimState{};
  j.index = index;
  j.need = needs_[static_cast<size_t>(slot)] = need;
  j.duration = j.job.run;
  if (cfg_.kill_at_limit && j.job.req_time >= 0 && j.job.req_time < j.job.run) {
    j.duration = j.job.req_time;
    j.killed = true;
  }
  if (online_) {
    const OnlineEstimate e = online_->submit(j.job, index, now_);
    MLPRIO_REPLAY_CHECK(std::isfinite(e.estimate) && e.estimate >= 0,
                        "the online estimator gave a negative or non-finite estimate");
    j.estimate = e.estimate;
    j.pred = e.prediction;
  } else {
    j.estimate = detail::job_estimate(j.job, cfg_);
    attach_fixed_prediction(j);
  }
  prepare(j);
  if (cfg_.backfill == Backfill::CONSERVATIVE && j.estimate < j.duration) {
    // A reservation plan needs estimates that bound the run time (a real limit would have
    // killed the job); raise it and count it.
    j.estimate = j.duration;
    ++raised_;
  }
  if (traits_.scores_submit && !traits_.dynamic) {
    j.score = j.job.submit;
  } else {
    const JobView v = view(j);
    j.score = policy_.score(v, state());
    if (traits_.dynamic)
      views_[static_cast<size_t>(slot)] = v;  // kept for every pass (order_queue)
  }
  nan_submit_ |= std::isnan(j.job.submit);
  if (traits_.dynamic || queue_.empty() || !before(slot, queue_.back())) {
    queue_.push_back(slot);  // static orders: the usual case under fcfs, after every queued job
  } else {
    auto it = std::upper_bound(queue_.begin(), queue_.end(), slot,
                               [this](int32_t a, int32_t b) { return before(a, b); });
    queue_.insert(it, slot);
    easy_kept_.valid = false;
  }
  if (cfg_.backfill == Backfill::CONSERVATIVE) unplaced_ = true;
  min_queued_units_ = std::min(min_queued_units_, need.units);
  return true;
}

void StandardEngine::start(int32_t slot) {
  SimJob& j = slab_[static_cast<size_t>(slot)];
  MLPRIO_REPLAY_CHECK(j.need.fits_in(free_), "job started without free resources");
  MLPRIO_REPLAY_CHECK(now_ >= j.job.submit, "job started before its submit time");
  free_ -= j.need;
  MLPRIO_REPLAY_CHECK(free_.units >= 0 && free_.gpus >= 0, "more resources busy than exist");
  j.start = now_;
  j.est_end = now_ + j.estimate;
  j.seq = next_seq_++;
  completions_.push({now_ + j.duration, j.seq, slot});
  running_by_est_.insert(j.est_end, j.seq, slot, j.need);
  watch_expiry(j, slot);
  ++next_seq_started_;
  metrics_.started(j.job, now_, now_ + j.duration, j.estimate, j.job.procs(), j.killed);
}

inline void StandardEngine::record_series() {
  if (!cfg_.record_series) return;
  const auto q = static_cast<int64_t>(queue_.size());
  const int64_t busy = (total_.units - free_.units) * unit_cores_;
  if (done_ != mean_bsld_done_) {  // divide only when a job finished since the last pass
    mean_bsld_ = done_bsld_sum_ / static_cast<double>(done_);
    mean_bsld_done_ = done_;
  }
  const double bsld = mean_bsld_;
  const auto same_bsld = [&](double b) { return b == bsld || (std::isnan(b) && std::isnan(bsld)); };
  if (!series_.time.empty() && series_.queue_length.back() == q &&
      series_.busy_cores.back() == busy && same_bsld(series_.mean_bsld.back()))
    return;
  if (!series_.time.empty() && series_.time.back() == now_) {
    series_.queue_length.back() = q;
    series_.busy_cores.back() = busy;
    series_.mean_bsld.back() = bsld;
    return;
  }
  detail::append_growing(series_.time, now_);
  detail::append_growing(series_.queue_length, q);
  detail::append_growing(series_.busy_cores, busy);
  detail::append_growing(series_.mean_bsld, bsld);
  if (cfg_.sink != nullptr && series_.time.size() > detail::SINK_BLOCK_ROWS) [[unlikely]]
    hand_series_to_sink();
}

}  // namespace mlprio::replay::standard
