// The rlscheduler compatibility profile: RLScheduler's (SC20) job handling and event loop, copied
// step by step (see ../shared/reference/replay_protocols.md §4 and replay/README.md) so that
// the published Lublin-1/Lublin-2 table can be reproduced to the printed decimals. Use
// prepare_rlscheduler_jobs() on a loaded trace, cut windows with select_window(), and run
// simulate() with SimConfig::profile = Profile::RLSCHEDULER.
#pragma once

#include <cstdint>
#include <vector>

#include "mlprio/jobs/job.hpp"
#include "mlprio/replay/simulator.hpp"

namespace mlprio {
struct TraceHeader;
}

namespace mlprio::replay {

struct RlschedulerPrepareReport {
  int64_t dropped_zero_run = 0;    // run == 0: RLScheduler drops them
  int64_t fixed_negative_run = 0;  // run < 0 (unknown): set to 10 s and kept
};

// Applies RLScheduler's job handling: procs = max(allocated, requested) (stored in both
// alloc_procs and req_procs), requested time -1 -> run time, run 0 dropped, run < 0 -> 10 s,
// list sorted by job id (stable).
std::vector<Job> prepare_rlscheduler_jobs(std::vector<Job> jobs,
                                          RlschedulerPrepareReport* report = nullptr);

// RLScheduler's machine: MaxNodes whole nodes of MaxProcs/MaxNodes cores (MaxProcs defaults to
// MaxNodes). Throws ConfigError when MaxNodes is absent.
Machine rlscheduler_machine(const TraceHeader& header);

// The published table's window starts (seed 1, length 1024, 10000-job Lublin traces).
inline constexpr int64_t RLSCHEDULER_TABLE_LEN = 1024;
inline const std::vector<int64_t>& rlscheduler_table_starts() {
  static const std::vector<int64_t> starts = {1981, 2756, 4299, 8850, 3316,
                                              2714, 5228, 7762, 4022, 7085};
  return starts;
}

}  // namespace mlprio::replay
