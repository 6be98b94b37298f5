// Hand-checked scenarios for every rule of the caching-allocator model. Each expected number is
// worked out from the rules in ../shared/reference/caching_allocator.md (and PyTorch's
// CUDACachingAllocator.cpp), written in the comment next to it, not read back from the model.
#include <catch2/catch.hpp>

#include "mlprio/fsdp/allocator.hpp"

using namespace mlprio::fsdp;

namespace {

struct Fixture {
  explicit Fixture(uint64_t capacity, const std::string& conf = "",
                   AllocatorSettings base = AllocatorSettings{})
      : dev(capacity), alloc(dev, parse_alloc_conf(conf, base)) {}
  SimulatedDevice dev;
  CachingAllocator alloc;
  const MemoryStats& s() const { return alloc.stats(); }
};

}  // namespace

TEST_CASE("rounding follows round_size() of PyTorch 2.x", "[fsdp][rules]") {
  AllocatorSettings d;
  CHECK(round_size(1, d) == 512);
  CHECK(round_size(512, d) == 512);
  CHECK(round_size(513, d) == 1024);
  CHECK(round_size(MiB + 1, d) == 1'049'088);
  CHECK(round_size(12 * MiB + 1, d) == 12'583'424);
  const auto four = parse_alloc_conf("roundup_power2_divisions:4");
  // The code applies divisions only when size > 512 * divisions = 2048, so 1200 B keeps plain
  // 512 B rounding (1536), although the documentation's prose example says 1280.
  CHECK(round_size(1200, four) == 1536);
  // 1 MiB + 1: floor 1 MiB, division 256 KiB -> 1.25 MiB.
  CHECK(round_size(MiB + 1, four) == 1'310'720);
  // A power of two stays; 3 MiB is a division point of [2 MiB, 4 MiB); 3 MiB + 1 -> 3.5 MiB.
  CHECK(round_size(4 * MiB, four) == 4 * MiB);
  CHECK(round_size(3 * MiB, four) == 3 * MiB);
  CHECK(round_size(3 * MiB + 1, four) == 3 * MiB + 512 * KiB);
  // Per-interval list: [1:2,>:8] -> below 2 MiB two divisions, from 2 MiB up eight.
  const auto list = parse_alloc_conf("roundup_power2_divisions:[1:2,2:8]");
  CHECK(round_size(MiB + 1, list) == MiB + 512 * KiB);
  CHECK(round_size(2 * MiB + 1, list) == 2 * MiB + 256 * KiB);
}

TEST_CASE("version switch: 1.13 rounds to a power of two with divisions 1", "[fsdp][rules]") {
  AllocatorSettings v1;
  v1.version = TorchVersion::TORCH_1_13;
  const auto old = parse_alloc_conf("roundup_power2_divisions:1", v1);
  CHECK(round_size(3000, old) == 4096);  // 3000 > 512 * 1 and divisions > 0 in 1.13
  const auto now = parse_alloc_conf("roundup_power2_divisions:1");
  CHECK(round_size(3000, now) == 3072);  // 2.x needs divisions > 1
  CHECK_THROWS_AS(parse_alloc_conf("expandable_segments:True", v1), SettingsError);
}

TEST_CASE("segment sizes", "[fsdp][rules]") {
  CHECK(allocation_size(512) == 2 * MiB);
  CHECK(allocation_size(MiB) == 2 * MiB);
  CHECK(allocation_size(1'049'088) == 20 * MiB);
  CHECK(allocation_size(10 * MiB) == 10 * MiB);  // 10 MiB - 1 B rounds to 10 MiB: not < 10 MiB
  CHECK(allocation_size(12'583'424) == 14 * MiB);
}

