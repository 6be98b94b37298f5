// A lower bound for the goal "a whole FCFS+EASY replay within 1x the awk pass": the same SWF
// reader as `mlprio-replay run`, and the least an FCFS+EASY replay has to do, with nothing else.
// Machines of one processor per node (MaxProcs from the header, or --procs), every job's request
// as its estimate (its run time where it has none), the same event order, reservation and
// backfill rule as the engine, its two shortcuts (no pass while nothing queued fits, only the new
// jobs tried after arrivals alone), and only the mean wait, mean bounded slowdown (10 s) and the
// longest wait kept: no policy, no per-user or percentile metrics, no checks, no segments, no
// series. A plain binary heap of completions, a sorted vector of estimated ends, a vector queue.
//
//   bench_easy_floor TRACE.swf [--procs N] [--metrics]
//
// prints `jobs=... avg_wait=... avg_bsld=... max_wait=...`, which must equal `mlprio-replay run
// --trace TRACE.swf --backfill easy --policy fcfs --json`'s fields on such a trace (ctest
// bench_easy_floor_agrees checks it); its time beside run's and awk's is in bench/RESULTS.md.
// --metrics adds the engine's own metric accumulator (MetricsAccumulator: the sums, the waits'
// percentiles, per-user summaries) fed as the engine feeds it, and prints its p95/p99 waits and
// worst user's mean bounded slowdown too: the time it adds is what run's metrics cost.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <queue>
#include <string>
#include <vector>

#include "mlprio/jobs/trace.hpp"
#include "mlprio/replay/detail/metrics.hpp"

