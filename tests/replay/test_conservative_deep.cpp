// Conservative backfilling on deep queues (issue 14): the schedules of seeded Lublin workloads
// loaded far past the machine (queues of hundreds of jobs) must stay the ones the original
// list-profile engine gave, job by job, whatever structure replaces it. The checksums below were
// computed with that engine (commit 1ca6167) over every job's id, start and end; a changed
// checksum means a changed schedule. The configurations cover static and dynamic queue orders,
// GPUs (two resource dimensions), core allocation, exact estimates and the costly checks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "../../replay/lib/engine_common.hpp"
#include "../support/skip.hpp"
#include "mlprio/jobs/lublin.hpp"
#include "mlprio/replay/simulator.hpp"

using namespace mlprio;
using namespace mlprio::replay;

namespace {

std::vector<Job> deep_workload(uint64_t seed, int64_t nodes, int64_t count) {
  LublinOptions o;
  o.nodes = nodes;
  o.seed = seed;
  o.load_scale = 2.5;
  o.req_time = LublinReqTime::FACTOR;
  std::vector<Job> jobs = generate_lublin(o, count);
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].user = static_cast<int32_t>(i % 7);
  return jobs;
}

// FNV-1a over (id, start, end) of every outcome, in outcome order.
uint64_t schedule_checksum(const SimResult& r) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 1099511628211ULL;
    }
  };
  for (const auto& o : r.jobs) {
    mix(static_cast<uint64_t>(o.id));
    mix(std::bit_cast<uint64_t>(o.start));
    mix(std::bit_cast<uint64_t>(o.end));
  }
  return h;
}

struct DeepCase {
  const char* name;
  const char* policy;
  bool gpus;
  bool exact_estimates;
  bool check_invariants;
  uint64_t seed;
  int64_t nodes;
  uint64_t expected;
};

// Every case under one scan of the free profile (1: the step loop, 2: AVX-512).
void check_deep_cases(int mode) {
  const DeepCase cases[] = {
      {"fcfs", "fcfs", false, false, false, 1, 64, 12443938013031673213ULL},
      {"fcfs checked", "fcfs", false, false, true, 1, 64, 12443938013031673213ULL},
      {"sjf", "sjf", false, false, false, 1, 64, 5241300670720959829ULL},
      {"multifactor (dynamic order)", "multifactor", false, false, false, 1, 64,
       12532192500386366955ULL},
      {"wfp3 (dynamic order)", "wfp3", false, false, false, 1, 64, 17294032589792311147ULL},
      {"fcfs with scarce GPUs, cores", "fcfs", true, false, false, 1, 64, 16294918703196961173ULL},
      {"fcfs exact estimates", "fcfs", false, true, false, 1, 64, 16460981109369251702ULL},
      {"fcfs, 128 nodes", "fcfs", false, false, false, 2, 128, 11986225383931528766ULL},
  };
  replay::detail::set_profile_scan_mode(mode);
  for (const DeepCase& c : cases) {
    std::vector<Job> input = deep_workload(c.seed, c.nodes, 4000);
    SimConfig cfg;
    cfg.machine = {c.nodes, 1, 0, Allocation::NODES};
    if (c.gpus) {
      // One GPU per node and every other job asking for two per node: GPUs bind as often as
      // cores, so reservations are placed in two dimensions.
      cfg.machine = {c.nodes, 4, 1, Allocation::CORES};
      for (size_t i = 0; i < input.size(); ++i) {
        const int64_t nodes = input[i].procs();
        input[i].req_procs = input[i].alloc_procs = 4 * nodes;
        input[i].req_gpus =
            static_cast<double>(i % 2 == 0 ? std::min<int64_t>(2 * nodes, c.nodes) : 0);
      }
    }
    cfg.policy = c.policy;
    cfg.backfill = Backfill::CONSERVATIVE;
    cfg.check_invariants = c.check_invariants;
    cfg.record_jobs = true;
    if (c.exact_estimates) cfg.estimate = EstimateMode::ACTUAL;
    const SimResult r = simulate(input, cfg);
    const uint64_t got = schedule_checksum(r);
    INFO(c.name << (mode == 1 ? " (step loop)" : " (AVX-512)") << ": checksum " << got << " over "
                << r.jobs.size() << " jobs");
    CHECK(r.jobs.size() == input.size());
    CHECK(got == c.expected);
  }
  replay::detail::set_profile_scan_mode(0);
}

}  // namespace

TEST_CASE("conservative backfilling keeps the original schedules on deep queues",
          "[replay][conservative][exact]") {
  check_deep_cases(1);
}

TEST_CASE("conservative backfilling's AVX-512 profile scan keeps the same schedules",
          "[replay][conservative][exact]") {
  if (!replay::detail::set_profile_scan_mode(0))
    MLPRIO_SKIP("this CPU lacks AVX-512F: the step loop is the only profile scan here");
  check_deep_cases(2);
}
