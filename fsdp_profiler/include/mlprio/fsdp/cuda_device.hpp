// The CUDA device ("cuda"): the Device interface over a real GPU. Segments are cudaMalloc /
// cudaFree; expandable segments reserve virtual ranges with cuMemAddressReserve and back pages
// with cuMemCreate + cuMemMap (+ cuMemSetAccess), unmapping with cuMemUnmap + cuMemRelease after
// a device synchronisation, as PyTorch's expandable segments do. The capacity is a budget the
// allocator model may hold (at most the free memory when the device is made), so the same
// allocator rules run against the same limit as on the simulated device, while every call really
// happens and is timed (times()). The destructor returns everything still held.
// Built only with CUDA (MLPRIO_FSDP_HAVE_CUDA); the header itself needs no CUDA header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mlprio/fsdp/device.hpp"

namespace mlprio::fsdp {

// Number of CUDA devices; 0 when no driver is installed or no device is visible (why says
// which). A driver too old for this build's CUDA runtime throws CudaDriverError, any other CUDA
// failure RuntimeError (launch.hpp: classify_cuda): a broken GPU machine is a fault, not "no GPU".
int cuda_device_count(std::string* why = nullptr);
// Free and total bytes of a device (cudaMemGetInfo after cudaSetDevice).
void cuda_memory_info(int device_index, uint64_t& free_bytes, uint64_t& total_bytes);

class CudaDevice final : public Device {
 public:
  // Makes `device_index` current. Throws DeviceError when capacity exceeds the free memory.
  CudaDevice(int device_index, uint64_t capacity, LatencyModel latency = {});
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  std::string_view name() const override { return "cuda"; }
  uint64_t capacity() const override;
  uint64_t used() const override;
  std::optional<uint64_t> malloc_segment(uint64_t bytes) override;
  void free_segment(uint64_t addr, uint64_t bytes) override;
  uint64_t reserve_address_range(uint64_t bytes) override;
  bool map_pages(uint64_t addr, uint64_t bytes) override;
  void unmap_pages(uint64_t addr, uint64_t bytes) override;
  void synchronize() override;  // cudaDeviceSynchronize, timed into times().sync_us
  // The latency *model* (what the allocator model charges); times() is what was measured.
  const LatencyModel& latency() const override;

  const DeviceCallTimes& times() const;
  int index() const;
  uint64_t map_granularity() const;  // cuMemGetAllocationGranularity (minimum); 0 without VMM

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlprio::fsdp
