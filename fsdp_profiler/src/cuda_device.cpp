// The CUDA device (see cuda_device.hpp). Every device call is timed with a steady clock; cudaFree
// and cuMemUnmap synchronise the device first (cudaFree does so itself; unmapping pages that a
// queued kernel may still touch is undefined, so it is done explicitly), which is part of what a
// retry costs on a real GPU and is therefore inside the timed region. Driver-API calls go through
// detail::driver() (gpu_check.hpp), so the program never links libcuda.
#include "mlprio/fsdp/cuda_device.hpp"
#include "mlprio/fsdp/launch.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <unordered_map>
#include <vector>

#include "gpu_check.hpp"
#include "mlprio/kernels/check.hpp"

namespace mlprio::fsdp {

namespace {

double since_us(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

std::string bytes_text(uint64_t b) {
  return std::to_string(b) + " B";
}

template <class Fn>
void load_entry(const char* symbol, Fn& fn) {
  void* ptr = nullptr;
  cudaDriverEntryPointQueryResult status{};
  CUDA_CHECK(
      cudaGetDriverEntryPointByVersion(symbol, &ptr, CUDA_VERSION, cudaEnableDefault, &status));
  if (status != cudaDriverEntryPointSuccess || ptr == nullptr)
    throw kernels::CudaError(std::string("driver entry point ") + symbol +
                                 " not found (driver older than CUDA " +
                                 std::to_string(CUDA_VERSION) + "?)",
                             cudaErrorSymbolNotFound);
  fn = reinterpret_cast<Fn>(ptr);
}

}  // namespace

namespace detail {
const DriverApi& driver() {
  static const DriverApi api = [] {
    DriverApi d;
    load_entry("cuGetErrorName", d.get_error_name);
    load_entry("cuGetErrorString", d.get_error_string);
    load_entry("cuMemGetAllocationGranularity", d.mem_get_allocation_granularity);
    load_entry("cuMemAddressReserve", d.mem_address_reserve);
    load_entry("cuMemAddressFree", d.mem_address_free);
    load_entry("cuMemCreate", d.mem_create);
    load_entry("cuMemRelease", d.mem_release);
    load_entry("cuMemMap", d.mem_map);
    load_entry("cuMemUnmap", d.mem_unmap);
    load_entry("cuMemSetAccess", d.mem_set_access);
    load_entry("cuDeviceGet", d.device_get);
    load_entry("cuDeviceGetAttribute", d.device_get_attribute);
    return d;
  }();
  return api;
}
}  // namespace detail

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  CountStatus status = CountStatus::ok;
  std::string detail;
  if (e != cudaSuccess) {
    detail = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    status = e == cudaErrorInsufficientDriver ? CountStatus::insufficient_driver
             : e == cudaErrorNoDevice         ? CountStatus::no_device
                                              : CountStatus::other_error;
    (void)cudaGetLastError();
    n = 0;
  }
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  (void)cudaGetLastError();
  const CudaProbeResult r = classify_cuda(status, n, driver, runtime, detail);
  switch (r.kind) {
    case CudaProbe::ok:
      return n;
    case CudaProbe::no_driver:
    case CudaProbe::no_device:
      if (why) *why = r.message;
      return 0;
    case CudaProbe::driver_too_old:
      throw CudaDriverError(r.message);
    case CudaProbe::error:
      break;
  }
  throw ::mlprio::RuntimeError(r.message);
}

void cuda_memory_info(int device_index, uint64_t& free_bytes, uint64_t& total_bytes) {
  CUDA_CHECK(cudaSetDevice(device_index));
  size_t f = 0, t = 0;
  CUDA_CHECK(cudaMemGetInfo(&f, &t));
  free_bytes = f;
  total_bytes = t;
}

struct CudaDevice::Impl {
  int index = 0;
  uint64_t capacity = 0;
  uint64_t used = 0;
  uint64_t granularity = 0;
  bool vmm = false;  // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
  LatencyModel latency;
  DeviceCallTimes times;
  std::unordered_map<uint64_t, uint64_t> segments;  // addr -> bytes (cudaMalloc)
  struct Mapping {
    CUmemGenericAllocationHandle handle;
    uint64_t bytes;
  };
  std::map<uint64_t, Mapping> mappings;               // addr -> physical pages mapped there
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // reserved virtual ranges

