// CUDA_CHECK: the one check macro for CUDA runtime calls (llm.c's cudaCheck). It records the call
// text, file:line, host and MPI rank (set_error_rank) in a typed CudaError. Errors that leave the
// context unusable (illegal address, launch failure, ECC, ...) print the same text and abort,
// because nothing after them can be trusted (Kokkos does the same). format_error_site() is shared
// with the NCCL and driver-API macros of fsdp_profiler so every message has the same shape.
// Needs CUDA (MLPRIO_KERNELS_HAVE_CUDA).
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "mlprio/util/errors.hpp"

namespace mlprio::kernels {

class CudaError : public ::mlprio::RuntimeError {
 public:
  CudaError(const std::string& what, cudaError_t code)
      : ::mlprio::RuntimeError(what), code_(code) {}
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

// Rank printed in error messages (-1: not part of a multi-rank run).
void set_error_rank(int rank);
// "<call> failed at <file>:<line> on host <h> rank <r>: <detail>"
std::string format_error_site(const char* call, const char* file, int line,
                              const std::string& detail);
// True for errors after which the CUDA context cannot be used again.
bool is_sticky_cuda_error(cudaError_t e);
[[noreturn]] void abort_with(const std::string& message);
// Throws CudaError (or aborts for a sticky error) unless e == cudaSuccess.
void cuda_check(cudaError_t e, const char* call, const char* file, int line);

}  // namespace mlprio::kernels

#define CUDA_CHECK(call) ::mlprio::kernels::cuda_check((call), #call, __FILE__, __LINE__)
