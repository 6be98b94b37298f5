// The STANDARD profile's event-driven engine (simulate() dispatches the rlscheduler profile to
// rlscheduler_engine.cpp). Time advances from event instant to event instant; at each instant all
// completions are applied first, then all arrivals in trace order, then one scheduling pass (see
// replay/README.md, "Tie-breaking"). Only queued and running jobs are held (a slab with a free
// list), so memory follows the queue, not the trace. Backfilling: NONE starts jobs in queue order
// until one does not fit; EASY gives the first blocked job a reservation recomputed at every pass
// and backfills jobs that end by it or use only the extra resources; CONSERVATIVE keeps a
// reservation for every queued job in a profile of free resources over time, moves reservations
// only earlier (never later) when a job ends before its estimate, and checks that it does.
#include "mlprio/replay/simulator.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <queue>
#include <string>
#include <tuple>
#include <vector>

#include "engine_common.hpp"
#include "mlprio/jobs/trace.hpp"
#include "mlprio/replay/ml.hpp"
#include "mlprio/replay/segment.hpp"
#include "mlprio/util/checked_cast.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MLPRIO_PROFILE_AVX512 1
#else
#define MLPRIO_PROFILE_AVX512 0
#endif

namespace mlprio::replay {

std::string_view backfill_name(Backfill b) {
  switch (b) {
    case Backfill::NONE:
      return "none";
    case Backfill::EASY:
      return "easy";
    case Backfill::CONSERVATIVE:
      return "conservative";
    case Backfill::RLSCHEDULER:
      return "rlscheduler";
  }
  return "?";
}

std::string_view profile_name(Profile p) {
  return p == Profile::RLSCHEDULER ? "rlscheduler" : "standard";
}

Backfill parse_backfill(std::string_view s) {
  for (Backfill b : {Backfill::NONE, Backfill::EASY, Backfill::CONSERVATIVE, Backfill::RLSCHEDULER})
    if (s == backfill_name(b)) return b;
  throw ConfigError("unknown backfill '" + std::string(s) +
                    "' (valid: none, easy, conservative, rlscheduler)");
}

Profile parse_profile(std::string_view s) {
  if (s == "standard") return Profile::STANDARD;
  if (s == "rlscheduler") return Profile::RLSCHEDULER;
  throw ConfigError("unknown profile '" + std::string(s) + "' (valid: standard, rlscheduler)");
}

std::string_view allocation_name(Allocation a) {
  return a == Allocation::CORES ? "cores" : "nodes";
}
std::string_view too_large_name(TooLarge t) {
  return t == TooLarge::SKIP ? "skip" : "error";
}
std::string_view correction_name(Correction c) {
  switch (c) {
    case Correction::NONE:
      return "none";
    case Correction::REQUEST:
      return "request";
    case Correction::TSAFRIR:
      return "tsafrir";
  }
  return "?";
}
std::string_view backfill_order_name(BackfillOrder o) {
  return o == BackfillOrder::SJBF ? "sjbf" : "fcfs";
}

namespace {
// One table-driven parser for the small enums: "unknown WHAT 'x' (valid: a, b)".
template <typename E, size_t N>
E parse_enum(std::string_view s, const char* what, const E (&values)[N],
             std::string_view (*name)(E)) {
  std::string valid;
  for (E v : values) {
    if (s == name(v)) return v;
    valid += (valid.empty() ? "" : ", ") + std::string(name(v));
  }
  throw ConfigError("unknown " + std::string(what) + " '" + std::string(s) + "' (valid: " + valid +
                    ")");
}
}  // namespace

Allocation parse_allocation(std::string_view s) {
  static constexpr Allocation v[] = {Allocation::NODES, Allocation::CORES};
  return parse_enum(s, "allocation", v, allocation_name);
}
TooLarge parse_too_large(std::string_view s) {
  static constexpr TooLarge v[] = {TooLarge::ERROR, TooLarge::SKIP};
  return parse_enum(s, "too-large rule", v, too_large_name);
}
Correction parse_correction(std::string_view s) {
  static constexpr Correction v[] = {Correction::NONE, Correction::REQUEST, Correction::TSAFRIR};
  return parse_enum(s, "correction", v, correction_name);
}
BackfillOrder parse_backfill_order(std::string_view s) {
  static constexpr BackfillOrder v[] = {BackfillOrder::QUEUE, BackfillOrder::SJBF};
  return parse_enum(s, "backfill order", v, backfill_order_name);
}

Machine machine_from_header(const TraceHeader& h) {
  Machine m;
  if (h.max_nodes > 0) {
    m.nodes = h.max_nodes;
    const int64_t procs = h.max_procs > 0 ? h.max_procs : h.max_nodes;
    if (procs % h.max_nodes != 0)
      throw ConfigError("trace header MaxProcs " + std::to_string(procs) +
                        " is not a multiple of MaxNodes " + std::to_string(h.max_nodes) +
                        "; give --nodes N --cores-per-node C");
    m.cores_per_node = procs / h.max_nodes;
  } else if (h.max_procs > 0) {
    m.nodes = h.max_procs;
    m.cores_per_node = 1;
  } else {
    throw ConfigError(
        "the trace header has neither MaxNodes nor MaxProcs; give --nodes N --cores-per-node C");
  }
  return m;
}

std::span<const Job> select_window(std::span<const Job> jobs, int64_t start, int64_t len) {
  if (start < 0 || len < 0) throw ConfigError("a window needs START >= 0 and LEN >= 0");
  const auto n = static_cast<int64_t>(jobs.size());
  if (start >= n) return {};
  return jobs.subspan(static_cast<size_t>(start), static_cast<size_t>(std::min(len, n - start)));
}

namespace {

constexpr double INF = std::numeric_limits<double>::infinity();

struct Res {
  int64_t units = 0;  // nodes (Allocation::NODES) or cores (Allocation::CORES)
  int64_t gpus = 0;
  bool fits_in(const Res& avail) const { return units <= avail.units && gpus <= avail.gpus; }
  Res& operator+=(const Res& o) {
    units += o.units;
    gpus += o.gpus;
    return *this;
  }
  Res& operator-=(const Res& o) {
    units -= o.units;
    gpus -= o.gpus;
    return *this;
  }
};

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

// Which profile scan conservative backfilling uses: 0 = automatic (AVX-512 where the CPU has
// it, else AVX2's run scan where it has that), 1 = the step loop, 2 = AVX-512 where usable, 3 =
// AVX2's run scan where usable (the rest of the profile code scalar). Internal switch for tests
// and benchmarks (see detail::set_profile_scan_mode); MLPRIO_PROFILE_SCAN=scalar|avx512|avx2 sets
// the starting value.
int initial_profile_scan_mode() {
  const char* e = std::getenv("MLPRIO_PROFILE_SCAN");
  if (e != nullptr && std::strcmp(e, "scalar") == 0) return 1;
  if (e != nullptr && std::strcmp(e, "avx512") == 0) return 2;
  if (e != nullptr && std::strcmp(e, "avx2") == 0) return 3;
  return 0;
}

std::atomic<int>& profile_scan_mode() {
  static std::atomic<int> mode{initial_profile_scan_mode()};
  return mode;
}

bool cpu_has_avx512_profile() {
#if MLPRIO_PROFILE_AVX512
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx2_profile() {
#if MLPRIO_PROFILE_AVX512
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi");
  return has;
#else
  return false;
#endif
}

// Whether an engine made now uses the AVX-512 profile code (FreeProfile, ProbeProofs).
bool profile_avx512_chosen() {
  const int mode = profile_scan_mode().load();
  return (mode == 0 || mode == 2) && cpu_has_avx512_profile();
}
// Whether it uses AVX2's run scan instead (FreeProfile::scan_runs_avx2, with BMI's tzcnt and blsr).
bool profile_avx2_chosen() {
  const int mode = profile_scan_mode().load();
  return ((mode == 0 && !cpu_has_avx512_profile()) || mode == 3) && cpu_has_avx2_profile();
}

#if MLPRIO_PROFILE_AVX512
// LAST_START[m][j]: the highest k <= j with bit k of m set, or 8 when none (then the run open
// from the round before: the second table of vpermt2pd).
struct LastStart {
  alignas(64) uint8_t at[256][8];
};
constexpr LastStart make_last_start() {
  LastStart l{};
  for (unsigned m = 0; m < 256; ++m) {
    uint8_t last = 8;
    for (unsigned j = 0; j < 8; ++j) {
      if ((m >> j) & 1) last = static_cast<uint8_t>(j);
      l.at[m][j] = last;
    }
  }
  return l;
}
constexpr LastStart LAST_START = make_last_start();

#endif

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

  Res free_at(double t) const {
    Res r = at(0);
    for (size_t k = 0; k < t_.size(); ++k) {
      if (t_[k] > t) break;
      r = at(k);
    }
    return r;
  }

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
  // rewrite of the steps from `to` to old_end. The two calls would shift the whole profile after
  // each step they insert or merge away (four times per move on a deep queue); this shifts it
  // once, by the net count, and finds its window by two short walks (searches where they would
  // be long) instead of four searches. The change is -need on [to, p1), none on [p1, p2), +need
  // on [p2, old_end), where p1 and p2 are old and to_end in time order (equal when the slots
  // touch). `near`, when not NO_STEP, is a step at or after the one holding `to`
  // (earliest_fit_before's stop), from which that step is found by a short walk back.
  void move(double old, double to, double d, const Res& need, size_t near = NO_STEP) {
    const double to_end = slot_end(to, d);
    const double p[4] = {to, std::min(old, to_end), std::max(old, to_end), slot_end(old, d)};
    const int64_t du[5] = {0, -need.units, 0, need.units, 0};  // after 0..4 of p[] passed
    const int64_t dg[5] = {0, -need.gpus, 0, need.gpus, 0};
    MLPRIO_REPLAY_CHECK(to >= t_.front() && to < old, "a booking moved before the profile");
    const size_t n = t_.size();
    size_t a = NO_STEP;  // the step holding `to`
    if (near != NO_STEP) {
      a = std::min(near, n - 1);
      const size_t walk_end = a > 16 ? a - 16 : 0;
      while (a > walk_end && t_[a] > p[0]) --a;
      if (t_[a] > p[0]) a = NO_STEP;
    }
    if (a == NO_STEP) {
      a = lower_bound(p[0]);
      if (a == n || t_[a] != p[0]) --a;
    }
    // The first step starting after old_end. Moves are short on a deep queue (the window spans
    // about 5 steps on the deep 20k trace): walk from `to`'s step, and search only past 16 steps.
    // Every step before a starts before to < old_end.
    size_t b = a;
    const size_t walk_end = std::min(n, a + 16);
    while (b < walk_end && t_[b] < p[3]) ++b;
    if (b == walk_end && b < n && t_[b] < p[3]) b = lower_bound(p[3]);
    if (b < n && t_[b] == p[3]) ++b;
    wt_.clear();
    wu_.clear();
    wg_.clear();
    bool have_last = a > 0;  // the last step kept before the one being written, to merge with
    int64_t last_u = have_last ? units_[a - 1] : 0, last_g = have_last ? g(a - 1) : 0;
    const double window_end = b < n ? t_[b] : INF;
    size_t k = a;
    int q = 0;
    for (double x = t_[a]; x < window_end;) {
      while (q < 4 && p[q] <= x) ++q;
      const double step_end = k + 1 < n ? t_[k + 1] : INF;
      const double y = std::min(step_end, q < 4 ? p[q] : INF);
      const int64_t vu = units_[k] + du[q], vg = g(k) + dg[q];
      if (!have_last || vu != last_u || vg != last_g) {
        wt_.push_back(x);
        wu_.push_back(vu);
        if (gpus_on_) wg_.push_back(vg);
        have_last = true;
        last_u = vu;
        last_g = vg;
      }
      if (y == step_end) ++k;
      x = y;
    }
    // No merge with step b: the window ends with step b - 1's part after old_end, unchanged, and
    // the profile was merged.
    const size_t m = wt_.size(), span = b - a;
    if (m > span) {
      const auto at = static_cast<std::ptrdiff_t>(b);
      t_.insert(t_.begin() + at, m - span, 0.0);
      units_.insert(units_.begin() + at, m - span, 0);
      if (gpus_on_) gpus_.insert(gpus_.begin() + at, m - span, 0);
    } else if (m < span) {
      erase_range(a + m, b);
    }
    std::copy(wt_.begin(), wt_.end(), t_.begin() + static_cast<std::ptrdiff_t>(a));
    std::copy(wu_.begin(), wu_.end(), units_.begin() + static_cast<std::ptrdiff_t>(a));
    if (gpus_on_) std::copy(wg_.begin(), wg_.end(), gpus_.begin() + static_cast<std::ptrdiff_t>(a));
  }

  // Both queries in one scan over the steps before s (s = INF: all): skip the steps that end by
  // `now`; then follow the runs of steps where `need` fits, a run starting at cand = max(its first
  // step's t, now), and answer the first run that reaches cand + duration or s (cand), or s when
  // none does. The answers are those of a single pass restarting the candidate at every blocking
  // step, rounding included (cand + duration is formed once per run).
  // Where it answers cand < s, *stop (when given) is the index of the step that decided it: the
  // first after the run's fitting steps reaching cand + duration or s, or the profile's size.
  double scan_fit(double now, double s, double duration, const Res& need,
                  size_t* stop = nullptr) const {
    if (!(now < s)) return s;
    const double* t = t_.data();
    const size_t n = t_.size();
    // Skip the steps that end by `now`, eight at a time while the eighth step ahead starts by it
    // (a probe that knows no run starts early, ProbeProofs, starts far from the first step).
    // Steps left that end by `now` change no answer: a run through them has cand = now, and one
    // that stops before `now` stops before cand + duration and before s, which decides nothing.
    size_t i = 0;
    while (i + 8 < n && t[i + 8] <= now) i += 8;
    MLPRIO_REPLAY_CHECK(gpus_on_ || need.gpus == 0, "a job needs GPUs on a machine without any");
#if MLPRIO_PROFILE_AVX512
    if (vector_)
      return need.gpus > 0 ? scan_runs_avx512<true>(i, now, s, duration, need, stop)
                           : scan_runs_avx512<false>(i, now, s, duration, need, stop);
    if (avx2_)
      return need.gpus > 0 ? scan_runs_avx2<true>(i, now, s, duration, need, stop)
                           : scan_runs_avx2<false>(i, now, s, duration, need, stop);
#endif
    // Alternately: find the first step that fits (none before s: s), then follow its run until
    // it reaches cand + duration or s (a start: cand) or a step blocks (start over after it).
    const int64_t* u = units_.data();
    const auto fits = [&](size_t k) { return need.units <= u[k] && need.gpus <= g(k); };
    for (;;) {
      while (i < n && t[i] < s && !fits(i)) ++i;
      if (i == n || !(t[i] < s)) return s;
      const double cand = std::max(t[i], now);
      const double limit = std::min(s, cand + duration);
      size_t k = i + 1;
      while (k < n && t[k] < limit && fits(k)) ++k;
      if (k == n || !(t[k] < limit)) {
        if (stop != nullptr) *stop = k;
        return cand;
      }
      i = k + 1;  // step k blocks
    }
  }

  // The plan from `t` on, for a segment boundary (steps before t cannot matter any more: the
  // engine advances the profile to the current time before every use).
  std::vector<ProfileStep> export_from(double t) const {
    FreeProfile cut = *this;
    cut.advance(t);
    std::vector<ProfileStep> out;
    for (size_t k = 0; k < cut.t_.size(); ++k) out.push_back({cut.t_[k], cut.units_[k], cut.g(k)});
    return out;
  }
  void import(const std::vector<ProfileStep>& steps) {
    t_.clear();
    units_.clear();
    gpus_.clear();
    gpus_on_ = false;
    for (const auto& s : steps) gpus_on_ = gpus_on_ || s.gpus != 0;
    for (const auto& s : steps) {
      t_.push_back(s.t);
      units_.push_back(s.units);
      if (gpus_on_) gpus_.push_back(s.gpus);
    }
  }

 private:
  Res at(size_t k) const {
    return Res{units_[k], g(k)};
  }
  // Free GPUs in step k: 0 throughout on a machine without GPUs, whose profile keeps no gpus_.
  int64_t g(size_t k) const {
    return gpus_on_ ? gpus_[k] : 0;
  }

#if MLPRIO_PROFILE_AVX512

// GCC 12's AVX-512 intrinsics fill unused lanes from _mm512_undefined_*(), a self-initialised
// variable that -Wmaybe-uninitialized reports where they are inlined. Nothing here reads it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
  // scan_fit's runs from step i on, eight steps per round and no branch per step or per run. On
  // a deep queue the steps alternate between fitting and blocking every few steps (about 28 runs
  // of 2 fitting steps per probe on a 20k-job deep queue), so a loop that tests step by step
  // mispredicts at every run's start and end. Here each round marks the steps that fit, that
  // start a run, and that stop one (the first step after a fitting one that does not fit, or is
  // at or past s); gives every step the t of its run's first step (a table lookup and one
  // permute; the run open from the round before carries its t in a vector), hence the run's
  // cand = max(t, now) and cand + duration; and a stopping step decides its run when its own t
  // reaches cand + duration or s (t only grows, so this is when the run reached
  // min(s, cand + duration)). The first decided run is the answer.
  template <bool GPUS>
  [[gnu::target("avx512f")]] double scan_runs_avx512(size_t i, double now, double s,
                                                     double duration, const Res& need,
                                                     size_t* stop) const {
    const double* t = t_.data();
    const int64_t* u = units_.data();
    const int64_t* g = gpus_.data();
    const size_t n = t_.size();
    const __m512d vs = _mm512_set1_pd(s);
    const __m512d vnow = _mm512_set1_pd(now);
    const __m512d vdur = _mm512_set1_pd(duration);
    const __m512i nu = _mm512_set1_epi64(need.units);
    const __m512i ng = _mm512_set1_epi64(need.gpus);
    unsigned open = 0;                    // 1: a run is open entering the round, from t = ...
    __m512d carry = _mm512_setzero_pd();  // ... this (in every lane)
    for (; i < n; i += 8) {
      const auto len = static_cast<unsigned>(std::min<size_t>(8, n - i));
      const unsigned valid = (1u << len) - 1;
      const auto m = static_cast<__mmask8>(valid);
      const __m512d T = _mm512_maskz_loadu_pd(m, t + i);
      const unsigned before_s = _mm512_mask_cmp_pd_mask(m, T, vs, _CMP_LT_OQ);
      unsigned fits =
          before_s & _mm512_mask_cmpge_epi64_mask(m, _mm512_maskz_loadu_epi64(m, u + i), nu);
      if constexpr (GPUS)
        fits &= _mm512_mask_cmpge_epi64_mask(m, _mm512_maskz_loadu_epi64(m, g + i), ng);
      const unsigned after = ((fits << 1) | open) & valid;  // steps whose predecessor fits
      const unsigned starts = fits & ~after;
      const unsigned stops = valid & ~fits & after;
      uint64_t idx_bytes;
      std::memcpy(&idx_bytes, LAST_START.at[starts], 8);
      const __m512i idx = _mm512_cvtepu8_epi64(_mm_cvtsi64_si128(static_cast<int64_t>(idx_bytes)));
      const __m512d first_t = _mm512_permutex2var_pd(T, idx, carry);
      const __m512d cand = _mm512_max_pd(vnow, first_t);  // equal: t, as std::max(t, now)
      const auto sm = static_cast<__mmask8>(stops);
      const unsigned decided =
          _mm512_mask_cmp_pd_mask(sm, T, _mm512_add_pd(cand, vdur), _CMP_GE_OQ) |
          _mm512_mask_cmp_pd_mask(sm, T, vs, _CMP_GE_OQ);
      if (decided != 0) {
        alignas(64) double lanes[8];
        _mm512_store_pd(lanes, cand);
        const auto lane = static_cast<size_t>(std::countr_zero(decided));
        if (stop != nullptr) *stop = i + lane;
        return lanes[lane];
      }
      open = (fits >> (len - 1)) & 1;
      carry = _mm512_permutexvar_pd(_mm512_set1_epi64(len - 1), first_t);
      // At or past s with no run open (an open one is decided at the first step past s).
      if (before_s != valid) return s;
    }
    // A run still open at the last step goes on forever (the last step is all free).
    if (stop != nullptr) *stop = n;
    return open != 0 ? std::max(_mm512_cvtsd_f64(carry), now) : s;
  }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

  // scan_runs_avx512's decisions with AVX2 and BMI, for CPUs without AVX-512 (AMD Zen 1-3, Intel
  // client cores), in blocks of 48 steps: the marks of the steps that fit and that lie before s
  // come from twelve 4-step compares with no dependence between them, the block's starts and
  // stops follow as bit masks, and then each run ending in the block is tested on its own: its
  // first step is the start paired with its stop (or the run carried in from the block before),
  // its cand = max(t, now), and it is decided when the stopping step's t reaches cand + duration
  // or s. Runs are tested in order, so the first decided one is the answer, as in the step loop.
  // Forming every step's run start in vectors instead (a table permute per 4-step round, as
  // scan_runs_avx512 does with its masks) put a chain of about 40 cycles of loads, permutes and
  // mask moves in every round, which Zen 1 could not overlap enough (the blocks take 0.82x its
  // time there).
  template <bool GPUS>
  [[gnu::target("avx2,bmi")]] double scan_runs_avx2(size_t i, double now, double s, double duration,
                                                    const Res& need, size_t* stop) const {
    const double* t = t_.data();
    const int64_t* u = units_.data();
    const int64_t* g = gpus_.data();
    const size_t n = t_.size();
    const __m256d vs = _mm256_set1_pd(s);
    const __m256i nu = _mm256_set1_epi64x(need.units);
    const __m256i ng = _mm256_set1_epi64x(need.gpus);
    const __m256i lane = _mm256_setr_epi64x(0, 1, 2, 3);
    constexpr size_t BLOCK = 48;
    constexpr uint64_t FULL = (uint64_t{1} << BLOCK) - 1;
    uint64_t open = 0;  // 1: a run is open entering the block, from t = ...
    double carry = 0;   // ... this
    for (; i < n; i += BLOCK) {
      uint64_t before_s = 0, short_mask = 0, valid;
      if (i + BLOCK <= n) {
        valid = FULL;
        for (size_t q = 0; q < BLOCK; q += 4) {
          const __m256d T = _mm256_loadu_pd(t + i + q);
          __m256i short_of = _mm256_cmpgt_epi64(
              nu, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u + i + q)));
          if constexpr (GPUS)
            short_of = _mm256_or_si256(
                short_of, _mm256_cmpgt_epi64(
                              ng, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + i + q))));
          before_s |= static_cast<uint64_t>(static_cast<unsigned>(
                          _mm256_movemask_pd(_mm256_cmp_pd(T, vs, _CMP_LT_OQ))))
                      << q;
          short_mask |= static_cast<uint64_t>(static_cast<unsigned>(
                            _mm256_movemask_pd(_mm256_castsi256_pd(short_of))))
                        << q;
        }
      } else {  // the last block: steps past the profile's end read nothing (masked loads)
        valid = (uint64_t{1} << (n - i)) - 1;
        for (size_t q = 0; i + q < n; q += 4) {
          const auto len = static_cast<int64_t>(std::min<size_t>(4, n - i - q));
          const __m256i m = _mm256_cmpgt_epi64(_mm256_set1_epi64x(len), lane);
          const __m256d T = _mm256_maskload_pd(t + i + q, m);
          __m256i short_of = _mm256_cmpgt_epi64(
              nu, _mm256_maskload_epi64(reinterpret_cast<const long long*>(u + i + q), m));
          if constexpr (GPUS)
            short_of = _mm256_or_si256(
                short_of,
                _mm256_cmpgt_epi64(
                    ng, _mm256_maskload_epi64(reinterpret_cast<const long long*>(g + i + q), m)));
          before_s |= static_cast<uint64_t>(static_cast<unsigned>(
                          _mm256_movemask_pd(_mm256_cmp_pd(T, vs, _CMP_LT_OQ))))
                      << q;
          short_mask |= static_cast<uint64_t>(static_cast<unsigned>(
                            _mm256_movemask_pd(_mm256_castsi256_pd(short_of))))
                        << q;
        }
        before_s &= valid;
      }
      const uint64_t fits = before_s & ~short_mask;         // need <= free, before s
      const uint64_t after = ((fits << 1) | open) & valid;  // steps whose predecessor fits
      // Starts and stops alternate, so the k-th stop ends the run of the k-th start (or of the run
      // carried in, which takes the first stop).
      uint64_t starts = fits & ~after;
      bool carried = open != 0;
      for (uint64_t stops = valid & ~fits & after; stops != 0; stops &= stops - 1) {
        const auto at = static_cast<size_t>(std::countr_zero(stops));
        double first = carry;
        if (!carried) {
          first = t[i + static_cast<size_t>(std::countr_zero(starts))];
          starts &= starts - 1;
        }
        carried = false;
        const double cand = std::max(first, now);
        // At or past s: not before it (no t is NaN).
        if (t[i + at] >= cand + duration || ((before_s >> at) & 1) == 0) {
          if (stop != nullptr) *stop = i + at;
          return cand;
        }
      }
      open = (fits >> (valid == FULL ? BLOCK - 1 : n - i - 1)) & 1;
      // A run open at the block's end started at the one start left, if any.
      if (open != 0 && starts != 0) carry = t[i + static_cast<size_t>(std::countr_zero(starts))];
      // At or past s with no run open (an open one is decided at the first step past s).
      if (before_s != valid) return s;
    }
    // A run still open at the last step goes on forever (the last step is all free).
    if (stop != nullptr) *stop = n;
    return open != 0 ? std::max(carry, now) : s;
  }
