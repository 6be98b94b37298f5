// The per-run metrics both simulation engines share (internal to mlprio-replay; benchmarks and
// tests use them too): WaitQuantiles, the waits' exact p95/p99/max in bounded memory, and
// MetricsAccumulator, which turns started jobs into Summary, per-user summaries and JobOutcome
// rows (handed to a ResultSink in blocks where the run has one). Not part of the stable API.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "mlprio/replay/simulator.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MLPRIO_WAITS_AVX512 1
#else
#define MLPRIO_WAITS_AVX512 0
#endif

namespace mlprio::replay::detail {

inline double bounded_slowdown(double wait, double run, double threshold) {
  return std::max(1.0, (wait + run) / std::max(run, threshold));
}

// Rows a run hands its ResultSink at a time.
inline constexpr size_t SINK_BLOCK_ROWS = 65536;

// push_back for the vectors that grow with the whole run (the waits, the time series): when full,
// reserve four times the capacity instead of twice. Pages that are reserved but not yet written
// are never touched, and each reallocation of a large vector is a fresh mapping that faults in
// page by page: growing by 4 touches about 1.33x the final size instead of 2x, and copies less.
template <typename T>
[[gnu::always_inline]] inline void append_growing(std::vector<T>& v, const T& x) {
  if (v.size() == v.capacity()) [[unlikely]]
    v.reserve(std::max<size_t>(1024, 4 * v.capacity()));
  v.emplace_back(x);
}

// The waits' nearest-rank p95 and p99 (the smallest wait with at least p % of the jobs at or
// below) and their maximum, exact, in memory that stops growing with the trace. The first
// `histogram_after` waits are kept one by one and selected at the end (linear; what every window
// of a sweep or tune of fewer jobs uses). Past that the waits are counted instead: one 32-bit
// counter per whole second up to the longest whole-second wait seen (at most HISTOGRAM_SECONDS of
// them, 4 MB), and only the waits that are not whole seconds under that bound (fractions, waits of
// twelve days or more) are kept one by one, as is a wait whose counter is full. Both give the same
// values, bit for bit (test_wait_quantiles).
//
// Counting is deferred: add() only stores the wait in a block of BLOCK waits (8 KB), and a full
// block is sorted out by one loop with no branch on the values (a replay's waits mix zeros, short
// and long waits in no predictable order), 16 at a time with AVX-512 where the CPU has it. Zeros,
// most waits, are only counted; the other whole seconds shorter than NEAR_SECONDS have their
// counters (64 KB) incremented at once; the longer ones are gathered, `far_block` at a time, and
// counted grouped by the 64 KB window their counters lie in, so that the increments stay within
// cached memory. The history of bench/RESULTS.md has what each step gained.
class WaitQuantiles {
 public:
  static constexpr size_t HISTOGRAM_AFTER = size_t{1} << 16;    // 512 KB of waits
  static constexpr size_t HISTOGRAM_SECONDS = size_t{1} << 20;  // 12.1 days, 4 MB of counters
  static constexpr size_t FAR_BLOCK = size_t{1} << 14;          // long waits gathered (64 KB)
  static constexpr size_t BLOCK = size_t{1} << 10;              // waits stored before sorting out

  // `far_block` (for tests) also bounds the block add() fills, so that small values exercise
  // both flushes.
  explicit WaitQuantiles(size_t histogram_after = HISTOGRAM_AFTER, size_t far_block = FAR_BLOCK)
      : after_(histogram_after),
        far_block_(std::max<size_t>(far_block, 1)),
        block_size_(std::min(far_block_, BLOCK)) {
    if (after_ == 0) start_counting();
  }

  void add(double wait) {
    ++n_;
    if (counting_) {
      store(wait);
      return;
    }
    append_growing(waits_, wait);
    if (waits_.size() >= after_) [[unlikely]] {
      std::vector<double> kept;
      kept.swap(waits_);
      start_counting();
      for (double w : kept) store(w);
    }
  }

  struct Result {
    double p95 = 0, p99 = 0, max = 0;
  };

