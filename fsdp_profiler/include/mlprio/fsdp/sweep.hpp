// The minibatch sweep: for each minibatch size, run the step generator's operations through a
// fresh allocator model on a device of the given capacity for several steps, and report cudaMalloc
// retries per step, OOMs, peak reserved/allocated memory and fragmentation; max_safe_mbs is the
// largest minibatch below the first one with retries or an OOM. run_steps() is the driver that
// executes generated operations and is used by the tests as well.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mlprio/fsdp/allocator.hpp"
#include "mlprio/fsdp/step_generator.hpp"

namespace mlprio::fsdp {

struct MemorySample {
  int64_t op = 0;     // index of the allocator operation within the run
  int32_t step = 0;   // -1: initialisation
  int32_t phase = 0;  // Phase value
  int64_t allocated_bytes = 0;
  int64_t reserved_bytes = 0;
  int64_t active_bytes = 0;
};

struct StepStats {
  int64_t retries = 0;
  int64_t ooms = 0;
  int64_t peak_reserved = 0;
  int64_t peak_allocated = 0;
  int64_t reserved_at_peak_allocated = 0;
  double device_time_us = 0.0;
};

struct RunResult {
  std::vector<StepStats> steps;
  MemoryStats final_stats;
  std::vector<MemorySample> series;  // filled when requested
  int64_t alloc_ops = 0;
};

// Runs init + `steps` training steps of `gen` on a fresh allocator over `device`.
// check_invariants runs check() after every operation (tests).
RunResult run_steps(StepGenerator& gen, Device& device, const AllocatorSettings& settings,
                    int steps, bool record_series, bool check_invariants = false);

struct SweepPoint {
  int64_t mbs = 0;
  double retries_per_step = 0.0;  // mean over the steps after the first (all if only one)
  int64_t first_step_retries = 0;
  bool oom = false;
  int64_t ooms = 0;
  int64_t peak_reserved = 0;
  int64_t peak_allocated = 0;
  double fragmentation = 0.0;               // 1 - allocated/reserved at the moment allocated peaked
  double alloc_overhead_ms_per_step = 0.0;  // simulated device-call time (latency model)
};

// Folds one step's statistics into a point: OOM count, peak reserved, and the peak allocated
// with the fragmentation at that moment. Shared by the simulated sweep and the GPU measurement.
void fold_step_peaks(SweepPoint& p, const StepStats& s);

// Bounds on the work one sweep may ask for: the largest per-GPU minibatch (tensor sizes are
// products of it, in 64 bits) and the most minibatch sizes run (each point is a fresh run of
// every step).
inline constexpr int64_t MAX_MICRO_BATCH = int64_t{1} << 20;
inline constexpr int64_t MAX_SWEEP_POINTS = 4096;

struct SweepOptions {
  FsdpConfig base;  // micro_batch is overwritten per point
  uint64_t capacity = 0;
  AllocatorSettings settings;
  LatencyModel latency;  // what each simulated device call costs (alloc_overhead_ms_per_step)
  int64_t mbs_lo = 1, mbs_hi = 1, mbs_step = 1;  // mbs_hi <= MAX_MICRO_BATCH
  int steps = 3;
  // Stop at the first minibatch with an OOM (larger ones only OOM more; the CLI's default, unless
  // --past-oom). Without it the range may hold at most MAX_SWEEP_POINTS sizes; with it the range
  // may be longer, and the sweep stops after that many points (stopped_at_point_bound).
  bool stop_after_oom = false;
  std::function<void(int64_t mbs, size_t done, size_t total)> progress;
  // Asked before each minibatch size; true stops the sweep there (SweepResult::interrupted).
  // The CLI answers with mlprio/util/stop_signal.hpp (SIGTERM/SIGINT).
  std::function<bool()> stop;
};

struct SweepResult {
  std::vector<SweepPoint> points;
  int64_t max_safe_mbs = 0;   // 0: even the smallest minibatch retries or runs out of memory
  int64_t first_bad_mbs = 0;  // 0: none
  bool stopped_at_point_bound = false;  // MAX_SWEEP_POINTS sizes run, none with an OOM
  bool interrupted = false;             // SweepOptions::stop said stop: `points` is only a prefix
  // Per-operation memory series for up to two points (the last safe one and the first bad one).
  std::vector<std::pair<int64_t, std::vector<MemorySample>>> series;
};

SweepResult run_sweep(const SweepOptions& opts);

}  // namespace mlprio::fsdp
