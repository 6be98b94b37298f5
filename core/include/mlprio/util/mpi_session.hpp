// The MPI plumbing every MPI user shares (the replayer's distributed drivers, replay/dist/, and
// the FSDP profiler's measure): MLPRIO_MPI_CHECK, the one check macro every MPI call goes through
// (call text, file:line and rank in a typed MpiError), and MpiSession, which initialises MPI
// (MPI_THREAD_FUNNELED: the replay sweep's rank 0 computes on a second thread that never calls
// MPI) for the lifetime of one command and finalises it. Header-only and usable only where MPI
// was found: link the INTERFACE target mlprio_mpi_session (core/CMakeLists.txt), which adds
// MPI::MPI_C (the C API; Open MPI's C++ bindings are not used); nothing in core's own library
// includes it.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>

#include "mlprio/util/errors.hpp"

namespace mlprio::util {

class MpiError : public ::mlprio::RuntimeError {
 public:
  using ::mlprio::RuntimeError::RuntimeError;
};

// Throws MpiError "MPI call failed on rank R: <call> at file:line: <MPI error string>" (rank -1
// before MPI_Init).
[[noreturn]] inline void mpi_fail(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(code, text, &len);
  int rank = -1, init = 0;
  MPI_Initialized(&init);
  if (init) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw MpiError("MPI call failed on rank " + std::to_string(rank) + ": " + call + " at " + file +
                 ":" + std::to_string(line) + ": " + std::string(text, static_cast<size_t>(len)));
}

#define MLPRIO_MPI_CHECK(call)                                             \
  do {                                                                     \
    const int mlprio_mpi_rc_ = (call);                                     \
    if (mlprio_mpi_rc_ != MPI_SUCCESS)                                     \
      ::mlprio::util::mpi_fail(mlprio_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)

// Initialises MPI unless it already is (then MPI is left running at the end, for its owner to
// finalise), and makes MPI_COMM_WORLD return error codes so that MLPRIO_MPI_CHECK can name the
// call and the rank. Throws MpiError when the library does not provide MPI_THREAD_FUNNELED.
class MpiSession {
 public:
  explicit MpiSession(int* argc = nullptr, char*** argv = nullptr) {
    int init = 0;
    MLPRIO_MPI_CHECK(MPI_Initialized(&init));
    if (!init) {
      int provided = 0;
      MLPRIO_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
      owns_ = true;
      if (provided < MPI_THREAD_FUNNELED)
        throw MpiError("the MPI library does not provide MPI_THREAD_FUNNELED");
    }
    MLPRIO_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MLPRIO_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    MLPRIO_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  }
  ~MpiSession() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (owns_ && !fin) MPI_Finalize();
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  bool owns_ = false;
  int rank_ = 0, size_ = 1;
};

}  // namespace mlprio::util
