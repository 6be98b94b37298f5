// ProbeProofs: what earlier read-only probes of the free profile proved, so that conservative
// backfilling's later probes in a compression pass start past the profile's early steps. Small
// and on the probe path, so defined here whole (AVX-512 and AVX2 queries, a loop elsewhere).
// Internal to replay/lib.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "free_profile.hpp"
#include "resources.hpp"

#if MLPRIO_PROFILE_AVX512
#include <immintrin.h>
#endif

namespace mlprio::replay::standard {

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

}  // namespace mlprio::replay::standard
