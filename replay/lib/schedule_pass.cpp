// StandardEngine's scheduling pass (standard_engine.hpp), up to the backfilling: schedule() puts
// the queue in order (a dynamic order re-scores it with the views kept since the jobs were queued
// and sorts it by score, submit time and trace index; the whole-queue hook may then reorder it)
// and hands it to the pass of the backfilling in use: NONE's is here, EASY's in easy_backfill.cpp,
// conservative's in conservative_backfill.cpp. The per-pass sort is inlined into schedule(): as a
// call of its own the order's scoring loop ran up to 1.5x slower (wfp3 + EASY on a deep queue,
// AMD Zen 3, the same instructions).
#include <algorithm>
#include <cmath>
#include <functional>

#include "standard_engine.hpp"

namespace mlprio::replay::standard {

// A dynamic order's queued jobs are scored at every pass: their views are kept, dense by slot,
// from the time they are queued (a job's view changes only with the wait while it queues).
void StandardEngine::keep_view(int32_t slot) {
  if (traits_.dynamic) views_[static_cast<size_t>(slot)] = view(slab_[static_cast<size_t>(slot)]);
}

void StandardEngine::check_kept_view(int32_t slot) const {
  const JobView& k = views_[static_cast<size_t>(slot)];
  const JobView v = view(slab_[static_cast<size_t>(slot)]);
  const auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
  MLPRIO_REPLAY_CHECK(k.index == v.index && k.id == v.id && same(k.submit, v.submit) &&
                          same(k.estimate, v.estimate) && k.procs == v.procs &&
                          same(k.gpus, v.gpus) && k.user == v.user &&
                          same(k.req_time, v.req_time) && same(k.pred_runtime, v.pred_runtime) &&
                          same(k.pred_upper, v.pred_upper) && same(k.fail_prob, v.fail_prob) &&
                          k.terms_set == v.terms_set && same(k.terms.run, v.terms.run) &&
                          same(k.terms.size, v.terms.size) && same(k.terms.fail, v.terms.fail) &&
                          same(k.terms.unmoved, v.terms.unmoved) &&
                          k.terms.sized == v.terms.sized && k.terms.fixed == v.terms.fixed,
                      "a queued job's kept view differs from its record");
}

// Sorts keys_. The queue comes in the previous pass's order, and scores that move with the
// wait move alike, so it is mostly sorted already: only new jobs and the few that a change of
// usage or an age cap moved are out of place. An insertion sort then costs about one compare
// per job; it gives up past 8 moves per job, and std::sort finishes. The trace index makes the
// order total, so both give the one sorted order. A NaN score or submit time breaks that (it
// compares false both ways): then std::sort alone, the same compares as a sort of the slots.
inline void StandardEngine::sort_keys(bool nan) {
  if (!nan && detail::insertion_sort_while_cheap(keys_, std::less<OrderKey>{})) return;
  std::sort(keys_.begin(), keys_.end());
}

inline void StandardEngine::order_queue() {
  if (!traits_.dynamic) return;
  easy_kept_.valid = false;
  const ClusterState s = state();
  keys_.clear();
  bool nan = false;
  for (int32_t slot : queue_) {
    // The job's view as submit() kept it (nothing in it but the wait moves while it queues):
    // one dense record per job instead of the slab entry's lines and its trace record.
    JobView& v = views_[static_cast<size_t>(slot)];
    if (cfg_.check_invariants) check_kept_view(slot);
    v.wait = now_ - v.submit;
    const double score = policy_.score(v, s);
    slab_[static_cast<size_t>(slot)].score = score;
    nan |= std::isnan(score) || std::isnan(v.submit);
    keys_.push_back({score, v.submit, v.index, slot});
  }
  sort_keys(nan);
  for (size_t k = 0; k < keys_.size(); ++k) queue_[k] = keys_[k].slot;
  if (cfg_.check_invariants && !nan)
    MLPRIO_REPLAY_CHECK(std::is_sorted(queue_.begin(), queue_.end(),
                                       [this](int32_t a, int32_t b) { return before(a, b); }),
                        "a dynamic order left the queue unsorted");
  if (traits_.orders_queue) apply_policy_order(s);
}

// The whole-queue hook (QueuePolicy::order_queue): shows the policy the queue in base order and
// the running jobs, and puts the queue in the order it gives.
void StandardEngine::apply_policy_order(const ClusterState& s) {
  queue_views_.clear();
  for (int32_t slot : queue_) queue_views_.push_back(view(slab_[static_cast<size_t>(slot)]));
  running_views_.clear();
  running_seq_.clear();
  running_by_est_.walk([&](const RunningByEnd::Entry& e) {
    running_seq_.emplace_back(e.seq, e.slot);
    return false;
  });
  std::sort(running_seq_.begin(), running_seq_.end());
  for (const auto& [seq, slot] : running_seq_) {
    const SimJob& j = slab_[static_cast<size_t>(slot)];
    running_views_.push_back({j.job.id, j.job.procs(), j.start, j.job.req_time, j.estimate});
  }
  policy_.order_queue({s, queue_views_, running_views_}, policy_order_);
  MLPRIO_REPLAY_CHECK(policy_order_.size() == queue_.size(),
                      "a queue order is not a permutation of the queue");
  reordered_.clear();
  for (size_t k : policy_order_) {
    MLPRIO_REPLAY_CHECK(k < queue_.size(), "a queue order names a position outside the queue");
    reordered_.push_back(queue_[k]);
  }
  queue_.swap(reordered_);
}

void StandardEngine::schedule(bool early_end) {
  if (queue_.empty()) {
    wakeup_ = -INF;
    return;
  }
  // EASY starts nothing while fewer units are free than any queued job needs, whatever the
  // order: an order whose sort does not depend on the queue's incoming order (finite scores)
  // is then left as it is, and the next pass sorts it to the order it would have had. Not in
  // segment mode, where checkpoints compare queues and scores as they stand.
  if (sort_may_wait_ && free_.units < min_queued_units_ && !nan_submit_) {
    if (cfg_.check_invariants)
      for (int32_t slot : queue_)
        MLPRIO_REPLAY_CHECK(!slab_[static_cast<size_t>(slot)].need.fits_in(free_),
                            "a pass left unsorted could have started a job");
  } else if (traits_.dynamic) {
    order_queue();  // (a static order's queue is kept in order as jobs arrive)
  }
  switch (cfg_.backfill) {
    case Backfill::NONE:
      schedule_none();
      break;
    case Backfill::EASY:
      schedule_easy();
      break;
    case Backfill::CONSERVATIVE:
      schedule_conservative(early_end);
      break;
    case Backfill::RLSCHEDULER:
      throw ConfigError("backfill 'rlscheduler' replays a job list; call simulate()");
  }
}

inline void StandardEngine::schedule_none() {
  size_t i = 0;
  while (i < queue_.size() && slab_[static_cast<size_t>(queue_[i])].need.fits_in(free_))
    start(queue_[i++]);
  queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(i));
}

}  // namespace mlprio::replay::standard
