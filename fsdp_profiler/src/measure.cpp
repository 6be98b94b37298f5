// The measuring runner (see measure.hpp). It executes the step generator's operations like
// run_steps() in sweep.cpp, but for real: MARK/WAIT record and wait on CUDA events, SYNC_ALL is a
// device synchronisation, every allocation is written by fill_pattern on its stream (first
// touch), Adam's moments are zeroed and updated by the fused AdamW kernel, and with more than one
// rank the FSDP buffers are all-gathered / reduce-scattered by NCCL. Which generated buffers are
// collective buffers, and their inputs, follows the Role of each allocation (CollectivePlan in
// collectives.hpp: ALL_GATHER_OUTPUT from the live MP_SHARD or in place, RS_OUTPUT from the
// latest live RS_INPUT), so reordering allocations in the generator cannot silently pair the
// wrong buffers; a missing or mis-sized partner is an InvariantError.
// Before each collective the ranks agree (MPI_Allreduce) that all of them hold both buffers, so a
// rank that ran out of memory makes every rank skip that collective instead of hanging NCCL.
#include "mlprio/fsdp/measure.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "gpu_check.hpp"
#include "mlprio/fsdp/allocator.hpp"
#include "mlprio/fsdp/collectives.hpp"
#include "mlprio/fsdp/cuda_device.hpp"
#include "mlprio/fsdp/launch.hpp"
#include "mlprio/kernels/check.hpp"
#include "mlprio/kernels/kernels.hpp"
#include "rank_abort.hpp"

#if MLPRIO_FSDP_HAVE_MPI
#include "mlprio/util/errors.hpp"
#include "mlprio/util/mpi_session.hpp"
#endif

namespace mlprio::fsdp {

namespace {

// Ranks, this rank's GPU and the collectives between them.
struct Group {
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  int nccl_version = 0;  // ncclGetVersion, the same on every rank; 0 without NCCL or one rank
#if MLPRIO_FSDP_HAVE_MPI
  std::optional<util::MpiSession> mpi;  // only when started as one of several ranks
#endif
#if MLPRIO_FSDP_HAVE_NCCL
  ncclComm_t comm = nullptr;
#endif
  bool all(bool mine) const {
#if MLPRIO_FSDP_HAVE_MPI
    if (size > 1) {
      int in = mine ? 1 : 0, out = 0;
      MLPRIO_MPI_CHECK(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD));
      return out != 0;
    }
#endif
    return mine;
  }
  void max(double* v, int n) const {
#if MLPRIO_FSDP_HAVE_MPI
    if (size > 1)
      MLPRIO_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
#else
    (void)v;
    (void)n;
#endif
  }
  uint64_t min(uint64_t v) const {
#if MLPRIO_FSDP_HAVE_MPI
    if (size > 1) {
      unsigned long long in = v, out = 0;
      MLPRIO_MPI_CHECK(
          MPI_Allreduce(&in, &out, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD));
      return out;
    }
#endif
    return v;
  }
  ~Group() {
#if MLPRIO_FSDP_HAVE_NCCL
    if (comm) ncclCommDestroy(comm);
#endif
  }
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One minibatch point: init + steps on a fresh allocator over a fresh CudaDevice.
class Runner {
 public:
  Runner(const FsdpConfig& cfg, Group& group, std::array<cudaStream_t, NUM_GEN_STREAMS>& streams,
         CudaDevice& dev, const AllocatorSettings& settings, int64_t units)
      : cfg_(cfg),
        g_(group),
        streams_(streams),
        dev_(dev),
        alloc_(dev, settings),
        units_(units),
        ab_(cfg.mixed_precision ? 2 : 4),
        plan_(group.size, ab_, cfg.sharding) {
    CUDA_CHECK(cudaEventCreateWithFlags(&ev_dep_, cudaEventDisableTiming));
  }
  ~Runner() {
    (void)cudaDeviceSynchronize();
    for (auto& m : marks_)
      for (cudaEvent_t e : m)
        if (e) (void)cudaEventDestroy(e);
    (void)cudaEventDestroy(ev_dep_);
  }
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  struct Step {
    StepStats st;
    double ms = 0, device_call_ms = 0, retry_sync_ms = 0;
    double compute_ms = 0;  // GPU time spent in busy_wait standing in for the GEMMs
    int64_t collectives = 0;
  };

