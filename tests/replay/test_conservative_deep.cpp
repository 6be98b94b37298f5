// Conservative backfilling on deep queues: the schedules of seeded Lublin workloads
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

#include "../support/skip.hpp"
#include "mlprio/jobs/lublin.hpp"
#include "mlprio/replay/detail/profile_scan.hpp"
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

// Every case under one scan of the free profile (1: the step loop, 2: AVX-512, 3: AVX2).
void check_deep_cases(int mode) {
  const DeepCase cases[] = {
      {"fcfs", "fcfs", false, false, false, 1, 64, 12443938013031673213ULL},
      {"fcfs checked", "fcfs", false, false, true, 1, 64, 12443938013031673213ULL},
      {"sjf", "sjf", false, false, false, 1, 64, 5241300670720959829ULL},
      {"multifactor (dynamic order)", "multifactor", false, false, false, 1, 64,
       12532192500386366955ULL},
      {"wfp3 (dynamic order)", "wfp3", false, false, false, 1, 64, 17294032589792311147ULL},
      {"fcfs with scarce GPUs, cores", "fcfs", true, false, false, 1, 64, 16294918703196961173ULL},
      {"fcfs with scarce GPUs, checked", "fcfs", true, false, true, 1, 64, 16294918703196961173ULL},
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
    INFO(c.name << (mode == 1   ? " (step loop)"
                    : mode == 2 ? " (AVX-512)"
                                : " (AVX2)")
                << ": checksum " << got << " over " << r.jobs.size() << " jobs");
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
  const bool usable = replay::detail::set_profile_scan_mode(2);
  replay::detail::set_profile_scan_mode(0);
  if (!usable) MLPRIO_SKIP("this CPU lacks AVX-512F: no AVX-512 profile scan to compare");
  check_deep_cases(2);
}

TEST_CASE("conservative backfilling's AVX2 profile scan keeps the same schedules",
          "[replay][conservative][exact]") {
  const bool usable = replay::detail::set_profile_scan_mode(3);
  replay::detail::set_profile_scan_mode(0);
  if (!usable) MLPRIO_SKIP("this CPU lacks AVX2: no AVX2 profile scan to compare");
  check_deep_cases(3);
}

// Found by fuzz/fuzz_replay.cpp against a variant that raised a proof's units but not its GPUs
// when a moved reservation gave both back (minimized): on 6 nodes of 4 cores and 1 GPU, a later
// job that needed the GPUs just given back was told by such a proof that it could not move. The
// costly checks compare every probe a proof shortens with a full one.
TEST_CASE("conservative: a proof kept past a move counts the GPUs given back",
          "[replay][conservative][exact]") {
  struct Row {
    double submit, run, req;
    int64_t procs;
    bool alloc;
    double gpus;
    int32_t user;
  };
  const Row rows[] = {
      {180, 114780, 1226711.25, 3, true, 5, 1},    {1500, 123060, 1684383.75, 10, false, -1, 6},
      {1500, 238860, 3358968.75, 26, true, -1, 2}, {3660, 471060, 1766475, 6, true, -1, 2},
      {3900, 400800, 350700, 46, false, -1, 0},    {4800, 539400, 8326987.5, 48, false, 3, 2},
      {6000, 153780, 67278.75, 0, false, -1, 4},   {7620, 135480, 1219320, 52, false, -1, 7},
      {9960, 918960, 8500380, 1, false, 4, 2},     {10980, 2100, 24543.75, 52, false, -1, 2},
      {12720, 83700, 690525, 54, false, -1, 6},    {16140, 64440, 563850, 32, false, 6, 5},
      {16140, 630780, 8673225, 5, true, 2, 1},     {16260, 33060, 340931.25, 4, true, 7, 1},
      {17820, 179940, 2316727.5, 3, true, 1, 6},   {19020, 950280, 7899202.5, 11, false, 3, 0},
  };
  std::vector<Job> jobs;
  for (const Row& r : rows) {
    Job j;
    j.id = static_cast<int64_t>(jobs.size()) + 1;
    j.submit = r.submit;
    j.run = r.run;
    j.req_time = r.req;
    j.req_procs = r.procs;
    j.alloc_procs = r.alloc ? r.procs : -1;
    j.req_gpus = r.gpus;
    j.user = r.user;
    jobs.push_back(j);
  }
  SimConfig cfg;
  cfg.machine = {6, 4, 1, Allocation::CORES};
  cfg.backfill = Backfill::CONSERVATIVE;
  cfg.too_large = TooLarge::SKIP;
  cfg.record_series = false;
  cfg.check_invariants = true;
  for (const std::string& policy : policy_names()) {
    if (policy == "ml") continue;  // needs a model
    cfg.policy = policy;
    for (int scan : {1, 2, 3}) {
      INFO(policy << (scan == 1   ? " (step loop)"
                      : scan == 2 ? " (AVX-512 where the CPU has it)"
                                  : " (AVX2 where the CPU has it)"));
      replay::detail::set_profile_scan_mode(scan);
      CHECK_NOTHROW(simulate(jobs, cfg));
      replay::detail::set_profile_scan_mode(0);
    }
  }
}
