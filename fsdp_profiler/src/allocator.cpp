// The caching-allocator model (see allocator.hpp). The structure follows torch's
// DeviceCachingAllocator so that each rule can be compared with its source: malloc() climbs the
// same ladder, free_block() merges the same way, and every statistic is updated at the same
// point. Blocks live in an arena indexed by BlockId; the free lists are, per pool and stream,
// vectors sorted by (size, addr) (torch's (stream, size, addr) order, one stream at a time), so a
// lookup is a binary search over contiguous memory and steady-state operations do not touch the
// heap. Debug builds (no NDEBUG) also check on every free-list update that the list agrees with
// the blocks; check() verifies everything in any build.
// One file (about 960 lines) because it mirrors torch's CUDACachingAllocator.cpp function by
// function, so each rule can be read beside its source.
#include "mlprio/fsdp/allocator.hpp"

#include <algorithm>
#include <bit>
#include <map>
#include <sstream>

namespace mlprio::fsdp {

namespace {

uint64_t floor_pow2(uint64_t x) {
  return x == 0 ? 0 : (uint64_t{1} << (63 - std::countl_zero(x)));
}

// Index of the 1 MiB..64 GiB interval a size falls in (torch clamps below and above).
size_t interval_index(uint64_t size) {
  const int log_size = 63 - std::countl_zero(size);
  const int start = 20;  // log2(1 MiB)
  if (log_size < start) return 0;
  return std::min<size_t>(static_cast<size_t>(log_size - start), ROUNDUP_INTERVALS - 1);
}

uint64_t roundup_power2_next_division(uint64_t size, uint64_t divisions) {
  if (std::has_single_bit(size)) return size;
  const uint64_t power2_floor = floor_pow2(size);
  const uint64_t division = power2_floor >> (63 - std::countl_zero(divisions));
  if (division == 0) return power2_floor << 1;
  const uint64_t floor_to_division = size & ~(division - 1);
  return floor_to_division == size ? size : floor_to_division + division;
}

[[noreturn]] void fail(const std::string& what) {
  throw InvariantError("allocator invariant: " + what);
}

}  // namespace

uint64_t round_size(uint64_t bytes, const AllocatorSettings& s) {
  if (bytes < MIN_BLOCK_SIZE) return MIN_BLOCK_SIZE;
  const bool v1 = s.version == TorchVersion::TORCH_1_13;
  // 1.13 kept one value for all sizes (interval 0 holds it) and applied it when > 0.
  const uint64_t divisions =
      v1 ? s.roundup_power2_divisions[0] : s.roundup_power2_divisions[interval_index(bytes)];
  const bool applies = (v1 ? divisions > 0 : divisions > 1) && bytes > MIN_BLOCK_SIZE * divisions;
  if (applies) return roundup_power2_next_division(bytes, divisions);
  return MIN_BLOCK_SIZE * ((bytes + MIN_BLOCK_SIZE - 1) / MIN_BLOCK_SIZE);
}

uint64_t allocation_size(uint64_t rounded) {
  if (rounded <= SMALL_SIZE) return SMALL_BUFFER;
  if (rounded < MIN_LARGE_ALLOC) return LARGE_BUFFER;
  return ROUND_LARGE * ((rounded + ROUND_LARGE - 1) / ROUND_LARGE);
}

CachingAllocator::CachingAllocator(Device& device, AllocatorSettings settings)
    : device_(device),
      settings_(settings),
      small_pool_(std::make_unique<Pool>(true, &node_pool_)),
      large_pool_(std::make_unique<Pool>(false, &node_pool_)) {
  if (settings_.expandable_segments && settings_.version == TorchVersion::TORCH_1_13)
    throw SettingsError("expandable_segments needs PyTorch 2.1 or later (torch version 1.13 set)");
  stats_.max_split_size =
      settings_.max_split_size == UNLIMITED ? -1 : static_cast<int64_t>(settings_.max_split_size);
  if (settings_.memory_fraction > 0.0) {
    allowed_maximum_ =
        static_cast<uint64_t>(settings_.memory_fraction * static_cast<double>(device_.capacity()));
    gc_enabled_ = settings_.garbage_collection_threshold > 0.0;
  }
  blocks_.reserve(1024);
  events_.resize(MAX_STREAMS);
  next_seq_.assign(MAX_STREAMS, 0);
  done_seq_.assign(MAX_STREAMS, 0);
}

CachingAllocator::~CachingAllocator() = default;

BlockId CachingAllocator::new_block() {
  BlockId id;
  if (!free_slots_.empty()) {
    id = free_slots_.back();
    free_slots_.pop_back();
    blocks_[id] = Block{};
  } else {
    if (blocks_.size() >= NO_BLOCK) throw DeviceError("allocator model: too many blocks");
    id = static_cast<BlockId>(blocks_.size());
    blocks_.emplace_back();
  }
  blocks_[id].live = true;
  return id;
}

void CachingAllocator::delete_block(BlockId id) {
  blocks_[id].live = false;
  free_slots_.push_back(id);
}

// Branch-free binary search: the free lists are short and their order is random, so a
// conditional move beats a mispredicted branch per level.
size_t CachingAllocator::FreeList::search(const FreeEntry* first, size_t n, Key key) {
  if (n == 0) return 0;
  const FreeEntry* base = first;
  while (n > 1) {
    const size_t half = n / 2;
    base = base[half - 1].key < key ? base + half : base;
    n -= half;
  }
  return static_cast<size_t>(base - first) + (base->key < key ? 1 : 0);
}

void CachingAllocator::replace_free_at(Pool& pool, StreamId stream, size_t index, BlockId id) {
  Block& b = blk(id);
  b.gc_count_base = pool.get_free_blocks_call_count;
  auto& v = pool.blocks.by_stream[stream];
  const FreeEntry e{free_key(b.size, b.addr), id};
  if (index > 0 && e.key < v[index - 1].key) {
    const size_t j = FreeList::search(v.data(), index, e.key);
    std::move_backward(v.begin() + static_cast<std::ptrdiff_t>(j),
                       v.begin() + static_cast<std::ptrdiff_t>(index),
                       v.begin() + static_cast<std::ptrdiff_t>(index + 1));
    v[j] = e;
  } else if (index + 1 < v.size() && v[index + 1].key < e.key) {
    const size_t j =
        index + 1 + FreeList::search(v.data() + index + 1, v.size() - index - 1, e.key);
    std::move(v.begin() + static_cast<std::ptrdiff_t>(index + 1),
              v.begin() + static_cast<std::ptrdiff_t>(j),
              v.begin() + static_cast<std::ptrdiff_t>(index));
    v[j - 1] = e;
  } else {
    v[index] = e;
  }
}

void CachingAllocator::insert_free(BlockId id) {
  Block& b = blk(id);
  Pool& p = pool_of(b);
  b.gc_count_base = p.get_free_blocks_call_count;
  auto& v = p.blocks.by_stream[b.stream];
  const Key key = free_key(b.size, b.addr);
  const size_t i = FreeList::lower_bound(v, key);
  // A (size, addr) already present would be a block freed twice (a std::set ignores it).
  if (i < v.size() && v[i].key == key) {
#ifndef NDEBUG
    fail("block inserted twice into a free list");
#else
    return;
#endif
  }
  v.insert(v.begin() + static_cast<std::ptrdiff_t>(i), FreeEntry{key, id});
  ++p.blocks.count;
}
void CachingAllocator::erase_free(BlockId id) {
  const Block& b = blk(id);
  Pool& p = pool_of(b);
  auto& v = p.blocks.by_stream[b.stream];
  const size_t i = FreeList::lower_bound(v, free_key(b.size, b.addr));
  if (i == v.size() || v[i].id != id) {
#ifndef NDEBUG
    fail("erasing a block that is not in its free list");
#else
    return;  // as std::set::erase of a missing key
#endif
  }
  erase_free_at(p, b.stream, i);
}
void CachingAllocator::erase_free_at(Pool& pool, StreamId stream, size_t index) {
  auto& v = pool.blocks.by_stream[stream];
  v.erase(v.begin() + static_cast<std::ptrdiff_t>(index));
  --pool.blocks.count;
}
std::vector<BlockId> CachingAllocator::free_block_ids(const Pool& pool) const {
  std::vector<BlockId> ids;
  ids.reserve(pool.blocks.count);
  for (const auto& v : pool.blocks.by_stream)
    for (const FreeEntry& e : v) ids.push_back(e.id);
  return ids;
}
void CachingAllocator::insert_unmapped(BlockId id) {
  const Block& b = blk(id);
  pool_of(b).unmapped.insert(AddrKey{b.stream, b.addr, id});
}
void CachingAllocator::erase_unmapped(BlockId id) {
  const Block& b = blk(id);
  pool_of(b).unmapped.erase(AddrKey{b.stream, b.addr, id});
}

uint64_t CachingAllocator::block_addr(BlockId id) const {
  if (id >= blocks_.size() || !blk(id).live) throw InvariantError("block_addr: unknown block");
  return blk(id).addr;
}
uint64_t CachingAllocator::block_size(BlockId id) const {
  if (id >= blocks_.size() || !blk(id).live) throw InvariantError("block_size: unknown block");
  return blk(id).size;
}

// ---------------------------------------------------------------- malloc

AllocResult CachingAllocator::malloc(uint64_t bytes, StreamId stream) {
  if (stream >= MAX_STREAMS)
    throw InvariantError("stream id " + std::to_string(stream) +
                         " >= " + std::to_string(MAX_STREAMS));
  if (bytes == 0) return AllocResult{NO_BLOCK, 0, 0, true};
  if (pending_events_ > 0) process_events();
  const uint64_t size = round_size(bytes, settings_);
  Pool& pool = size <= SMALL_SIZE ? *small_pool_ : *large_pool_;
  const uint64_t alloc_size = allocation_size(size);

  size_t index = NOT_LISTED;
  BlockId found = get_free_block(pool, stream, size, index);
  if (found == NO_BLOCK) {
    if (gc_enabled_) garbage_collect();
    // The ladder, in torch's order: a new segment; release cached oversize blocks and try
    // again; synchronise, release every releasable segment and try a last time (a retry).
    if (!alloc_block(pool, stream, size, alloc_size, false, found) &&
        !(release_available_cached_blocks(pool, stream, size) &&
          alloc_block(pool, stream, size, alloc_size, false, found)) &&
        !(release_cached_blocks() && alloc_block(pool, stream, size, alloc_size, true, found))) {
      stats_.num_ooms += 1;
      return AllocResult{};
    }
  }
  return alloc_found_block(found, size, bytes, index);
}

BlockId CachingAllocator::get_free_block(Pool& pool, StreamId stream, uint64_t size,
                                         size_t& index) {
  if (gc_enabled_) ++pool.get_free_blocks_call_count;
  const auto& v = pool.blocks.by_stream[stream];
  size_t i = FreeList::lower_bound(v, free_key(size, 0));
  if (i == v.size()) return NO_BLOCK;
  if (blk(v[i].id).expandable >= 0 && settings_.expandable_segments) {
    // A free block followed by unmapped space can grow, so best fit compares the size it could
    // reach, preferring a smaller reachable size among candidates on the stream.
    auto reach = [&](BlockId id) {
      const Block& b = blk(id);
      return b.size + (b.next != NO_BLOCK && !blk(b.next).mapped ? blk(b.next).size : 0);
    };
    size_t next = i + 1;
    while (blk(v[i].id).expandable >= 0 && next < v.size() && reach(v[next].id) < reach(v[i].id)) {
      i = next++;
    }
  }
  const uint64_t candidate = v[i].size();
  if (size < settings_.max_split_size && candidate >= settings_.max_split_size) return NO_BLOCK;
  if (size >= settings_.max_split_size && candidate >= size + settings_.max_non_split_rounding_size)
    return NO_BLOCK;
  index = i;
  return v[i].id;
}

bool CachingAllocator::alloc_block(Pool& pool, StreamId stream, uint64_t size, uint64_t alloc_size,
                                   bool is_retry, BlockId& out) {
  if (is_retry) stats_.num_alloc_retries += 1;
  if (total_reserved_ + alloc_size > allowed_maximum_) return false;
  if (settings_.expandable_segments) {
    out = try_allocate_expandable_block(pool, stream, size);
    return out != NO_BLOCK;
  }
  const auto addr = device_.malloc_segment(alloc_size);
  device_time_us_ += device_.latency().malloc_us + device_.latency().malloc_us_per_gib *
                                                       static_cast<double>(alloc_size) /
                                                       static_cast<double>(GiB);
  if (!addr) return false;
  total_reserved_ += alloc_size;
  const BlockId id = new_block();
  Block& b = blk(id);
  b.addr = *addr;
  b.size = alloc_size;
  b.stream = stream;
  b.is_small = pool.is_small;
  stat_inc(stats_.segment, b.is_small, 1);
  stat_inc(stats_.reserved_bytes, b.is_small, static_cast<int64_t>(alloc_size));
  if (alloc_size >= settings_.max_split_size) stats_.oversize_segments.increase(1);
  stats_.num_device_alloc += 1;
  out = id;
  return true;
}

AllocResult CachingAllocator::alloc_found_block(BlockId id, uint64_t size, uint64_t requested,
                                                size_t index) {
  const bool small = blk(id).is_small;
  const bool exp = blk(id).expandable >= 0;
  const bool already_split = blk(id).is_split();
  const uint64_t remaining_size = blk(id).size - size;
  const bool should_split = (small || settings_.expandable_segments)
                                ? remaining_size >= MIN_BLOCK_SIZE
                                : size < settings_.max_split_size && remaining_size > SMALL_SIZE;
  if (should_split) {
    // The remainder keeps the block's identity at the higher address; the allocation is a new
    // block in front of it.
    const BlockId rem = id;
    const BlockId nb = new_block();
    Block& r = blk(rem);
    Block& b = blk(nb);
    b.addr = r.addr;
    b.size = size;
    b.stream = r.stream;
    b.is_small = r.is_small;
    b.expandable = r.expandable;
    b.prev = r.prev;
    if (b.prev != NO_BLOCK) blk(b.prev).next = nb;
    b.next = rem;
    r.prev = nb;
    r.addr += size;
    r.size -= size;
    if (index != NOT_LISTED) {
      replace_free_at(pool_of(r), r.stream, index, rem);
    } else {
      insert_free(rem);
    }
    if (!exp) {
      if (already_split) {
        stat_dec(stats_.inactive_split_bytes, small, static_cast<int64_t>(size));
      } else {
        stat_inc(stats_.inactive_split_bytes, small, static_cast<int64_t>(r.size));
        stat_inc(stats_.inactive_split, small, 1);
      }
    }
    id = nb;
  } else {
    if (index != NOT_LISTED) erase_free_at(pool_of(blk(id)), blk(id).stream, index);
    if (already_split && !exp) {
      stat_dec(stats_.inactive_split_bytes, small, static_cast<int64_t>(blk(id).size));
      stat_dec(stats_.inactive_split, small, 1);
    }
  }
  Block& b = blk(id);
  b.allocated = true;
  b.requested = requested;
  const auto bsize = static_cast<int64_t>(b.size);
  stat_inc(stats_.allocation, small, 1);
  stat_inc(stats_.allocated_bytes, small, bsize);
  stat_inc(stats_.active, small, 1);
  stat_inc(stats_.active_bytes, small, bsize);
  stat_inc(stats_.requested_bytes, small, static_cast<int64_t>(requested));
  if (b.size >= settings_.max_split_size) stats_.oversize_allocations.increase(1);
  return AllocResult{id, b.addr, b.size, true};
}

bool CachingAllocator::release_available_cached_blocks(Pool& pool, StreamId stream, uint64_t size) {
  if (settings_.max_split_size == UNLIMITED) return false;
  const uint64_t key_size = std::max(size, settings_.max_split_size);
  const auto& v = pool.blocks.by_stream[stream];
  const size_t i = FreeList::lower_bound(v, free_key(key_size, 0));
  if (i == v.size() || blk(v[i].id).expandable >= 0) {
    // No single cached block is large enough: release oversize blocks from the largest down
    // until enough is released. Releasing entry j leaves entries 0..j-1 where they are.
    uint64_t released = 0;
    for (size_t j = i;
         j > 0 && released < key_size && v[j - 1].size() >= settings_.max_split_size;) {
      --j;
      const BlockId cid = v[j].id;
      if (blk(cid).expandable < 0 && !blk(cid).is_split()) {
        released += blk(cid).size;
        release_block(cid);
      }
    }
    return released >= key_size;
  }
  if (blk(v[i].id).is_split()) return false;  // oversize blocks are whole segments; be safe
  release_block(v[i].id);
  return true;
}

bool CachingAllocator::release_cached_blocks() {
  synchronize_and_free_events();
  release_blocks(*large_pool_);
  release_blocks(*small_pool_);
  return true;
}

void CachingAllocator::release_blocks(Pool& pool) {
  std::vector<BlockId> to_unmap;
  for (const BlockId id : free_block_ids(pool)) {
    if (blk(id).expandable >= 0) {
      to_unmap.push_back(id);
    } else if (!blk(id).is_split()) {
      release_block(id);
    }
  }
  for (BlockId id : to_unmap) unmap_block(id);
}

void CachingAllocator::release_block(BlockId id) {
  Block& b = blk(id);
  device_.free_segment(b.addr, b.size);
  device_time_us_ += device_.latency().free_us;
  total_reserved_ -= b.size;
  stat_dec(stats_.segment, b.is_small, 1);
  stat_dec(stats_.reserved_bytes, b.is_small, static_cast<int64_t>(b.size));
  if (b.size >= settings_.max_split_size) stats_.oversize_segments.decrease(1);
  stats_.num_device_free += 1;
  erase_free(id);
  delete_block(id);
}

void CachingAllocator::garbage_collect() {
  // Releases whole cached large segments older than the average age until reserved memory is
  // back under threshold * allowed maximum (torch's garbage_collect_cached_blocks).
  const auto threshold = static_cast<uint64_t>(settings_.garbage_collection_threshold *
                                               static_cast<double>(allowed_maximum_));
  if (total_reserved_ <= threshold) return;
  const uint64_t target = total_reserved_ - threshold;
  Pool& pool = *large_pool_;
  uint64_t total_age = 0;
  int64_t freeable = 0;
  for (const auto& v : pool.blocks.by_stream) {
    for (const FreeEntry& e : v) {
      if (!blk(e.id).is_split()) {
        total_age += pool.get_free_blocks_call_count - blk(e.id).gc_count_base;
        ++freeable;
      }
    }
  }
  if (freeable == 0) return;
  uint64_t reclaimed = 0;
  bool block_freed = true;
  while (reclaimed < target && block_freed && freeable > 0) {
    const double age_threshold = static_cast<double>(total_age) / static_cast<double>(freeable);
    block_freed = false;
    for (const BlockId id : free_block_ids(pool)) {
      const Block& b = blk(id);
      const uint64_t age = pool.get_free_blocks_call_count - b.gc_count_base;
      if (!b.is_split() && b.expandable < 0 && static_cast<double>(age) >= age_threshold) {
        block_freed = true;
        reclaimed += b.size;
        total_age -= age;
        --freeable;
        release_block(id);
      }
    }
  }
}

// ---------------------------------------------------------------- free

void CachingAllocator::free(BlockId id) {
  if (id == NO_BLOCK) return;
  if (id >= blocks_.size() || !blk(id).live || !blk(id).allocated)
    throw InvariantError("free of a block that is not allocated (id " + std::to_string(id) + ")");
  Block& b = blk(id);
  b.allocated = false;
  stat_dec(stats_.allocation, b.is_small, 1);
  stat_dec(stats_.allocated_bytes, b.is_small, static_cast<int64_t>(b.size));
  if (b.size >= settings_.max_split_size) stats_.oversize_allocations.decrease(1);
  if (b.stream_uses != 0) {
    insert_events(id);
  } else {
    free_block(id);
  }
}

void CachingAllocator::record_stream(BlockId id, StreamId stream) {
  if (id == NO_BLOCK) return;
  if (stream >= MAX_STREAMS || id >= blocks_.size() || !blk(id).live || !blk(id).allocated)
    throw InvariantError("record_stream on a block that is not allocated");
  if (stream == blk(id).stream) return;  // torch ignores the allocation stream itself
  blk(id).stream_uses |= uint64_t{1} << stream;
}

void CachingAllocator::free_deferred(BlockId id) {
  if (id == NO_BLOCK) return;
  if (id >= blocks_.size() || !blk(id).live || !blk(id).allocated)
    throw InvariantError("free of a block that is not allocated (id " + std::to_string(id) + ")");
  Block& b = blk(id);
  b.allocated = false;
  stat_dec(stats_.allocation, b.is_small, 1);
  stat_dec(stats_.allocated_bytes, b.is_small, static_cast<int64_t>(b.size));
  if (b.size >= settings_.max_split_size) stats_.oversize_allocations.decrease(1);
  b.stream_uses = 0;
  b.event_count += 1;
  b.deferred = true;
  b.deferred_index = static_cast<uint32_t>(deferred_.size());
  deferred_.push_back(id);
}

bool CachingAllocator::complete_deferred_free(BlockId id) {
  if (id >= blocks_.size() || !blk(id).live || !blk(id).deferred) return false;
  Block& b = blk(id);
  const uint32_t idx = b.deferred_index;
  deferred_[idx] = deferred_.back();
  blk(deferred_[idx]).deferred_index = idx;
  deferred_.pop_back();
  b.deferred = false;
  finish_event(id);
  return true;
}

void CachingAllocator::insert_events(BlockId id) {
  Block& b = blk(id);
  uint64_t uses = b.stream_uses;
  b.stream_uses = 0;
  while (uses != 0) {
    const auto s = static_cast<StreamId>(std::countr_zero(uses));
    uses &= uses - 1;
    b.event_count += 1;
    events_[s].push_back(PendingEvent{id, next_seq_[s]++});
    pending_streams_ |= uint64_t{1} << s;
    ++pending_events_;
  }
}

void CachingAllocator::finish_event(BlockId id) {
  Block& b = blk(id);
  b.event_count -= 1;
  if (b.event_count == 0) free_block(id);
}

uint64_t CachingAllocator::stream_marker(StreamId stream) const {
  if (stream >= MAX_STREAMS) throw InvariantError("stream id out of range");
  return next_seq_[stream];
}

void CachingAllocator::stream_done_until(StreamId stream, uint64_t marker) {
  if (stream >= MAX_STREAMS) throw InvariantError("stream id out of range");
  done_seq_[stream] = std::max(done_seq_[stream], std::min(marker, next_seq_[stream]));
}

void CachingAllocator::all_streams_done() {
  for (StreamId s = 0; s < MAX_STREAMS; ++s) done_seq_[s] = next_seq_[s];
}

void CachingAllocator::process_events() {
  // Streams in increasing order, as before, but only those with queued events.
  for (uint64_t streams = pending_streams_; streams != 0; streams &= streams - 1) {
    const auto s = static_cast<StreamId>(std::countr_zero(streams));
    auto& q = events_[s];
    while (!q.empty() && q.front().seq < done_seq_[s]) {
      const BlockId id = q.front().block;
      q.pop_front();
      --pending_events_;
      finish_event(id);
    }
    if (q.empty()) pending_streams_ &= ~(uint64_t{1} << s);
  }
}

void CachingAllocator::synchronize_and_free_events() {
  stats_.num_sync_all_streams += 1;
  device_.synchronize();  // a real GPU waits here; its cost is part of what a retry loses
  device_time_us_ += device_.latency().sync_all_streams_us;
  for (StreamId s = 0; s < MAX_STREAMS && pending_events_ > 0; ++s) {
    auto& q = events_[s];
    while (!q.empty()) {
      const BlockId id = q.front().block;
      q.pop_front();
      --pending_events_;
      finish_event(id);
    }
    done_seq_[s] = next_seq_[s];
  }
  pending_streams_ = 0;  // every queue was drained
  while (!deferred_.empty()) complete_deferred_free(deferred_.back());
}

void CachingAllocator::empty_cache() {
  release_cached_blocks();
}

void CachingAllocator::free_block(BlockId id) {
  const bool small = blk(id).is_small;
  const uint64_t original_size = blk(id).size;
  const uint64_t requested = blk(id).requested;
  int64_t net_blocks = 0;
  int64_t net_bytes = 0;
  // The first free neighbour's free-list slot is reused for the merged block (same order of
  // merges and block deletions as try_merge() twice, so block ids stay the same).
  Pool& pool = pool_of(blk(id));
  const StreamId stream = blk(id).stream;
  size_t slot = NOT_LISTED;
  for (BlockId cand : {blk(id).prev, blk(id).next}) {
    if (!mergeable(id, cand)) continue;
    const Block& c = blk(cand);
    uint64_t subsumed = 0;
    auto& v = pool.blocks.by_stream[stream];
    const size_t ci = FreeList::lower_bound(v, free_key(c.size, c.addr));
    if (!c.mapped || ci == v.size() || v[ci].id != cand) {
#ifndef NDEBUG
      if (c.mapped) fail("free neighbour missing from its free list");
#endif
      subsumed = try_merge(id, cand);
    } else if (slot == NOT_LISTED) {
      slot = ci;
      subsumed = merge_links(id, cand);
    } else {
      erase_free_at(pool, stream, ci);
      if (ci < slot) --slot;
      subsumed = merge_links(id, cand);
    }
    net_blocks -= 1;
    net_bytes -= static_cast<int64_t>(subsumed);
  }
  if (slot != NOT_LISTED) {
    replace_free_at(pool, stream, slot, id);
  } else {
    insert_free(id);
  }
  Block& b = blk(id);
  if (b.is_split()) {
    net_blocks += 1;
    net_bytes += static_cast<int64_t>(b.size);
  }
  // Expandable blocks are left out of inactive_split: their free pages can always be unmapped.
  if (b.expandable < 0) {
    if (net_blocks > 0) stat_inc(stats_.inactive_split, small, net_blocks);
    if (net_blocks < 0) stat_dec(stats_.inactive_split, small, -net_blocks);
    if (net_bytes > 0) stat_inc(stats_.inactive_split_bytes, small, net_bytes);
    if (net_bytes < 0) stat_dec(stats_.inactive_split_bytes, small, -net_bytes);
  }
  stat_dec(stats_.active, small, 1);
  stat_dec(stats_.active_bytes, small, static_cast<int64_t>(original_size));
  stat_dec(stats_.requested_bytes, small, static_cast<int64_t>(requested));
}

bool CachingAllocator::mergeable(BlockId dst, BlockId src) const {
  if (src == NO_BLOCK) return false;
  const Block& s = blk(src);
  return !(s.allocated || s.event_count > 0 || s.stream_uses != 0 || s.mapped != blk(dst).mapped);
}

uint64_t CachingAllocator::try_merge(BlockId dst, BlockId src) {
  if (!mergeable(dst, src)) return 0;
  if (blk(src).mapped) {
    erase_free(src);
  } else {
    erase_unmapped(src);
  }
  // The free lists are keyed by address and size, so dst must leave them while it changes.
  return merge_links(dst, src);
}

uint64_t CachingAllocator::merge_links(BlockId dst, BlockId src) {
  const Block& s = blk(src);
  Block& d = blk(dst);
  if (d.prev == src) {
    d.addr = s.addr;
    d.prev = s.prev;
    if (d.prev != NO_BLOCK) blk(d.prev).next = dst;
  } else {
    d.next = s.next;
    if (d.next != NO_BLOCK) blk(d.next).prev = dst;
  }
  const uint64_t subsumed = s.size;
  d.size += subsumed;
  delete_block(src);
  return subsumed;
}

// ---------------------------------------------------------------- expandable segments

BlockId CachingAllocator::find_expandable_block(Pool& pool, StreamId stream, uint64_t size) {
  auto allocatable = [&](BlockId id) {
    if (id == NO_BLOCK) return false;
    const Block& b = blk(id);
    return !b.allocated && b.event_count == 0 && b.stream_uses == 0;
  };
  auto has_room = [&](BlockId id) {
    uint64_t bytes = 0;
    while (bytes < size && allocatable(id)) {
      bytes += blk(id).size;
      id = blk(id).next;
    }
    return bytes >= size;
  };
  for (auto it = pool.unmapped.lower_bound(AddrKey{stream, 0, NO_BLOCK});
       it != pool.unmapped.end() && it->stream == stream; ++it) {
    BlockId c = it->id;
    if (allocatable(blk(c).prev)) c = blk(c).prev;
    if (has_room(c)) return c;
  }
  // A fresh virtual range of 1 1/8 x device memory, in pages of the pool's segment size.
  const uint64_t page = pool.is_small ? SMALL_BUFFER : LARGE_BUFFER;
  const uint64_t want = device_.capacity() + device_.capacity() / 8;
  const uint64_t vsize = std::max<uint64_t>(1, (want + page - 1) / page) * page;
  Expandable e;
  e.stream = stream;
  e.is_small = pool.is_small;
  e.base = device_.reserve_address_range(vsize);
  e.size = vsize;
  e.page = page;
  e.mapped.assign(vsize / page, 0);
  expandables_.push_back(std::move(e));
  const BlockId id = new_block();
  Block& b = blk(id);
  b.addr = expandables_.back().base;
  b.size = vsize;
  b.stream = stream;
  b.is_small = pool.is_small;
  b.expandable = static_cast<int32_t>(expandables_.size() - 1);
  b.mapped = false;
  insert_unmapped(id);
  return id;
}

bool CachingAllocator::map_block(BlockId id, uint64_t size) {
  Block& b0 = blk(id);
  Expandable& e = expandables_[static_cast<size_t>(b0.expandable)];
  const uint64_t first = (b0.addr - e.base) / e.page;
  const uint64_t last = (b0.addr + size - e.base + e.page - 1) / e.page;  // exclusive
  for (uint64_t p = first; p < last; ++p) {
    if (e.mapped[p]) fail("mapping a page that is already mapped");
    if (!device_.map_pages(e.base + p * e.page, e.page)) {
      for (uint64_t q = first; q < p; ++q) {
        device_.unmap_pages(e.base + q * e.page, e.page);
        e.mapped[q] = 0;
      }
      return false;
    }
    e.mapped[p] = 1;
    device_time_us_ += device_.latency().map_page_us;
  }
  const uint64_t mapped_size = (last - first) * e.page;
  erase_unmapped(id);
  Block& b = blk(id);
  b.mapped = true;
  if (mapped_size < b.size) {
    const BlockId rem = new_block();
    Block& r = blk(rem);
    Block& bb = blk(id);
    r.addr = bb.addr + mapped_size;
    r.size = bb.size - mapped_size;
    r.stream = bb.stream;
    r.is_small = bb.is_small;
    r.expandable = bb.expandable;
    r.mapped = false;
    r.prev = id;
    r.next = bb.next;
    if (r.next != NO_BLOCK) blk(r.next).prev = rem;
    bb.next = rem;
    bb.size = mapped_size;
    insert_unmapped(rem);
  }
  try_merge(id, blk(id).prev);
  try_merge(id, blk(id).next);
  insert_free(id);
  total_reserved_ += mapped_size;
  stat_inc(stats_.reserved_bytes, blk(id).is_small, static_cast<int64_t>(mapped_size));
  stats_.num_device_alloc += 1;
  return true;
}

BlockId CachingAllocator::try_allocate_expandable_block(Pool& pool, StreamId stream,
                                                        uint64_t size) {
  BlockId c = find_expandable_block(pool, stream, size);
  // c is free-then-unmapped or unmapped: map just enough to cover `size`.
  if (!blk(c).mapped && !map_block(c, std::min(blk(c).size, size))) return NO_BLOCK;
  while (blk(c).size < size) {
    const uint64_t remaining = size - blk(c).size;
    const BlockId nc = blk(c).next;
    if (!map_block(nc, std::min(remaining, blk(nc).size))) return NO_BLOCK;
    c = nc;  // map_block merged c into nc
  }
  erase_free(c);
  return c;
}

void CachingAllocator::unmap_block(BlockId id) {
  Block& b0 = blk(id);
  Expandable& e = expandables_[static_cast<size_t>(b0.expandable)];
  // Only whole pages inside the free block can go.
  const uint64_t first = (b0.addr - e.base + e.page - 1) / e.page;
  const uint64_t last = (b0.addr + b0.size - e.base) / e.page;
  if (first >= last) return;
  const uint64_t ustart = e.base + first * e.page;
  const uint64_t usize = (last - first) * e.page;
  for (uint64_t p = first; p < last; ++p) {
    if (!e.mapped[p]) fail("unmapping a page that is not mapped");
    device_.unmap_pages(e.base + p * e.page, e.page);
    e.mapped[p] = 0;
    device_time_us_ += device_.latency().unmap_page_us;
  }
  erase_free(id);
  const uint64_t before = ustart - blk(id).addr;
  if (before > 0) {
    const BlockId nb = new_block();
    Block& f = blk(nb);
    Block& b = blk(id);
    f.addr = b.addr;
    f.size = before;
    f.stream = b.stream;
    f.is_small = b.is_small;
    f.expandable = b.expandable;
    f.prev = b.prev;
    if (f.prev != NO_BLOCK) blk(f.prev).next = nb;
    f.next = id;
    b.prev = nb;
    insert_free(nb);
  }
  const uint64_t after = blk(id).size - before - usize;
  if (after > 0) {
    const BlockId na = new_block();
    Block& f = blk(na);
    Block& b = blk(id);
    f.addr = ustart + usize;
    f.size = after;
    f.stream = b.stream;
    f.is_small = b.is_small;
    f.expandable = b.expandable;
    f.next = b.next;
    if (f.next != NO_BLOCK) blk(f.next).prev = na;
    f.prev = id;
    b.next = na;
    insert_free(na);
  }
  Block& b = blk(id);
  b.addr = ustart;
  b.size = usize;
  b.mapped = false;
  try_merge(id, b.prev);
  try_merge(id, blk(id).next);
  insert_unmapped(id);
  total_reserved_ -= usize;
  stat_dec(stats_.reserved_bytes, blk(id).is_small, static_cast<int64_t>(usize));
  stats_.num_device_free += 1;
}

// ---------------------------------------------------------------- invariants

// What check() recounts over the blocks, to compare with the allocator's own bookkeeping.
struct CachingAllocator::CheckTally {
  MemoryStats recount;
  uint64_t reserved = 0;
  // Segments as (start, end) to check they never overlap.
  std::map<uint64_t, uint64_t> ranges;
  size_t free_mapped = 0;
  size_t unmapped = 0;

