// Helpers the MPI tests share: a generated Lublin trace written once (by rank 0) to the test
// directory, and communicator helpers. Every rank sees the same file after the barrier.
#pragma once

#include <mpi.h>

#include <fstream>
#include <string>
#include <vector>

#include "mlprio/jobs/lublin.hpp"
#include "mlprio/jobs/trace.hpp"

namespace mlprio::test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

inline std::vector<Job> lublin_jobs(int64_t n, uint64_t seed, double load) {
  LublinOptions o;
  o.nodes = 128;
  o.seed = seed;
  o.types = LublinJobTypes::BOTH;
  o.load_scale = load;
  o.req_time = LublinReqTime::FACTOR;
  return generate_lublin(o, n);
}

// Writes the trace (rank 0) and returns its path on every rank; names carry the world size so
// the -n 2 and -n 3 runs never share files.
inline std::string shared_lublin_trace(const std::string& name, int64_t n, uint64_t seed,
                                       double load) {
  const std::string path =
      std::string(MLPRIO_MPI_TEST_DIR) + "/" + name + ".np" + std::to_string(world_size()) + ".swf";
  if (world_rank() == 0) {
    TraceHeader h;
    h.max_nodes = 128;
    h.max_procs = 128;
    std::ofstream out(path);
    write_swf(out, h, lublin_jobs(n, seed, load));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

}  // namespace mlprio::test