  CUmemAllocationProp prop() const {
    CUmemAllocationProp p{};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = index;
    return p;
  }
};

CudaDevice::CudaDevice(int device_index, uint64_t capacity, LatencyModel latency)
    : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  d.index = device_index;
  d.latency = latency;
  CUDA_CHECK(cudaSetDevice(device_index));
  CUDA_CHECK(cudaFree(nullptr));  // creates the primary context the driver calls below use
  const detail::DriverApi& drv = detail::driver();
  uint64_t free_b = 0, total_b = 0;
  cuda_memory_info(device_index, free_b, total_b);
  if (capacity == 0 || capacity > free_b)
    throw DeviceError("cuda device " + std::to_string(device_index) + ": capacity " +
                      bytes_text(capacity) + " is not in (0, free memory " + bytes_text(free_b) +
                      "]; lower --capacity or leave more headroom");
  d.capacity = capacity;
  CUdevice dev = 0;
  CU_CHECK(drv.device_get(&dev, device_index));
  int vmm = 0;
  CU_CHECK(
      drv.device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  d.vmm = vmm != 0;
  if (!d.vmm) return;  // cudaMalloc segments only; expandable segments are refused when asked
  const CUmemAllocationProp p = d.prop();
  size_t gran = 0;
  CU_CHECK(drv.mem_get_allocation_granularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  d.granularity = gran;
}

CudaDevice::~CudaDevice() {
  // Nothing here may throw; report and go on so that as much as possible is returned. The
  // driver table is loaded: the constructor needed it.
  const detail::DriverApi& drv = detail::driver();
  Impl& d = *impl_;
  auto warn = [](const char* what, int code) {
    std::fprintf(stderr, "mlprio-fsdp: warning: %s failed (%d) while releasing the CUDA device\n",
                 what, code);
  };
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) warn("cudaDeviceSynchronize", e);
  for (const auto& [addr, bytes] : d.segments)
    if (cudaError_t e = cudaFree(reinterpret_cast<void*>(addr)); e != cudaSuccess)
      warn("cudaFree", e);
  for (const auto& [addr, m] : d.mappings) {
    if (CUresult r = drv.mem_unmap(static_cast<CUdeviceptr>(addr), m.bytes); r != CUDA_SUCCESS)
      warn("cuMemUnmap", r);
    if (CUresult r = drv.mem_release(m.handle); r != CUDA_SUCCESS) warn("cuMemRelease", r);
  }
  for (const auto& [addr, bytes] : d.ranges)
    if (CUresult r = drv.mem_address_free(static_cast<CUdeviceptr>(addr), bytes); r != CUDA_SUCCESS)
      warn("cuMemAddressFree", r);
}

uint64_t CudaDevice::capacity() const {
  return impl_->capacity;
}
uint64_t CudaDevice::used() const {
  return impl_->used;
}
const LatencyModel& CudaDevice::latency() const {
  return impl_->latency;
}
const DeviceCallTimes& CudaDevice::times() const {
  return impl_->times;
}
int CudaDevice::index() const {
  return impl_->index;
}
uint64_t CudaDevice::map_granularity() const {
  return impl_->granularity;
}

std::optional<uint64_t> CudaDevice::malloc_segment(uint64_t bytes) {
  Impl& d = *impl_;
  // The budget is checked first so that the allocator model sees the same limit as on the
  // simulated device; a cudaMalloc that fails inside the budget (memory taken by someone else)
  // is counted in times().failed and reported as out of memory, like torch does.
  if (bytes > d.capacity - d.used) return std::nullopt;
  void* ptr = nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  const cudaError_t e = cudaMalloc(&ptr, bytes);
  const double us = since_us(t0);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so the next check does not see it
    d.times.failed_us += us;
    ++d.times.failed;
    return std::nullopt;
  }
  kernels::cuda_check(e, "cudaMalloc(&ptr, bytes)", __FILE__, __LINE__);
  d.times.malloc_us += us;
  ++d.times.mallocs;
  const double gib = static_cast<double>(bytes) / static_cast<double>(1ULL << 30);
  d.times.malloc_gib += gib;
  d.times.malloc_gib2 += gib * gib;
  d.times.malloc_gib_us += gib * us;
  const auto addr = reinterpret_cast<uint64_t>(ptr);
  d.segments.emplace(addr, bytes);
  d.used += bytes;
  return addr;
}