  // Model compute time (--compute-tflops): the step's forward and backward FLOPs run as GPU time
  // on the compute stream, spread over that phase's compute-stream allocations in proportion to
  // their bytes (activations grow with the work that makes them).
  void set_compute(double tflops, double fwd_flops, double bwd_flops) {
    tflops_ = tflops;
    phase_flops_[0] = fwd_flops;
    phase_flops_[1] = bwd_flops;
  }

  void execute(const StepTrace& trace, int32_t step, Step* out, std::vector<MemorySample>& series) {
    const int64_t retries0 = alloc_.stats().num_alloc_retries;
    const int64_t ooms0 = alloc_.stats().num_ooms;
    const double model0 = alloc_.device_time_us();
    const double calls0 = dev_.times().total_us();
    const double sync0 = dev_.times().sync_us;
    const int64_t coll0 = collectives_run_;
    plan_compute(trace);
    compute_ns_ = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const Op& op : trace.ops) {
      run_op(op, out ? &out->st : nullptr);
      if (op.kind == OpKind::ALLOC || op.kind == OpKind::FREE) {
        const auto& s = alloc_.stats();
        series.push_back(MemorySample{
            static_cast<int64_t>(series.size()), step, phase_, s.allocated_bytes[AGGREGATE].current,
            s.reserved_bytes[AGGREGATE].current, s.active_bytes[AGGREGATE].current});
      }
    }
    flush_compute();
    CUDA_CHECK(cudaDeviceSynchronize());
    if (out) {
      out->ms = ms_since(t0);
      out->compute_ms = compute_ns_ / 1e6;
      out->device_call_ms = (dev_.times().total_us() - calls0) / 1000.0;
      out->retry_sync_ms = (dev_.times().sync_us - sync0) / 1000.0;
      out->collectives = collectives_run_ - coll0;
      out->st.retries = alloc_.stats().num_alloc_retries - retries0;
      out->st.ooms = alloc_.stats().num_ooms - ooms0;
      out->st.device_time_us = alloc_.device_time_us() - model0;
    }
  }
  void finish() { alloc_.check(); }

 private:
  cudaStream_t st(uint8_t s) const { return streams_[s]; }
  void* ptr(uint32_t tensor) const {
    const auto it = live_.find(tensor);
    return it == live_.end() ? nullptr : reinterpret_cast<void*>(alloc_.block_addr(it->second));
  }
  uint64_t bytes_of(uint32_t tensor) const {
    const auto it = bytes_.find(tensor);
    return it == bytes_.end() ? 0 : it->second;
  }
  // `consumer` waits for everything enqueued on `producer` so far (FSDP's stream waits).
  void depend(uint8_t consumer, uint8_t producer) {
    CUDA_CHECK(cudaEventRecord(ev_dep_, st(producer)));
    CUDA_CHECK(cudaStreamWaitEvent(st(consumer), ev_dep_, 0));
  }

  void run_op(const Op& op, StepStats* stats) {
    switch (op.kind) {
      case OpKind::ALLOC:
        on_alloc(op, stats);
        break;
      case OpKind::FREE: {
        if (phase_ == static_cast<int32_t>(Phase::OPTIMIZER) && !adam_done_) run_adam();
        plan_.on_op(op);  // a freed collective input is no longer a partner
        const auto it = live_.find(op.tensor);
        if (it != live_.end()) {
          alloc_.free(it->second);
          live_.erase(it);
          bytes_.erase(op.tensor);
        }
        break;
      }
      case OpKind::RECORD_STREAM: {
        const auto it = live_.find(op.tensor);
        if (it != live_.end()) alloc_.record_stream(it->second, op.stream);
        break;
      }
      case OpKind::MARK: {
        if (marks_.size() <= op.tensor) marks_.resize(op.tensor + 1);
        if (marker_pos_.size() <= op.tensor) marker_pos_.resize(op.tensor + 1);
        for (uint8_t s = 0; s < NUM_GEN_STREAMS; ++s) {
          cudaEvent_t& e = marks_[op.tensor][s];
          if (!e) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
          CUDA_CHECK(cudaEventRecord(e, st(s)));
          marker_pos_[op.tensor][s] = alloc_.stream_marker(s);
        }
        break;
      }
      case OpKind::WAIT:
        for (uint8_t s = 0; s < NUM_GEN_STREAMS; ++s) {
          CUDA_CHECK(cudaEventSynchronize(marks_.at(op.tensor)[s]));
          alloc_.stream_done_until(s, marker_pos_.at(op.tensor)[s]);
        }
        break;
      case OpKind::STREAM_WAIT:
        CUDA_CHECK(cudaStreamWaitEvent(st(op.stream),
                                       marks_.at(op.tensor)[static_cast<uint8_t>(op.bytes)], 0));
        break;
      case OpKind::SYNC_ALL:
        if (phase_ == static_cast<int32_t>(Phase::OPTIMIZER) && !adam_done_) run_adam();
        CUDA_CHECK(cudaDeviceSynchronize());
        alloc_.all_streams_done();
        alloc_.process_events();
        break;
      case OpKind::PHASE:
        flush_compute();
        phase_ = static_cast<int32_t>(op.bytes);
        if (phase_ == static_cast<int32_t>(Phase::OPTIMIZER)) {
          opt_allocs_.clear();
          adam_done_ = false;
        }
        break;
    }
  }