#endif

  void erase_range(size_t a, size_t b) {
    const auto from = [a](auto& v) { return v.begin() + static_cast<std::ptrdiff_t>(a); };
    const auto to = [b](auto& v) { return v.begin() + static_cast<std::ptrdiff_t>(b); };
    t_.erase(from(t_), to(t_));
    units_.erase(from(units_), to(units_));
    if (gpus_on_) gpus_.erase(from(gpus_), to(gpus_));
  }

  // The first k with t_[k] >= t (t_.size() when none), by a binary search whose steps select
  // instead of branching: the bookings land anywhere in the profile, so a branch per halving
  // mispredicts about every other time.
  size_t lower_bound(double t) const {
#if MLPRIO_PROFILE_AVX512
    if (vector_) return lower_bound_avx512(t);
#endif
    const double* base = t_.data();
    size_t len = t_.size();  // never 0: the profile has a step from its start on
    while (len > 1) {
      const size_t half = len / 2;
      base = base[half - 1] < t ? base + half : base;
      len -= half;
    }
    return static_cast<size_t>(base - t_.data()) + (*base < t ? 1 : 0);
  }

#if MLPRIO_PROFILE_AVX512
  // The same halvings down to 32 steps, then one count of the steps before t among those 32:
  // the last five halvings are a chain of dependent loads (on the deep 20k-job trace the two
  // searches took 70 % of a booking's time), the count four independent compares.
  [[gnu::target("avx512f")]] size_t lower_bound_avx512(double t) const {
    const double* base = t_.data();
    size_t len = t_.size();
    while (len > 32) {
      const size_t half = len / 2;
      base = base[half - 1] < t ? base + half : base;
      len -= half;
    }
    // The answer is in [base, base + len]: every step before base is earlier than t.
    const __m512d vt = _mm512_set1_pd(t);
    uint64_t before = 0;
    for (size_t k = 0; k < 32; k += 8) {
      const size_t left = len > k ? len - k : 0;
      const auto m = static_cast<__mmask8>(left >= 8 ? 0xff : (1u << left) - 1);
      const __m512d steps = _mm512_maskz_loadu_pd(m, base + k);
      before |= uint64_t{_mm512_mask_cmp_pd_mask(m, steps, vt, _CMP_LT_OQ)} << k;
    }
    return static_cast<size_t>(base - t_.data()) + static_cast<size_t>(std::popcount(before));
  }