  // After the last add(); needs at least one wait. Reorders the kept waits.
  Result finish() {
    const auto n = static_cast<double>(n_);
    const auto rank = [&](double p) {
      const auto k = static_cast<size_t>(std::ceil(p / 100.0 * n));
      return std::max<size_t>(k, 1) - 1;
    };
    const size_t k95 = rank(95), k99 = rank(99);
    Result r;
    if (!counting_) {
      // Selection, not a full sort: p95, then p99 among the waits above it, then the maximum
      // among those above that.
      const auto at = [&](size_t k) { return waits_.begin() + static_cast<std::ptrdiff_t>(k); };
      std::nth_element(waits_.begin(), at(k95), waits_.end());
      r.p95 = waits_[k95];
      std::nth_element(at(k95), at(k99), waits_.end());
      r.p99 = waits_[k99];
      r.max = *std::max_element(at(k99), waits_.end());
      return r;
    }
    sort_out_block();
    count_far();
    // The counted seconds and the kept waits merged in increasing order (equal values may come
    // in either order: the k-th value is the same).
    std::sort(other_.begin(), other_.end());
    size_t seen = 0, o = 0;
    const auto take = [&](double value, size_t count) {
      if (k95 >= seen && k95 < seen + count) r.p95 = value;
      if (k99 >= seen && k99 < seen + count) r.p99 = value;
      seen += count;
    };
    // The longest counted second is the last counter in use; the walk stops once both ranks
    // are passed, and takes every counter, zero or not (no branch on the counts).
    size_t used = counts_.size();
    while (used > 0 && counts_[used - 1] == 0) --used;
    if (used > 0) r.max = static_cast<double>(used - 1);
    for (size_t sec = 0; sec < used && seen <= k99; ++sec) {
      const auto v = static_cast<double>(sec);
      for (; o < other_.size() && other_[o] < v; ++o) take(other_[o], 1);
      take(v, counts_[sec]);
    }
    for (; o < other_.size() && seen <= k99; ++o) take(other_[o], 1);
    if (!other_.empty()) r.max = std::max(r.max, other_.back());
    return r;
  }

 private:
  static constexpr size_t NEAR_SECONDS = size_t{1} << 14;  // one window of counters, 64 KB
  static constexpr size_t WINDOWS = HISTOGRAM_SECONDS / NEAR_SECONDS;
  static constexpr size_t ROOM = 16;  // entries past a list's end a vector store may write

  // How many of a block's waits went to each list (far: gathered so far, with earlier blocks').
  struct Sorted {
    uint64_t zeros;
    size_t near, far, odd;
  };

  void start_counting() {
    counting_ = true;
    counts_.assign(NEAR_SECONDS, 0);
    block_.resize(block_size_);
    near_.resize(block_size_ + ROOM);
    far_.resize(far_block_ + block_size_ + ROOM);
    odd_.resize(block_size_ + ROOM);
  }

  // Counting: the wait stored, and the block sorted out once full.
  void store(double w) {
    block_[stored_++] = w;
    if (stored_ == block_size_) [[unlikely]]
      sort_out_block();
  }

  // One counter up, or the wait kept where the counter is full (2^32 - 1 jobs of one second).
  void count_one(uint32_t sec) {
    uint32_t& c = counts_[sec];
    if (c != UINT32_MAX) [[likely]]
      ++c;
    else
      append_growing(other_, static_cast<double>(sec));
  }

