// FreeProfile's out-of-line members (free_profile.hpp): forgetting the past, the earliest-fit
// scan with its scalar step loop and AVX-512 and AVX2 run scans (chosen once per profile, see
// profile_scan_mode), bookings and moves with their merges, and the segment boundary's export and
// import. Also the scan-mode switch tests and benchmarks set (detail::set_profile_scan_mode).
#include "free_profile.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "engine_common.hpp"

#if MLPRIO_PROFILE_AVX512
#include <immintrin.h>
#endif

namespace mlprio::replay::standard {

namespace {

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

}  // namespace

bool profile_avx512_chosen() {
  const int mode = profile_scan_mode().load();
  return (mode == 0 || mode == 2) && cpu_has_avx512_profile();
}
bool profile_avx2_chosen() {
  const int mode = profile_scan_mode().load();
  return ((mode == 0 && !cpu_has_avx512_profile()) || mode == 3) && cpu_has_avx2_profile();
}

namespace {

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
[[gnu::target("avx512f")]] double scan_runs_avx512(const double* t, const int64_t* u,
                                                   const int64_t* g, size_t n, size_t i, double now,
                                                   double s, double duration, const Res& need,
                                                   size_t* stop) {
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
    const unsigned decided = _mm512_mask_cmp_pd_mask(sm, T, _mm512_add_pd(cand, vdur), _CMP_GE_OQ) |
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
[[gnu::target("avx2,bmi")]] double scan_runs_avx2(const double* t, const int64_t* u,
                                                  const int64_t* g, size_t n, size_t i, double now,
                                                  double s, double duration, const Res& need,
                                                  size_t* stop) {
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
        __m256i short_of =
            _mm256_cmpgt_epi64(nu, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u + i + q)));
        if constexpr (GPUS)
          short_of = _mm256_or_si256(
              short_of, _mm256_cmpgt_epi64(
                            ng, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + i + q))));
        before_s |= static_cast<uint64_t>(
                        static_cast<unsigned>(_mm256_movemask_pd(_mm256_cmp_pd(T, vs, _CMP_LT_OQ))))
                    << q;
        short_mask |= static_cast<uint64_t>(
                          static_cast<unsigned>(_mm256_movemask_pd(_mm256_castsi256_pd(short_of))))
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
        before_s |= static_cast<uint64_t>(
                        static_cast<unsigned>(_mm256_movemask_pd(_mm256_cmp_pd(T, vs, _CMP_LT_OQ))))
                    << q;
        short_mask |= static_cast<uint64_t>(
                          static_cast<unsigned>(_mm256_movemask_pd(_mm256_castsi256_pd(short_of))))
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

// The same halvings down to 32 steps, then one count of the steps before t among those 32:
// the last five halvings are a chain of dependent loads (on the deep 20k-job trace the two
// searches took 70 % of a booking's time), the count four independent compares.
[[gnu::target("avx512f")]] size_t lower_bound_avx512(const double* data, size_t size, double t) {
  const double* base = data;
  size_t len = size;
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
  return static_cast<size_t>(base - data) + static_cast<size_t>(std::popcount(before));
}
#endif

}  // namespace

Res FreeProfile::free_at(double t) const {
  Res r = at(0);
  for (size_t k = 0; k < t_.size(); ++k) {
    if (t_[k] > t) break;
    r = at(k);
  }
  return r;
}

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
void FreeProfile::move(double old, double to, double d, const Res& need, size_t near) {
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

double FreeProfile::scan_fit(double now, double s, double duration, const Res& need,
                             size_t* stop) const {
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
    return need.gpus > 0 ? scan_runs_avx512<true>(t, units_.data(), gpus_.data(), n, i, now, s,
                                                  duration, need, stop)
                         : scan_runs_avx512<false>(t, units_.data(), gpus_.data(), n, i, now, s,
                                                   duration, need, stop);
  if (avx2_)
    return need.gpus > 0 ? scan_runs_avx2<true>(t, units_.data(), gpus_.data(), n, i, now, s,
                                                duration, need, stop)
                         : scan_runs_avx2<false>(t, units_.data(), gpus_.data(), n, i, now, s,
                                                 duration, need, stop);
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

std::vector<ProfileStep> FreeProfile::export_from(double t) const {
  FreeProfile cut = *this;
  cut.advance(t);
  std::vector<ProfileStep> out;
  for (size_t k = 0; k < cut.t_.size(); ++k) out.push_back({cut.t_[k], cut.units_[k], cut.g(k)});
  return out;
}
void FreeProfile::import(const std::vector<ProfileStep>& steps) {
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

void FreeProfile::erase_range(size_t a, size_t b) {
  const auto from = [a](auto& v) { return v.begin() + static_cast<std::ptrdiff_t>(a); };
  const auto to = [b](auto& v) { return v.begin() + static_cast<std::ptrdiff_t>(b); };
  t_.erase(from(t_), to(t_));
  units_.erase(from(units_), to(units_));
  if (gpus_on_) gpus_.erase(from(gpus_), to(gpus_));
}

// The first k with t_[k] >= t (t_.size() when none), by a binary search whose steps select
// instead of branching: the bookings land anywhere in the profile, so a branch per halving
// mispredicts about every other time.
inline size_t FreeProfile::lower_bound(double t) const {
#if MLPRIO_PROFILE_AVX512
  if (vector_) return lower_bound_avx512(t_.data(), t_.size(), t);
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

inline size_t FreeProfile::split(double t) {
  const size_t k = lower_bound(t);
  const auto it = t_.begin() + static_cast<std::ptrdiff_t>(k);
  if (it != t_.end() && *it == t) return k;
  const auto pos = static_cast<std::ptrdiff_t>(k);
  t_.insert(it, t);
  units_.insert(units_.begin() + pos, units_[k - 1]);
  if (gpus_on_) gpus_.insert(gpus_.begin() + pos, gpus_[k - 1]);
  return k;
}

void FreeProfile::add(double t0, double t1, const Res& need, int sign) {
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

}  // namespace mlprio::replay::standard

namespace mlprio::replay::detail {

bool set_profile_scan_mode(int mode) {
  standard::profile_scan_mode().store(mode);
  return standard::profile_avx512_chosen() || standard::profile_avx2_chosen();
}

}  // namespace mlprio::replay::detail