#endif

  size_t split(double t) {
    const size_t k = lower_bound(t);
    const auto it = t_.begin() + static_cast<std::ptrdiff_t>(k);
    if (it != t_.end() && *it == t) return k;
    const auto pos = static_cast<std::ptrdiff_t>(k);
    t_.insert(it, t);
    units_.insert(units_.begin() + pos, units_[k - 1]);
    if (gpus_on_) gpus_.insert(gpus_.begin() + pos, gpus_[k - 1]);
    return k;
  }
  void add(double t0, double t1, const Res& need, int sign) {
    if (!(t1 > t0)) return;
    t0 = std::max(t0, t_.front());
    if (!(t1 > t0)) return;
    const size_t a = split(t0);
    const size_t b = split(t1);
    const int64_t du = sign < 0 ? -need.units : need.units;
    const int64_t dg = sign < 0 ? -need.gpus : need.gpus;
    for (size_t k = a; k < b; ++k) {
      units_[k] += du;
      if (gpus_on_) gpus_[k] += dg;
    }
    // Merge equal neighbours so the profile does not grow with history. The profile was merged
    // before this call and [a, b) moved by one constant, so only the two edges can have become
    // equal to their neighbour: merging there keeps the whole profile merged (the same steps a
    // full pass would leave, which segment states compare) at O(log n) plus one move, not O(n).
    if (b < t_.size() && same(b, b - 1)) erase_range(b, b + 1);
    if (a > 0 && same(a, a - 1)) erase_range(a, a + 1);
  }
  bool same(size_t x, size_t y) const {
    return units_[x] == units_[y] && g(x) == g(y);
  }

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

