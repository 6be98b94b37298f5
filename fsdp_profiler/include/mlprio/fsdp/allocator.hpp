// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp), one device,
// no graph capture. It reproduces the rules that decide when cudaMalloc retries happen: size
// rounding, small/large pools, segment sizes, per-stream best fit with the oversize rules,
// splitting and merging, the malloc ladder (cache, new segment, release oversize blocks, flush
// everything releasable and retry, OOM), record_stream events, garbage collection and expandable
// segments. Statistics follow torch.cuda.memory_stats(). check() verifies every invariant and
// throws InvariantError; it is always compiled in.
//
// Streams are small dense ids (callers intern raw cudaStream_t values); blocks are handed out as
// BlockId indices into an arena so that the hot path makes no heap allocation.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory_resource>
#include <set>
#include <stdexcept>
#include <vector>

#include "mlprio/fsdp/device.hpp"
#include "mlprio/fsdp/settings.hpp"
#include "mlprio/fsdp/stats.hpp"
#include "mlprio/util/errors.hpp"

namespace mlprio::fsdp {

// An invariant of the allocator model broke (a bug): the one mlprio::InvariantError, which the
// replay simulator (replay::InvariantError) throws too.
using InvariantError = ::mlprio::InvariantError;

using StreamId = uint32_t;
using BlockId = uint32_t;
inline constexpr BlockId NO_BLOCK = UINT32_MAX;
inline constexpr StreamId MAX_STREAMS = 64;  // stream uses are a 64-bit mask

struct AllocResult {
  BlockId id = NO_BLOCK;
  uint64_t addr = 0;
  uint64_t size = 0;  // rounded block size
  bool ok = false;    // false: out of memory (counted in num_ooms)
};

// Rounding and segment-size rules, exposed for tests and the step generator.
uint64_t round_size(uint64_t bytes, const AllocatorSettings& settings);
uint64_t allocation_size(uint64_t rounded);

class CachingAllocator {
 public:
  CachingAllocator(Device& device, AllocatorSettings settings);
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  ~CachingAllocator();

  // Never throws on out-of-memory: the result says !ok and num_ooms counts it. A zero-byte
  // request succeeds with NO_BLOCK, as torch returns a null pointer for it.
  AllocResult malloc(uint64_t bytes, StreamId stream);
  // Frees a block (its allocated bytes drop now). If record_stream() named other streams, the
  // block returns to its pool only after events on those streams complete.
  void free(BlockId id);
  void record_stream(BlockId id, StreamId stream);

  // Free whose completion is signalled later by complete_deferred_free() (a snapshot's
  // free_requested ... free_completed pair). A synchronisation of all streams completes it too.
  void free_deferred(BlockId id);
  // false when the block was already returned (e.g. by a retry's synchronisation).
  bool complete_deferred_free(BlockId id);

  // Event ordering: every event recorded on a stream gets the next sequence number.
  // stream_marker() is the number the next event will get; stream_done_until(s, m) says the GPU
  // finished everything recorded on s before m. Completed events are retired at the next
  // malloc, as torch's process_events() does.
  uint64_t stream_marker(StreamId stream) const;
  void stream_done_until(StreamId stream, uint64_t marker);
  void all_streams_done();  // the GPU caught up with every stream (e.g. a device synchronise)
  void process_events();
  void synchronize_and_free_events();  // torch's helper; counts num_sync_all_streams
  void empty_cache();                  // torch.cuda.empty_cache()

  const MemoryStats& stats() const { return stats_; }
  void reset_peak_stats() { stats_.reset_peak(); }
  const AllocatorSettings& settings() const { return settings_; }
  uint64_t block_addr(BlockId id) const;
  uint64_t block_size(BlockId id) const;
  // Simulated time spent in device calls (cudaMalloc, cudaFree, mapping, synchronisation).
  double device_time_us() const { return device_time_us_; }
  uint64_t pending_events() const { return pending_events_; }

  // Verifies every invariant (segments tile their ranges without overlap, the free lists hold
  // exactly the free blocks, statistics equal a recount, reserved >= active >= allocated, the
  // device holds what the allocator reserved). Throws InvariantError naming the first failure.
  void check() const;

