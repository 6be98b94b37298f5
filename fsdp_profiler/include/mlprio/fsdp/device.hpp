// The one small interface between the allocator model and a GPU: whole segments (cudaMalloc /
// cudaFree), virtual ranges with pages mapped on demand (cuMemAddressReserve, cuMemCreate +
// cuMemMap, cuMemUnmap) for expandable segments, the capacity, and a latency model so the
// profiler can say what retries cost. SimulatedDevice ("sim") runs on any CPU; a CUDA device is
// meant to implement the same interface in its own file and register under "cuda".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "mlprio/util/errors.hpp"

namespace mlprio::fsdp {

class DeviceError : public ::mlprio::RuntimeError {
 public:
  using ::mlprio::RuntimeError::RuntimeError;
};

// Microseconds each device call costs (orders of magnitude from public measurements of
// cudaMalloc/cudaFree on A100/H100; cudaFree and unmapping imply a device synchronisation).
struct LatencyModel {
  double malloc_us = 100.0;
  double malloc_us_per_gib = 20.0;
  double free_us = 150.0;
  double map_page_us = 15.0;
  double unmap_page_us = 15.0;
  double sync_all_streams_us = 200.0;
};

// "malloc_us=80,free_us=300" style text (any subset of LatencyModel's field names, each a finite
// number >= 0, comma separated), applied on top of `base`: `sweep --latency` takes the line that
// `measure` prints. Throws SettingsError naming the bad item.
LatencyModel parse_latency(const std::string& text, LatencyModel base = {});
// The same fields as that text, in LatencyModel's order.
std::string latency_text(const LatencyModel& m);

// Wall-clock time spent inside a real device's calls, and their counts (CudaDevice::times()).
// malloc_gib* are the sums a least-squares line of cudaMalloc time over size needs.
struct DeviceCallTimes {
  double malloc_us = 0, free_us = 0, map_us = 0, unmap_us = 0;
  double sync_us = 0;    // synchronize(): the device-wide wait before an allocator retry
  double failed_us = 0;  // cudaMalloc / cuMemCreate calls that ran out of memory
  int64_t mallocs = 0, frees = 0, maps = 0, unmaps = 0, failed = 0, syncs = 0;
  double malloc_gib = 0, malloc_gib2 = 0, malloc_gib_us = 0;  // sum x, x^2, x*y (x GiB, y us)
  double total_us() const { return malloc_us + free_us + map_us + unmap_us + sync_us + failed_us; }
  DeviceCallTimes& operator+=(const DeviceCallTimes& o);
};

// The LatencyModel that these measured calls fit: per-call means for free, map (per page),
// unmap (per page) and the retry synchronisation, and a line malloc_us + malloc_us_per_gib * GiB
// through the cudaMalloc times (least squares; a negative slope or a single size gives the mean
// and slope 0, a negative intercept a line through the origin). A kind of call that never
// happened keeps base's value.
LatencyModel fit_latency(const DeviceCallTimes& t, const LatencyModel& base = {});

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string_view name() const = 0;
  virtual uint64_t capacity() const = 0;  // bytes the allocator may hold
  virtual uint64_t used() const = 0;      // bytes currently held (segments + mapped pages)
  // A new segment of `bytes`; nullopt when the device cannot satisfy it (not an exception:
  // running out is the normal trigger of the allocator's retry ladder).
  virtual std::optional<uint64_t> malloc_segment(uint64_t bytes) = 0;
  virtual void free_segment(uint64_t addr, uint64_t bytes) = 0;
  // Virtual address space only; no physical memory is taken.
  virtual uint64_t reserve_address_range(uint64_t bytes) = 0;
  // Backs [addr, addr+bytes) with physical memory; false when the device is full.
  virtual bool map_pages(uint64_t addr, uint64_t bytes) = 0;
  virtual void unmap_pages(uint64_t addr, uint64_t bytes) = 0;
  // Waits until every stream of the device is idle (cudaDeviceSynchronize). The allocator calls
  // it where PyTorch's synchronize_and_free_events does: before a retry releases the cache. A
  // simulated device has nothing to wait for; the latency model charges sync_all_streams_us.
  virtual void synchronize() {}
  virtual const LatencyModel& latency() const = 0;
};

// A device that only counts bytes. Addresses are handed out from a bump pointer so that segments
// never overlap and a wrong address in the model shows up as an invariant failure.
class SimulatedDevice final : public Device {
 public:
  explicit SimulatedDevice(uint64_t capacity, LatencyModel latency = {});
  std::string_view name() const override { return "sim"; }
  uint64_t capacity() const override { return capacity_; }
  uint64_t used() const override { return used_; }
  std::optional<uint64_t> malloc_segment(uint64_t bytes) override;
  void free_segment(uint64_t addr, uint64_t bytes) override;
  uint64_t reserve_address_range(uint64_t bytes) override;
  bool map_pages(uint64_t addr, uint64_t bytes) override;
  void unmap_pages(uint64_t addr, uint64_t bytes) override;
  const LatencyModel& latency() const override { return latency_; }

 private:
  uint64_t take_addresses(uint64_t bytes);
  uint64_t capacity_;
  uint64_t used_ = 0;
  uint64_t next_addr_ = 0x7f0000000000ULL;
  LatencyModel latency_;
};

// Devices by name: "sim" now; "cuda" once a CUDA device file is added. Throws DeviceError naming
// the known kinds for an unknown one.
std::unique_ptr<Device> make_device(std::string_view kind, uint64_t capacity);

}  // namespace mlprio::fsdp
