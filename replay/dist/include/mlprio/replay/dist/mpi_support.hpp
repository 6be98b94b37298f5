// The MPI entry points of the distributed drivers (MPI builds only): the master/worker sweep and
// the one-segment-per-rank time-parallel replay. The session and the check macro they use are
// core's (mlprio/util/mpi_session.hpp), included here for the commands that start a session.
#pragma once

#include <mpi.h>

#include <span>

#include "mlprio/replay/dist/sweep_run.hpp"
#include "mlprio/replay/dist/time_parallel.hpp"
#include "mlprio/util/mpi_session.hpp"

namespace mlprio::replay::dist {

// Master/worker sweep over `comm`: rank 0 hands out tasks (largest first) to every rank, itself
// included (on a compute thread), appends each result to the journal and writes the output; the
// other ranks compute. Results are returned on rank 0 only. Collective over `comm`.
SweepOutcome run_sweep_mpi(const SweepPlan& plan, const SweepRunOptions& opts, MPI_Comm comm);

// One segment per rank of `comm`; the result (and stats) is complete on rank 0. Collective.
TimeParallelResult time_parallel_mpi(std::span<const Job> jobs, const SimConfig& config,
                                     MPI_Comm comm);

}  // namespace mlprio::replay::dist