namespace {

// A queued job; with METRICS also its user, for the engine's metrics.
template <bool METRICS>
struct QueuedJob {
  double submit, run, estimate;
  int64_t need;
};
template <>
struct QueuedJob<true> {
  double submit, run, estimate;
  int64_t need;
  int32_t user = -1;
};
struct Completion {
  double end;
  int64_t seq, need;
  bool operator>(const Completion& o) const { return end > o.end || (end == o.end && seq > o.seq); }
};
struct EstimatedEnd {
  double end;
  int64_t seq, need;
  bool operator<(const EstimatedEnd& o) const {
    return end < o.end || (end == o.end && seq < o.seq);
  }
};

// One function of about 145 lines on purpose: it is the floor the replay is compared with, so it
// reads, queues and backfills in one loop with no call a compiler might not inline.
template <bool METRICS>
int floor_replay(const std::string& path, int64_t procs) {
  using Queued = QueuedJob<METRICS>;
  auto reader = mlprio::open_job_reader(path);
  mlprio::Job job;
  bool have = reader->next(job);
  if (procs <= 0) procs = reader->header().max_procs;
  if (procs <= 0) {
    std::fprintf(stderr, "bench_easy_floor: %s gives no MaxProcs; pass --procs N\n", path.c_str());
    return 2;
  }
  const auto queued = [](const mlprio::Job& j) {
    Queued q{j.submit, j.run, j.req_time >= 0 ? j.req_time : j.run, j.procs()};
    if constexpr (METRICS) q.user = j.user;
    return q;
  };
  Queued incoming = have ? queued(job) : Queued{};
  int64_t free = procs, seq = 0, started = 0;
  double now = 0, wait_sum = 0, bsld_sum = 0, max_wait = 0;
  std::vector<Queued> queue;
  std::priority_queue<Completion, std::vector<Completion>, std::greater<>> completions;
  std::vector<EstimatedEnd> by_end;  // running jobs by estimated end
  mlprio::replay::SimConfig config;
  config.record_jobs = false;
  config.record_series = false;
  mlprio::replay::detail::MetricsAccumulator metrics(config);
  mlprio::Job started_job;  // what MetricsAccumulator::started reads of a job: submit, user
  const auto start = [&](const Queued& q) {
    if constexpr (METRICS) {
      started_job.submit = q.submit;
      started_job.user = q.user;
      metrics.started(started_job, now, now + q.run, q.estimate, q.need, false);
    }
    free -= q.need;
    const double wait = now - q.submit;
    wait_sum += wait;
    max_wait = std::max(max_wait, wait);
    bsld_sum += mlprio::replay::detail::bounded_slowdown(wait, q.run, 10.0);
    ++started;
    completions.push({now + q.run, seq, q.need});
    const EstimatedEnd e{now + q.estimate, seq++, q.need};
    by_end.insert(std::upper_bound(by_end.begin(), by_end.end(), e), e);
  };
  constexpr double NONE = -std::numeric_limits<double>::infinity();
  // The engine's two shortcuts, which any replay of a long trace should have: no pass while fewer
  // processors are free than the smallest queued job needs (`min_need`, a lower bound), and after
  // arrivals alone (no job ended, the head still blocked) only the new jobs are tried, against
  // the reservation the previous pass left (`kept`: the first `tried` jobs were tried).
  int64_t min_need = std::numeric_limits<int64_t>::max();
  bool kept = false;
  size_t tried = 0;
  double shadow = NONE;  // the head's reserved end (NONE: not worked out)
  int64_t extra = 0;     // what the reservation leaves over
  while (have || !queue.empty() || !completions.empty()) {
    now = completions.empty()
              ? incoming.submit
              : (have ? std::min(completions.top().end, incoming.submit) : completions.top().end);
    while (!completions.empty() && completions.top().end <= now) {
      const Completion c = completions.top();
      completions.pop();
      free += c.need;
      kept = false;
      by_end.erase(std::find_if(by_end.begin(), by_end.end(),
                                [&](const EstimatedEnd& e) { return e.seq == c.seq; }));
    }
    while (have && incoming.submit <= now) {
      if (incoming.run >= 0 && incoming.need > 0) {
        if (incoming.need > procs) {
          std::fprintf(stderr, "bench_easy_floor: a job needs %lld of %lld processors\n",
                       static_cast<long long>(incoming.need), static_cast<long long>(procs));
          return 2;
        }
        queue.push_back(incoming);
        min_need = std::min(min_need, incoming.need);
      }
      have = reader->next(job);
      if (have) incoming = queued(job);
    }
    if (free < min_need) continue;
    size_t head = 0;
    while (head < queue.size() && queue[head].need <= free) start(queue[head++]);
    if (head == queue.size()) {
      queue.clear();
      min_need = std::numeric_limits<int64_t>::max();
      kept = false;
      continue;
    }
    size_t k = head + 1;
    if (head == 0 && kept) {
      k = tried;
    } else {
      shadow = NONE;
    }
    // The candidates in queue order, compacted in place behind the head; the blocked head's
    // reservation is worked out at the first candidate that fits.
    queue[0] = queue[head];
    size_t w = k - head;
    int64_t least = k > head + 1 ? min_need : queue[0].need;
    bool keep = true;  // no backfill ends at or after the reserved end (the next walk agrees)
    for (; k < queue.size() && free > 0; ++k) {
      const Queued q = queue[k];
      bool go = false;
      if (q.need <= free) {
        if (shadow == NONE) {
          int64_t avail = free;
          for (const EstimatedEnd& e : by_end) {
            avail += e.need;
            if (avail >= queue[0].need) {
              shadow = e.end;
              break;
            }
          }
          extra = avail - queue[0].need;
        }
        if (now + q.estimate <= std::max(shadow, now)) {
          keep &= now + q.estimate < shadow;
          go = true;
        } else if (q.need <= extra) {
          extra -= q.need;
          go = true;
        }
      }
      if (go) {
        start(q);
      } else {
        queue[w++] = q;
        least = std::min(least, q.need);
      }
    }
    if (k == queue.size()) min_need = least;
    for (; k < queue.size(); ++k) queue[w++] = queue[k];
    queue.resize(w);
    kept = keep;
    tried = queue.size();
  }
  const double n = static_cast<double>(std::max<int64_t>(started, 1));
  std::printf("jobs=%lld avg_wait=%.6f avg_bsld=%.17g max_wait=%.17g",
              static_cast<long long>(started), wait_sum / n, bsld_sum / n, max_wait);
  if constexpr (METRICS) {
    mlprio::replay::SimResult r;
    metrics.finish(r, static_cast<double>(procs));
    std::printf(" p95_wait=%.17g p99_wait=%.17g max_user_bsld=%.17g", r.summary.p95_wait,
                r.summary.p99_wait, r.summary.max_user_bsld);
  }
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t procs = 0;
  bool metrics = false, usage = argc < 2;
  for (int a = 2; a < argc && !usage; ++a) {
    if (std::strcmp(argv[a], "--metrics") == 0)
      metrics = true;
    else if (std::strcmp(argv[a], "--procs") == 0 && a + 1 < argc)
      procs = std::atoll(argv[++a]);
    else
      usage = true;
  }
  if (usage) {
    std::fprintf(stderr, "usage: bench_easy_floor TRACE.swf [--procs N] [--metrics]\n");
    return 2;
  }
  try {
    return metrics ? floor_replay<true>(argv[1], procs) : floor_replay<false>(argv[1], procs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_easy_floor: %s\n", e.what());
    return 1;
  }
}
