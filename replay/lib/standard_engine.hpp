// The STANDARD profile's event-driven engine, StandardEngine (simulate() in simulator.cpp runs it;
// the rlscheduler profile is rlscheduler_engine.cpp's). Time advances from event instant to event
// instant; at each instant all completions are applied first, then all arrivals in trace order,
// then one scheduling pass (see replay/README.md, "Tie-breaking"). Only queued and running jobs are
// held (a slab with a free list), so memory follows the queue, not the trace. Backfilling: NONE
// starts jobs in queue order until one does not fit; EASY gives the first blocked job a reservation
// recomputed at every pass and backfills jobs that end by it or use only the extra resources;
// CONSERVATIVE keeps a reservation for every queued job in a profile of free resources over time,
// moves reservations only earlier (never later) when a job ends before its estimate, and checks
// that it does.
//
// The class is declared here and its members are defined by topic: standard_engine.cpp (the event
// loop, submits, starts and ends, estimate corrections, the series), schedule_pass.cpp (each
// pass's start: the queue put in order, NONE's pass), easy_backfill.cpp (the EASY/EASY++ pass),
// conservative_backfill.cpp (the conservative pass) and segments.cpp (segment mode: resuming from
// a carried state, checkpoints, and the time-parallel entry points). Internal to replay/lib.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <queue>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "engine_common.hpp"
#include "free_profile.hpp"
#include "mlprio/replay/detail/metrics.hpp"
#include "mlprio/replay/ml.hpp"
#include "mlprio/replay/policy.hpp"
#include "mlprio/replay/segment.hpp"
#include "mlprio/replay/simulator.hpp"
#include "probe_proofs.hpp"
#include "resources.hpp"
#include "running_by_end.hpp"

namespace mlprio::replay::standard {

// What the engine keeps about a queued or running job besides its trace record: the fields a
// scheduling pass reads come first, together in one cache line. A slot is reset by assigning a
// fresh SimState, which leaves the record (and its storage) to be overwritten.
struct SimState {
  Res need;
  double estimate = 0;  // seconds, for backfilling and the policy
  double score = 0;
  int64_t index = 0;
  double start = -1;
  double est_end = 0;     // start + estimate, moved later by --correction
  double res_start = -1;  // conservative reservation start; -1 when none yet
  double duration = 0;    // seconds it will actually run (run, or cut at the limit)
  int64_t seq = 0;        // start order, to order simultaneous completions
  bool killed = false;
  model::Prediction pred;   // the online estimator's or the fixed predictions' (ml order)
  model::ScoreTerms terms;  // QueuePolicy::prepare()'s, where terms_set
  bool terms_set = false;
};

struct SimJob : SimState {
  Job job;                 // the trace record (kept for the estimate hook and the outcome)
  int32_t next_free = -1;  // a free slot's successor in the engine's free list (-1: none)
};

class StandardEngine {
 public:
  StandardEngine(const SimConfig& c, QueuePolicy& p);

  SimResult run(const JobSource& next);

  // Puts the engine in `st` at time t_begin, with the next job taking trace index `first_index`
  // and `all` the full job list the state's indices refer to. Only a fresh engine may resume.
  void resume(const EngineState& st, std::span<const Job> all, int64_t first_index, double t_begin,
              double t_end);

  // Segment mode: record a checkpoint every `every` event instants (every > 0).
  void record_checkpoints(int64_t every) {
    checkpoint_every_ = every;
    if (every != 0) sort_may_wait_ = false;
  }
  // Segment mode, repair: compare the state with `recorded`'s checkpoints at their instants and
  // stop at the first equal one. `recorded` must outlive run().
  void compare_with(const std::vector<Checkpoint>& recorded) {
    recorded_ = &recorded;
    sort_may_wait_ = false;
  }
  bool rejoined() const { return rejoined_; }
  size_t rejoin_index() const { return ref_next_; }
  std::vector<Checkpoint>& checkpoints() { return checkpoints_; }
  int64_t events() const { return events_; }
  int64_t started() const { return next_seq_started_; }

  // The state now, just before instant t: after run() stopped at a boundary t, or at the top of
  // the event loop with every event before t applied and none at t.
  EngineState export_state(double t) const;

  TimeSeries take_series() { return std::move(series_); }

  // Gives the sink every point but the last, which the next pass may still overwrite.
  void hand_series_to_sink();

