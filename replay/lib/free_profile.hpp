// The free profile conservative backfilling plans in (FreeProfile): free resources over time as a
// step function, with the earliest-fit scans a reservation needs, bookings, and the one-rewrite
// move of a booking. The scans have a scalar step loop and AVX-512 and AVX2 run scans, chosen
// once per profile behind scan_fit(); free_profile.cpp holds them. Internal to replay/lib.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "mlprio/replay/segment.hpp"
#include "resources.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MLPRIO_PROFILE_AVX512 1
#else
#define MLPRIO_PROFILE_AVX512 0
#endif

namespace mlprio::replay::standard {

// Whether a FreeProfile or ProbeProofs made now uses the AVX-512 code, or AVX2's run scan
// instead (with BMI's tzcnt and blsr): the CPU's support and the scan mode
// (detail::set_profile_scan_mode, MLPRIO_PROFILE_SCAN).
bool profile_avx512_chosen();
bool profile_avx2_chosen();

// Free resources over time: a step function, free[i] holding from t[i] until t[i+1] (the last step
// forever). Conservative backfilling books running jobs (until their estimated end) and
// reservations in it.
class FreeProfile {
 public:
  void reset(double now, Res total) {
    t_.assign(1, now);
    units_.assign(1, total.units);
    gpus_on_ = total.gpus != 0;
    gpus_.assign(gpus_on_ ? 1 : 0, total.gpus);
  }

  // Forgets steps that ended before `now`, so the profile stays as short as the plan ahead.
  void advance(double now) {
    size_t k = 0;
    while (k + 1 < t_.size() && t_[k + 1] <= now) ++k;
    if (k > 0) erase_range(0, k);
    if (t_.front() < now) t_.front() = now;
  }

  Res free_at(double t) const;

  // Earliest t >= now at which `need` fits for `duration` seconds: one pass, restarting the
  // candidate after every step that is too full.
  double earliest_fit(double now, double duration, const Res& need) const {
    // INF when nowhere, which cannot happen for jobs that fit the machine: the last step is all
    // free.
    return scan_fit(now, INF, duration, need);
  }

  // For a job booked at [s, s + duration): the earliest t in [now, s) at which it would fit if its
  // own booking were taken out, or s when there is none (it cannot move). Read-only, and it only
  // reads the steps before s: taking the booking out adds `need` back on [s, s + duration), so a
  // run of fitting steps that reaches s continues through the job's own slot, which is at least as
  // long as any earlier start needs (t < s gives t + duration <= s + duration, rounding being
  // monotone). This is exactly the minimum feasible start earliest_fit() would find after an
  // unbook, so when it returns s the unbook/re-book pair can be skipped without changing the
  // profile. Where it returns t < s, *stop (when given) is a step at or after the one holding t,
  // close to it (where the scan decided), for move().
  double earliest_fit_before(double now, double s, double duration, const Res& need,
                             size_t* stop = nullptr) const {
    return scan_fit(now, s, duration, need, stop);
  }

  // The end of a booking of `d` seconds from t: t + d, or the next representable time after t
  // where that sum is t itself (a job whose estimate is 0 s, or a start so late that adding its
  // estimate rounds it away). An empty booking would leave the job's resources free at t, where
  // another job could then be booked; at t both would start on resources that are there once.
  // The scans need no change: a run of fitting steps that lasts `d` from cand (cand + d rounding
  // to cand) is one fitting step at cand, which holds [cand, slot_end(cand, d)) too.
  static double slot_end(double t, double d) {
    const double e = t + d;
    return e > t ? e : std::nextafter(t, INF);
  }

  void book(double t0, double t1, const Res& need) { add(t0, t1, need, -1); }
  void unbook(double t0, double t1, const Res& need) { add(t0, t1, need, +1); }

  size_t size() const { return t_.size(); }
  bool operator==(const FreeProfile& o) const {
    return t_ == o.t_ && units_ == o.units_ && gpus_on_ == o.gpus_on_ && gpus_ == o.gpus_;
  }

  // No step index known (move()'s `near`).
  static constexpr size_t NO_STEP = ~size_t{0};

  // Moves a booking of `need` for d seconds from [old, old_end) to [to, to_end), to < old, both
  // at or after the profile's first step (the ends are slot_end(old, d) and slot_end(to, d)):
  // the steps unbook(old, old_end) then book(to, to_end) leave, merged the same way, but by one
  // rewrite of the steps from `to` to old_end (see free_profile.cpp). `near`, when not NO_STEP, is
  // a step at or after the one holding `to` (earliest_fit_before's stop), from which that step is
  // found by a short walk back.
  void move(double old, double to, double d, const Res& need, size_t near = NO_STEP);

  // Both queries in one scan over the steps before s (s = INF: all): skip the steps that end by
  // `now`; then follow the runs of steps where `need` fits, a run starting at cand = max(its first
  // step's t, now), and answer the first run that reaches cand + duration or s (cand), or s when
  // none does. The answers are those of a single pass restarting the candidate at every blocking
  // step, rounding included (cand + duration is formed once per run).
  // Where it answers cand < s, *stop (when given) is the index of the step that decided it: the
  // first after the run's fitting steps reaching cand + duration or s, or the profile's size.
  double scan_fit(double now, double s, double duration, const Res& need,
                  size_t* stop = nullptr) const;

  // The plan from `t` on, for a segment boundary (steps before t cannot matter any more: the
  // engine advances the profile to the current time before every use).
  std::vector<ProfileStep> export_from(double t) const;
  void import(const std::vector<ProfileStep>& steps);

 private:
  Res at(size_t k) const { return Res{units_[k], g(k)}; }
  // Free GPUs in step k: 0 throughout on a machine without GPUs, whose profile keeps no gpus_.
  int64_t g(size_t k) const { return gpus_on_ ? gpus_[k] : 0; }

  void erase_range(size_t a, size_t b);
  size_t lower_bound(double t) const;
  [[gnu::always_inline]] size_t split(double t);
  void add(double t0, double t1, const Res& need, int sign);
  bool same(size_t x, size_t y) const { return units_[x] == units_[y] && g(x) == g(y); }

  // The AVX-512 scan, or AVX2's run scan, chosen once per engine (see profile_scan_mode).
  bool vector_ = profile_avx512_chosen();
  bool avx2_ = profile_avx2_chosen();
  // The step function as three arrays (the free resources from t_[k] until t_[k + 1], the last
  // step forever), so that scan_fit reads each quantity as a plain array, and a probe for a job
  // that needs no GPU reads no GPU count.
  std::vector<double> t_;
  // gpus_ is empty on a machine without GPUs (gpus_on_ false): every step then has 0 free GPUs
  // and no job needs one, and bookings and moves shift two arrays instead of three.
  std::vector<int64_t> units_, gpus_;
  bool gpus_on_ = true;
  // move()'s rewritten steps, kept to reuse their memory.
  std::vector<double> wt_;
  std::vector<int64_t> wu_, wg_;
};

}  // namespace mlprio::replay::standard
