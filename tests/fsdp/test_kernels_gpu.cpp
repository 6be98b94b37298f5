// GPU tests of kernels/ and the CUDA device: each kernel against its CPU reference within the
// tolerance reference.hpp states, and CudaDevice's segments and mapped pages. Without a CUDA
// device every test is skipped (MLPRIO_SKIP: ctest reports it as skipped, not passed).
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../support/skip.hpp"
#include "mlprio/fsdp/allocator.hpp"
#include "mlprio/fsdp/cuda_device.hpp"
#include "mlprio/kernels/check.hpp"
#include "mlprio/kernels/kernels.hpp"

using namespace mlprio::kernels;

namespace {

// Empty when a CUDA device is present, else why not.
std::string no_gpu_reason() {
  std::string why;
  if (mlprio::fsdp::cuda_device_count(&why) > 0) return {};
  return "no CUDA device (" + why + ")";
}

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t n) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
    ptr = static_cast<T*>(p);
  }
  ~DeviceBuffer() { (void)cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

}  // namespace

TEST_CASE("fill_pattern equals its reference bit for bit", "[kernels][gpu]") {
  if (const std::string why = no_gpu_reason(); !why.empty()) MLPRIO_SKIP(why);
  for (uint64_t bytes : {1ULL, 15ULL, 4096ULL, (1ULL << 20) + 7ULL}) {
    for (uint64_t offset : {0ULL, 3ULL}) {  // aligned (vector path) and unaligned (byte path)
      DeviceBuffer<unsigned char> d(bytes + offset);
      fill_pattern(d.ptr + offset, bytes, 42, nullptr);
      std::vector<unsigned char> got(bytes), want(bytes);
      CUDA_CHECK(cudaMemcpy(got.data(), d.ptr + offset, bytes, cudaMemcpyDeviceToHost));
      fill_pattern_ref(want.data(), bytes, 42);
      const CompareResult r = compare_bytes(got.data(), want.data(), bytes);
      INFO(r.describe("fill_pattern") << " bytes " << bytes << " offset " << offset);
      CHECK(r.ok());
    }
  }
}