 private:
  struct Completion {
    double end;
    int64_t seq;
    int32_t slot;
    bool operator>(const Completion& o) const {
      return std::tie(end, seq) > std::tie(o.end, o.seq);
    }
  };

  JobView view(const SimJob& j) const {
    JobView v;
    v.index = j.index;
    v.id = j.job.id;
    v.submit = j.job.submit;
    v.wait = now_ - j.job.submit;
    v.estimate = j.estimate;
    v.procs = j.job.procs();
    v.gpus = static_cast<double>(j.need.gpus);
    v.user = j.job.user;
    v.req_time = j.job.req_time;
    v.pred_runtime = j.pred.runtime;
    v.pred_upper = j.pred.runtime_upper;
    v.fail_prob = j.pred.fail_prob;
    v.terms = j.terms;
    v.terms_set = j.terms_set;
    return v;
  }
  ClusterState state() const {
    ClusterState s;
    s.now = now_;
    s.total_cores = cfg_.machine.total_cores();
    s.free_cores = free_.units * unit_cores_;
    s.queued = static_cast<int64_t>(queue_.size());
    s.running = static_cast<int64_t>(running_by_est_.size());
    return s;
  }
  // Queue order: score, then submit time, then trace order.
  bool before(int32_t a, int32_t b) const {
    const SimJob& x = slab_[static_cast<size_t>(a)];
    const SimJob& y = slab_[static_cast<size_t>(b)];
    return std::tie(x.score, x.job.submit, x.index) < std::tie(y.score, y.job.submit, y.index);
  }

  // Small steps the event loop and the segment resume share, defined here so that they inline.

  // --correction: a running job that will outlive its estimate gets an event at its estimated
  // end (jobs that end by their estimate never need one).
  void watch_expiry(const SimJob& j, int32_t slot) {
    if (correction_ == Correction::NONE) return;
    if (j.start + j.duration > j.est_end) expiries_.push({j.est_end, j.seq, slot});
  }
  void release_slot(int32_t s) {
    slab_[static_cast<size_t>(s)].next_free = free_head_;
    free_head_ = s;
  }
  // The fixed predictions' entry for the job (the `ml` order's, where given without an online
  // estimator), by its index in the replayed list.
  void attach_fixed_prediction(SimJob& j) const {
    const auto& fixed = cfg_.policy_options.ml;
    if (fixed && j.index >= 0 && static_cast<size_t>(j.index) < fixed->predictions.size())
      j.pred = fixed->predictions[static_cast<size_t>(j.index)];
  }
  // The order's per-job terms, once the job's prediction is attached (its inputs are fixed from
  // then on).
  void prepare(SimJob& j) const {
    if (!traits_.prepares) return;
    j.terms = policy_.prepare(view(j));
    j.terms_set = true;
  }

  // standard_engine.cpp: the event loop's steps.
  double corrected_end(const SimJob& j) const;
  static constexpr double MAX_LONG_STEPS = 10000;
  void correct_estimates();
  int32_t alloc_slot();
  bool submit(int32_t slot);
  void start(int32_t slot);
  [[gnu::always_inline]] bool finish(int32_t slot);
  [[gnu::always_inline]] void record_series();

  // schedule_pass.cpp: each scheduling pass, the queue put in order and handed to the
  // backfilling's pass (NONE's is there).
  void schedule(bool early_end);
  void schedule_none();
  void keep_view(int32_t slot);
  void check_kept_view(int32_t slot) const;
  [[gnu::always_inline]] void order_queue();
  // A queued job's place in a dynamic order, copied out of the slab so that the sort compares
  // one contiguous array (before()'s order: score, submit time, trace index).
  struct OrderKey {
    double score, submit;
    int64_t index;
    int32_t slot;
    bool operator<(const OrderKey& o) const {
      return std::tie(score, submit, index) < std::tie(o.score, o.submit, o.index);
    }
  };
  [[gnu::always_inline]] void sort_keys(bool nan);
  void apply_policy_order(const ClusterState& s);

  // easy_backfill.cpp: the EASY pass (EASY++ with --correction and --backfill-order sjbf).
  void schedule_easy();
  void check_kept_pass(const SimJob& head, size_t tried) const;
  [[gnu::noinline]] double reserve(const SimJob& head, Res& extra) const;

  // conservative_backfill.cpp: the conservative pass.
  void place(SimJob& j);
  void schedule_conservative(bool early_end);