TEST_CASE("1 B goes to a 2 MiB small segment", "[fsdp][rules]") {
  Fixture f(GiB);
  const auto r = f.alloc.malloc(1, 0);
  REQUIRE(r.ok);
  CHECK(r.size == 512);
  CHECK(f.s().allocated_bytes[SMALL_POOL].current == 512);
  CHECK(f.s().allocated_bytes[LARGE_POOL].current == 0);
  CHECK(f.s().reserved_bytes[AGGREGATE].current == 2 * MiB);
  CHECK(f.s().segment[SMALL_POOL].current == 1);
  CHECK(f.s().requested_bytes[AGGREGATE].current == 1);
  // The rest of the segment (2 MiB - 512 B) is an inactive split block.
  CHECK(f.s().inactive_split[SMALL_POOL].current == 1);
  CHECK(f.s().inactive_split_bytes[SMALL_POOL].current == 2 * MiB - 512);
  CHECK(f.s().num_device_alloc == 1);
  f.alloc.check();
  f.alloc.free(r.id);
  // Back to one whole free segment: nothing split, nothing active, still reserved.
  CHECK(f.s().inactive_split[SMALL_POOL].current == 0);
  CHECK(f.s().active_bytes[AGGREGATE].current == 0);
  CHECK(f.s().reserved_bytes[AGGREGATE].current == 2 * MiB);
  CHECK(f.s().allocated_bytes[AGGREGATE].allocated == 512);
  CHECK(f.s().allocated_bytes[AGGREGATE].freed == 512);
  f.alloc.check();
}

TEST_CASE("1 MiB + 1 B is large and takes a 20 MiB segment", "[fsdp][rules]") {
  Fixture f(GiB);
  const auto r = f.alloc.malloc(MiB + 1, 0);
  REQUIRE(r.ok);
  CHECK(r.size == 1'049'088);
  CHECK(f.s().allocated_bytes[LARGE_POOL].current == 1'049'088);
  CHECK(f.s().reserved_bytes[LARGE_POOL].current == 20 * MiB);
  // remainder 20 MiB - 1,049,088 = 19,922,432 > 1 MiB, so the block is split.
  CHECK(f.s().inactive_split_bytes[LARGE_POOL].current == 19'922'432);
  f.alloc.check();
}

TEST_CASE("12 MiB + 1 B takes a 14 MiB segment; 10 MiB - 1 B a 10 MiB one", "[fsdp][rules]") {
  Fixture f(GiB);
  const auto a = f.alloc.malloc(12 * MiB + 1, 0);
  CHECK(a.size == 12'583'424);
  CHECK(f.s().reserved_bytes[AGGREGATE].current == 14 * MiB);
  // 14 MiB - 12,583,424 = 2,096,640 > 1 MiB: split.
  CHECK(f.s().inactive_split_bytes[AGGREGATE].current == 2'096'640);
  const auto b = f.alloc.malloc(10 * MiB - 1, 0);
  CHECK(b.size == 10 * MiB);
  CHECK(f.s().reserved_bytes[AGGREGATE].current == 24 * MiB);
  CHECK(f.s().segment[AGGREGATE].current == 2);
  f.alloc.check();
}

TEST_CASE("split, reuse of the remainder and merge back", "[fsdp][rules]") {
  Fixture f(GiB);
  const auto a = f.alloc.malloc(MiB + 1, 0);  // 1,049,088 at the start of a 20 MiB segment
  const auto b = f.alloc.malloc(4 * MiB, 0);  // from the remainder, right after a
  CHECK(b.addr == a.addr + 1'049'088);
  CHECK(f.s().segment[AGGREGATE].current == 1);
  // remainder now 19,922,432 - 4,194,304 = 15,728,128
  CHECK(f.s().inactive_split_bytes[AGGREGATE].current == 15'728'128);
  f.alloc.free(a.id);  // a cannot merge (b is allocated): two inactive split blocks
  CHECK(f.s().inactive_split[AGGREGATE].current == 2);
  CHECK(f.s().inactive_split_bytes[AGGREGATE].current == 15'728'128 + 1'049'088);
  f.alloc.free(b.id);  // b merges with both: one whole free segment
  CHECK(f.s().inactive_split[AGGREGATE].current == 0);
  CHECK(f.s().inactive_split_bytes[AGGREGATE].current == 0);
  CHECK(f.s().reserved_bytes[AGGREGATE].current == 20 * MiB);
  f.alloc.check();
  // The whole segment comes back for a 20 MiB request (best fit, no new cudaMalloc).
  const auto c = f.alloc.malloc(20 * MiB, 0);
  CHECK(c.addr == a.addr);
  CHECK(f.s().num_device_alloc == 1);
  f.alloc.check();
}