 private:
  struct Block {
    uint64_t addr = 0;
    uint64_t size = 0;
    uint64_t requested = 0;
    uint64_t stream_uses = 0;  // bit per stream named by record_stream()
    uint64_t gc_count_base = 0;
    BlockId prev = NO_BLOCK;
    BlockId next = NO_BLOCK;
    StreamId stream = 0;
    int32_t expandable = -1;  // index into expandables_, or -1 for a cudaMalloc segment
    uint32_t event_count = 0;
    uint32_t deferred_index = 0;
    bool live = false;
    bool allocated = false;
    bool mapped = true;
    bool is_small = false;
    bool deferred = false;
    bool is_split() const { return prev != NO_BLOCK || next != NO_BLOCK; }
  };
  // One free, mapped block in its (pool, stream) free list: key = size << 64 | addr, so one
  // 128-bit compare orders by (size, addr) without a branch.
  __extension__ using Key = unsigned __int128;
  static Key free_key(uint64_t size, uint64_t addr) { return Key{size} << 64 | addr; }
  struct FreeEntry {
    Key key;
    BlockId id;
    uint64_t size() const { return static_cast<uint64_t>(key >> 64); }
    uint64_t addr() const { return static_cast<uint64_t>(key); }
  };
  // A pool's free, mapped blocks: per stream, a vector sorted by (size, addr). Taken stream by
  // stream this is exactly torch's set ordered by (stream, size, addr), so best fit, the
  // oversize walks and every iteration see the blocks in the same order, but a lookup is a
  // binary search over contiguous memory and insert/erase make no node allocation (the vectors
  // keep their capacity, so steady-state operations do not touch the heap).
  struct FreeList {
    std::array<std::vector<FreeEntry>, MAX_STREAMS> by_stream;
    size_t count = 0;
    // Index of the first entry not smaller than (size, addr) in stream `s`'s vector.
    static size_t lower_bound(const std::vector<FreeEntry>& v, Key key) {
      return search(v.data(), v.size(), key);
    }
    static size_t search(const FreeEntry* first, size_t n, Key key);
  };
  struct AddrKey {
    StreamId stream;
    uint64_t addr;
    BlockId id;
    bool operator<(const AddrKey& o) const {
      return stream != o.stream ? stream < o.stream : addr < o.addr;
    }
  };
  struct Expandable {
    StreamId stream;
    bool is_small;
    uint64_t base;
    uint64_t size;
    uint64_t page;
    std::vector<uint8_t> mapped;
  };
  struct Pool {
    explicit Pool(bool small, std::pmr::memory_resource* r) : is_small(small), unmapped(r) {}
    bool is_small;
    FreeList blocks;                  // free, mapped blocks by (stream, size, addr)
    std::pmr::set<AddrKey> unmapped;  // unmapped ranges of expandable segments by (stream, addr)
    uint64_t get_free_blocks_call_count = 0;
  };
  struct PendingEvent {
    BlockId block;
    uint64_t seq;
  };

  Block& blk(BlockId id) { return blocks_[id]; }
  const Block& blk(BlockId id) const { return blocks_[id]; }
  BlockId new_block();
  void delete_block(BlockId id);
  Pool& pool_of(const Block& b) { return b.is_small ? *small_pool_ : *large_pool_; }
  size_t stat_pool(bool is_small) const { return is_small ? SMALL_POOL : LARGE_POOL; }
  void stat_inc(StatArray& a, bool is_small, int64_t amount) {
    a[AGGREGATE].increase(amount);
    a[stat_pool(is_small)].increase(amount);
  }
  void stat_dec(StatArray& a, bool is_small, int64_t amount) {
    a[AGGREGATE].decrease(amount);
    a[stat_pool(is_small)].decrease(amount);
  }

  void insert_free(BlockId id);
  void erase_free(BlockId id);
  void erase_free_at(Pool& pool, StreamId stream, size_t index);
  std::vector<BlockId> free_block_ids(const Pool& pool) const;  // in (stream, size, addr) order
  void insert_unmapped(BlockId id);
  void erase_unmapped(BlockId id);
  static constexpr size_t NOT_LISTED = SIZE_MAX;
  // Best fit; the block stays listed at `index` for alloc_found_block() to erase or reuse.
  BlockId get_free_block(Pool& pool, StreamId stream, uint64_t size, size_t& index);
  bool alloc_block(Pool& pool, StreamId stream, uint64_t size, uint64_t alloc_size, bool is_retry,
                   BlockId& out);
  AllocResult alloc_found_block(BlockId id, uint64_t size, uint64_t requested, size_t index);
  // Block `id`, whose key changed, takes over free-list slot `index` of the same pool and stream
  // (one shift of the entries in between instead of an erase plus an insert).
  void replace_free_at(Pool& pool, StreamId stream, size_t index, BlockId id);
  bool release_available_cached_blocks(Pool& pool, StreamId stream, uint64_t size);
  bool release_cached_blocks();
  void release_blocks(Pool& pool);
  void release_block(BlockId id);
  void garbage_collect();
  void free_block(BlockId id);
  uint64_t try_merge(BlockId dst, BlockId src);
  bool mergeable(BlockId dst, BlockId src) const;
  uint64_t merge_links(BlockId dst, BlockId src);  // src into dst; the free lists untouched
  void insert_events(BlockId id);
  void finish_event(BlockId id);

  // check()'s parts; CheckTally (allocator.cpp) is the recount they build up.
  struct CheckTally;
  void check_block(BlockId id, CheckTally& t) const;
  void check_expandable_block(const Block& b) const;
  size_t check_free_lists() const;  // the blocks they hold
  void check_stats(const MemoryStats& recount, uint64_t reserved) const;

  BlockId try_allocate_expandable_block(Pool& pool, StreamId stream, uint64_t size);
  BlockId find_expandable_block(Pool& pool, StreamId stream, uint64_t size);
  bool map_block(BlockId id, uint64_t size);
  void unmap_block(BlockId id);

  Device& device_;
  AllocatorSettings settings_;
  MemoryStats stats_;
  uint64_t total_reserved_ = 0;
  uint64_t allowed_maximum_ = UINT64_MAX;
  bool gc_enabled_ = false;
  double device_time_us_ = 0.0;

  std::vector<Block> blocks_;
  std::vector<BlockId> free_slots_;
  std::pmr::unsynchronized_pool_resource node_pool_;
  std::unique_ptr<Pool> small_pool_, large_pool_;
  std::vector<Expandable> expandables_;

  std::vector<std::deque<PendingEvent>> events_;  // per stream, in record order
  std::vector<uint64_t> next_seq_;
  std::vector<uint64_t> done_seq_;
  uint64_t pending_events_ = 0;
  uint64_t pending_streams_ = 0;   // bit per stream whose event queue is not empty
  std::vector<BlockId> deferred_;  // blocks awaiting complete_deferred_free()
};

}  // namespace mlprio::fsdp