  void on_alloc(const Op& op, StepStats* stats) {
    const auto r = alloc_.malloc(op.bytes, op.stream);
    if (r.ok) {
      live_[op.tensor] = r.id;
      bytes_[op.tensor] = op.bytes;
    }
    if (stats) {
      const auto& s = alloc_.stats();
      stats->peak_reserved = std::max(stats->peak_reserved, s.reserved_bytes[AGGREGATE].current);
      if (s.allocated_bytes[AGGREGATE].current > stats->peak_allocated) {
        stats->peak_allocated = s.allocated_bytes[AGGREGATE].current;
        stats->reserved_at_peak_allocated = s.reserved_bytes[AGGREGATE].current;
      }
    }
    const auto phase = static_cast<Phase>(phase_);
    if (phase == Phase::INIT) params_.push_back(op.tensor);
    if (phase == Phase::OPTIMIZER) opt_allocs_.push_back(op.tensor);
    const Collective c = plan_.on_op(op);
    switch (c.kind) {
      case CollectiveKind::NONE:
        break;
      case CollectiveKind::ALL_GATHER: {
        void* recv = ptr(c.output);
        const uint64_t chunk = c.count * static_cast<uint64_t>(ab_);
        void* send = c.in_place ? (recv ? static_cast<char*>(recv) + chunk * g_.rank : nullptr)
                                : ptr(c.input);
        if (g_.all(recv && send)) {
          all_gather(send, recv, c.count);
          depend(COMPUTE_STREAM, UNSHARD_STREAM);  // forward/backward of the unit waits
        }
        return;  // the output is written by the collective, not touched
      }
      case CollectiveKind::REDUCE_SCATTER: {
        void* send = ptr(c.input);
        void* recv = ptr(c.output);
        if (g_.all(send && recv)) {
          depend(POST_BACKWARD_STREAM, COMPUTE_STREAM);  // the flat gradient is complete
          reduce_scatter(send, recv, c.count);
        }
        return;
      }
    }
    if (void* p = ptr(op.tensor)) kernels::fill_pattern(p, op.bytes, op.tensor, st(op.stream));
    if (const int k = compute_phase(op, phase); k >= 0) {
      debt_ns_ += static_cast<double>(op.bytes) * ns_per_byte_[k];
      if (debt_ns_ >= 20000) flush_compute();  // fewer, longer waits: launches cost ~us each
    }
  }