TEST_CASE("blocks never cross streams", "[fsdp][rules]") {
  Fixture f(GiB);
  const auto a = f.alloc.malloc(4 * MiB, 0);
  f.alloc.free(a.id);
  const auto b = f.alloc.malloc(4 * MiB, 1);  // stream 1 cannot use stream 0's cached segment
  CHECK(f.s().segment[AGGREGATE].current == 2);
  CHECK(b.addr != a.addr);
  f.alloc.check();
}

TEST_CASE("retry: flush the cache, then cudaMalloc succeeds", "[fsdp][rules]") {
  Fixture f(64 * MiB);
  const auto a = f.alloc.malloc(30 * MiB, 0);
  const auto b = f.alloc.malloc(30 * MiB, 0);
  f.alloc.free(a.id);
  f.alloc.free(b.id);  // 60 MiB cached, nothing allocated
  const auto c = f.alloc.malloc(40 * MiB, 0);
  // No cached block >= 40 MiB; cudaMalloc(40 MiB) fails (60 + 40 > 64); no max_split_size, so
  // step 7 is a no-op; step 8 syncs, frees both segments and retries: one retry, no OOM.
  REQUIRE(c.ok);
  CHECK(f.s().num_alloc_retries == 1);
  CHECK(f.s().num_ooms == 0);
  CHECK(f.s().num_sync_all_streams == 1);
  CHECK(f.s().num_device_free == 2);
  CHECK(f.s().num_device_alloc == 3);
  CHECK(f.s().reserved_bytes[AGGREGATE].current == 40 * MiB);
  CHECK(f.s().reserved_bytes[AGGREGATE].peak == 60 * MiB);
  f.alloc.check();
}

TEST_CASE("OOM is counted (with its retry) and the run goes on", "[fsdp][rules]") {
  Fixture f(64 * MiB);
  const auto a = f.alloc.malloc(40 * MiB, 0);
  const auto b = f.alloc.malloc(40 * MiB, 0);
  CHECK_FALSE(b.ok);
  CHECK(f.s().num_alloc_retries == 1);  // failing at step 8 counts a retry and an OOM
  CHECK(f.s().num_ooms == 1);
  const auto c = f.alloc.malloc(10 * MiB, 0);  // 40 + 10 <= 64: fine
  CHECK(c.ok);
  CHECK(f.s().reserved_bytes[AGGREGATE].current == 50 * MiB);
  f.alloc.free(a.id);
  f.alloc.free(c.id);
  f.alloc.check();
}

TEST_CASE("record_stream delays reuse until the other stream's event completes", "[fsdp][rules]") {
  Fixture f(GiB);
  const auto a = f.alloc.malloc(4 * MiB, 0);  // 20 MiB segment, split
  f.alloc.record_stream(a.id, 1);
  f.alloc.free(a.id);
  CHECK(f.s().allocated_bytes[AGGREGATE].current == 0);     // drops at free request
  CHECK(f.s().active_bytes[AGGREGATE].current == 4 * MiB);  // still active
  CHECK(f.alloc.pending_events() == 1);
  const auto b = f.alloc.malloc(4 * MiB, 0);  // a is not reusable yet: takes the remainder
  CHECK(b.addr == a.addr + 4 * MiB);
  f.alloc.stream_done_until(1, f.alloc.stream_marker(1));  // stream 1 passed the event
  CHECK(f.alloc.pending_events() == 1);  // retired only at the next malloc (process_events)
  const auto c = f.alloc.malloc(4 * MiB, 0);
  CHECK(f.alloc.pending_events() == 0);
  CHECK(c.addr == a.addr);  // a's block came back and is the best fit
  f.alloc.check();
}