// What earlier probes proved, so that later probes skip the start of the profile. A probe for a
// job of need (u, g) and duration d booked at r that answers b (b = r: it cannot move) found every
// run of steps fitting (u, g) that starts before b blocked by a step before r. Such a step blocks
// every job needing at least (u, g), and every run starting before b from the same `now` is then
// blocked before b + d' for any duration d' >= d. So a later job of need >= (u, g), duration
// >= d, booked at s >= r (its probe reads the steps before s, r's steps included) has no start
// before b, and its probe may start at b with the same answer (also when b falls inside a
// step: a run through b that started at c < b was stopped before fl(c + d') <= fl(b + d'), so
// the run from b stops at the same step). A later `now` only cuts runs short.
// Bookings only take away; resources come back where a job ends early (from `now` on) and where
// a moved reservation leaves its old slot (from max(its old start, its new end) on). A step
// that blocked (u, g) and got (x, y) back blocks (u + x, g + y): so instead of being dropped, a
// proof with r past such a time holds on for jobs needing that much more, within the pass and
// across passes (a job ending early raises every proof with r past `now`).
// The last CAP proofs are kept, in arrays one AVX-512 query reads (a loop on other CPUs); on the
// deep 5k-job trace they save 56 % of the steps a pass's probes span, against 60 % for all of
// them.
class ProbeProofs {
 public:
  static constexpr size_t CAP = 16;
  ProbeProofs() { clear(); }
  void clear() {
    for (size_t k = 0; k < CAP; ++k) r_[k] = INF;  // r = INF: usable by no probe
    next_ = 0;
  }
  // The latest b a proof gives a job of need `need` and duration `d` booked at s (`now` if none).
  double bound(double now, double s, double d, const Res& need) const {
#if MLPRIO_PROFILE_AVX512
    if (vector_) return bound_avx512(now, s, d, need);
    if (avx2_) return bound_avx2(now, s, d, need);
#endif
    double b = now;
    for (size_t k = 0; k < CAP; ++k) {
      const bool applies = u_[k] <= need.units && g_[k] <= need.gpus && d_[k] <= d && r_[k] <= s;
      b = applies && b_[k] > b ? b_[k] : b;
    }
    return b;
  }
  void add(double b, double r, double d, const Res& need) {
    u_[next_] = need.units;
    g_[next_] = need.gpus;
    d_[next_] = d;
    b_[next_] = b;
    r_[next_] = r;
    next_ = (next_ + 1) % CAP;
  }
  // `back` came back on an interval from time a on: the proofs that read steps at or past a hold
  // for jobs needing `back` more.
  void gave_back(double a, const Res& back) {
#if MLPRIO_PROFILE_AVX512
    if (vector_) return gave_back_avx512(a, back);
    if (avx2_) return gave_back_avx2(a, back);
#endif
    for (size_t k = 0; k < CAP; ++k) {
      if (r_[k] > a) {
        u_[k] = std::min(u_[k] + back.units, RAISED_MAX);
        g_[k] = std::min(g_[k] + back.gpus, RAISED_MAX);
      }
    }
  }
  static constexpr int64_t RAISED_MAX = int64_t{1} << 62;  // needs no job has; no overflow

