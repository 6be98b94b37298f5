// The Catch2 main of the MPI tests: MPI_Init/MPI_Finalize around a Catch::Session on every rank.
// Each rank writes its report to its own file; rank 0 then prints them all in rank order, so a
// failure on any rank is readable in the ctest log, and the exit code is the worst rank's: 77
// (support/skip.hpp) when no rank failed and every rank skipped every test case it ran.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "../support/skip_listener.hpp"

using mlprio::test::SkipListener;
CATCH_REGISTER_LISTENER(SkipListener)

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string log = std::string(MLPRIO_MPI_TEST_DIR) + "/mpi_tests.np" +
                          std::to_string(size) + ".rank" + std::to_string(rank) + ".log";
  std::vector<std::string> args(argv, argv + argc);
  args.push_back("--out");
  args.push_back(log);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  Catch::Session session;
  int failed = session.applyCommandLine(static_cast<int>(cargs.size()), cargs.data());
  if (failed == 0) failed = session.run();
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    for (int r = 0; r < size; ++r) {
      std::ifstream in(std::string(MLPRIO_MPI_TEST_DIR) + "/mpi_tests.np" + std::to_string(size) +
                       ".rank" + std::to_string(r) + ".log");
      std::cout << "===== rank " << r << " of " << size << " =====\n" << in.rdbuf() << "\n";
    }
    std::cout.flush();
  }
  int worst = 0;
  MPI_Allreduce(&failed, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  const int skipped_here = mlprio::test::all_skipped() ? 1 : 0;
  int skipped_everywhere = 0;
  MPI_Allreduce(&skipped_here, &skipped_everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Finalize();
  if (worst != 0) return 1;
  return skipped_everywhere == 1 ? mlprio::test::kSkipExitCode : 0;
}