  void add_range(uint64_t start, uint64_t size) {
    auto [it, inserted] = ranges.emplace(start, start + size);
    if (!inserted) fail("two segments start at the same address");
    if (it != ranges.begin() && std::prev(it)->second > start) fail("segments overlap");
    if (std::next(it) != ranges.end() && std::next(it)->first < start + size)
      fail("segments overlap");
  }
};

// A live block: its links and neighbours, its free-list entry, its share of the recount, and
// its segment (expandable range, or the cudaMalloc segment it starts).
void CachingAllocator::check_block(BlockId id, CheckTally& t) const {
  const Block& b = blk(id);
  MemoryStats& recount = t.recount;
  if (b.size == 0) fail("block of size 0");
  const size_t pi = stat_pool(b.is_small);
  const bool active = b.allocated || b.event_count > 0;
  if (b.allocated && b.event_count > 0) fail("allocated block with pending events");
  if (b.deferred && b.event_count == 0) fail("deferred block without an event");
  if (b.next != NO_BLOCK) {
    const Block& n = blk(b.next);
    if (!n.live || n.prev != id) fail("broken next/prev link");
    if (n.addr != b.addr + b.size) fail("neighbouring blocks do not touch");
    if (n.stream != b.stream || n.is_small != b.is_small || n.expandable != b.expandable)
      fail("neighbours from different segments");
    const bool nfree = !n.allocated && n.event_count == 0;
    if (!active && nfree && n.mapped == b.mapped) fail("two mergeable free blocks not merged");
  }
  if (b.allocated) {
    recount.allocation[pi].current += 1;
    recount.allocated_bytes[pi].current += static_cast<int64_t>(b.size);
  }
  if (active) {
    recount.active[pi].current += 1;
    recount.active_bytes[pi].current += static_cast<int64_t>(b.size);
    recount.requested_bytes[pi].current += static_cast<int64_t>(b.requested);
  } else if (b.mapped) {
    ++t.free_mapped;
    const Pool& p = b.is_small ? *small_pool_ : *large_pool_;
    const auto& v = p.blocks.by_stream[b.stream];
    const size_t i = FreeList::lower_bound(v, free_key(b.size, b.addr));
    if (i == v.size() || v[i].id != id || v[i].key != free_key(b.size, b.addr))
      fail("free block missing from its pool's free list");
    if (b.expandable < 0 && b.is_split()) {
      recount.inactive_split[pi].current += 1;
      recount.inactive_split_bytes[pi].current += static_cast<int64_t>(b.size);
    }
  } else {
    ++t.unmapped;
    if (b.expandable < 0) fail("unmapped block outside an expandable segment");
  }
  if (b.expandable >= 0) {
    check_expandable_block(b);
  } else if (b.prev == NO_BLOCK) {
    uint64_t seg_size = 0;
    for (BlockId c = id; c != NO_BLOCK; c = blk(c).next) seg_size += blk(c).size;
    t.add_range(b.addr, seg_size);
    t.reserved += seg_size;
    recount.segment[pi].current += 1;
    recount.reserved_bytes[pi].current += static_cast<int64_t>(seg_size);
  }
}

// A block of an expandable segment lies in its range, tiles it, and agrees with its pages.
void CachingAllocator::check_expandable_block(const Block& b) const {
  const Expandable& e = expandables_.at(static_cast<size_t>(b.expandable));
  if (b.addr < e.base || b.addr + b.size > e.base + e.size) fail("block outside its range");
  if (b.prev == NO_BLOCK && b.addr != e.base) fail("expandable range does not start at base");
  if (b.next == NO_BLOCK && b.addr + b.size != e.base + e.size)
    fail("expandable range does not end at its end");
  if (!b.mapped && ((b.addr - e.base) % e.page != 0 || b.size % e.page != 0))
    fail("unmapped block not page aligned");
  const uint64_t first = (b.addr - e.base) / e.page;
  const uint64_t last = (b.addr + b.size - e.base + e.page - 1) / e.page;
  for (uint64_t p = first; p < last; ++p)
    if ((e.mapped[p] != 0) != b.mapped) fail("block mapping disagrees with its pages");
}

// The free lists are sorted, name live blocks of their own stream and pool, and are counted
// right; returns how many blocks they hold.
size_t CachingAllocator::check_free_lists() const {
  size_t listed = 0;
  for (const Pool* p : {small_pool_.get(), large_pool_.get()}) {
    size_t in_pool = 0;
    for (const auto& v : p->blocks.by_stream) {
      in_pool += v.size();
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0 && !(v[i - 1].key < v[i].key)) fail("free list not sorted by (size, addr)");
        if (v[i].id >= blocks_.size() || !blk(v[i].id).live)
          fail("free list names a block that does not exist");
        const Block& b = blk(v[i].id);
        if (&v != &p->blocks.by_stream[b.stream] || b.is_small != p->is_small)
          fail("free block listed under the wrong stream or pool");
      }
    }
    if (in_pool != p->blocks.count) fail("free list count is wrong");
    listed += in_pool;
  }
  return listed;
}

