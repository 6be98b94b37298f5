// Flattening of MemoryStats into torch.cuda.memory_stats()'s dotted, sorted key names.
#include "mlprio/fsdp/stats.hpp"

#include <algorithm>

namespace mlprio::fsdp {

std::vector<std::pair<std::string, int64_t>> MemoryStats::flatten() const {
  std::vector<std::pair<std::string, int64_t>> out;
  auto stat = [&](const std::string& prefix, const Stat& s) {
    out.emplace_back(prefix + ".current", s.current);
    out.emplace_back(prefix + ".peak", s.peak);
    out.emplace_back(prefix + ".allocated", s.allocated);
    out.emplace_back(prefix + ".freed", s.freed);
  };
  auto array = [&](const std::string& name, const StatArray& a) {
    stat(name + ".all", a[AGGREGATE]);
    stat(name + ".small_pool", a[SMALL_POOL]);
    stat(name + ".large_pool", a[LARGE_POOL]);
  };
  array("allocation", allocation);
  array("segment", segment);
  array("active", active);
  array("inactive_split", inactive_split);
  array("allocated_bytes", allocated_bytes);
  array("reserved_bytes", reserved_bytes);
  array("active_bytes", active_bytes);
  array("inactive_split_bytes", inactive_split_bytes);
  array("requested_bytes", requested_bytes);
  stat("oversize_allocations", oversize_allocations);
  stat("oversize_segments", oversize_segments);
  out.emplace_back("num_alloc_retries", num_alloc_retries);
  out.emplace_back("num_ooms", num_ooms);
  out.emplace_back("num_sync_all_streams", num_sync_all_streams);
  out.emplace_back("num_device_alloc", num_device_alloc);
  out.emplace_back("num_device_free", num_device_free);
  out.emplace_back("max_split_size", max_split_size);
  std::sort(out.begin(), out.end());
  return out;
}

void MemoryStats::reset_peak() {
  for (StatArray* a : {&allocation, &segment, &active, &inactive_split, &allocated_bytes,
                       &reserved_bytes, &active_bytes, &inactive_split_bytes, &requested_bytes})
    for (Stat& s : *a) s.reset_peak();
  oversize_allocations.reset_peak();
  oversize_segments.reset_peak();
}

}  // namespace mlprio::fsdp
