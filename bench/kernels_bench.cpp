// Google Benchmark of the kernels in kernels/: bytes moved per second for fill_pattern (first
// touch), the fused AdamW update and the bf16 GELU; and the device calls the allocator model
// charges for (cudaMalloc/cudaFree by size, expandable segments' page map/unmap). Before anything
// is timed, each kernel is compared with its CPU reference (reference.hpp's tolerances) and a wrong
// answer exits 1 (nccl-tests' #wrong). Without a CUDA device it says so and exits 0. Timing uses
// CUDA events around each launch (manual time).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "mlprio/fsdp/cuda_device.hpp"
#include "mlprio/kernels/check.hpp"
#include "mlprio/kernels/kernels.hpp"

using namespace mlprio::kernels;

namespace {

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}

// Runs `launch` once per iteration, timed with events; reports bytes moved per second.
template <class F>
void time_kernel(benchmark::State& state, double bytes_per_launch, F launch) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  launch();  // warm-up
  for (auto _ : state) {
    CUDA_CHECK(cudaEventRecord(start));
    launch();
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(static_cast<double>(ms) / 1000.0);
  }
  state.counters["bytes_per_s"] = benchmark::Counter(
      bytes_per_launch * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
}

void BM_fill_pattern(benchmark::State& state) {
  const auto bytes = static_cast<uint64_t>(state.range(0));
  void* d = device_alloc(bytes);
  time_kernel(state, static_cast<double>(bytes), [&] { fill_pattern(d, bytes, 1, nullptr); });
  CUDA_CHECK(cudaFree(d));
}

void BM_adamw(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto* buf = static_cast<float*>(device_alloc(static_cast<size_t>(4 * n) * 4));
  CUDA_CHECK(cudaMemset(buf, 0, static_cast<size_t>(4 * n) * 4));
  int step = 0;
  // Reads p, g, m, v and writes p, m, v: 7 floats per element.
  time_kernel(state, 7.0 * 4.0 * static_cast<double>(n), [&] {
    adamw(buf, buf + n, buf + 2 * n, buf + 3 * n, n, AdamWParams{}, ++step, nullptr);
  });
  CUDA_CHECK(cudaFree(buf));
}

void BM_gelu_bf16(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto* buf = static_cast<uint16_t*>(device_alloc(static_cast<size_t>(2 * n) * 2));
  CUDA_CHECK(cudaMemset(buf, 0, static_cast<size_t>(2 * n) * 2));
  time_kernel(state, 4.0 * static_cast<double>(n), [&] { gelu_bf16(buf, buf + n, n, nullptr); });
  CUDA_CHECK(cudaFree(buf));
}

// One cudaMalloc + cudaFree of range(0) MiB on an idle GPU, wall-clock time of the pair: the
// costs the allocator model's LatencyModel charges (malloc_us + malloc_us_per_gib, free_us).
void BM_cuda_malloc_free(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0)) << 20;
  double malloc_us = 0, free_us = 0;
  for (auto _ : state) {
    void* p = nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    CUDA_CHECK(cudaMalloc(&p, bytes));
    const auto t1 = std::chrono::steady_clock::now();
    CUDA_CHECK(cudaFree(p));
    const auto t2 = std::chrono::steady_clock::now();
    malloc_us += std::chrono::duration<double, std::micro>(t1 - t0).count();
    free_us += std::chrono::duration<double, std::micro>(t2 - t1).count();
    state.SetIterationTime(std::chrono::duration<double>(t2 - t0).count());
  }
  const auto n = static_cast<double>(state.iterations());
  state.counters["malloc_us"] = malloc_us / n;
  state.counters["free_us"] = free_us / n;
}

// Expandable segments' page calls through CudaDevice: map range(0) pages of the mapping
// granularity one by one (cuMemCreate + cuMemMap + cuMemSetAccess), then unmap them
// (synchronise, cuMemUnmap + cuMemRelease): map_page_us and unmap_page_us of the model.
void BM_vmm_map_unmap(benchmark::State& state) {
  const auto pages = static_cast<uint64_t>(state.range(0));
  uint64_t free_bytes = 0, total_bytes = 0;
  mlprio::fsdp::cuda_memory_info(0, free_bytes, total_bytes);
  mlprio::fsdp::CudaDevice dev(0, free_bytes / 2);
  const uint64_t page = dev.map_granularity();
  if (page == 0) {
    state.SkipWithError("no virtual memory management on this GPU");
    return;
  }
  const uint64_t base = dev.reserve_address_range(pages * page);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t p = 0; p < pages; ++p)
      if (!dev.map_pages(base + p * page, page)) state.SkipWithError("map_pages failed");
    dev.synchronize();
    for (uint64_t p = 0; p < pages; ++p) dev.unmap_pages(base + p * page, page);
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const auto& t = dev.times();
  state.counters["map_page_us"] = t.maps ? t.map_us / static_cast<double>(t.maps) : 0;
  state.counters["unmap_page_us"] = t.unmaps ? t.unmap_us / static_cast<double>(t.unmaps) : 0;
  state.counters["page_mib"] = static_cast<double>(page) / (1 << 20);
}