 private:
#if MLPRIO_PROFILE_AVX512
#if defined(__GNUC__) && !defined(__clang__)  // see scan_runs_avx512
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
  [[gnu::target("avx512f")]] double bound_avx512(double now, double s, double d,
                                                 const Res& need) const {
    const __m512i nu = _mm512_set1_epi64(need.units);
    const __m512i ng = _mm512_set1_epi64(need.gpus);
    const __m512d vd = _mm512_set1_pd(d);
    const __m512d vs = _mm512_set1_pd(s);
    __m512d b = _mm512_set1_pd(now);
    for (size_t k = 0; k < CAP; k += 8) {
      const __mmask8 applies = _mm512_cmple_epi64_mask(_mm512_load_si512(u_ + k), nu) &
                               _mm512_cmple_epi64_mask(_mm512_load_si512(g_ + k), ng) &
                               _mm512_cmp_pd_mask(_mm512_load_pd(d_ + k), vd, _CMP_LE_OQ) &
                               _mm512_cmp_pd_mask(_mm512_load_pd(r_ + k), vs, _CMP_LE_OQ);
      b = _mm512_mask_max_pd(b, applies, b, _mm512_load_pd(b_ + k));
    }
    return _mm512_reduce_max_pd(b);
  }
  [[gnu::target("avx512f")]] void gave_back_avx512(double a, const Res& back) {
    const __m512d va = _mm512_set1_pd(a);
    const __m512i bu = _mm512_set1_epi64(back.units), bg = _mm512_set1_epi64(back.gpus);
    const __m512i top = _mm512_set1_epi64(RAISED_MAX);
    for (size_t k = 0; k < CAP; k += 8) {
      const __mmask8 m = _mm512_cmp_pd_mask(_mm512_load_pd(r_ + k), va, _CMP_GT_OQ);
      const __m512i u = _mm512_load_si512(u_ + k), g = _mm512_load_si512(g_ + k);
      _mm512_store_si512(u_ + k, _mm512_mask_min_epi64(u, m, _mm512_add_epi64(u, bu), top));
      _mm512_store_si512(g_ + k, _mm512_mask_min_epi64(g, m, _mm512_add_epi64(g, bg), top));
    }
  }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  // The same two with AVX2, four proofs a round (no 64-bit min or masked max: compares and blends).
  [[gnu::target("avx2")]] double bound_avx2(double now, double s, double d, const Res& need) const {
    const __m256i nu = _mm256_set1_epi64x(need.units);
    const __m256i ng = _mm256_set1_epi64x(need.gpus);
    const __m256d vd = _mm256_set1_pd(d);
    const __m256d vs = _mm256_set1_pd(s);
    __m256d b = _mm256_set1_pd(now);
    for (size_t k = 0; k < CAP; k += 4) {
      const __m256i more = _mm256_or_si256(  // the proof needs more than the job
          _mm256_cmpgt_epi64(_mm256_load_si256(reinterpret_cast<const __m256i*>(u_ + k)), nu),
          _mm256_cmpgt_epi64(_mm256_load_si256(reinterpret_cast<const __m256i*>(g_ + k)), ng));
      const __m256d applies =
          _mm256_andnot_pd(_mm256_castsi256_pd(more),
                           _mm256_and_pd(_mm256_cmp_pd(_mm256_load_pd(d_ + k), vd, _CMP_LE_OQ),
                                         _mm256_cmp_pd(_mm256_load_pd(r_ + k), vs, _CMP_LE_OQ)));
      b = _mm256_blendv_pd(b, _mm256_max_pd(b, _mm256_load_pd(b_ + k)), applies);
    }
    const __m128d half = _mm_max_pd(_mm256_castpd256_pd128(b), _mm256_extractf128_pd(b, 1));
    return _mm_cvtsd_f64(_mm_max_pd(half, _mm_unpackhi_pd(half, half)));
  }
  [[gnu::target("avx2")]] void gave_back_avx2(double a, const Res& back) {
    const __m256d va = _mm256_set1_pd(a);
    const __m256i bu = _mm256_set1_epi64x(back.units), bg = _mm256_set1_epi64x(back.gpus);
    const __m256i top = _mm256_set1_epi64x(RAISED_MAX);
    for (size_t k = 0; k < CAP; k += 4) {
      const __m256i m = _mm256_castpd_si256(_mm256_cmp_pd(_mm256_load_pd(r_ + k), va, _CMP_GT_OQ));
      int64_t* const xs[2] = {u_ + k, g_ + k};
      for (int q = 0; q < 2; ++q) {
        const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(xs[q]));
        const __m256i sum = _mm256_add_epi64(v, q == 0 ? bu : bg);  // both <= 2^62: no overflow
        const __m256i capped = _mm256_blendv_epi8(sum, top, _mm256_cmpgt_epi64(sum, top));
        _mm256_store_si256(reinterpret_cast<__m256i*>(xs[q]), _mm256_blendv_epi8(v, capped, m));
      }
    }
  }