  // 0 (forward) or 1 (backward) for an allocation that stands for compute, else -1.
  static int compute_phase(const Op& op, Phase phase) {
    if (op.kind != OpKind::ALLOC || op.stream != COMPUTE_STREAM) return -1;
    switch (op.role) {
      case Role::ACTIVATION:
      case Role::DROPOUT_MASK:
      case Role::TEMPORARY:
      case Role::ACTIVATION_GRAD:
      case Role::WEIGHT_GRAD:
      case Role::LOGITS:
      case Role::LOSS:
        break;
      default:
        return -1;
    }
    return phase == Phase::FORWARD ? 0 : phase == Phase::BACKWARD ? 1 : -1;
  }
  void plan_compute(const StepTrace& trace) {
    ns_per_byte_[0] = ns_per_byte_[1] = 0;
    debt_ns_ = 0;
    if (tflops_ <= 0) return;
    double bytes[2] = {0, 0};
    Phase phase = Phase::INIT;
    for (const Op& op : trace.ops) {
      if (op.kind == OpKind::PHASE) phase = static_cast<Phase>(op.bytes);
      if (const int k = compute_phase(op, phase); k >= 0) bytes[k] += static_cast<double>(op.bytes);
    }
    for (int k = 0; k < 2; ++k)
      if (bytes[k] > 0) ns_per_byte_[k] = phase_flops_[k] / (tflops_ * 1e12) * 1e9 / bytes[k];
  }
  void flush_compute() {
    const auto ns = static_cast<uint64_t>(debt_ns_);
    if (ns == 0) return;
    kernels::busy_wait(ns, st(COMPUTE_STREAM));
    compute_ns_ += static_cast<double>(ns);
    debt_ns_ -= static_cast<double>(ns);
  }

  void all_gather(void* send, void* recv, uint64_t count) {
#if MLPRIO_FSDP_HAVE_NCCL
    NCCL_CHECK(ncclAllGather(send, recv, count, ab_ == 2 ? ncclBfloat16 : ncclFloat32, g_.comm,
                             st(UNSHARD_STREAM)));
    ++collectives_run_;
#else
    (void)send, (void)recv, (void)count;
#endif
  }
  void reduce_scatter(void* send, void* recv, uint64_t count) {
#if MLPRIO_FSDP_HAVE_NCCL
    NCCL_CHECK(ncclReduceScatter(send, recv, count, ab_ == 2 ? ncclBfloat16 : ncclFloat32, ncclSum,
                                 g_.comm, st(POST_BACKWARD_STREAM)));
    ++collectives_run_;
#else
    (void)send, (void)recv, (void)count;
#endif
  }

  // The optimizer phase allocates (first step only) exp_avg, exp_avg_sq per unit, then one
  // temporary per unit the size of the fp32 shard; the update runs before the first free of the
  // phase. The temporary stands in for the gradient (same size; its values do not matter here).
  void run_adam() {
    adam_done_ = true;
    const auto n = static_cast<size_t>(units_);
    if (opt_allocs_.size() == 3 * n) {
      exp_avg_.clear();
      exp_avg_sq_.clear();
      for (size_t u = 0; u < n; ++u) {
        exp_avg_.push_back(opt_allocs_[2 * u]);
        exp_avg_sq_.push_back(opt_allocs_[2 * u + 1]);
        for (uint32_t t : {exp_avg_.back(), exp_avg_sq_.back()})
          if (void* p = ptr(t)) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes_of(t), st(COMPUTE_STREAM)));
      }
    }
    if (opt_allocs_.size() < n || exp_avg_.size() != n || params_.size() < n) return;
    ++adam_step_;
    const size_t tmp0 = opt_allocs_.size() - n;
    for (size_t u = 0; u < n; ++u) {
      const uint32_t ids[] = {params_[u], opt_allocs_[tmp0 + u], exp_avg_[u], exp_avg_sq_[u]};
      const uint64_t b = bytes_of(ids[0]);
      bool ok = b > 0 && b % 4 == 0;
      for (uint32_t t : ids) ok = ok && ptr(t) && bytes_of(t) == b;
      if (!ok) continue;  // a buffer is missing (out of memory) or the pattern changed
      kernels::adamw(static_cast<float*>(ptr(ids[0])), static_cast<const float*>(ptr(ids[1])),
                     static_cast<float*>(ptr(ids[2])), static_cast<float*>(ptr(ids[3])),
                     static_cast<int64_t>(b / 4), kernels::AdamWParams{}, adam_step_,
                     st(COMPUTE_STREAM));
    }
  }

  const FsdpConfig& cfg_;
  Group& g_;
  std::array<cudaStream_t, NUM_GEN_STREAMS>& streams_;
  CudaDevice& dev_;
  CachingAllocator alloc_;
  int64_t units_;
  int ab_ = 2;
  int32_t phase_ = 0;
  cudaEvent_t ev_dep_ = nullptr;
  std::unordered_map<uint32_t, BlockId> live_;
  std::unordered_map<uint32_t, uint64_t> bytes_;
  std::vector<std::array<cudaEvent_t, NUM_GEN_STREAMS>> marks_;
  std::vector<std::array<uint64_t, NUM_GEN_STREAMS>> marker_pos_;
  CollectivePlan plan_;
  std::vector<uint32_t> params_, opt_allocs_, exp_avg_, exp_avg_sq_;
  bool adam_done_ = true;
  int adam_step_ = 0;
  int64_t collectives_run_ = 0;
  double tflops_ = 0;               // 0: no compute time modelled
  double phase_flops_[2] = {0, 0};  // forward, backward FLOPs of one step on this rank
  double ns_per_byte_[2] = {0, 0};  // of the current trace's compute-stream allocations
  double debt_ns_ = 0, compute_ns_ = 0;
};