  // The stored waits sorted out without a branch on their values: zeros counted, the other whole
  // seconds under NEAR_SECONDS counted at once, the longer whole seconds in range gathered for
  // count_far(), the rest kept. Every wait is written to each list and only the list it belongs
  // to moves on.
  void sort_out_block() {
    const size_t n = stored_;
    stored_ = 0;
    Sorted o{0, 0, far_count_, 0};
    uint32_t* const near_at = near_.data();
    uint32_t* const far_at = far_.data();
    double* const odd_at = odd_.data();
    size_t k = 0;
#if MLPRIO_WAITS_AVX512
    static const bool avx512 = __builtin_cpu_supports("avx512f");
    if (avx512) k = sort_out_avx512(n, o);
#endif
    uint64_t& zeros = o.zeros;
    size_t &near = o.near, &far = o.far, &odd = o.odd;
    constexpr auto top = static_cast<double>(HISTOGRAM_SECONDS);
    for (; k < n; ++k) {
      const double w = block_[k];
      const bool in_range = (w >= 0) & (w < top);  // false for NaN
      const auto sec = static_cast<uint32_t>(in_range ? w : 0.0);
      const bool counted = in_range & (static_cast<double>(sec) == w);
      const bool zero = w == 0;  // 0 and -0, both counted as second 0
      zeros += zero;
      near_at[near] = sec;
      near += counted & !zero & (sec < NEAR_SECONDS);
      far_at[far] = sec;
      far += counted & (sec >= NEAR_SECONDS);
      odd_at[odd] = w;
      odd += !counted;
    }
    if (zeros > 0) {
      const uint64_t c = counts_[0] + zeros;
      counts_[0] = static_cast<uint32_t>(std::min<uint64_t>(c, UINT32_MAX));
      for (uint64_t extra = c > UINT32_MAX ? c - UINT32_MAX : 0; extra > 0; --extra)
        append_growing(other_, 0.0);
    }
    for (size_t i = 0; i < near; ++i) count_one(near_at[i]);
    for (size_t i = 0; i < odd; ++i) append_growing(other_, odd_at[i]);
    far_count_ = far;
    if (far_count_ >= far_block_) count_far();
  }

#if MLPRIO_WAITS_AVX512
// GCC 12's AVX-512 intrinsics fill unused lanes from _mm512_undefined_*(), a self-initialised
// variable that -Wmaybe-uninitialized reports where they are inlined. Nothing here reads it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
  // sort_out_block()'s loop on 16 waits at a time, for the first n rounded down to 16 (returned):
  // the same tests as vectors, and each list's entries compressed and stored whole (the lists
  // have 16 entries of room past any block). Needs AVX-512 F.
  [[gnu::target("avx512f")]] size_t sort_out_avx512(size_t n, Sorted& o) {
    const __m512d zero = _mm512_setzero_pd();
    const __m512d top = _mm512_set1_pd(static_cast<double>(HISTOGRAM_SECONDS));
    const __m512i near_seconds = _mm512_set1_epi32(static_cast<int>(NEAR_SECONDS));
    uint32_t* const near_at = near_.data();
    uint32_t* const far_at = far_.data();
    double* const odd_at = odd_.data();
    const double* const w = block_.data();
    const size_t end = n & ~size_t{15};
    for (size_t k = 0; k < end; k += 16) {
      const __m512d lo = _mm512_loadu_pd(w + k), hi = _mm512_loadu_pd(w + k + 8);
      // In [0, top) (false for NaN), then whole: the second converted back equals the wait.
      const __mmask8 in_lo =
          _mm512_cmp_pd_mask(lo, zero, _CMP_GE_OQ) & _mm512_cmp_pd_mask(lo, top, _CMP_LT_OQ);
      const __mmask8 in_hi =
          _mm512_cmp_pd_mask(hi, zero, _CMP_GE_OQ) & _mm512_cmp_pd_mask(hi, top, _CMP_LT_OQ);
      const __m256i sec_lo = _mm512_maskz_cvttpd_epu32(in_lo, lo);
      const __m256i sec_hi = _mm512_maskz_cvttpd_epu32(in_hi, hi);
      const __mmask8 whole_lo =
          in_lo & _mm512_cmp_pd_mask(_mm512_cvtepu32_pd(sec_lo), lo, _CMP_EQ_OQ);
      const __mmask8 whole_hi =
          in_hi & _mm512_cmp_pd_mask(_mm512_cvtepu32_pd(sec_hi), hi, _CMP_EQ_OQ);
      const __m512i sec = _mm512_inserti64x4(_mm512_castsi256_si512(sec_lo), sec_hi, 1);
      const auto counted = static_cast<__mmask16>(whole_lo | (whole_hi << 8));
      const auto is_zero = static_cast<__mmask16>(_mm512_cmp_pd_mask(lo, zero, _CMP_EQ_OQ) |
                                                  (_mm512_cmp_pd_mask(hi, zero, _CMP_EQ_OQ) << 8));
      const __mmask16 short_sec = _mm512_cmplt_epu32_mask(sec, near_seconds);
      const auto near = static_cast<__mmask16>(counted & short_sec & ~is_zero);
      const auto far = static_cast<__mmask16>(counted & ~short_sec);
      o.zeros += static_cast<uint64_t>(__builtin_popcount(is_zero));
      _mm512_storeu_si512(near_at + o.near, _mm512_maskz_compress_epi32(near, sec));
      o.near += static_cast<size_t>(__builtin_popcount(near));
      _mm512_storeu_si512(far_at + o.far, _mm512_maskz_compress_epi32(far, sec));
      o.far += static_cast<size_t>(__builtin_popcount(far));
      const auto odd_lo = static_cast<__mmask8>(~whole_lo),
                 odd_hi = static_cast<__mmask8>(~whole_hi);
      _mm512_storeu_pd(odd_at + o.odd, _mm512_maskz_compress_pd(odd_lo, lo));
      o.odd += static_cast<size_t>(__builtin_popcount(odd_lo));
      _mm512_storeu_pd(odd_at + o.odd, _mm512_maskz_compress_pd(odd_hi, hi));
      o.odd += static_cast<size_t>(__builtin_popcount(odd_hi));
    }
    return end;
  }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

