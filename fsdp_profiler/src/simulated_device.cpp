// The simulated device ("sim"): counts bytes against a capacity and hands out non-overlapping
// addresses, and the by-name device registry. A CUDA device belongs in its own file
// (cuda_device.cpp) registered in make_device() under "cuda".
#include <string>

#include "mlprio/fsdp/device.hpp"

namespace mlprio::fsdp {

SimulatedDevice::SimulatedDevice(uint64_t capacity, LatencyModel latency)
    : capacity_(capacity), latency_(latency) {
  if (capacity == 0) throw DeviceError("simulated device: capacity must be > 0");
}

uint64_t SimulatedDevice::take_addresses(uint64_t bytes) {
  // 2 MiB alignment, like the driver's large-page allocations.
  const uint64_t align = 2ULL << 20;
  const uint64_t addr = next_addr_;
  next_addr_ += (bytes + align - 1) / align * align;
  if (next_addr_ < addr) throw DeviceError("simulated device: address space exhausted");
  return addr;
}

std::optional<uint64_t> SimulatedDevice::malloc_segment(uint64_t bytes) {
  if (bytes > capacity_ - used_) return std::nullopt;
  used_ += bytes;
  return take_addresses(bytes);
}

void SimulatedDevice::free_segment(uint64_t /*addr*/, uint64_t bytes) {
  if (bytes > used_) throw DeviceError("simulated device: freeing more than is held");
  used_ -= bytes;
}

uint64_t SimulatedDevice::reserve_address_range(uint64_t bytes) {
  return take_addresses(bytes);
}

bool SimulatedDevice::map_pages(uint64_t /*addr*/, uint64_t bytes) {
  if (bytes > capacity_ - used_) return false;
  used_ += bytes;
  return true;
}

void SimulatedDevice::unmap_pages(uint64_t /*addr*/, uint64_t bytes) {
  if (bytes > used_) throw DeviceError("simulated device: unmapping more than is mapped");
  used_ -= bytes;
}

std::unique_ptr<Device> make_device(std::string_view kind, uint64_t capacity) {
  if (kind == "sim") return std::make_unique<SimulatedDevice>(capacity);
  throw DeviceError("unknown device kind '" + std::string(kind) +
                    "'; known: sim (a CUDA device is not built into this version)");
}

}  // namespace mlprio::fsdp