// The statistics equal the recount, the totals agree with the segments and the device, and
// reserved >= active >= allocated.
void CachingAllocator::check_stats(const MemoryStats& recount, uint64_t reserved) const {
  auto cmp = [&](const char* name, const StatArray& got, StatArray want) {
    want[AGGREGATE].current = want[SMALL_POOL].current + want[LARGE_POOL].current;
    for (size_t i = 0; i < 3; ++i)
      if (got[i].current != want[i].current)
        fail(std::string(name) + "[" + std::to_string(i) + "].current is " +
             std::to_string(got[i].current) + ", recount gives " + std::to_string(want[i].current));
  };
  cmp("allocation", stats_.allocation, recount.allocation);
  cmp("allocated_bytes", stats_.allocated_bytes, recount.allocated_bytes);
  cmp("active", stats_.active, recount.active);
  cmp("active_bytes", stats_.active_bytes, recount.active_bytes);
  cmp("requested_bytes", stats_.requested_bytes, recount.requested_bytes);
  cmp("inactive_split", stats_.inactive_split, recount.inactive_split);
  cmp("inactive_split_bytes", stats_.inactive_split_bytes, recount.inactive_split_bytes);
  cmp("segment", stats_.segment, recount.segment);
  cmp("reserved_bytes", stats_.reserved_bytes, recount.reserved_bytes);
  if (reserved != total_reserved_) fail("total reserved differs from the segments");
  if (device_.used() != total_reserved_) fail("device holds a different amount than reserved");
  for (size_t i = 0; i < 3; ++i) {
    if (stats_.reserved_bytes[i].current < stats_.active_bytes[i].current)
      fail("reserved < active");
    if (stats_.active_bytes[i].current < stats_.allocated_bytes[i].current)
      fail("active < allocated");
    if (stats_.allocated_bytes[i].peak < stats_.allocated_bytes[i].current) fail("peak < current");
  }
}

void CachingAllocator::check() const {
  CheckTally t;
  for (BlockId id = 0; id < blocks_.size(); ++id)
    if (blk(id).live) check_block(id, t);
  for (const Expandable& e : expandables_) {
    t.add_range(e.base, e.size);
    const auto pages = static_cast<uint64_t>(std::count(e.mapped.begin(), e.mapped.end(), 1));
    t.reserved += pages * e.page;
    t.recount.reserved_bytes[stat_pool(e.is_small)].current += static_cast<int64_t>(pages * e.page);
  }
  if (check_free_lists() != t.free_mapped) fail("free lists hold blocks that are not free");
  if (small_pool_->unmapped.size() + large_pool_->unmapped.size() != t.unmapped)
    fail("unmapped lists disagree with the blocks");
  check_stats(t.recount, t.reserved);
  uint64_t queued = 0;
  for (StreamId s = 0; s < MAX_STREAMS; ++s) {
    queued += events_[s].size();
    if (!events_[s].empty() && ((pending_streams_ >> s) & 1) == 0)
      fail("stream with queued events missing from the pending mask");
  }
  if (queued != pending_events_) fail("pending event count is wrong");
}

}  // namespace mlprio::fsdp