  // Counts the gathered long waits window by window (a counting sort on the window, then the
  // increments, each within 64 KB of counters).
  void count_far() {
    const size_t n = far_count_;
    far_count_ = 0;
    if (n == 0) return;
    uint32_t top = 0;
    for (size_t k = 0; k < n; ++k) top = std::max(top, far_[k]);
    if (top >= counts_.size())
      counts_.resize(std::min(HISTOGRAM_SECONDS, std::max<size_t>(top + 1, 2 * counts_.size())), 0);
    size_t at[WINDOWS + 1] = {};
    for (size_t k = 0; k < n; ++k) ++at[far_[k] / NEAR_SECONDS + 1];
    for (size_t k = 1; k <= WINDOWS; ++k) at[k] += at[k - 1];
    grouped_.resize(n);
    for (size_t k = 0; k < n; ++k) grouped_[at[far_[k] / NEAR_SECONDS]++] = far_[k];
    for (uint32_t sec : grouped_) count_one(sec);
  }

  size_t after_, far_block_, block_size_;
  size_t n_ = 0;
  bool counting_ = false;
  std::vector<double> waits_;     // before counting: every wait
  std::vector<uint32_t> counts_;  // counting: jobs per whole second of wait
  std::vector<double> other_;     // counting: the waits that are not counted
  std::vector<double> block_;     // counting: waits stored, stored_ of them
  size_t stored_ = 0;
  std::vector<uint32_t> near_;  // sort_out_block()'s short waits (scratch)
  std::vector<double> odd_;     // sort_out_block()'s waits to keep (scratch)
  std::vector<uint32_t> far_;   // long whole-second waits gathered, far_count_ of them
  size_t far_count_ = 0;
  std::vector<uint32_t> grouped_;  // count_far()'s, grouped by window
};

class MetricsAccumulator {
 public:
  explicit MetricsAccumulator(const SimConfig& c) : cfg_(c) {}