void CudaDevice::free_segment(uint64_t addr, uint64_t bytes) {
  Impl& d = *impl_;
  const auto it = d.segments.find(addr);
  if (it == d.segments.end() || it->second != bytes)
    throw DeviceError("cuda device: free_segment of " + bytes_text(bytes) + " at " +
                      std::to_string(addr) + " that was not allocated with that size");
  const auto t0 = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaFree(reinterpret_cast<void*>(addr)));
  d.times.free_us += since_us(t0);
  ++d.times.frees;
  d.segments.erase(it);
  d.used -= bytes;
}

uint64_t CudaDevice::reserve_address_range(uint64_t bytes) {
  const detail::DriverApi& drv = detail::driver();
  Impl& d = *impl_;
  if (!d.vmm)
    throw DeviceError("cuda device " + std::to_string(d.index) +
                      ": no virtual memory management support "
                      "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0), so "
                      "expandable_segments cannot run here; measure without it");
  const uint64_t size = (bytes + d.granularity - 1) / d.granularity * d.granularity;
  CUdeviceptr ptr = 0;
  CU_CHECK(drv.mem_address_reserve(&ptr, size, d.granularity, 0, 0));
  d.ranges.emplace_back(static_cast<uint64_t>(ptr), size);
  return static_cast<uint64_t>(ptr);
}

bool CudaDevice::map_pages(uint64_t addr, uint64_t bytes) {
  const detail::DriverApi& drv = detail::driver();
  Impl& d = *impl_;
  if (bytes % d.granularity != 0 || addr % d.granularity != 0)
    throw DeviceError("cuda device: map_pages of " + bytes_text(bytes) +
                      " is not a multiple of the mapping granularity " + bytes_text(d.granularity));
  if (bytes > d.capacity - d.used) return false;
  const auto t0 = std::chrono::steady_clock::now();
  const CUmemAllocationProp p = d.prop();
  CUmemGenericAllocationHandle h{};
  const CUresult r = drv.mem_create(&h, bytes, &p, 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    d.times.failed_us += since_us(t0);
    ++d.times.failed;
    return false;
  }
  CU_CHECK(r);
  // The physical handle is released (and the range unmapped) when a later step fails, so an
  // error leaves nothing behind for the destructor to miss.
  if (const CUresult m = drv.mem_map(static_cast<CUdeviceptr>(addr), bytes, 0, h, 0);
      m != CUDA_SUCCESS) {
    (void)drv.mem_release(h);
    CU_CHECK(m);
  }
  CUmemAccessDesc access{};
  access.location = p.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (const CUresult a = drv.mem_set_access(static_cast<CUdeviceptr>(addr), bytes, &access, 1);
      a != CUDA_SUCCESS) {
    (void)drv.mem_unmap(static_cast<CUdeviceptr>(addr), bytes);
    (void)drv.mem_release(h);
    CU_CHECK(a);
  }
  d.times.map_us += since_us(t0);
  ++d.times.maps;
  d.mappings.emplace(addr, Impl::Mapping{h, bytes});
  d.used += bytes;
  return true;
}

void CudaDevice::unmap_pages(uint64_t addr, uint64_t bytes) {
  const detail::DriverApi& drv = detail::driver();
  Impl& d = *impl_;
  const auto t0 = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaDeviceSynchronize());
  // The allocator unmaps page by page, as it mapped; a range made of several earlier mappings is
  // accepted too, but never part of one.
  uint64_t done = 0;
  while (done < bytes) {
    const auto it = d.mappings.find(addr + done);
    if (it == d.mappings.end() || done + it->second.bytes > bytes)
      throw DeviceError("cuda device: unmap_pages of " + bytes_text(bytes) + " at " +
                        std::to_string(addr) + " does not match what map_pages mapped");
    CU_CHECK(drv.mem_unmap(static_cast<CUdeviceptr>(it->first), it->second.bytes));
    CU_CHECK(drv.mem_release(it->second.handle));
    done += it->second.bytes;
    d.used -= it->second.bytes;
    d.mappings.erase(it);
  }
  d.times.unmap_us += since_us(t0);
  ++d.times.unmaps;
}

void CudaDevice::synchronize() {
  Impl& d = *impl_;
  const auto t0 = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaDeviceSynchronize());
  d.times.sync_us += since_us(t0);
  ++d.times.syncs;
}

}  // namespace mlprio::fsdp
