// Throughput of the caching-allocator model (fsdp_profiler): allocator operations per second on
// one core, for (a) a random mix of malloc/free over both pools and three streams on a device
// that is never full (the common path: best fit, split, merge) and (b) the operations of
// generated FSDP training steps (GPT2-XL and T5-3B under FSDP1, 8 GPUs, 80 GiB), which include
// record_stream events and, near the limit, retries. Before timing, the same workloads run with
// check() after every operation and a hand-checked scenario is verified; a wrong answer exits
// non-zero.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <random>
#include <vector>

#include "mlprio/fsdp/allocator.hpp"
#include "mlprio/fsdp/sweep.hpp"

using namespace mlprio::fsdp;

namespace {

struct MixOp {
  uint64_t size;
  uint32_t victim;  // which live slot to free
  StreamId stream;
};

std::vector<MixOp> make_mix(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<MixOp> ops(n);
  for (auto& o : ops) {
    const uint64_t r = rng() % 100;
    o.size = r < 60   ? 1 + rng() % (64 * KiB)
             : r < 90 ? 1 + rng() % (4 * MiB)
                      : 1 + rng() % (64 * MiB);
    o.victim = static_cast<uint32_t>(rng());
    o.stream = static_cast<StreamId>(rng() % 3);
  }
  return ops;
}

constexpr size_t LIVE = 256;

// One malloc and one free per element: a steady state of LIVE live blocks.
template <bool CHECK>
int64_t run_mix(CachingAllocator& a, const std::vector<MixOp>& ops, std::vector<BlockId>& live) {
  int64_t n = 0;
  for (const MixOp& o : ops) {
    const size_t slot = o.victim % LIVE;
    if (live[slot] != NO_BLOCK) {
      a.free(live[slot]);
      ++n;
    }
    const auto r = a.malloc(o.size, o.stream);
    ++n;
    live[slot] = r.ok ? r.id : NO_BLOCK;
    if constexpr (CHECK) a.check();
  }
  return n;
}

bool verify() {
  bool ok = true;
  {
    SimulatedDevice dev(64 * GiB);
    CachingAllocator a(dev, AllocatorSettings{});
    std::vector<BlockId> live(LIVE, NO_BLOCK);
    try {
      run_mix<true>(a, make_mix(20000, 7), live);
    } catch (const InvariantError& e) {
      std::fprintf(stderr, "WRONG: invariant failed in the mixed workload: %s\n", e.what());
      ok = false;
    }
    if (a.stats().num_alloc_retries != 0) {
      std::fprintf(stderr, "WRONG: retries on a device that is never full\n");
      ok = false;
    }
  }
  {
    SimulatedDevice dev(64 * MiB);
    CachingAllocator a(dev, AllocatorSettings{});
    const auto x = a.malloc(MiB + 1, 0);
    const auto y = a.malloc(30 * MiB, 0);
    a.free(x.id);
    a.free(y.id);
    const auto z = a.malloc(50 * MiB, 0);  // needs both cached segments released: one retry
    if (x.size != 1'049'088 || !z.ok || a.stats().num_alloc_retries != 1 ||
        a.stats().reserved_bytes[AGGREGATE].current != static_cast<int64_t>(50 * MiB)) {
      std::fprintf(stderr, "WRONG: hand-checked retry scenario\n");
      ok = false;
    }
  }
  for (const char* model : {"gpt2-xl", "t5-3b"}) {
    FsdpConfig c;
    c.model = find_model(model);
    c.micro_batch = 4;
    StepGenerator gen(c);
    SimulatedDevice dev(80 * GiB);
    try {
      run_steps(gen, dev, AllocatorSettings{}, 2, false, true);
    } catch (const InvariantError& e) {
      std::fprintf(stderr, "WRONG: invariant failed in %s steps: %s\n", model, e.what());
      ok = false;
    }
  }
  return ok;
}

void BM_mixed_malloc_free(benchmark::State& state) {
  const auto ops = make_mix(1 << 16, 42);
  SimulatedDevice dev(64 * GiB);
  CachingAllocator a(dev, AllocatorSettings{});
  std::vector<BlockId> live(LIVE, NO_BLOCK);
  run_mix<false>(a, ops, live);  // warm the cache: steady state only
  int64_t total = 0;
  for (auto _ : state) total += run_mix<false>(a, ops, live);
  state.counters["alloc_ops_per_s"] =
      benchmark::Counter(static_cast<double>(total), benchmark::Counter::kIsRate);
  state.SetItemsProcessed(total);
}
BENCHMARK(BM_mixed_malloc_free)->Unit(benchmark::kMillisecond);

void BM_fsdp_steps(benchmark::State& state, const char* model) {
  FsdpConfig c;
  c.model = find_model(model);
  c.micro_batch = state.range(0);
  int64_t ops = 0;
  for (auto _ : state) {
    StepGenerator gen(c);
    SimulatedDevice dev(80 * GiB);
    const RunResult r = run_steps(gen, dev, AllocatorSettings{}, 3, false, false);
    ops += r.alloc_ops;
  }
  state.counters["mallocs_per_s"] =
      benchmark::Counter(static_cast<double>(ops), benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_fsdp_steps, gpt2_xl, "gpt2-xl")->Arg(8)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_fsdp_steps, t5_3b, "t5-3b")->Arg(64)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  if (!verify()) return 1;
  benchmark::AddCustomContext("build_type", MLPRIO_BUILD_TYPE);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
