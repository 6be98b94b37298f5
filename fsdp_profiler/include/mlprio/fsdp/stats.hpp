// The allocator model's statistics, named and counted exactly as torch.cuda.memory_stats():
// nine per-pool stat arrays (all/small_pool/large_pool, each with current/peak/allocated/freed),
// two oversize stats and the scalar counters. flatten() produces the dotted key names
// ("allocated_bytes.all.current") in the same sorted order Python prints them, so a replayed
// snapshot can be compared key by key with a real run.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mlprio::fsdp {

struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;
  int64_t freed = 0;

  void increase(int64_t amount) {
    current += amount;
    if (current > peak) peak = current;
    allocated += amount;
  }
  void decrease(int64_t amount) {
    current -= amount;
    freed += amount;
  }
  void reset_peak() { peak = current; }
};

enum StatType : size_t { AGGREGATE = 0, SMALL_POOL = 1, LARGE_POOL = 2 };
using StatArray = std::array<Stat, 3>;

struct MemoryStats {
  StatArray allocation, segment, active, inactive_split, allocated_bytes, reserved_bytes,
      active_bytes, inactive_split_bytes, requested_bytes;
  Stat oversize_allocations, oversize_segments;
  int64_t num_alloc_retries = 0;
  int64_t num_ooms = 0;
  int64_t num_sync_all_streams = 0;
  int64_t num_device_alloc = 0;
  int64_t num_device_free = 0;
  int64_t max_split_size = -1;  // torch reports SIZE_MAX cast to int64, i.e. -1, when unlimited

  // Sorted (key, value) pairs with torch's dotted names.
  std::vector<std::pair<std::string, int64_t>> flatten() const;
  void reset_peak();
};

}  // namespace mlprio::fsdp