TEST_CASE("a retry's synchronisation completes outstanding events", "[fsdp][rules]") {
  Fixture f(40 * MiB);
  const auto a = f.alloc.malloc(30 * MiB, 0);
  f.alloc.record_stream(a.id, 2);
  f.alloc.free(a.id);
  const auto b = f.alloc.malloc(36 * MiB, 0);  // needs a's segment released: sync, free, retry
  REQUIRE(b.ok);
  CHECK(f.s().num_alloc_retries == 1);
  CHECK(f.alloc.pending_events() == 0);
  f.alloc.check();
}

TEST_CASE("a retry synchronises the device itself, once per retry", "[fsdp][rules]") {
  // PyTorch's synchronize_and_free_events waits for the GPU before the cache is released; on a
  // real device that wait is part of what a retry costs, so the allocator must reach the device.
  struct CountingDevice final : Device {
    SimulatedDevice inner{64 * MiB};
    int syncs = 0;
    std::string_view name() const override { return "counting"; }
    uint64_t capacity() const override { return inner.capacity(); }
    uint64_t used() const override { return inner.used(); }
    std::optional<uint64_t> malloc_segment(uint64_t b) override { return inner.malloc_segment(b); }
    void free_segment(uint64_t a, uint64_t b) override { inner.free_segment(a, b); }
    uint64_t reserve_address_range(uint64_t b) override { return inner.reserve_address_range(b); }
    bool map_pages(uint64_t a, uint64_t b) override { return inner.map_pages(a, b); }
    void unmap_pages(uint64_t a, uint64_t b) override { inner.unmap_pages(a, b); }
    void synchronize() override { ++syncs; }
    const LatencyModel& latency() const override { return inner.latency(); }
  } dev;
  CachingAllocator alloc(dev, parse_alloc_conf("", AllocatorSettings{}));
  const auto a = alloc.malloc(30 * MiB, 0);
  const auto b = alloc.malloc(30 * MiB, 0);
  CHECK(dev.syncs == 0);  // no retry yet: no synchronisation
  alloc.free(a.id);
  alloc.free(b.id);
  REQUIRE(alloc.malloc(40 * MiB, 0).ok);  // as in "retry: flush the cache": one retry
  CHECK(alloc.stats().num_alloc_retries == 1);
  CHECK(dev.syncs == 1);
  CHECK_FALSE(alloc.malloc(40 * MiB, 0).ok);  // 40 + 40 > 64: a retry that ends in an OOM
  CHECK(alloc.stats().num_alloc_retries == 2);
  CHECK(dev.syncs == 2);
  CHECK(alloc.stats().num_sync_all_streams == 2);
  alloc.check();
}

TEST_CASE("max_split_size: oversize blocks are not split nor given to small requests",
          "[fsdp][rules]") {
  Fixture f(GiB, "max_split_size_mb:64");
  const auto big = f.alloc.malloc(100 * MiB, 0);  // oversize segment, never split
  CHECK(f.s().oversize_segments.current == 1);
  CHECK(f.s().oversize_allocations.current == 1);
  f.alloc.free(big.id);
  const auto small_req = f.alloc.malloc(30 * MiB, 0);  // < 64 MiB may not take the 100 MiB block
  CHECK(small_req.addr != big.addr);
  const auto mid = f.alloc.malloc(70 * MiB, 0);  // 100 >= 70 + 20: not taken either
  CHECK(mid.addr != big.addr);
  const auto fit = f.alloc.malloc(85 * MiB, 0);  // 100 < 85 + 20: taken whole, not split
  CHECK(fit.addr == big.addr);
  CHECK(fit.size == 100 * MiB);
  CHECK(f.s().segment[AGGREGATE].current == 3);
  CHECK(f.s().max_split_size == static_cast<int64_t>(64 * MiB));
  f.alloc.check();
}

