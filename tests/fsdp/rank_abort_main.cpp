// mpirun -np 2 rank_abort_main: rank 1 fails inside run_or_abort_ranks while rank 0 waits in
// MPI_Barrier for it, as a rank waits in a collective for a peer that hit a CUDA error. The job
// must end (MPI_Abort), not hang; the caller (rank_abort.sh) checks the exit status, the time and
// the message naming rank 1 and its host. Reaching the end of main is itself the failure (exit 3).
#include <mpi.h>

#include <cstdio>
#include <stdexcept>

#include "rank_abort.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  mlprio::fsdp::run_or_abort_ranks(
      rank, size,
      [&] {
        if (rank == 1) throw std::runtime_error("injected CUDA error on this rank");
        MPI_Barrier(MPI_COMM_WORLD);  // rank 0: waits for rank 1, which never comes
        return 0;
      },
      [&] { std::fprintf(stderr, "rank %d: collectives aborted\n", rank); });
  std::fprintf(stderr, "rank %d passed the barrier: the failing rank did not end the job\n", rank);
  MPI_Finalize();
  return 3;
}