TEST_CASE("adamw matches its reference within tolerance over three steps", "[kernels][gpu]") {
  if (const std::string why = no_gpu_reason(); !why.empty()) MLPRIO_SKIP(why);
  const int64_t n = 100003;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
  for (int64_t i = 0; i < n; ++i) p[i] = nd(rng), g[i] = nd(rng);
  DeviceBuffer<float> dp(n), dg(n), dm(n), dv(n);
  CUDA_CHECK(cudaMemcpy(dp.ptr, p.data(), n * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dg.ptr, g.data(), n * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dm.ptr, m.data(), n * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dv.ptr, v.data(), n * 4, cudaMemcpyHostToDevice));
  AdamWParams hp;
  for (int step = 1; step <= 3; ++step) {
    adamw(dp.ptr, dg.ptr, dm.ptr, dv.ptr, n, hp, step, nullptr);
    adamw_ref(p.data(), g.data(), m.data(), v.data(), n, hp, step);
  }
  std::vector<float> gp(n), gm(n), gv(n);
  CUDA_CHECK(cudaMemcpy(gp.data(), dp.ptr, n * 4, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(gm.data(), dm.ptr, n * 4, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(gv.data(), dv.ptr, n * 4, cudaMemcpyDeviceToHost));
  for (auto [got, want, what] :
       {std::tuple{&gp, &p, "p"}, std::tuple{&gm, &m, "m"}, std::tuple{&gv, &v, "v"}}) {
    const CompareResult r =
        compare_floats(got->data(), want->data(), n, ADAMW_REL_TOL, ADAMW_ABS_TOL);
    INFO(r.describe(what));
    CHECK(r.ok());
  }
}

TEST_CASE("gelu_bf16 matches its reference within one bf16 ulp", "[kernels][gpu]") {
  if (const std::string why = no_gpu_reason(); !why.empty()) MLPRIO_SKIP(why);
  // Every finite bf16 value once, so no input range is left unchecked.
  std::vector<uint16_t> x;
  for (uint32_t h = 0; h < 0x10000; ++h)
    if ((h & 0x7f80U) != 0x7f80U) x.push_back(static_cast<uint16_t>(h));
  const auto n = static_cast<int64_t>(x.size());
  DeviceBuffer<uint16_t> dx(x.size()), dy(x.size());
  CUDA_CHECK(cudaMemcpy(dx.ptr, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  gelu_bf16(dx.ptr, dy.ptr, n, nullptr);
  std::vector<uint16_t> got(x.size()), want(x.size());
  CUDA_CHECK(cudaMemcpy(got.data(), dy.ptr, x.size() * 2, cudaMemcpyDeviceToHost));
  gelu_bf16_ref(x.data(), want.data(), n);
  const CompareResult r = compare_bf16(got.data(), want.data(), n, GELU_MAX_ULP);
  INFO(r.describe("gelu_bf16"));
  CHECK(r.ok());
}

TEST_CASE("busy_wait holds its stream for at least the time asked, in order", "[kernels][gpu]") {
  if (const std::string why = no_gpu_reason(); !why.empty()) MLPRIO_SKIP(why);
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  for (const uint64_t ns : {uint64_t{0}, uint64_t{200000}, uint64_t{2000000}}) {
    INFO(ns << " ns");
    CUDA_CHECK(cudaEventRecord(a, s));
    busy_wait(ns / 2, s);  // two waits on one stream run one after the other
    busy_wait(ns - ns / 2, s);
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    // A lower bound only (the global timer's resolution is about a microsecond): no upper bound,
    // which would be a timing assertion on a shared machine.
    CHECK(static_cast<double>(ms) * 1e6 >= static_cast<double>(ns) * 0.999 - 2000.0);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  CUDA_CHECK(cudaStreamDestroy(s));
}

TEST_CASE("CudaDevice: segments, mapped pages and the allocator model on a GPU", "[fsdp][gpu]") {
  if (const std::string why = no_gpu_reason(); !why.empty()) MLPRIO_SKIP(why);
  using namespace mlprio::fsdp;
  CudaDevice dev(0, 256ULL << 20);
  const auto a = dev.malloc_segment(20ULL << 20);
  REQUIRE(a);
  CHECK(dev.used() == (20ULL << 20));
  CHECK_FALSE(dev.malloc_segment(300ULL << 20));  // over the budget: nullopt, not an exception
  fill_pattern(reinterpret_cast<void*>(*a), 20ULL << 20, 1, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  dev.free_segment(*a, 20ULL << 20);
  CHECK(dev.used() == 0);

  const uint64_t page = std::max<uint64_t>(dev.map_granularity(), 2ULL << 20);
  const uint64_t base = dev.reserve_address_range(8 * page);
  REQUIRE(dev.map_pages(base, page));
  REQUIRE(dev.map_pages(base + page, page));
  fill_pattern(reinterpret_cast<void*>(base), 2 * page, 2, nullptr);  // spans both mappings
  std::vector<unsigned char> got(2 * page), want(2 * page);
  CUDA_CHECK(
      cudaMemcpy(got.data(), reinterpret_cast<void*>(base), 2 * page, cudaMemcpyDeviceToHost));
  fill_pattern_ref(want.data(), 2 * page, 2);
  CHECK(compare_bytes(got.data(), want.data(), 2 * page).ok());
  dev.unmap_pages(base + page, page);
  CHECK(dev.used() == page);
  CHECK(dev.times().maps == 2);

  // The allocator model, expandable segments on, over the real device.
  AllocatorSettings s = parse_alloc_conf("expandable_segments:True", AllocatorSettings{});
  {
    CudaDevice dev2(0, 512ULL << 20);
    CachingAllocator alloc(dev2, s);
    const auto r1 = alloc.malloc(100ULL << 20, 0);
    const auto r2 = alloc.malloc(3000, 0);
    REQUIRE(r1.ok);
    REQUIRE(r2.ok);
    fill_pattern(reinterpret_cast<void*>(r1.addr), 100ULL << 20, 3, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    alloc.free(r1.id);
    alloc.free(r2.id);
    alloc.empty_cache();
    alloc.check();
    CHECK(dev2.used() == 0);
  }
}
