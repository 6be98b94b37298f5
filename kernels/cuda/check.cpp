// CUDA_CHECK's implementation and the error-site text shared by the project's CUDA, driver-API
// and NCCL check macros (see check.hpp).
#include "mlprio/kernels/check.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace mlprio::kernels {

namespace {
std::atomic<int> g_rank{-1};
}

void set_error_rank(int rank) {
  g_rank.store(rank);
}

std::string format_error_site(const char* call, const char* file, int line,
                              const std::string& detail) {
  char host[256] = "?";
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '?';
  host[sizeof host - 1] = '\0';
  std::string s =
      std::string(call) + " failed at " + file + ":" + std::to_string(line) + " on host " + host;
  if (g_rank.load() >= 0) s += " rank " + std::to_string(g_rank.load());
  return s + ": " + detail;
}

bool is_sticky_cuda_error(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorAssert:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

void abort_with(const std::string& message) {
  std::fprintf(stderr, "fatal: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

void cuda_check(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  const std::string msg = format_error_site(
      call, file, line, std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")");
  if (is_sticky_cuda_error(e)) abort_with(msg + "; the CUDA context is unusable");
  throw CudaError(msg, e);
}

}  // namespace mlprio::kernels
