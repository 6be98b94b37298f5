// The measuring runner: the sweep's FSDP step stream run through the allocator model backed by a
// real GPU (CudaDevice), with every allocation touched by a kernel, Adam's update run by a fused
// AdamW kernel over each flat shard, and, with more than one rank (mpirun/srun, one GPU per rank),
// NCCL all-gathers and reduce-scatters on the generated buffers. Reports the sweep's fields (from
// the model's statistics on the real run) plus measured step times, so the throughput cliff can
// be seen. Built only with CUDA (MLPRIO_FSDP_HAVE_CUDA).
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlprio/fsdp/sweep.hpp"
#include "mlprio/util/errors.hpp"

namespace mlprio::fsdp {

// No usable CUDA device: the program exits 3 and points at `sweep`.
class NoCudaDeviceError : public ::mlprio::NoDeviceError {
 public:
  using ::mlprio::NoDeviceError::NoDeviceError;
};

struct MeasureOptions {
  FsdpConfig base;        // world_size must equal the number of ranks when there is more than one
  uint64_t capacity = 0;  // budget per GPU; 0: free memory minus headroom
  uint64_t headroom = 3ULL << 30;  // left to the CUDA context, NCCL and the kernels' launches
  AllocatorSettings settings;
  LatencyModel latency;  // what the allocator model charges (alloc_overhead_ms_per_step)
  // > 0: each step's forward/backward FLOPs run as GPU time on the compute stream at this rate
  // (kernels::busy_wait), so that a retry's synchronisation drains real queued work; 0: none.
  double compute_tflops = 0;
  int64_t mbs_lo = 1, mbs_hi = 1, mbs_step = 1;
  int steps = 3;
  bool stop_after_oom = true;
  std::function<void(int64_t mbs, size_t done, size_t total)> progress;  // rank 0 only
};

struct MeasurePoint {
  SweepPoint model;      // the sweep's fields, from the allocator on the real device
  double step_ms = 0.0;  // mean measured step time over the steps after the first
  double first_step_ms = 0.0;
  double device_call_ms_per_step = 0.0;  // measured time inside cudaMalloc/Free, map/unmap, sync
  double retry_sync_ms_per_step = 0.0;   // of which: cudaDeviceSynchronize before retries
  double compute_ms_per_step = 0.0;      // GPU time modelling the GEMMs (--compute-tflops)
  double samples_per_s = 0.0;            // mbs * ranks / step time (all ranks together)
  int64_t collectives_per_step = 0;
};

struct MeasureResult {
  std::vector<MeasurePoint> points;
  int64_t max_safe_mbs = 0;
  int64_t first_bad_mbs = 0;
  int ranks = 1;
  int rank = 0;
  bool collectives = false;  // NCCL ran (more than one rank)
  int nccl_version = 0;      // ncclGetVersion (checked equal on every rank); 0: no NCCL used
  std::string device_name;   // of rank 0's GPU
  uint64_t capacity = 0;     // the budget every rank used (the minimum over ranks)
  // Rank 0's device calls over every measured minibatch (init and all steps); fit_latency of it
  // is the LatencyModel that `sweep --latency` can take to predict this GPU's retry costs.
  DeviceCallTimes calls;
  std::vector<std::pair<int64_t, std::vector<MemorySample>>> series;  // as SweepResult::series
};

// Initialises MPI itself when started by mpirun/srun and the build has MPI. Throws
// NoCudaDeviceError without a device. Results are identical on every rank (maxima over ranks
// for retries, OOMs, peaks and times).
MeasureResult run_measure(const MeasureOptions& opts);

}  // namespace mlprio::fsdp
