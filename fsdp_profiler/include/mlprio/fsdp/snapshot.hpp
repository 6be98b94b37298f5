// Reading a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot, converted from pickle to
// JSON by scripts/snapshot_to_json.py) and replaying its device_traces through the allocator
// model. The reader validates every field it uses and throws SnapshotError naming the source,
// the entry (device_traces[d][i]) and what a valid value looks like; it never crashes on
// malformed input. The replay honours streams and the free_requested/free_completed split, and
// counts an OOM and goes on, so a trace recorded with one allocator setting can be re-run under
// another.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mlprio/fsdp/allocator.hpp"
#include "mlprio/util/errors.hpp"

namespace mlprio::fsdp {

class SnapshotError : public ::mlprio::UsageError {
 public:
  using ::mlprio::UsageError::UsageError;
};

enum class TraceAction { ALLOC, FREE_REQUESTED, FREE_COMPLETED, FREE, OTHER };

struct TraceEntry {
  TraceAction action = TraceAction::OTHER;
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t stream = 0;  // raw cudaStream_t value as recorded
  double time_us = 0.0;
};

struct Snapshot {
  std::vector<std::vector<TraceEntry>> device_traces;
  std::string allocator_settings;  // as JSON text, "" when absent
};

Snapshot parse_snapshot(std::string_view json_text, const std::string& source_name);
Snapshot read_snapshot(const std::string& path);

struct ReplaySample {
  int64_t entry = 0;  // index into the device trace
  int64_t allocated_bytes = 0;
  int64_t reserved_bytes = 0;
  int64_t active_bytes = 0;
};

struct ReplayResult {
  int device_index = 0;
  MemoryStats stats;
  int64_t entries = 0;
  int64_t allocs = 0;
  int64_t frees = 0;
  int64_t failed_allocs = 0;    // OOM in the model (counted, replay went on)
  int64_t unmatched_frees = 0;  // frees of addresses allocated before the trace began
  int64_t other_actions = 0;    // segment_*, oom, snapshot: informational only
  double device_time_us = 0.0;
  std::vector<ReplaySample> series;  // one sample per alloc/free entry
};

struct ReplayOptions {
  int device_index = -1;          // -1: the first device with a non-empty trace
  bool check_invariants = false;  // run check() after every entry (slow; tests)
};

ReplayResult replay_snapshot(const Snapshot& snap, Device& device,
                             const AllocatorSettings& settings, const ReplayOptions& opts = {});

}  // namespace mlprio::fsdp