// Ranks from MPI, cross-checked with the launcher's own count; the node-local rank and size
// from MPI_Comm_split_type (the launcher's variables only when MPI is not running).
void set_up_group(Group& g, const MeasureOptions& opts) {
  const LauncherInfo launcher = launcher_info([](const char* v) { return std::getenv(v); });
#if MLPRIO_FSDP_HAVE_MPI
  if (launched_with_ranks(launcher)) {
    g.mpi.emplace();
    g.rank = g.mpi->rank();
    g.size = g.mpi->size();
    check_mpi_size(launcher, g.size);
    MPI_Comm local;
    MLPRIO_MPI_CHECK(
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g.rank, MPI_INFO_NULL, &local));
    MLPRIO_MPI_CHECK(MPI_Comm_rank(local, &g.local_rank));
    MLPRIO_MPI_CHECK(MPI_Comm_size(local, &g.local_size));
    MLPRIO_MPI_CHECK(MPI_Comm_free(&local));
    kernels::set_error_rank(g.rank);
  }
#else
  if (launched_with_ranks(launcher))
    throw ::mlprio::RuntimeError("started as one of " + std::to_string(launcher.size) +
                                 " processes (" + launcher.size_from +
                                 ") but this build has no MPI: run one process");
#endif
  if (g.size > 1 && g.size != opts.base.world_size)
    throw ::mlprio::UsageError("--world-size " + std::to_string(opts.base.world_size) +
                               " does not match the " + std::to_string(g.size) +
                               " MPI ranks; start one rank per GPU with mpirun -n N or srun");
#if !MLPRIO_FSDP_HAVE_NCCL
  if (g.size > 1)
    throw ::mlprio::RuntimeError(
        "this build has no NCCL: run a single rank (collectives are not run)");
#endif
}

// ncclCommAbort, which unlike ncclCommDestroy returns even when peers are stuck in a collective.
void abort_collectives(Group& g) {
#if MLPRIO_FSDP_HAVE_NCCL
  if (g.comm) (void)ncclCommAbort(g.comm);
  g.comm = nullptr;
#else
  (void)g;
#endif
}

// The NCCL communicator of the ranks. The NCCL version is compared across ranks first (a mix
// can hang in ncclCommInitRank); then one all-gather and one reduce-scatter of 64 MiB per rank
// make NCCL set up its connections and their buffers (ring, and NVLS where it applies: GBs per
// GPU on 8 x H200), which it does lazily at the first collective, so that they are held before
// free memory is read for the budget instead of appearing as retries in the first minibatch.
void set_up_nccl(Group& g) {
#if MLPRIO_FSDP_HAVE_NCCL && MLPRIO_FSDP_HAVE_MPI
  if (g.size <= 1) return;
  int version = 0;
  NCCL_CHECK(ncclGetVersion(&version));
  int lo = version, hi = version;
  MLPRIO_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  MLPRIO_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  if (lo != hi)
    throw ::mlprio::RuntimeError("NCCL versions differ across ranks (" + std::to_string(lo) +
                                 " .. " + std::to_string(hi) +
                                 "): every node must load the same libnccl");
  g.nccl_version = version;
  ncclUniqueId id;
  if (g.rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MLPRIO_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
  NCCL_CHECK(ncclCommInitRank(&g.comm, g.size, id, g.rank));
  const size_t per_rank = (64u << 20) / sizeof(float);
  float* buf = nullptr;
  CUDA_CHECK(cudaMalloc(&buf, per_rank * g.size * sizeof(float)));
  struct Free {
    float* p;
    ~Free() { (void)cudaFree(p); }
  } free_buf{buf};
  CUDA_CHECK(cudaMemset(buf, 0, per_rank * g.size * sizeof(float)));
  NCCL_CHECK(ncclAllGather(buf + per_rank * g.rank, buf, per_rank, ncclFloat32, g.comm, nullptr));
  NCCL_CHECK(ncclReduceScatter(buf, buf + per_rank * g.rank, per_rank, ncclFloat32, ncclSum, g.comm,
                               nullptr));
  CUDA_CHECK(cudaStreamSynchronize(nullptr));
#else
  (void)g;
#endif
}

}  // namespace

