// What the serial loop (sweep.cpp) and the MPI master/worker (sweep_mpi.cpp) share and no user of
// the library sees: the progress line, and the hook the kill-and-resume test
// (tests/mpi/kill_resume.cmake) kills a rank with.
#pragma once

#include <cstdint>

namespace mlprio::replay::dist::detail {

// The progress line: "done/total, tasks/s, ETA" (only when stderr is a terminal).
class Progress {
 public:
  Progress(int64_t total, int64_t already, bool enabled);
  void update(int64_t done);
  void finish();

 private:
  int64_t total_, already_;
  bool enabled_;
  double t0_, last_ = -1;
};

// Test hook (never documented for users): MLPRIO_SWEEP_TEST_KILL_RANK=r and
// MLPRIO_SWEEP_TEST_KILL_AFTER=k make rank r raise SIGKILL after computing its k-th task, before
// reporting it. Returns the configured k for `rank`, or -1.
int64_t test_kill_after(int rank);

}  // namespace mlprio::replay::dist::detail
