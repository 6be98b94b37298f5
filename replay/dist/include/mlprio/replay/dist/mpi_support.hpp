// MPI plumbing for the replay drivers (MPI builds only): the one check macro every MPI call goes
// through (call text, file:line and rank in a typed MpiError), and MpiSession, which initialises
// MPI (MPI_THREAD_FUNNELED: rank 0 computes on a second thread that never calls MPI) for the
// lifetime of one subcommand and finalises it. Also the MPI entry points of the sweep and the
// time-parallel replay.
#pragma once

#include <mpi.h>

#include <stdexcept>
#include <string>

#include "mlprio/replay/dist/sweep.hpp"
#include "mlprio/replay/dist/time_parallel.hpp"
#include "mlprio/util/errors.hpp"

namespace mlprio::replay::dist {

class MpiError : public ::mlprio::RuntimeError {
 public:
  using ::mlprio::RuntimeError::RuntimeError;
};

// Throws MpiError "MPI call failed on rank R: <call> at file:line: <MPI error string>".
void mpi_fail(int code, const char* call, const char* file, int line);

#define MLPRIO_MPI_CHECK(call)                                                      \
  do {                                                                              \
    const int mlprio_mpi_rc_ = (call);                                              \
    if (mlprio_mpi_rc_ != MPI_SUCCESS)                                              \
      ::mlprio::replay::dist::mpi_fail(mlprio_mpi_rc_, #call, __FILE__, __LINE__);  \
  } while (0)

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  bool owns_ = false;
  int rank_ = 0, size_ = 1;
};

// Master/worker sweep over `comm`: rank 0 hands out tasks (largest first) to every rank, itself
// included (on a compute thread), appends each result to the journal and writes the output; the
// other ranks compute. Results are returned on rank 0 only. Collective over `comm`.
SweepOutcome run_sweep_mpi(const SweepPlan& plan, const SweepRunOptions& opts, MPI_Comm comm);

// One segment per rank of `comm`; the result (and stats) is complete on rank 0. Collective.
TimeParallelResult time_parallel_mpi(std::span<const Job> jobs, const SimConfig& config,
                                     MPI_Comm comm);

}  // namespace mlprio::replay::dist