  [[gnu::always_inline]] void started(const Job& j, double start, double end, double estimate,
                                      int64_t procs, bool killed, int64_t site = 0,
                                      int64_t priority = 0) {
    const double run = end - start;
    const double wait = start - j.submit;
    const double bsld = bounded_slowdown(wait, run, cfg_.bsld_threshold);
    if (n_ == 0) first_submit_ = j.submit;
    first_submit_ = std::min(first_submit_, j.submit);
    last_end_ = std::max(last_end_, end);
    last_start_ = std::max(last_start_, start);
    ++n_;
    sum_wait_ += wait;
    sum_bsld_ += bsld;
    waits_.add(wait);
    sum_turn_ += wait + run;
    core_seconds_ += run * static_cast<double>(procs);
    killed_ += killed ? 1 : 0;
    // Consecutive jobs are often the same user's: look the user up only when it changes (the
    // map's elements do not move when it grows).
    if (user_ == nullptr || j.user != user_id_) {
      user_ = &users_[j.user];
      user_id_ = j.user;
    }
    UserSummary& u = *user_;
    ++u.jobs;
    u.mean_wait += wait;  // sums until finish()
    u.mean_bsld += bsld;
    u.core_seconds += run * static_cast<double>(procs);
    if (cfg_.record_jobs) {
      JobOutcome o;
      o.id = j.id;
      o.user = j.user;
      o.submit = j.submit;
      o.start = start;
      o.end = end;
      o.wait = wait;
      o.run = run;
      o.bsld = bsld;
      o.estimate = estimate;
      o.procs = procs;
      o.killed = killed ? 1 : 0;
      o.site = site;
      o.priority = priority;
      jobs_.push_back(o);
      if (cfg_.sink != nullptr && jobs_.size() >= SINK_BLOCK_ROWS) [[unlikely]] {
        cfg_.sink->jobs(jobs_);
        jobs_.clear();
      }
    }
  }

  double last_start() const { return last_start_; }
  double first_submit() const { return first_submit_; }
  double core_seconds() const { return core_seconds_; }

  void finish(SimResult& r, double total_cores) {
    Summary& s = r.summary;
    s.jobs = n_;
    s.killed = killed_;
    if (n_ > 0) {
      const double n = static_cast<double>(n_);
      s.avg_wait = sum_wait_ / n;
      s.avg_bsld = sum_bsld_ / n;
      s.avg_turnaround = sum_turn_ / n;
      s.first_submit = first_submit_;
      s.last_end = last_end_;
      s.makespan = last_end_ - first_submit_;
      s.utilization = s.makespan > 0 ? core_seconds_ / (s.makespan * total_cores) : 0.0;
      const WaitQuantiles::Result q = waits_.finish();
      s.p95_wait = q.p95;
      s.p99_wait = q.p99;
      s.max_wait = q.max;
    }
    r.users.reserve(users_.size());
    for (auto& [id, u] : users_) {
      u.user = id;
      u.mean_wait /= static_cast<double>(u.jobs);
      u.mean_bsld /= static_cast<double>(u.jobs);
      r.users.push_back(u);
    }
    std::sort(r.users.begin(), r.users.end(),
              [](const UserSummary& a, const UserSummary& b) { return a.user < b.user; });
    // Per-user fairness over the users' mean bounded slowdowns (in user order, so the sums are
    // the same on every run): the worst user, and Jain's index (sum x)^2 / (k sum x^2).
    double sx = 0, sxx = 0;
    for (const auto& u : r.users) {
      s.max_user_bsld = std::max(s.max_user_bsld, u.mean_bsld);
      sx += u.mean_bsld;
      sxx += u.mean_bsld * u.mean_bsld;
    }
    s.jain_user_bsld = sxx > 0 ? sx * sx / (static_cast<double>(r.users.size()) * sxx) : 1.0;
    if (cfg_.sink != nullptr) {
      if (!jobs_.empty()) cfg_.sink->jobs(jobs_);
      jobs_.clear();
    } else {
      r.jobs = std::move(jobs_);
    }
  }

 private:
  const SimConfig& cfg_;
  int64_t n_ = 0, killed_ = 0;
  double sum_wait_ = 0, sum_bsld_ = 0, sum_turn_ = 0, core_seconds_ = 0;
  double first_submit_ = 0, last_end_ = 0, last_start_ = 0;
  std::unordered_map<int32_t, UserSummary> users_;
  UserSummary* user_ = nullptr;  // users_[user_id_], the last job's user
  int32_t user_id_ = 0;
  std::vector<JobOutcome> jobs_;
  WaitQuantiles waits_;
};

}  // namespace mlprio::replay::detail
