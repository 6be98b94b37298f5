// StandardEngine's EASY pass (standard_engine.hpp): start the queue's head jobs that fit, give
// the first blocked job a reservation from the running jobs' estimated ends, and backfill the
// candidates (in queue order, or shortest estimate first with --backfill-order sjbf) that end by
// its shadow time or use only what it leaves over; a pass that follows only arrivals queued at the
// back tries just those, against the reservation kept.
#include <algorithm>
#include <limits>

#include "standard_engine.hpp"

namespace mlprio::replay::standard {

void StandardEngine::schedule_easy() {
  size_t i = 0;
  while (i < queue_.size() && slab_[static_cast<size_t>(queue_[i])].need.fits_in(free_))
    start(queue_[i++]);
  // Nothing else can start when fewer units are free than any queued job needs (most passes
  // that start nothing): the queue stays as it is.
  if (i > 0) easy_kept_.valid = false;
  if (i == queue_.size() || free_.units < min_queued_units_) {
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(i));
    if (queue_.empty()) min_queued_units_ = std::numeric_limits<int64_t>::max();
    return;
  }
  // The head's reservation, worked out at the first candidate that fits the free resources,
  // before any backfills (in many passes none fits, and the walk is skipped). `reserved_end`
  // is the estimated end it waits for (-INF: not worked out yet); the shadow time is that end
  // or now, whichever is later.
  const SimJob& head = slab_[static_cast<size_t>(queue_[i])];
  double reserved_end = -INF;
  Res extra;
  // Only jobs arrived since the previous pass, queued behind its candidates, and the head is
  // the same: free resources, running jobs and hence the head's reservation are those that
  // pass left (its backfills took what they used of `extra`), and each of its candidates
  // failed with at least as much free and as much `extra` and a shadow no later than now's.
  // So they fail again: only the new jobs are tried, against the reservation kept.
  size_t first = i + 1;
  if (easy_kept_.valid && i == 0 && queue_[0] == easy_kept_.head &&
      easy_kept_.tried <= queue_.size()) {
    first = easy_kept_.tried;
    reserved_end = easy_kept_.reserved_end;
    extra = easy_kept_.extra;
    if (cfg_.check_invariants) check_kept_pass(head, first);
  }
  // A backfill that ends by the shadow time but not before the head's reserved end (it ends
  // just then, or that end is past) lies at or after that end in the running-jobs order, so
  // the next pass's walk could stop elsewhere: the reservation is then not kept.
  bool keep_reservation = true;
  // May this candidate, which fits the free resources, start now without delaying the head's
  // reservation?
  auto may_backfill = [&](const SimJob& j) {
    if (reserved_end == -INF) reserved_end = reserve(head, extra);
    const double ends = now_ + j.estimate;
    if (ends <= std::max(reserved_end, now_)) {  // ends by the shadow time
      keep_reservation &= ends < reserved_end;
      return true;
    }
    // Else it may use the resources the reservation leaves over (which it then takes).
    if (!j.need.fits_in(extra)) return false;
    extra -= j.need;
    return true;
  };
  // Every job needs at least one unit: once none is free, no later candidate can start.
  if (cfg_.backfill_order == BackfillOrder::SJBF) {
    // Candidates by increasing estimate (stable: ties keep queue order); the ones that start
    // leave the queue, the rest keep their queue order. Only the candidates that fit the free
    // resources now are sorted: free resources only shrink in this pass, so the others cannot
    // start (the fit test turns them down first thing, changing nothing).
    const auto cand = queue_.begin() + static_cast<std::ptrdiff_t>(first);
    order_.clear();
    for (auto it = cand; it != queue_.end(); ++it)
      if (slab_[static_cast<size_t>(*it)].need.fits_in(free_)) order_.push_back(*it);
    if (!order_.empty()) {
      std::stable_sort(order_.begin(), order_.end(), [this](int32_t a, int32_t b) {
        return slab_[static_cast<size_t>(a)].estimate < slab_[static_cast<size_t>(b)].estimate;
      });
      for (int32_t slot : order_) {
        if (free_.units <= 0) break;
        const SimJob& j = slab_[static_cast<size_t>(slot)];
        if (j.need.fits_in(free_) && may_backfill(j)) start(slot);
      }
      // start() set start >= 0; the queue holds only jobs not started before this pass.
      auto started = [this](int32_t slot) { return slab_[static_cast<size_t>(slot)].start >= 0; };
      queue_.erase(std::remove_if(cand, queue_.end(), started), queue_.end());
    }
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(i));
    min_queued_units_ = std::numeric_limits<int64_t>::max();
    for (int32_t slot : queue_)
      min_queued_units_ = std::min(min_queued_units_, slab_[static_cast<size_t>(slot)].need.units);
    easy_kept_ = {keep_reservation, queue_[0], queue_.size(), reserved_end, extra};
    return;
  }
  // Compact the queue in place as it is scanned: the head first, then the candidates that do not
  // start, in queue order. The scan also finds the smallest need left.
  // start() moves neither the queue nor the slab: keep their addresses in registers.
  // Most candidates do not fit the free resources: their needs come from the dense copy, and
  // their slab entries (a cache line or more each, all over the slab) are not read.
  int32_t* const queue = queue_.data();
  const SimJob* const slab = slab_.data();
  const Res* const needs = needs_.data();
  const size_t n = queue_.size();
  queue[0] = queue[i];
  int64_t min_units = first > i + 1 ? min_queued_units_ : head.need.units;
  size_t w = first - i, k = first;
  for (; k < n && free_.units > 0; ++k) {
    const int32_t slot = queue[k];
    const Res& need = needs[static_cast<size_t>(slot)];
    if (need.fits_in(free_) && may_backfill(slab[static_cast<size_t>(slot)])) {
      start(slot);
    } else {
      queue[w++] = slot;
      min_units = std::min(min_units, need.units);
    }
  }
  // A scan cut short leaves the bound as it was: still a lower bound.
  if (k == n) min_queued_units_ = min_units;
  const auto rest = std::copy(queue_.begin() + static_cast<std::ptrdiff_t>(k), queue_.end(),
                              queue_.begin() + static_cast<std::ptrdiff_t>(w));
  queue_.erase(rest, queue_.end());
  // Candidates a cut-short scan did not reach count as tried: it stopped with no unit free,
  // and until a job ends none is.
  easy_kept_ = {keep_reservation, queue_[0], queue_.size(), reserved_end, extra};
}