#endif

  alignas(64) int64_t u_[CAP] = {};
  alignas(64) int64_t g_[CAP] = {};
  alignas(64) double d_[CAP] = {};
  alignas(64) double b_[CAP] = {};
  alignas(64) double r_[CAP] = {};  // INF in unused entries (clear)
  size_t next_ = 0;
  bool vector_ = profile_avx512_chosen();
  bool avx2_ = profile_avx2_chosen();
};

// The running jobs ordered by (estimated end, start order), which EASY walks from the earliest
// estimated end to find the blocked job's shadow time. A sorted flat vector instead of a node
// set: no allocation per start, and the walk reads consecutive memory. An erase at the front (the
// earliest estimated end, where jobs tend to end) only advances `begin_`; an erase elsewhere
// leaves a dead entry (slot -1, key kept, so the order holds) that walks skip. An insert moves the
// shorter side: the entries before it into the space freed at the front, or those after it.
class RunningByEnd {
 public:
  struct Entry {
    double est_end;
    int64_t seq;
    int32_t slot;  // -1: erased
    Res need;      // the job's, so that a walk reads one array
    bool operator<(const Entry& o) const {
      return std::tie(est_end, seq) < std::tie(o.est_end, o.seq);
    }
  };

  size_t size() const { return live_; }

  void insert(double est_end, int64_t seq, int32_t slot, const Res& need) {
    const Entry e{est_end, seq, slot, need};
    ++live_;
    if (v_.empty() || v_.back() < e) {
      v_.push_back(e);
      return;
    }
    const auto first = v_.begin() + static_cast<std::ptrdiff_t>(begin_);
    const auto at = std::lower_bound(first, v_.end(), e);
    if (begin_ > 0 && at - first <= v_.end() - at) {
      std::move(first, at, first - 1);
      *(at - 1) = e;
      --begin_;
    } else {
      v_.insert(at, e);
    }
  }