namespace {

// One minibatch size's run on the device: the init trace, then opts.steps steps (their stats
// returned; every sample appended to `series`).
std::vector<Runner::Step> run_steps(const FsdpConfig& cfg, Group& g,
                                    std::array<cudaStream_t, NUM_GEN_STREAMS>& streams,
                                    CudaDevice& dev, const MeasureOptions& opts, StepGenerator& gen,
                                    int64_t mbs, std::vector<MemorySample>& series) {
  std::vector<Runner::Step> steps;
  Runner run(cfg, g, streams, dev, opts.settings, gen.unit_count());
  if (opts.compute_tflops > 0) {
    // Forward is 2 of flops_per_sample's 6 (8 with activation checkpointing) parts.
    const double step = gen.flops_per_sample() * static_cast<double>(mbs);
    const double fwd = step / (cfg.activation_checkpointing ? 4.0 : 3.0);
    run.set_compute(opts.compute_tflops, fwd, step - fwd);
  }
  run.execute(gen.init_trace(), -1, nullptr, series);
  for (int k = 0; k < opts.steps; ++k) {
    Runner::Step s;
    run.execute(gen.step_trace(k), k, &s, series);
    steps.push_back(s);
  }
  run.finish();
  return steps;
}

// The point of one minibatch size: the steps' peaks, and their means after the first step (when
// there is more than one), each the maximum over the ranks.
MeasurePoint summarize_steps(const std::vector<Runner::Step>& steps, Group& g, int64_t mbs) {
  MeasurePoint mp;
  SweepPoint& p = mp.model;
  p.mbs = mbs;
  p.first_step_retries = steps.front().st.retries;
  const size_t from = steps.size() > 1 ? 1 : 0;
  double retries = 0, model_us = 0, ms = 0, call_ms = 0, sync_ms = 0, compute_ms = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    const StepStats& s = steps[k].st;
    fold_step_peaks(p, s);
    if (k >= from) {
      retries += static_cast<double>(s.retries);
      model_us += s.device_time_us;
      ms += steps[k].ms;
      call_ms += steps[k].device_call_ms;
      sync_ms += steps[k].retry_sync_ms;
      compute_ms += steps[k].compute_ms;
    }
  }
  const auto n = static_cast<double>(steps.size() - from);
  double agg[] = {retries / n,
                  static_cast<double>(p.first_step_retries),
                  static_cast<double>(p.ooms),
                  static_cast<double>(p.peak_reserved),
                  static_cast<double>(p.peak_allocated),
                  model_us / n / 1000.0,
                  ms / n,
                  steps.front().ms,
                  call_ms / n,
                  sync_ms / n,
                  compute_ms / n};
  g.max(agg, static_cast<int>(std::size(agg)));
  p.retries_per_step = agg[0];
  p.first_step_retries = static_cast<int64_t>(agg[1]);
  p.ooms = static_cast<int64_t>(agg[2]);
  p.peak_reserved = static_cast<int64_t>(agg[3]);
  p.peak_allocated = static_cast<int64_t>(agg[4]);
  p.alloc_overhead_ms_per_step = agg[5];
  p.oom = p.ooms > 0;
  mp.step_ms = agg[6];
  mp.first_step_ms = agg[7];
  mp.device_call_ms_per_step = agg[8];
  mp.retry_sync_ms_per_step = agg[9];
  mp.compute_ms_per_step = agg[10];
  mp.samples_per_s = mp.step_ms > 0 ? static_cast<double>(mbs * g.size) / (mp.step_ms / 1000.0) : 0;
  mp.collectives_per_step = steps.back().collectives;
  return mp;
}

