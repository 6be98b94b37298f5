// The driver that executes generated FSDP operations on the allocator model, and the minibatch
// sweep built on it (see sweep.hpp). A failed allocation (OOM) marks its tensor as missing so
// that later frees of it are skipped and the step runs to its end, as the sweep wants to count
// every retry and OOM rather than stop at the first.
#include "mlprio/fsdp/sweep.hpp"
#include "mlprio/util/errors.hpp"

#include <algorithm>
#include <array>
#include <unordered_map>

namespace mlprio::fsdp {

RunResult run_steps(StepGenerator& gen, Device& device, const AllocatorSettings& settings,
                    int steps, bool record_series, bool check_invariants) {
  CachingAllocator alloc(device, settings);
  RunResult res;
  std::unordered_map<uint32_t, BlockId> live;
  std::vector<std::array<uint64_t, NUM_GEN_STREAMS>> marks;
  int32_t phase = 0;
  auto execute = [&](const StepTrace& trace, int32_t step, StepStats* st) {
    const int64_t retries0 = alloc.stats().num_alloc_retries;
    const int64_t ooms0 = alloc.stats().num_ooms;
    const double time0 = alloc.device_time_us();
    for (const Op& op : trace.ops) {
      switch (op.kind) {
        case OpKind::ALLOC: {
          const auto r = alloc.malloc(op.bytes, op.stream);
          ++res.alloc_ops;
          if (r.ok) live[op.tensor] = r.id;
          if (st) {
            const auto& s = alloc.stats();
            st->peak_reserved = std::max(st->peak_reserved, s.reserved_bytes[AGGREGATE].current);
            if (s.allocated_bytes[AGGREGATE].current > st->peak_allocated) {
              st->peak_allocated = s.allocated_bytes[AGGREGATE].current;
              st->reserved_at_peak_allocated = s.reserved_bytes[AGGREGATE].current;
            }
          }
          break;
        }
        case OpKind::FREE: {
          const auto it = live.find(op.tensor);
          if (it != live.end()) {
            alloc.free(it->second);
            live.erase(it);
          }
          break;
        }
        case OpKind::RECORD_STREAM: {
          const auto it = live.find(op.tensor);
          if (it != live.end()) alloc.record_stream(it->second, op.stream);
          break;
        }
        case OpKind::MARK: {
          if (marks.size() <= op.tensor) marks.resize(op.tensor + 1);
          for (uint8_t s = 0; s < NUM_GEN_STREAMS; ++s)
            marks[op.tensor][s] = alloc.stream_marker(s);
          break;
        }
        case OpKind::WAIT:
          for (uint8_t s = 0; s < NUM_GEN_STREAMS; ++s)
            alloc.stream_done_until(s, marks.at(op.tensor)[s]);
          break;
        case OpKind::SYNC_ALL:
          alloc.all_streams_done();
          alloc.process_events();
          break;
        case OpKind::PHASE:
          phase = static_cast<int32_t>(op.bytes);
          break;
        case OpKind::STREAM_WAIT:  // a GPU-side ordering: nothing for the allocator to do
          break;
      }
      if (check_invariants) alloc.check();
      if (record_series && (op.kind == OpKind::ALLOC || op.kind == OpKind::FREE)) {
        const auto& s = alloc.stats();
        res.series.push_back(MemorySample{static_cast<int64_t>(res.series.size()), step, phase,
                                          s.allocated_bytes[AGGREGATE].current,
                                          s.reserved_bytes[AGGREGATE].current,
                                          s.active_bytes[AGGREGATE].current});
      }
    }
    if (st) {
      st->retries = alloc.stats().num_alloc_retries - retries0;
      st->ooms = alloc.stats().num_ooms - ooms0;
      st->device_time_us = alloc.device_time_us() - time0;
    }
  };
  execute(gen.init_trace(), -1, nullptr);
  for (int k = 0; k < steps; ++k) {
    alloc.reset_peak_stats();
    StepStats st;
    execute(gen.step_trace(k), k, &st);
    res.steps.push_back(st);
  }
  alloc.check();
  res.final_stats = alloc.stats();
  return res;
}
void fold_step_peaks(SweepPoint& p, const StepStats& s) {
  p.ooms += s.ooms;
  p.peak_reserved = std::max(p.peak_reserved, s.peak_reserved);
  if (s.peak_allocated > p.peak_allocated) {
    p.peak_allocated = s.peak_allocated;
    p.fragmentation = s.reserved_at_peak_allocated > 0
                          ? 1.0 - static_cast<double>(s.peak_allocated) /
                                      static_cast<double>(s.reserved_at_peak_allocated)
                          : 0.0;
  }
}

SweepResult run_sweep(const SweepOptions& opts) {
  if (opts.mbs_lo < 1 || opts.mbs_hi < opts.mbs_lo || opts.mbs_step < 1)
    throw ::mlprio::UsageError("minibatch range must be LO:HI with 1 <= LO <= HI");
  if (opts.steps < 1) throw ::mlprio::UsageError("steps must be >= 1");
  if (opts.mbs_hi > MAX_MICRO_BATCH)
    throw ::mlprio::UsageError("minibatch " + std::to_string(opts.mbs_hi) +
                               " is more than the bound of " + std::to_string(MAX_MICRO_BATCH) +
                               " (MAX_MICRO_BATCH)");
  SweepResult out;
  const auto total = static_cast<size_t>((opts.mbs_hi - opts.mbs_lo) / opts.mbs_step + 1);
  if (!opts.stop_after_oom && total > static_cast<size_t>(MAX_SWEEP_POINTS))
    throw ::mlprio::UsageError(std::to_string(total) +
                               " minibatch sizes to run past the first OOM " +
                               "is more than the bound of " + std::to_string(MAX_SWEEP_POINTS) +
                               " (MAX_SWEEP_POINTS); narrow the range or give it a step");
  std::vector<MemorySample> prev_series;
  int64_t prev_mbs = 0;
  for (int64_t mbs = opts.mbs_lo; mbs <= opts.mbs_hi; mbs += opts.mbs_step) {
    if (out.points.size() == static_cast<size_t>(MAX_SWEEP_POINTS)) {
      out.stopped_at_point_bound = true;
      break;
    }
    if (opts.stop && opts.stop()) {
      out.interrupted = true;
      return out;
    }
    if (opts.progress) opts.progress(mbs, out.points.size(), total);
    FsdpConfig cfg = opts.base;
    cfg.micro_batch = mbs;
    StepGenerator gen(cfg);
    SimulatedDevice dev(opts.capacity, opts.latency);
    RunResult r = run_steps(gen, dev, opts.settings, opts.steps, true);
    SweepPoint p;
    p.mbs = mbs;
    p.first_step_retries = r.steps.front().retries;
    const size_t from = r.steps.size() > 1 ? 1 : 0;
    double retries = 0, time_us = 0;
    for (size_t k = 0; k < r.steps.size(); ++k) {
      const StepStats& s = r.steps[k];
      fold_step_peaks(p, s);
      if (k >= from) {
        retries += static_cast<double>(s.retries);
        time_us += s.device_time_us;
      }
    }
    const auto n = static_cast<double>(r.steps.size() - from);
    p.retries_per_step = retries / n;
    p.alloc_overhead_ms_per_step = time_us / n / 1000.0;
    p.oom = p.ooms > 0;
    out.points.push_back(p);
    // First-step retries (the cache being laid out, Adam state created) do not count as bad:
    // the question is whether steady-state steps retry.
    const bool bad = p.oom || p.retries_per_step > 0.0;
    if (bad && out.first_bad_mbs == 0) {
      out.first_bad_mbs = mbs;
      out.max_safe_mbs = prev_mbs;
      if (prev_mbs > 0) out.series.emplace_back(prev_mbs, std::move(prev_series));
      out.series.emplace_back(mbs, std::move(r.series));
      if (opts.stop_after_oom && p.oom) break;
    } else if (out.first_bad_mbs == 0) {
      prev_series = std::move(r.series);
      prev_mbs = mbs;
    } else if (opts.stop_after_oom && p.oom) {
      break;
    }
  }
  if (out.first_bad_mbs == 0) {
    out.max_safe_mbs = prev_mbs;
    if (prev_mbs > 0) out.series.emplace_back(prev_mbs, std::move(prev_series));
  }
  if (opts.progress) opts.progress(0, out.points.size(), total);
  return out;
}

}  // namespace mlprio::fsdp
