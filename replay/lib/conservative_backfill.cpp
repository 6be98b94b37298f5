// StandardEngine's conservative pass (standard_engine.hpp): every queued job holds a reservation
// in the free profile; when a job ended before its estimate, each reservation moves as early as it
// goes (a read-only probe first, helped by the probe proofs, and a move only where it can), new
// jobs are placed at their earliest fit, and the jobs whose reservation starts now start.
#include <algorithm>

#include "standard_engine.hpp"

namespace mlprio::replay::standard {

void StandardEngine::place(SimJob& j) {
  const double t = profile_.earliest_fit(now_, j.estimate, j.need);
  MLPRIO_REPLAY_CHECK(t < INF, "no place in the profile for a job that fits the machine");
  profile_.book(t, FreeProfile::slot_end(t, j.estimate), j.need);
  j.res_start = t;
}

void StandardEngine::schedule_conservative(bool early_end) {
  profile_.advance(now_);
  if (cfg_.check_invariants) {
    const Res p = profile_.free_at(now_);
    Res reserved_now{0, 0};
    for (int32_t slot : queue_) {
      const SimJob& j = slab_[static_cast<size_t>(slot)];
      if (j.res_start >= 0 && j.res_start <= now_) reserved_now += j.need;
    }
    MLPRIO_REPLAY_CHECK(
        p.units + reserved_now.units == free_.units && p.gpus + reserved_now.gpus == free_.gpus,
        "the reservation profile disagrees with the free resources");
  }
  if (early_end) {
    // Move every reservation as early as it goes, in queue order. Taking one job out and
    // putting it back at its earliest fit can only move it earlier: its old slot is still free.
    // Most reservations cannot move: ask first, read-only, whether the job would fit anywhere
    // before its reservation with it taken out, and only then take it out and put it back.
    for (int32_t slot : queue_) {
      SimJob& j = slab_[static_cast<size_t>(slot)];
      if (j.res_start < 0) continue;
      const double old = j.res_start;
      MLPRIO_REPLAY_CHECK(old >= now_, "a reservation start passed without starting its job");
      const double from = proofs_.bound(now_, old, j.estimate, j.need);
      size_t stop = FreeProfile::NO_STEP;
      const double to = profile_.earliest_fit_before(from, old, j.estimate, j.need, &stop);
      if (cfg_.check_invariants)
        MLPRIO_REPLAY_CHECK(to == profile_.earliest_fit_before(now_, old, j.estimate, j.need),
                            "a probe started where an earlier one proved no start differs");
      proofs_.add(to, old, j.estimate, j.need);
      if (!(to < old)) {
        if (cfg_.check_invariants) {  // the skipped take-out-and-put-back must be a no-op
          profile_.unbook(old, FreeProfile::slot_end(old, j.estimate), j.need);
          place(j);
          MLPRIO_REPLAY_CHECK(j.res_start == old, "the probe kept a reservation that could move");
        }
        continue;
      }
      // The move gives back its old slot from max(old, the new slot's end) on.
      const double old_end = FreeProfile::slot_end(old, j.estimate);
      const double freed = std::max(old, FreeProfile::slot_end(to, j.estimate));
      if (freed < old_end) proofs_.gave_back(freed, j.need);
      if (cfg_.check_invariants) {
        FreeProfile moved = profile_;
        moved.move(old, to, j.estimate, j.need, stop);
        profile_.unbook(old, old_end, j.need);
        place(j);
        MLPRIO_REPLAY_CHECK(j.res_start == to,
                            "a reservation moved elsewhere than the read-only probe found");
        MLPRIO_REPLAY_CHECK(moved == profile_,
                            "moving a booking left other steps than unbooking and booking it");
      } else {
        // The probe's answer is earliest_fit() after the unbook (see earliest_fit_before):
        // move there without scanning the profile again.
        profile_.move(old, to, j.estimate, j.need, stop);
        j.res_start = to;
      }
    }
  }
  if (unplaced_) {
    for (int32_t slot : queue_) {
      SimJob& j = slab_[static_cast<size_t>(slot)];
      if (j.res_start < 0) place(j);
    }
    unplaced_ = false;
  }
  size_t w = 0;
  double wakeup = INF;  // a local: start() does not read it, and a member would be stored per job
  for (size_t k = 0; k < queue_.size(); ++k) {
    const int32_t slot = queue_[k];
    SimJob& j = slab_[static_cast<size_t>(slot)];
    if (j.res_start <= now_) {
      start(slot);  // its booking in the profile now stands for the running job
    } else {
      wakeup = std::min(wakeup, j.res_start);
      queue_[w++] = slot;
    }
  }
  queue_.resize(w);
  wakeup_ = queue_.empty() ? -INF : wakeup;
}

}  // namespace mlprio::replay::standard
