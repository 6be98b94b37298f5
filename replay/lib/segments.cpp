// Segment mode (time-parallel replays, segment.hpp): StandardEngine's resume from a carried state,
// its state export and checkpoints (standard_engine.hpp), and the entry points that run one time
// segment recording checkpoints or repair one against a recorded run, rejoining it at the first
// equal checkpoint; also the idle starting state and the summary of a run's joined outcomes.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <utility>

#include "mlprio/replay/segment.hpp"
#include "standard_engine.hpp"

namespace mlprio::replay::standard {

void StandardEngine::resume(const EngineState& st, std::span<const Job> all, int64_t first_index,
                            double t_begin, double t_end) {
  if (online_) throw ConfigError("online estimates cannot be replayed in time segments");
  resumed_ = true;
  sort_may_wait_ = false;
  stop_ = t_end;
  next_index_ = first_index;
  // Just before the boundary: every later event (a wake-up at t_begin included) is still ahead.
  now_ = std::nextafter(t_begin, -INF);
  if (cfg_.backfill == Backfill::CONSERVATIVE) {
    if (st.profile.empty())
      profile_.reset(t_begin, total_);
    else
      profile_.import(st.profile);
  }
  if (!st.policy.empty()) policy_.load_state(st.policy);
  wakeup_ = st.wakeup;
  auto fill = [&](const StateJob& s) {
    MLPRIO_REPLAY_CHECK(s.index >= 0 && s.index < static_cast<int64_t>(all.size()),
                        "a carried state names a job outside the trace");
    const int32_t slot = alloc_slot();
    SimJob& j = slab_[static_cast<size_t>(slot)];
    static_cast<SimState&>(j) = SimState{};
    j.job = all[static_cast<size_t>(s.index)];
    j.index = s.index;
    j.need = needs_[static_cast<size_t>(slot)] = Res{s.units, s.gpus};
    j.estimate = s.estimate;
    j.duration = s.duration;
    j.killed = s.killed != 0;
    j.score = s.score;
    j.start = s.start;
    j.est_end = s.est_end;
    j.res_start = s.res_start;
    j.seq = s.seq;
    attach_fixed_prediction(j);  // as submit() did (online estimators cannot resume)
    prepare(j);
    return slot;
  };
  for (const auto& s : st.running) {
    const int32_t slot = fill(s);
    free_ -= Res{s.units, s.gpus};
    completions_.push({s.end, s.seq, slot});
    running_by_est_.insert(s.est_end, s.seq, slot, Res{s.units, s.gpus});
    // An estimated end before the boundary was an event before it: the correction it asked for
    // is made (est_end moved on, with a new expiry) or was declined (REQUEST's "ends now"
    // rule), and a sequential run holds no expiry for it any more.
    if (s.est_end >= t_begin) watch_expiry(slab_[static_cast<size_t>(slot)], slot);
    next_seq_ = std::max(next_seq_, s.seq + 1);
  }
  MLPRIO_REPLAY_CHECK(free_.units >= 0 && free_.gpus >= 0, "a carried state overfills the machine");
  for (const auto& s : st.queue) {
    const int32_t slot = fill(s);
    keep_view(slot);  // only queued jobs are scored (running ones need no view)
    queue_.push_back(slot);
  }
}

EngineState StandardEngine::export_state(double t) const {
  EngineState st;
  auto item = [&](int32_t slot) {
    const SimJob& j = slab_[static_cast<size_t>(slot)];
    StateJob s;
    s.index = j.index;
    s.units = j.need.units;
    s.gpus = j.need.gpus;
    s.estimate = j.estimate;
    s.duration = j.duration;
    s.score = j.score;
    s.start = j.start;
    s.est_end = j.est_end;
    s.end = j.start >= 0 ? j.start + j.duration : 0;
    s.res_start = j.res_start;
    s.seq = j.start >= 0 ? j.seq : 0;
    s.killed = j.killed ? 1 : 0;
    return s;
  };
  std::vector<std::pair<int64_t, int32_t>> by_seq;
  running_by_est_.walk([&](const RunningByEnd::Entry& e) {
    by_seq.emplace_back(e.seq, e.slot);
    return false;
  });
  std::sort(by_seq.begin(), by_seq.end());
  for (size_t k = 0; k < by_seq.size(); ++k) {
    st.running.push_back(item(by_seq[k].second));
    st.running.back().seq = static_cast<int64_t>(k);  // only the relative order matters
  }
  for (int32_t slot : queue_) st.queue.push_back(item(slot));
  if (cfg_.backfill == Backfill::CONSERVATIVE) st.profile = profile_.export_from(t);
  st.policy = policy_.save_state();
  // A wake-up before t has passed (the loop ignores it once now_ reaches it): write it as "none"
  // so that two states with the same future compare equal whatever stale value they hold.
  st.wakeup = wakeup_ >= t ? wakeup_ : -INF;
  return st;
}

Checkpoint StandardEngine::checkpoint_at(double t) const {
  Checkpoint c;
  c.t = t;
  c.jobs_before = next_seq_started_;
  c.skipped_before = skipped_;
  c.raised_before = raised_;
  c.events_before = events_;
  c.state = export_state(t);
  return c;
}

// Called at the top of the event loop with t the next event instant (every event before t
// applied). Recording run: takes a checkpoint every checkpoint_every_ instants. Repair run:
// compares the state with every recorded checkpoint at or before t (the state is the same for
// all of them: nothing happens in between) and returns true at the first equal one; the
// unequal ones are replaced by this run's own state, so the result carries a checkpoint at
// every recorded instant.
bool StandardEngine::at_instant(double t) {
  if (recorded_ != nullptr) {
    while (ref_next_ < recorded_->size() && (*recorded_)[ref_next_].t <= t) {
      const Checkpoint& ref = (*recorded_)[ref_next_];
      Checkpoint own = checkpoint_at(ref.t);
      if (own.state == ref.state) {
        rejoined_ = true;
        return true;
      }
      checkpoints_.push_back(std::move(own));
      ++ref_next_;
    }
    return false;
  }
  if (checkpoint_every_ > 0 && events_ > 0 && t < stop_ && t < INF &&
      events_ - last_checkpoint_events_ >= checkpoint_every_) {
    checkpoints_.push_back(checkpoint_at(t));
    last_checkpoint_events_ = events_;
  }
  return false;
}

}  // namespace mlprio::replay::standard