BENCHMARK(BM_fill_pattern)->Arg(1 << 20)->Arg(256 << 20)->UseManualTime();
BENCHMARK(BM_adamw)->Arg(1 << 16)->Arg(64 << 20)->UseManualTime();
BENCHMARK(BM_gelu_bf16)->Arg(1 << 16)->Arg(64 << 20)->UseManualTime();
BENCHMARK(BM_cuda_malloc_free)->Arg(2)->Arg(64)->Arg(1024)->Arg(4096)->Arg(16384)->UseManualTime();
BENCHMARK(BM_vmm_map_unmap)->Arg(1)->Arg(64)->UseManualTime();

// Each kernel against its reference on sizes that exercise tails and unaligned starts.
bool verify() {
  bool ok = true;
  auto report = [&](const CompareResult& r, const char* what) {
    if (!r.ok()) {
      std::fprintf(stderr, "WRONG %s\n", r.describe(what).c_str());
      ok = false;
    }
  };
  {
    const uint64_t bytes = (1 << 20) + 13;
    auto* d = static_cast<unsigned char*>(device_alloc(bytes + 3));
    std::vector<unsigned char> got(bytes), want(bytes);
    fill_pattern_ref(want.data(), bytes, 9);
    for (uint64_t off : {0, 3}) {
      fill_pattern(d + off, bytes, 9, nullptr);
      CUDA_CHECK(cudaMemcpy(got.data(), d + off, bytes, cudaMemcpyDeviceToHost));
      report(compare_bytes(got.data(), want.data(), bytes), "fill_pattern");
    }
    CUDA_CHECK(cudaFree(d));
  }
  {
    const int64_t n = 65537;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> host(static_cast<size_t>(4 * n), 0.0f);
    for (int64_t i = 0; i < 2 * n; ++i) host[static_cast<size_t>(i)] = nd(rng);  // p and g
    auto* d = static_cast<float*>(device_alloc(host.size() * 4));
    CUDA_CHECK(cudaMemcpy(d, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
    float* h = host.data();
    for (int step = 1; step <= 2; ++step) {
      adamw(d, d + n, d + 2 * n, d + 3 * n, n, AdamWParams{}, step, nullptr);
      adamw_ref(h, h + n, h + 2 * n, h + 3 * n, n, AdamWParams{}, step);
    }
    std::vector<float> got(host.size());
    CUDA_CHECK(cudaMemcpy(got.data(), d, got.size() * 4, cudaMemcpyDeviceToHost));
    report(compare_floats(got.data(), h, 4 * n, ADAMW_REL_TOL, ADAMW_ABS_TOL), "adamw");
    CUDA_CHECK(cudaFree(d));
  }
  {
    std::vector<uint16_t> x;
    for (uint32_t b = 0; b < 0x10000; ++b)
      if ((b & 0x7f80U) != 0x7f80U) x.push_back(static_cast<uint16_t>(b));
    const auto n = static_cast<int64_t>(x.size());
    auto* d = static_cast<uint16_t*>(device_alloc(x.size() * 4));
    CUDA_CHECK(cudaMemcpy(d, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
    gelu_bf16(d, d + n, n, nullptr);
    std::vector<uint16_t> got(x.size()), want(x.size());
    CUDA_CHECK(cudaMemcpy(got.data(), d + n, x.size() * 2, cudaMemcpyDeviceToHost));
    gelu_bf16_ref(x.data(), want.data(), n);
    report(compare_bf16(got.data(), want.data(), n, GELU_MAX_ULP), "gelu_bf16");
    CUDA_CHECK(cudaFree(d));
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  std::string why;
  if (mlprio::fsdp::cuda_device_count(&why) == 0) {
    std::printf("bench_kernels: SKIPPED, no CUDA device (%s)\n", why.c_str());
    return 0;
  }
  if (!verify()) return 1;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  benchmark::AddCustomContext("build_type", MLPRIO_BUILD_TYPE);
  benchmark::AddCustomContext("git_commit", MLPRIO_GIT_COMMIT);
  benchmark::AddCustomContext("gpu", prop.name);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
