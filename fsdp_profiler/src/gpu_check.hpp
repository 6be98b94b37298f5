// CU_CHECK (CUDA driver API) and NCCL_CHECK (NCCL): the check macros for the two foreign APIs the
// CUDA device and the measuring runner use besides the CUDA runtime (CUDA_CHECK, from kernels/).
// Same message shape as CUDA_CHECK (call text, file:line, host, rank); errors after which the
// context or communicator cannot be used abort, others throw a typed exception.
#pragma once

#include <cuda.h>

#include <stdexcept>
#include <string>

#include "mlprio/kernels/check.hpp"
#include "mlprio/util/errors.hpp"

#if MLPRIO_FSDP_HAVE_NCCL
#include <nccl.h>
#endif

namespace mlprio::fsdp::detail {

// Driver-API entry points, fetched through the runtime (cudaGetDriverEntryPointByVersion) rather
// than linked: linking libcuda would make mlprio-fsdp fail to start on a machine without a
// driver, where `sweep` and `replay` must keep working. Defined in cuda_device.cpp.
struct DriverApi {
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuMemGetAllocationGranularity) mem_get_allocation_granularity = nullptr;
  decltype(&::cuMemAddressReserve) mem_address_reserve = nullptr;
  decltype(&::cuMemAddressFree) mem_address_free = nullptr;
  decltype(&::cuMemCreate) mem_create = nullptr;
  decltype(&::cuMemRelease) mem_release = nullptr;
  decltype(&::cuMemMap) mem_map = nullptr;
  decltype(&::cuMemUnmap) mem_unmap = nullptr;
  decltype(&::cuMemSetAccess) mem_set_access = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
};
// Loads the table on first use (after the runtime has a device); throws CudaError if it cannot.
const DriverApi& driver();

class CuError : public ::mlprio::RuntimeError {
 public:
  CuError(const std::string& what, CUresult code) : ::mlprio::RuntimeError(what), code_(code) {}
  CUresult code() const { return code_; }

 private:
  CUresult code_;
};

inline void cu_check(CUresult r, const char* call, const char* file, int line) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  if (driver().get_error_name(r, &name) != CUDA_SUCCESS) name = "CUDA_ERROR_?";
  if (driver().get_error_string(r, &text) != CUDA_SUCCESS) text = "unknown driver error";
  const std::string msg =
      kernels::format_error_site(call, file, line, std::string(name) + " (" + text + ")");
  switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
      kernels::abort_with(msg + "; the CUDA context is unusable");
    default:
      throw CuError(msg, r);
  }
}

#if MLPRIO_FSDP_HAVE_NCCL
class NcclError : public ::mlprio::RuntimeError {
 public:
  using ::mlprio::RuntimeError::RuntimeError;
};

inline void nccl_check(ncclResult_t r, const char* call, const char* file, int line) {
  if (r == ncclSuccess) return;
  const std::string msg = kernels::format_error_site(call, file, line, ncclGetErrorString(r));
  // A failed collective leaves the communicator (and the peers waiting in it) unusable; only
  // argument/usage errors, caught before anything was enqueued, can be reported and survived.
  if (r == ncclInvalidArgument || r == ncclInvalidUsage) throw NcclError(msg);
  kernels::abort_with(msg + "; the communicator is unusable");
}
#endif

}  // namespace mlprio::fsdp::detail

#define CU_CHECK(call) ::mlprio::fsdp::detail::cu_check((call), #call, __FILE__, __LINE__)
#if MLPRIO_FSDP_HAVE_NCCL
#define NCCL_CHECK(call) ::mlprio::fsdp::detail::nccl_check((call), #call, __FILE__, __LINE__)
#endif