  void erase(double est_end, int64_t seq) {
    const Entry key{est_end, seq, 0, {}};
    const auto first = v_.begin() + static_cast<std::ptrdiff_t>(begin_);
    const auto at = first != v_.end() && first->seq == seq ? first  // the usual case
                                                           : std::lower_bound(first, v_.end(), key);
    MLPRIO_REPLAY_CHECK(at != v_.end() && at->seq == seq && at->est_end == est_end && at->slot >= 0,
                        "a running job is missing from the estimated-end order");
    at->slot = -1;
    --live_;
    ++dead_;
    while (begin_ < v_.size() && v_[begin_].slot < 0) {
      ++begin_;
      --dead_;
    }
    // Compact once the erased entries (front and dead) outnumber the live ones, past a small
    // floor that leaves room at the front for inserts: walks then read at most about twice the
    // live entries, memory follows the running jobs, and the cost spreads over the erases.
    if (begin_ + dead_ > std::max<size_t>(live_, 32)) {
      v_.erase(v_.begin(), v_.begin() + static_cast<std::ptrdiff_t>(begin_));
      v_.erase(std::remove_if(v_.begin(), v_.end(), [](const Entry& x) { return x.slot < 0; }),
               v_.end());
      begin_ = dead_ = 0;
    }
  }

  // Calls f(entry) for the running jobs in order until f returns true.
  template <typename F>
  void walk(F&& f) const {
    for (size_t k = begin_; k < v_.size(); ++k)
      if (v_[k].slot >= 0 && f(v_[k])) return;
  }

 private:
  std::vector<Entry> v_;
  size_t begin_ = 0;            // entries before it are erased
  size_t live_ = 0, dead_ = 0;  // dead_: erased entries at or after begin_
};