  // segments.cpp: segment-mode checkpoints.
  Checkpoint checkpoint_at(double t) const;
  bool at_instant(double t);

  const SimConfig& cfg_;
  QueuePolicy& policy_;
  const PolicyTraits traits_ = policy_.traits();  // an order's nature does not change in a run
  // EASY may leave a dynamic order's queue unsorted at a pass that can start no job (see
  // schedule()): its sort has one result whatever order the queue comes in (finite scores, no
  // whole-queue hook). Not in segment mode, where checkpoints compare queues and scores as they
  // stand: resume(), record_checkpoints() and compare_with() clear it.
  bool sort_may_wait_ = cfg_.backfill == Backfill::EASY && traits_.dynamic &&
                        traits_.finite_scores && !traits_.orders_queue;
  bool nan_submit_ = false;  // a queued job's submit time was NaN: every pass sorts
  detail::MetricsAccumulator metrics_;
  Res total_, free_;
  int64_t unit_cores_ = 1;
  double now_ = -INF;
  double wakeup_ = -INF;  // conservative: earliest future reservation start
  bool unplaced_ = false;
  // EASY: what the last pass left, for a pass that follows only arrivals queued at the back (see
  // schedule_easy). Invalid after anything else: a job's end, a corrected estimate, an arrival
  // queued ahead of others, a reordered queue, a start.
  struct EasyKept {
    bool valid = false;
    int32_t head = -1;        // the blocked head's slot
    size_t tried = 0;         // queue positions [0, tried) were the head and tried candidates
    double reserved_end = 0;  // -INF: the head's reservation was not worked out
    Res extra;
  } easy_kept_;
  // EASY: at most the smallest need (units) of the queued jobs; lowered at every submit, made
  // exact again by a full backfill scan (0 when not known: never skips a pass).
  int64_t min_queued_units_ = 0;
  bool resumed_ = false;  // started from a carried state (segment mode)
  double stop_ = INF;     // segment mode: stop before the first event at or after this time
  int64_t next_index_ = 0, next_seq_ = 0, skipped_ = 0, raised_ = 0;
  int64_t next_seq_started_ = 0;  // jobs started by this engine (= outcomes recorded)
  int64_t events_ = 0;            // event instants processed
  // Segment checkpoints (see at_instant): recording, or comparing with a recorded run.
  int64_t checkpoint_every_ = 0, last_checkpoint_events_ = 0;
  const std::vector<Checkpoint>* recorded_ = nullptr;
  size_t ref_next_ = 0;
  bool rejoined_ = false;
  std::vector<Checkpoint> checkpoints_;
  std::vector<SimJob> slab_;
  std::vector<Res> needs_;      // slab_[s].need for every slot s, dense: for the EASY scan
  std::vector<JobView> views_;  // dynamic orders: view(slab_[s]) as queued, for every slot s
  int32_t free_head_ = -1;      // the free slots, last freed first, linked by SimJob::next_free
  std::vector<int32_t> queue_;
  std::priority_queue<Completion, std::vector<Completion>, std::greater<>> completions_;
  RunningByEnd running_by_est_;
  // --correction: estimated ends of running jobs that will outlive them (min first).
  std::priority_queue<Completion, std::vector<Completion>, std::greater<>> expiries_;
  int64_t corrections_ = 0;
  Correction correction_ = Correction::NONE;  // cfg_.correction where it applies (EASY)
  std::vector<int32_t> order_;                // SJBF scratch
  // The whole-queue hook's scratch (apply_policy_order).
  std::vector<JobView> queue_views_;
  std::vector<RunningView> running_views_;
  std::vector<std::pair<int64_t, int32_t>> running_seq_;
  std::vector<size_t> policy_order_;
  std::vector<int32_t> reordered_;
  std::vector<OrderKey> keys_;  // order_queue's scratch
  double done_bsld_sum_ = 0;    // bounded slowdowns of the jobs finished so far (series)
  int64_t done_ = 0;
  double mean_bsld_ = std::numeric_limits<double>::quiet_NaN();  // the series' value for ...
  int64_t mean_bsld_done_ = 0;                                   // ... this many finished jobs
  std::unique_ptr<OnlineEstimator> online_;
  FreeProfile profile_;
  ProbeProofs proofs_;  // conservative: within one compression pass
  TimeSeries series_;
};

}  // namespace mlprio::replay::standard
