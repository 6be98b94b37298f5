// Property tests of the allocator model: seeded random sequences of malloc, free,
// record_stream, stream progress, deferred frees and empty_cache on a small device, under each
// family of settings, with check() (every invariant, statistics recounted) after every
// operation and conservation of bytes at the end.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "mlprio/fsdp/allocator.hpp"

using namespace mlprio::fsdp;

namespace {

void run_random(const std::string& conf, AllocatorSettings base, uint64_t seed, int ops) {
  SimulatedDevice dev(256 * MiB);
  CachingAllocator alloc(dev, parse_alloc_conf(conf, base));
  std::mt19937_64 rng(seed);
  std::vector<BlockId> live;
  std::vector<BlockId> deferred;
  std::uniform_int_distribution<int> op_dist(0, 99);
  for (int i = 0; i < ops; ++i) {
    const int op = op_dist(rng);
    const auto stream = static_cast<StreamId>(rng() % 3);
    if (op < 45 || live.empty()) {
      // Sizes across both pools and all segment-size rules, some near the device's capacity.
      uint64_t size = 0;
      switch (rng() % 4) {
        case 0:
          size = 1 + rng() % (64 * KiB);
          break;
        case 1:
          size = 1 + rng() % (2 * MiB);
          break;
        case 2:
          size = 1 + rng() % (24 * MiB);
          break;
        default:
          size = 1 + rng() % (96 * MiB);
          break;
      }
      const auto r = alloc.malloc(size, stream);
      if (r.ok) {
        REQUIRE(r.size >= size);
        live.push_back(r.id);
      }
    } else if (op < 80) {
      const size_t k = rng() % live.size();
      const BlockId id = live[k];
      live[k] = live.back();
      live.pop_back();
      if (rng() % 4 == 0) alloc.record_stream(id, static_cast<StreamId>(rng() % 4));
      if (rng() % 8 == 0) {
        alloc.free_deferred(id);
        deferred.push_back(id);
      } else {
        alloc.free(id);
      }
    } else if (op < 90) {
      const auto s = static_cast<StreamId>(rng() % 4);
      alloc.stream_done_until(s, alloc.stream_marker(s) - (rng() % 2));
    } else if (op < 97) {
      if (!deferred.empty()) {
        alloc.complete_deferred_free(deferred.back());
        deferred.pop_back();
      }
    } else {
      alloc.empty_cache();
    }
    alloc.check();
  }
  for (BlockId id : live) alloc.free(id);
  alloc.all_streams_done();
  alloc.synchronize_and_free_events();
  alloc.check();
  const auto& s = alloc.stats();
  CHECK(s.allocated_bytes[AGGREGATE].current == 0);
  CHECK(s.active_bytes[AGGREGATE].current == 0);
  CHECK(s.requested_bytes[AGGREGATE].current == 0);
  // Conservation: every byte handed out was handed back.
  CHECK(s.allocated_bytes[AGGREGATE].allocated == s.allocated_bytes[AGGREGATE].freed);
  alloc.empty_cache();
  CHECK(s.reserved_bytes[AGGREGATE].current == 0);
  CHECK(dev.used() == 0);
  CHECK(s.num_device_alloc >= s.num_device_free);
}

}  // namespace

TEST_CASE("random sequences keep every invariant", "[fsdp][property]") {
  const std::vector<std::string> confs = {
      "",
      "max_split_size_mb:48",
      "roundup_power2_divisions:4",
      "roundup_power2_divisions:[1:2,4:8,>:4],max_split_size_mb:32,max_non_split_rounding_mb:8",
      "expandable_segments:True",
      "expandable_segments:True,roundup_power2_divisions:8"};
  for (const auto& conf : confs) {
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      INFO("conf '" << conf << "' seed " << seed);
      run_random(conf, AllocatorSettings{}, seed, 3000);
    }
  }
}

TEST_CASE("random sequences with a memory fraction and garbage collection", "[fsdp][property]") {
  AllocatorSettings base;
  base.memory_fraction = 0.75;
  for (uint64_t seed = 11; seed <= 14; ++seed) {
    INFO("seed " << seed);
    run_random("garbage_collection_threshold:0.5", base, seed, 3000);
  }
}

TEST_CASE("PyTorch 1.13 rules under random sequences", "[fsdp][property]") {
  AllocatorSettings v1;
  v1.version = TorchVersion::TORCH_1_13;
  run_random("roundup_power2_divisions:1,max_split_size_mb:40", v1, 99, 3000);
}