// Everything after the group is set up. With more than one rank an exception here must not
// unwind (cudaDeviceSynchronize, ncclCommDestroy) while the peers wait in MPI or NCCL:
// run_measure runs it under run_or_abort_ranks.
MeasureResult measure_on_group(Group& g, const MeasureOptions& opts, int n_dev) {
  const int dev_index = device_for_rank(g.local_rank, g.local_size, n_dev);
  CUDA_CHECK(cudaSetDevice(dev_index));
  set_up_nccl(g);

  MeasureResult out;
  out.ranks = g.size;
  out.rank = g.rank;
  out.collectives = g.size > 1 && opts.base.sharding != ShardingStrategy::NO_SHARD;
  out.nccl_version = g.nccl_version;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev_index));
  out.device_name = prop.name;

  std::array<cudaStream_t, NUM_GEN_STREAMS> streams{};
  for (auto& s : streams) CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  struct StreamsGuard {
    std::array<cudaStream_t, NUM_GEN_STREAMS>& s;
    ~StreamsGuard() {
      for (cudaStream_t x : s)
        if (x) (void)cudaStreamDestroy(x);
    }
  } guard{streams};

  const size_t total = static_cast<size_t>((opts.mbs_hi - opts.mbs_lo) / opts.mbs_step + 1);
  std::vector<MemorySample> prev_series;
  int64_t prev_mbs = 0;
  for (int64_t mbs = opts.mbs_lo; mbs <= opts.mbs_hi; mbs += opts.mbs_step) {
    if (opts.progress && g.rank == 0) opts.progress(mbs, out.points.size(), total);
    FsdpConfig cfg = opts.base;
    cfg.micro_batch = mbs;
    StepGenerator gen(cfg);
    uint64_t free_b = 0, total_b = 0;
    cuda_memory_info(dev_index, free_b, total_b);
    const uint64_t avail = free_b > opts.headroom ? free_b - opts.headroom : 0;
    const uint64_t cap = g.min(opts.capacity ? std::min(opts.capacity, avail) : avail);
    if (cap == 0)
      throw DeviceError("no GPU memory left after a headroom of " + std::to_string(opts.headroom) +
                        " bytes");
    out.capacity = cap;
    CudaDevice dev(dev_index, cap, opts.latency);
    std::vector<MemorySample> series;
    const std::vector<Runner::Step> steps = run_steps(cfg, g, streams, dev, opts, gen, mbs, series);
    out.calls += dev.times();
    const MeasurePoint mp = summarize_steps(steps, g, mbs);
    const SweepPoint& p = mp.model;
    out.points.push_back(mp);
    const bool bad = p.oom || p.retries_per_step > 0.0;
    if (bad && out.first_bad_mbs == 0) {
      out.first_bad_mbs = mbs;
      out.max_safe_mbs = prev_mbs;
      if (prev_mbs > 0) out.series.emplace_back(prev_mbs, std::move(prev_series));
      out.series.emplace_back(mbs, std::move(series));
    } else if (out.first_bad_mbs == 0) {
      prev_series = std::move(series);
      prev_mbs = mbs;
    }
    if (opts.stop_after_oom && p.oom) break;
  }
  if (out.first_bad_mbs == 0) {
    out.max_safe_mbs = prev_mbs;
    if (prev_mbs > 0) out.series.emplace_back(prev_mbs, std::move(prev_series));
  }
  if (opts.progress && g.rank == 0) opts.progress(0, out.points.size(), total);
  return out;
}

}  // namespace

MeasureResult run_measure(const MeasureOptions& opts) {
  if (opts.mbs_lo < 1 || opts.mbs_hi < opts.mbs_lo || opts.mbs_step < 1)
    throw ::mlprio::UsageError("minibatch range must be LO:HI with 1 <= LO <= HI");
  if (opts.steps < 1) throw ::mlprio::UsageError("steps must be >= 1");
  std::string why;
  const int n_dev = cuda_device_count(&why);
  if (n_dev == 0) throw NoCudaDeviceError(why);

  Group g;
  set_up_group(g, opts);
  return run_or_abort_ranks(
      g.rank, g.size, [&] { return measure_on_group(g, opts, n_dev); },
      [&] { abort_collectives(g); });
}

}  // namespace mlprio::fsdp
