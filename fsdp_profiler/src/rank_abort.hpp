// One rank's error must end the whole job, not hang it. Without this, a CUDA, NCCL, VMM or
// allocator error on one rank unwinds into cudaDeviceSynchronize and ncclCommDestroy while its
// peers wait in MPI or NCCL for a collective that never comes. With more than one rank,
// run_or_abort_ranks prints the error with the rank and host, aborts the NCCL communicator
// (ncclCommAbort returns even when peers are stuck) and calls MPI_Abort, which ends every rank.
// One rank: the exception propagates as usual. Header-only so that the test program
// (tests/fsdp/rank_abort_main.cpp, run with mpirun -np 2) exercises this very code without a GPU.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>

#if MLPRIO_FSDP_HAVE_MPI
#include <mpi.h>
#endif

namespace mlprio::fsdp {

template <class Body>
auto run_or_abort_ranks(int rank, int size, Body&& body,
                        const std::function<void()>& abort_collectives) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& e) {
    if (size <= 1) throw;
    char host[256] = "?";
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '?';
    std::fprintf(stderr, "mlprio-fsdp: rank %d of %d on %s failed: %s; aborting every rank\n", rank,
                 size, host, e.what());
    std::fflush(stderr);
    if (abort_collectives) abort_collectives();
#if MLPRIO_FSDP_HAVE_MPI
    MPI_Abort(MPI_COMM_WORLD, 1);
#endif
    std::_Exit(1);  // MPI_Abort does not return; without MPI there are no peers to end
  }
}

}  // namespace mlprio::fsdp