TEST_CASE("max_split_size: cached oversize blocks are released before a retry", "[fsdp][rules]") {
  for (const bool with_limit : {true, false}) {
    Fixture f(200 * MiB, with_limit ? "max_split_size_mb:64" : "");
    const auto a = f.alloc.malloc(100 * MiB, 0);
    const auto b = f.alloc.malloc(80 * MiB, 0);
    f.alloc.free(a.id);
    f.alloc.free(b.id);
    const auto c = f.alloc.malloc(150 * MiB, 0);  // 180 + 150 > 200: cudaMalloc fails
    REQUIRE(c.ok);
    CHECK(f.s().num_device_free == 2);
    if (with_limit) {
      // Step 7 frees 100 MiB then 80 MiB (largest first, 180 >= 150) without a sync: no retry.
      CHECK(f.s().num_alloc_retries == 0);
      CHECK(f.s().num_sync_all_streams == 0);
    } else {
      CHECK(f.s().num_alloc_retries == 1);
      CHECK(f.s().num_sync_all_streams == 1);
    }
    f.alloc.check();
  }
}

TEST_CASE("expandable segments grow instead of making new segments", "[fsdp][rules]") {
  Fixture f(GiB, "expandable_segments:True");
  const auto a = f.alloc.malloc(30 * MiB, 0);  // maps two 20 MiB pages
  CHECK(f.s().reserved_bytes[AGGREGATE].current == 40 * MiB);
  CHECK(f.s().segment[AGGREGATE].current == 0);  // mapping does not count as a segment
  CHECK(f.s().num_device_alloc == 1);
  const auto b = f.alloc.malloc(30 * MiB, 0);  // 10 MiB free + one more page, contiguous
  CHECK(b.addr == a.addr + 30 * MiB);
  CHECK(f.s().reserved_bytes[AGGREGATE].current == 60 * MiB);
  CHECK(f.s().num_device_alloc == 2);
  CHECK(f.s().inactive_split[AGGREGATE].current == 0);  // expandable blocks are left out
  f.alloc.check();
  f.alloc.free(a.id);
  f.alloc.free(b.id);
  f.alloc.empty_cache();  // whole free pages are unmapped
  CHECK(f.s().reserved_bytes[AGGREGATE].current == 0);
  CHECK(f.s().num_device_free == 1);
  f.alloc.check();
}

TEST_CASE("expandable segments: unmapping another stream's free pages on OOM", "[fsdp][rules]") {
  Fixture f(100 * MiB, "expandable_segments:True");
  const auto a = f.alloc.malloc(50 * MiB, 0);  // 3 pages = 60 MiB
  f.alloc.free(a.id);
  const auto b = f.alloc.malloc(50 * MiB, 1);  // 60 + 60 > 100: map fails, unmap, retry
  REQUIRE(b.ok);
  CHECK(f.s().num_alloc_retries == 1);
  CHECK(f.s().reserved_bytes[AGGREGATE].current == 60 * MiB);
  CHECK(f.s().num_device_free == 1);
  f.alloc.check();
}

TEST_CASE("garbage collection releases old cached segments and avoids a retry", "[fsdp][rules]") {
  for (const bool gc : {true, false}) {
    AllocatorSettings base;
    base.memory_fraction = 0.5;  // 100 MiB of the 200 MiB device
    Fixture f(200 * MiB, gc ? "garbage_collection_threshold:0.5" : "", base);
    const auto a = f.alloc.malloc(60 * MiB, 0);
    f.alloc.free(a.id);
    const auto b = f.alloc.malloc(70 * MiB, 0);  // 60 + 70 > 100 allowed
    REQUIRE(b.ok);
    CHECK(f.s().num_device_free == 1);
    CHECK(f.s().num_alloc_retries == (gc ? 0 : 1));
    f.alloc.check();
  }
}