class StandardEngine {
 public:
  StandardEngine(const SimConfig& c, QueuePolicy& p) : cfg_(c), policy_(p), metrics_(c) {
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

  SimResult run(const JobSource& next) {
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

  // Puts the engine in `st` at time t_begin, with the next job taking trace index `first_index`
  // and `all` the full job list the state's indices refer to. Only a fresh engine may resume.
  void resume(const EngineState& st, std::span<const Job> all, int64_t first_index, double t_begin,
              double t_end) {
    if (online_) throw ConfigError("online estimates cannot be replayed in time segments");
    resumed_ = true;
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
    MLPRIO_REPLAY_CHECK(free_.units >= 0 && free_.gpus >= 0,
                        "a carried state overfills the machine");
    for (const auto& s : st.queue) {
      const int32_t slot = fill(s);
      keep_view(slot);  // only queued jobs are scored (running ones need no view)
      queue_.push_back(slot);
    }
  }

  // Segment mode: record a checkpoint every `every` event instants (every > 0).
  void record_checkpoints(int64_t every) { checkpoint_every_ = every; }
  // Segment mode, repair: compare the state with `recorded`'s checkpoints at their instants and
  // stop at the first equal one. `recorded` must outlive run().
  void compare_with(const std::vector<Checkpoint>& recorded) { recorded_ = &recorded; }
  bool rejoined() const { return rejoined_; }
  size_t rejoin_index() const { return ref_next_; }
  std::vector<Checkpoint>& checkpoints() { return checkpoints_; }
  int64_t events() const { return events_; }
  int64_t started() const { return next_seq_started_; }

  // The state now, just before instant t: after run() stopped at a boundary t, or at the top of
  // the event loop with every event before t applied and none at t.
  EngineState export_state(double t) const {
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

  TimeSeries take_series() { return std::move(series_); }

  // Gives the sink every point but the last, which the next pass may still overwrite.
  void hand_series_to_sink() {
    const size_t n = series_.time.size() - 1;
    cfg_.sink->series(series_, n);
    const auto drop = [n](auto& v) { v.erase(v.begin(), v.begin() + static_cast<ptrdiff_t>(n)); };
    drop(series_.time);
    drop(series_.queue_length);
    drop(series_.busy_cores);
    drop(series_.mean_bsld);
  }

 private:
  Checkpoint checkpoint_at(double t) const {
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
  bool at_instant(double t) {
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

  // --correction: a running job that will outlive its estimate gets an event at its estimated
  // end (jobs that end by their estimate never need one).
  void watch_expiry(const SimJob& j, int32_t slot) {
    if (correction_ == Correction::NONE) return;
    if (j.start + j.duration > j.est_end) expiries_.push({j.est_end, j.seq, slot});
  }

  // The next estimate of a job that reached `est_end` still running (see Correction).
  double corrected_end(const SimJob& j) const {
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
  static constexpr double MAX_LONG_STEPS = 10000;

  // Applies the corrections due now: each expired job gets its next estimate and, when it is
  // still short of the job's end, a new expiry. The following scheduling pass sees the new ends.
  void correct_estimates() {
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

  void release_slot(int32_t s) {
    slab_[static_cast<size_t>(s)].next_free = free_head_;
    free_head_ = s;
  }
  int32_t alloc_slot() {
    if (free_head_ >= 0) {
      const int32_t s = free_head_;
      free_head_ = slab_[static_cast<size_t>(s)].next_free;
      return s;
    }
    slab_.emplace_back();
    needs_.emplace_back();
    if (dynamic_) views_.emplace_back();
    return static_cast<int32_t>(slab_.size() - 1);
  }

  // Queues the job whose record was read into `slot` (a spare slot) and returns true, or skips
  // it (no run time or no size, or too large with --too-large skip) and returns false, leaving
  // the slot spare.
  bool submit(int32_t slot) {
    const Job& job = slab_[static_cast<size_t>(slot)].job;
    const int64_t index = next_index_++;
    const int64_t procs = job.procs();
    if (!(job.run >= 0) || procs <= 0) {  // no run time or no size: cannot be replayed
      ++skipped_;
      return false;
    }
    const Machine& m = cfg_.machine;
    Res need;
    need.units = m.allocation == Allocation::NODES
                     ? (procs + m.cores_per_node - 1) / m.cores_per_node
                     : procs;
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
          (m.gpus_per_node > 0 ? " x " + std::to_string(m.gpus_per_node) + " GPUs"
                               : std::string()) +
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
    if (scores_submit_ && !dynamic_) {
      j.score = j.job.submit;
    } else {
      const JobView v = view(j);
      j.score = policy_.score(v, state());
      if (dynamic_) views_[static_cast<size_t>(slot)] = v;  // kept for every pass (order_queue)
    }
    nan_submit_ |= std::isnan(j.job.submit);
    if (dynamic_ || queue_.empty() || !before(slot, queue_.back())) {
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
    if (!prepares_) return;
    j.terms = policy_.prepare(view(j));
    j.terms_set = true;
  }

  void start(int32_t slot) {
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

  // Returns true when the job ended before its estimated end (conservative must replan).
  [[gnu::always_inline]] bool finish(int32_t slot) {
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
    if (tracks_ends_) policy_.on_job_end(view(j), j.start, now_, j.job.procs());
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

  // A dynamic order's queued jobs are scored at every pass: their views are kept, dense by slot,
  // from the time they are queued (a job's view changes only with the wait while it queues).
  void keep_view(int32_t slot) {
    if (dynamic_) views_[static_cast<size_t>(slot)] = view(slab_[static_cast<size_t>(slot)]);
  }
  void check_kept_view(int32_t slot) const {
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

  void order_queue() {
    if (!dynamic_) return;
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
    if (policy_.orders_queue()) apply_policy_order(s);
  }

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

  // Sorts keys_. The queue comes in the previous pass's order, and scores that move with the
  // wait move alike, so it is mostly sorted already: only new jobs and the few that a change of
  // usage or an age cap moved are out of place. An insertion sort then costs about one compare
  // per job; it gives up past 8 moves per job, and std::sort finishes. The trace index makes the
  // order total, so both give the one sorted order. A NaN score or submit time breaks that (it
  // compares false both ways): then std::sort alone, the same compares as a sort of the slots.
  void sort_keys(bool nan) {
    if (!nan && detail::insertion_sort_while_cheap(keys_, std::less<OrderKey>{})) return;
    std::sort(keys_.begin(), keys_.end());
  }

  // The whole-queue hook (QueuePolicy::order_queue): shows the policy the queue in base order and
  // the running jobs, and puts the queue in the order it gives.
  void apply_policy_order(const ClusterState& s) {
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

  void schedule(bool early_end) {
    if (queue_.empty()) {
      wakeup_ = -INF;
      return;
    }
    // EASY starts nothing while fewer units are free than any queued job needs, whatever the
    // order: an order whose sort does not depend on the queue's incoming order (finite scores)
    // is then left as it is, and the next pass sorts it to the order it would have had. Not in
    // segment mode, where checkpoints compare queues and scores as they stand.
    if (cfg_.backfill == Backfill::EASY && free_.units < min_queued_units_ && sort_may_wait_ &&
        !nan_submit_ && recorded_ == nullptr && checkpoint_every_ == 0 && !resumed_) {
      if (cfg_.check_invariants)
        for (int32_t slot : queue_)
          MLPRIO_REPLAY_CHECK(!slab_[static_cast<size_t>(slot)].need.fits_in(free_),
                              "a pass left unsorted could have started a job");
    } else if (dynamic_) {
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

  void schedule_none() {
    size_t i = 0;
    while (i < queue_.size() && slab_[static_cast<size_t>(queue_[i])].need.fits_in(free_))
      start(queue_[i++]);
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  void schedule_easy() {
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
        min_queued_units_ =
            std::min(min_queued_units_, slab_[static_cast<size_t>(slot)].need.units);
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
  void check_kept_pass(const SimJob& head, size_t tried) const {
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
  [[gnu::noinline]] double reserve(const SimJob& head, Res& extra) const {
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

  void place(SimJob& j) {
    const double t = profile_.earliest_fit(now_, j.estimate, j.need);
    MLPRIO_REPLAY_CHECK(t < INF, "no place in the profile for a job that fits the machine");
    profile_.book(t, FreeProfile::slot_end(t, j.estimate), j.need);
    j.res_start = t;
  }

  void schedule_conservative(bool early_end) {
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

  void record_series() {
    if (!cfg_.record_series) return;
    const auto q = static_cast<int64_t>(queue_.size());
    const int64_t busy = (total_.units - free_.units) * unit_cores_;
    if (done_ != mean_bsld_done_) {  // divide only when a job finished since the last pass
      mean_bsld_ = done_bsld_sum_ / static_cast<double>(done_);
      mean_bsld_done_ = done_;
    }
    const double bsld = mean_bsld_;
    const auto same_bsld = [&](double b) {
      return b == bsld || (std::isnan(b) && std::isnan(bsld));
    };
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

  const SimConfig& cfg_;
  QueuePolicy& policy_;
  const bool prepares_ = policy_.prepares();
  const bool tracks_ends_ = policy_.tracks_job_ends();
  const bool scores_submit_ = policy_.scores_submit();
  const bool dynamic_ = policy_.dynamic();  // an order's nature does not change during a run
  const bool sort_may_wait_ =
      policy_.dynamic() && policy_.finite_scores() && !policy_.orders_queue();
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

}  // namespace

namespace detail {

bool set_profile_scan_mode(int mode) {
  profile_scan_mode().store(mode);
  return profile_avx512_chosen() || profile_avx2_chosen();
}

}  // namespace detail

SimResult simulate_stream(const JobSource& next, const SimConfig& config) {
  if (config.profile == Profile::RLSCHEDULER || config.backfill == Backfill::RLSCHEDULER)
    throw ConfigError("the rlscheduler event loop replays a job list; call simulate()");
  if (config.slurm)
    throw ConfigError("the deployed-stack replay reads a job list; call simulate()");
  auto policy = make_policy(config.policy, config.policy_options);
  StandardEngine engine(config, *policy);
  SimResult r = engine.run(next);
  r.agent = policy->agent_stats();
  r.agent_error = policy->agent_last_error();
  return r;
}

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

SimResult simulate(std::span<const Job> jobs, const SimConfig& config) {
  if (config.slurm) {
    if (config.profile != Profile::STANDARD)
      throw ConfigError("--slurm-conf replays what slurmctld does, not the rlscheduler profile");
    return detail::simulate_slurm(jobs, config);
  }
  if (config.profile == Profile::RLSCHEDULER || config.backfill == Backfill::RLSCHEDULER) {
    if (is_agent_policy(config.policy))
      throw ConfigError("policy '" + config.policy +
                        "' reorders the queue, which the rlscheduler profile and backfill "
                        "(a copy of RLScheduler's score sort) do not; use the standard profile "
                        "with none, easy or conservative backfilling");
    if (config.sink != nullptr)
      throw ConfigError("the rlscheduler profile keeps its rows: replay it without a result sink");
    return detail::simulate_rlscheduler(jobs, config);
  }
  size_t i = 0;
  return simulate_stream(
      [&](Job& out) {
        if (i >= jobs.size()) return false;
        out = jobs[i++];
        return true;
      },
      config);
}

}  // namespace mlprio::replay