// Costly check of a pass that tries only the new candidates: the kept reservation is the one
// a walk gives now, and none of the candidates the previous pass tried could start now.
void StandardEngine::check_kept_pass(const SimJob& head, size_t tried) const {
  const double kept_end = easy_kept_.reserved_end;
  if (kept_end != -INF) {
    Res extra;
    const double end = reserve(head, extra);
    MLPRIO_REPLAY_CHECK(
        end == kept_end && extra.units == easy_kept_.extra.units &&
            extra.gpus == easy_kept_.extra.gpus,
        "the EASY reservation kept from the previous pass differs from a fresh walk");
  }
  for (size_t k = 1; k < tried; ++k) {
    const SimJob& j = slab_[static_cast<size_t>(queue_[k])];
    if (!j.need.fits_in(free_)) continue;
    MLPRIO_REPLAY_CHECK(kept_end != -INF && now_ + j.estimate > std::max(kept_end, now_) &&
                            !j.need.fits_in(easy_kept_.extra),
                        "a candidate the previous EASY pass tried could start now");
  }
}

// EASY's reservation for the blocked job `head` (once a pass at most, out of the scan loop): the
// estimated end at which enough running jobs have finished (an overrunning job is taken to end
// now), and what is left over at that time.
// Returns that estimated end (the shadow time is the later of it and now) and sets `extra`.
double StandardEngine::reserve(const SimJob& head, Res& extra) const {
  Res avail = free_;
  double s = INF;
  running_by_est_.walk([&](const RunningByEnd::Entry& e) {
    avail += e.need;
    if (!head.need.fits_in(avail)) return false;
    s = e.est_end;
    return true;
  });
  MLPRIO_REPLAY_CHECK(s < INF, "the blocked job fits nowhere on the machine");
  extra = avail;
  extra -= head.need;
  return s;
}

}  // namespace mlprio::replay::standard