TEST_CASE("deferred frees (snapshot free_requested/free_completed)", "[fsdp][rules]") {
  Fixture f(GiB);
  const auto a = f.alloc.malloc(MiB, 0);
  f.alloc.free_deferred(a.id);
  CHECK(f.s().allocated_bytes[AGGREGATE].current == 0);
  CHECK(f.s().active_bytes[AGGREGATE].current == static_cast<int64_t>(MiB));
  f.alloc.check();
  CHECK(f.alloc.complete_deferred_free(a.id));
  CHECK_FALSE(f.alloc.complete_deferred_free(a.id));
  CHECK(f.s().active_bytes[AGGREGATE].current == 0);
  f.alloc.check();
}

TEST_CASE("settings errors name the key and value", "[fsdp][settings]") {
  auto msg = [](const std::string& conf) {
    try {
      parse_alloc_conf(conf);
    } catch (const SettingsError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(msg("max_split_size_mb:abc"),
             Catch::Contains("'abc'") && Catch::Contains("max_split_size_mb"));
  CHECK_THAT(msg("max_split_size_mb:10"), Catch::Contains("> 20"));
  CHECK_THAT(msg("expandable_segments:yes"), Catch::Contains("True or False"));
  CHECK_THAT(msg("garbage_collection_threshold:1.5"), Catch::Contains("< 1"));
  CHECK_THAT(msg("roundup_power2_divisions:3"), Catch::Contains("power of 2"));
  CHECK_THAT(msg("bogus_key:1"), Catch::Contains("unknown key 'bogus_key'"));
  CHECK_THAT(msg("expandable_segments"), Catch::Contains("KEY:VALUE"));
  const auto s = parse_alloc_conf(
      "expandable_segments:True,max_split_size_mb:128,roundup_power2_divisions:4,"
      "garbage_collection_threshold:0.6");
  CHECK(s.expandable_segments);
  CHECK(s.max_split_size == 128 * MiB);
  CHECK(s.roundup_power2_divisions[5] == 4);
  CHECK(s.garbage_collection_threshold == Approx(0.6));
  CHECK(parse_bytes("80GiB") == 80 * GiB);
  CHECK(parse_bytes("40GB") == 40'000'000'000ULL);
  CHECK(parse_bytes("512 MiB") == 512 * MiB);
  CHECK_THROWS_AS(parse_bytes("80 parsecs"), SettingsError);
  CHECK_THROWS_AS(parse_bytes(""), SettingsError);
}

TEST_CASE("sizes that would wrap in 64 bits are refused, not wrapped", "[fsdp][settings]") {
  // 1.5e19 bytes is below 2^64 but above what llround() can return (undefined behaviour).
  CHECK_THROWS_WITH(parse_bytes("15000000000000000000"),
                    Catch::Contains("out of range") && Catch::Contains("1 PiB"));
  CHECK_THROWS_WITH(parse_bytes("2048TiB"), Catch::Contains("out of range"));
  CHECK(parse_bytes("1024TiB") == MAX_SIZE_BYTES);
  // 2^44 MiB is 2^64 bytes, which wrapped to 0 and slipped past the "> 20" check.
  auto msg = [](const std::string& conf) {
    try {
      parse_alloc_conf(conf);
    } catch (const SettingsError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(msg("max_split_size_mb:17592186044416"),
             Catch::Contains("max_split_size_mb") && Catch::Contains("at most 1073741824"));
  CHECK_THAT(msg("max_non_split_rounding_mb:17592186044416"),
             Catch::Contains("max_non_split_rounding_mb"));
  CHECK(parse_alloc_conf("max_split_size_mb:1073741824").max_split_size == MAX_SIZE_BYTES);
}