namespace mlprio::replay {

using standard::StandardEngine;

EngineState idle_state(const SimConfig& config) {
  EngineState st;
  st.policy = make_policy(config.policy, config.policy_options)->save_state();
  return st;
}

namespace {

// One segment run: recording checkpoints (every > 0), or as a repair of `recorded` (non-null).
SegmentResult run_segment(std::span<const Job> jobs, int64_t begin, int64_t end, double t_begin,
                          double t_end, const EngineState& initial, const SimConfig& config,
                          int64_t every, const SegmentResult* recorded) {
  if (config.profile == Profile::RLSCHEDULER || config.backfill == Backfill::RLSCHEDULER)
    throw ConfigError("the rlscheduler profile cannot be replayed in time segments");
  if (config.slurm)
    throw ConfigError(
        "the deployed-stack replay (--slurm-conf) cannot be replayed in time segments");
  if (config.sink != nullptr)
    throw ConfigError("a run in time segments keeps its rows: replay it without a result sink");
  if (is_agent_policy(config.policy))
    throw ConfigError("policy '" + config.policy +
                      "' asks an outside agent, whose state cannot be carried across time "
                      "segments: replay it without --time-parallel");
  if (begin < 0 || end < begin || end > static_cast<int64_t>(jobs.size()))
    throw ConfigError("simulate_segment: job range out of bounds");
  SimConfig cfg = config;
  cfg.record_jobs = true;
  cfg.record_series = false;
  auto policy = make_policy(cfg.policy, cfg.policy_options);
  StandardEngine engine(cfg, *policy);
  engine.resume(initial, jobs, begin, t_begin, t_end);
  if (recorded != nullptr)
    engine.compare_with(recorded->checkpoints);
  else
    engine.record_checkpoints(every);
  auto i = static_cast<size_t>(begin);
  SimResult r = engine.run([&](Job& out) {
    if (i >= static_cast<size_t>(end)) return false;
    out = jobs[i++];
    return true;
  });
  MLPRIO_REPLAY_CHECK(static_cast<int64_t>(r.jobs.size()) == engine.started(),
                      "a segment recorded a different number of outcomes than jobs it started");
  SegmentResult seg;
  seg.jobs = std::move(r.jobs);
  seg.skipped = r.summary.skipped;
  seg.estimates_raised = r.summary.estimates_raised;
  seg.events = seg.events_simulated = engine.events();
  seg.checkpoints = std::move(engine.checkpoints());
  if (recorded == nullptr || !engine.rejoined()) {
    seg.final_state = engine.export_state(t_end);
    return seg;
  }
  // Rejoined at recorded checkpoint c: equal states and the same jobs still to come give the
  // same future, so the recorded run's outcomes from c on are this run's. Splice them in, with
  // the recorded checkpoints from c on rebased onto this run's counts.
  const size_t c = engine.rejoin_index();
  const Checkpoint& at = recorded->checkpoints[c];
  MLPRIO_REPLAY_CHECK(seg.checkpoints.size() == c, "a repair skipped a recorded checkpoint");
  MLPRIO_REPLAY_CHECK(seg.jobs.empty() || seg.jobs.back().start < at.t,
                      "a repair started a job at or after its rejoin instant");
  const auto from = static_cast<size_t>(at.jobs_before);
  MLPRIO_REPLAY_CHECK(from <= recorded->jobs.size() &&
                          (from == recorded->jobs.size() || recorded->jobs[from].start >= at.t) &&
                          (from == 0 || recorded->jobs[from - 1].start < at.t),
                      "a checkpoint's outcome count does not match its instant");
  const int64_t jobs0 = static_cast<int64_t>(seg.jobs.size()), skipped0 = seg.skipped,
                raised0 = seg.estimates_raised, events0 = seg.events;
  seg.jobs.insert(seg.jobs.end(), recorded->jobs.begin() + static_cast<std::ptrdiff_t>(from),
                  recorded->jobs.end());
  seg.skipped = skipped0 + (recorded->skipped - at.skipped_before);
  seg.estimates_raised = raised0 + (recorded->estimates_raised - at.raised_before);
  seg.events = events0 + (recorded->events - at.events_before);
  for (size_t k = c; k < recorded->checkpoints.size(); ++k) {
    Checkpoint cp = recorded->checkpoints[k];
    cp.jobs_before = jobs0 + (cp.jobs_before - at.jobs_before);
    cp.skipped_before = skipped0 + (cp.skipped_before - at.skipped_before);
    cp.raised_before = raised0 + (cp.raised_before - at.raised_before);
    cp.events_before = events0 + (cp.events_before - at.events_before);
    seg.checkpoints.push_back(std::move(cp));
  }
  seg.final_state = recorded->final_state;
  seg.rejoined_at = at.t;
  return seg;
}

}  // namespace

SegmentResult simulate_segment(std::span<const Job> jobs, int64_t begin, int64_t end,
                               double t_begin, double t_end, const EngineState& initial,
                               const SimConfig& config, int64_t checkpoint_every) {
  return run_segment(jobs, begin, end, t_begin, t_end, initial, config, checkpoint_every, nullptr);
}

SegmentResult resimulate_segment(std::span<const Job> jobs, int64_t begin, int64_t end,
                                 double t_begin, double t_end, const EngineState& initial,
                                 const SimConfig& config, const SegmentResult& recorded) {
  return run_segment(jobs, begin, end, t_begin, t_end, initial, config, 0, &recorded);
}

SimResult summarize_outcomes(std::vector<JobOutcome> jobs, int64_t skipped,
                             int64_t estimates_raised, const SimConfig& config) {
  detail::MetricsAccumulator metrics(config);
  Job j;
  for (const auto& o : jobs) {
    j.submit = o.submit;
    j.user = o.user;
    j.id = o.id;
    metrics.started(j, o.start, o.end, o.estimate, o.procs, o.killed != 0);
  }
  SimResult r;
  r.summary.skipped = skipped;
  r.summary.estimates_raised = estimates_raised;
  metrics.finish(r, static_cast<double>(config.machine.total_cores()));
  if (!config.record_jobs) r.jobs.clear();
  return r;
}

}  // namespace mlprio::replay
