// The free lists (per pool and stream, sorted by (size, addr)): best fit takes the smallest
// block and, among equal sizes, the lowest address; merges that reuse a neighbour's slot keep the
// lists sorted and complete (check() after every operation).
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "mlprio/fsdp/allocator.hpp"

using namespace mlprio::fsdp;

TEST_CASE("best fit: smallest size, then lowest address; merges keep the lists sorted",
          "[fsdp][freelist]") {
  SimulatedDevice dev(1 * GiB);
  CachingAllocator a(dev, AllocatorSettings{});
  std::vector<AllocResult> r;
  for (int i = 0; i < 8; ++i) r.push_back(a.malloc(4 * KiB, 0));
  const uint64_t base = r[0].addr;
  for (int i = 0; i < 8; ++i) REQUIRE(r[i].addr == base + static_cast<uint64_t>(i) * 4 * KiB);
  for (int i : {5, 1, 3}) a.free(r[i].id);  // three isolated free 4 KiB blocks
  a.check();
  const auto x = a.malloc(4 * KiB, 0);
  CHECK(x.addr == base + 1 * 4 * KiB);  // equal sizes: lowest address first
  a.check();
  a.free(r[4].id);  // merges with 3 and 5: one 12 KiB block at 3's address
  a.check();
  const auto y = a.malloc(8 * KiB, 0);
  CHECK(y.addr == base + 3 * 4 * KiB);  // split of the merged block, remainder stays listed
  a.check();
  const auto z = a.malloc(4 * KiB, 0);
  CHECK(z.addr == base + 5 * 4 * KiB);
  a.check();
  CHECK(a.malloc(4 * KiB, 1).addr != base + 8 * 4 * KiB);  // another stream: a new segment
  a.check();
}

TEST_CASE("many streams and equal sizes keep every invariant", "[fsdp][freelist]") {
  SimulatedDevice dev(512 * MiB);
  CachingAllocator a(dev, AllocatorSettings{});
  std::mt19937_64 rng(11);
  std::vector<BlockId> live;
  for (int i = 0; i < 4000; ++i) {
    if (live.empty() || rng() % 100 < 55) {
      const uint64_t size = (rng() % 2 ? 8 * KiB : 3 * MiB) * (1 + rng() % 3);
      const auto res = a.malloc(size, static_cast<StreamId>(rng() % 9));
      if (res.ok) live.push_back(res.id);
    } else {
      const size_t k = rng() % live.size();
      a.free(live[k]);
      live[k] = live.back();
      live.pop_back();
    }
    a.check();
  }
  for (BlockId id : live) a.free(id);
  a.empty_cache();
  a.check();
  CHECK(a.stats().reserved_bytes[AGGREGATE].current == 0);
}
