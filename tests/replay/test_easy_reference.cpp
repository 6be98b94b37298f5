// EASY against a plain reference, job by job. The engine keeps the running jobs in a sorted flat
// vector with lazy erases, works the reservation out only when a candidate fits, and skips passes
// by a lower bound on the queued needs; the reference below does none of that (it sorts the
// running jobs at every pass and scans the whole queue), following replay/README.md's rules:
// completions, then arrivals in trace order, then one pass per event instant. Random workloads of
// many small jobs on a large machine keep hundreds of jobs running, ending out of estimate order
// (estimates above and below the run time), so every path of the running list is taken.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "mlprio/replay/simulator.hpp"

using namespace mlprio;
using namespace mlprio::replay;

namespace {

struct RefJob {
  int64_t id;
  double submit, run, est;
  int64_t need;
};

// FCFS queue, EASY backfilling in queue order or shortest estimate first; start times by id.
std::map<int64_t, double> reference_easy(const std::vector<RefJob>& jobs, int64_t nodes,
                                         bool sjbf) {
  struct Running {
    double end, est_end;
    int64_t seq, need;
  };
  std::map<int64_t, double> start;
  std::vector<size_t> queue;
  std::vector<Running> running;
  int64_t free = nodes, seq = 0;
  size_t next = 0;
  double now = 0;
  auto begin = [&](size_t k) {
    const RefJob& j = jobs[k];
    free -= j.need;
    start[j.id] = now;
    running.push_back({now + j.run, now + j.est, seq++, j.need});
  };
  while (next < jobs.size() || !queue.empty() || !running.empty()) {
    double t = std::numeric_limits<double>::infinity();
    for (const auto& r : running) t = std::min(t, r.end);
    if (next < jobs.size()) t = std::min(t, jobs[next].submit);
    now = t;
    for (size_t k = 0; k < running.size();) {
      if (running[k].end <= now) {
        free += running[k].need;
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
      } else {
        ++k;
      }
    }
    while (next < jobs.size() && jobs[next].submit <= now) queue.push_back(next++);
    size_t i = 0;
    while (i < queue.size() && jobs[queue[i]].need <= free) begin(queue[i++]);
    queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(i));
    if (queue.empty() || free <= 0) continue;
    std::vector<Running> by_est = running;
    std::sort(by_est.begin(), by_est.end(), [](const Running& a, const Running& b) {
      return std::tie(a.est_end, a.seq) < std::tie(b.est_end, b.seq);
    });
    const int64_t head = jobs[queue[0]].need;
    int64_t avail = free;
    double shadow = 0;
    for (const auto& r : by_est) {
      avail += r.need;
      if (head <= avail) {
        shadow = std::max(r.est_end, now);
        break;
      }
    }
    int64_t extra = avail - head;
    std::vector<size_t> cand(queue.begin() + 1, queue.end());
    if (sjbf)
      std::stable_sort(cand.begin(), cand.end(),
                       [&](size_t a, size_t b) { return jobs[a].est < jobs[b].est; });
    std::vector<size_t> started;
    for (size_t k : cand) {
      const RefJob& j = jobs[k];
      if (free <= 0 || j.need > free) continue;
      if (now + j.est <= shadow) {
        begin(k);
        started.push_back(k);
      } else if (j.need <= extra) {
        extra -= j.need;
        begin(k);
        started.push_back(k);
      }
    }
    std::erase_if(queue, [&](size_t k) {
      return std::find(started.begin(), started.end(), k) != started.end();
    });
  }
  return start;
}

}  // namespace

TEST_CASE("EASY starts every job when a plain reference does, on random deep workloads",
          "[replay][easy][reference]") {
  const int64_t nodes = 256;
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    std::mt19937 rng(seed);
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    std::vector<RefJob> ref;
    std::vector<Job> jobs;
    double submit = 0;
    for (int64_t id = 1; id <= 3000; ++id) {
      submit += uniform(0, 3);  // many jobs arrive at the same instant
      const int size_class = uniform(0, 9);
      const int64_t need =
          size_class < 7 ? 1 : (size_class < 9 ? uniform(2, 16) : uniform(17, 256));
      const double run = uniform(1, 600);
      // Estimates above the run time, equal to it, or below it (the job overruns its estimate).
      const int est_class = uniform(0, 3);
      const double est = est_class == 0 ? run
                                        : (est_class == 1 ? run * 2 + uniform(0, 100)
                                                          : (est_class == 2 ? 600 : run / 2));
      ref.push_back({id, submit, run, est, need});
      Job j;
      j.id = id;
      j.submit = submit;
      j.req_procs = need;
      j.run = run;
      j.req_time = est;
      j.user = static_cast<int32_t>(id % 7);
      jobs.push_back(j);
    }
    for (bool sjbf : {false, true}) {
      SimConfig c;
      c.machine.nodes = nodes;
      c.machine.cores_per_node = 1;
      c.backfill = Backfill::EASY;
      c.backfill_order = sjbf ? BackfillOrder::SJBF : BackfillOrder::QUEUE;
      c.check_invariants = true;
      const SimResult r = simulate(jobs, c);
      const auto want = reference_easy(ref, nodes, sjbf);
      REQUIRE(r.jobs.size() == want.size());
      int64_t differ = 0;
      for (const auto& o : r.jobs) differ += o.start == want.at(o.id) ? 0 : 1;
      INFO("seed " << seed << (sjbf ? " sjbf" : " fcfs"));
      CHECK(differ == 0);
    }
  }
}
