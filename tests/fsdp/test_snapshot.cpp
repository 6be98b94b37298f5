// Snapshot reader and replay: the committed hand-written snapshot (tests/fsdp/data) replayed with
// statistics worked out by hand, and a fuzz-style test that feeds the reader truncated, mutated
// and wrongly typed JSON: every input must give a SnapshotError (with the entry named where one
// is at fault) or a valid snapshot, never a crash or another exception type.
#include <catch2/catch.hpp>

#include <fstream>
#include <random>
#include <sstream>

#include "mlprio/fsdp/snapshot.hpp"

using namespace mlprio::fsdp;

namespace {
std::string example_text() {
  std::ifstream in(std::string(MLPRIO_FSDP_TEST_DATA) + "/example_snapshot.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

TEST_CASE("example snapshot replays to hand-computed statistics", "[fsdp][snapshot]") {
  const Snapshot snap =
      read_snapshot(std::string(MLPRIO_FSDP_TEST_DATA) + "/example_snapshot.json");
  REQUIRE(snap.device_traces.size() == 1);
  REQUIRE(snap.device_traces[0].size() == 12);
  CHECK(snap.device_traces[0][5].stream == 94558031345664ULL);  // 64-bit values survive
  SimulatedDevice dev(80 * GiB);
  ReplayOptions opts;
  opts.check_invariants = true;
  const ReplayResult r = replay_snapshot(snap, dev, AllocatorSettings{}, opts);
  const auto& s = r.stats;
  // Live at the end: 12 MiB + 1 -> 12,583,424 B and 4 MiB on the second stream.
  CHECK(s.allocated_bytes[AGGREGATE].current == 12'583'424 + 4'194'304);
  CHECK(s.active_bytes[AGGREGATE].current == 12'583'424 + 4'194'304);
  // Segments: the 1 MiB + 1 alloc opens a 20 MiB segment whose 19,922,432 B remainder then
  // best-fits the 12 MiB + 1 request (leaving 7,339,008 B); stream 2 opens another 20 MiB one;
  // plus the 2 MiB small segment: 3 segments, 42 MiB.
  CHECK(s.segment[AGGREGATE].current == 3);
  CHECK(s.reserved_bytes[AGGREGATE].current == static_cast<int64_t>(42 * MiB));
  // The second 4 MiB could not reuse the first (its free had not completed): it took the
  // remainder, so stream 2's segment is free 4 MiB + used 4 MiB + free 12 MiB. With the first
  // segment's freed 1,049,088 B and 7,339,008 B remainder: 4 inactive split blocks.
  CHECK(s.inactive_split[LARGE_POOL].current == 4);
  CHECK(s.inactive_split_bytes[LARGE_POOL].current ==
        1'049'088 + 7'339'008 + 4'194'304 + 12'582'912);
  CHECK(s.num_alloc_retries == 0);
  CHECK(r.other_actions == 1);
}

TEST_CASE("example snapshot on a 40 MiB device: OOMs are counted and the replay goes on",
          "[fsdp][snapshot]") {
  const Snapshot snap = parse_snapshot(example_text(), "example");
  SimulatedDevice dev(40 * MiB);
  const ReplayResult r = replay_snapshot(snap, dev, AllocatorSettings{});
  // 2 + 20 MiB held (both segments in use) when stream 2 needs a 20 MiB segment: 42 > 40, no
  // whole cached segment to release, so each of stream 2's two allocs retries and fails.
  CHECK(r.stats.num_alloc_retries == 2);
  CHECK(r.stats.num_ooms == 2);
  CHECK(r.failed_allocs == 2);
  CHECK(r.unmatched_frees == 0);  // the free of a failed alloc is not "unmatched"
  CHECK(r.stats.num_device_free == 0);
  CHECK(r.stats.reserved_bytes[AGGREGATE].current == static_cast<int64_t>(22 * MiB));
  CHECK(r.stats.allocated_bytes[AGGREGATE].current == 12'583'424);
}

TEST_CASE("malformed snapshots give clear errors", "[fsdp][snapshot]") {
  auto err = [](const std::string& text) {
    try {
      parse_snapshot(text, "x.json");
    } catch (const SnapshotError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(err("{"), Catch::Contains("not valid JSON"));
  CHECK_THAT(err("[]"), Catch::Contains("top level"));
  CHECK_THAT(err("{}"), Catch::Contains("device_traces"));
  CHECK_THAT(err("{\"device_traces\": 3}"), Catch::Contains("must be a list"));
  CHECK_THAT(err("{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 1}]]}"),
             Catch::Contains("device_traces[0][0]") && Catch::Contains("'size'"));
  CHECK_THAT(err("{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 1, \"size\": -5}]]}"),
             Catch::Contains("size"));
  CHECK_THAT(err("{\"device_traces\": [[{\"action\": 7}]]}"), Catch::Contains("action"));
  CHECK_THAT(
      err("{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": \"0x10\", \"size\": 1}]]}"),
      Catch::Contains("addr"));
}

TEST_CASE("a snapshot nested 100,000 levels deep is refused, not a stack overflow",
          "[fsdp][snapshot]") {
  // In a field whose error message used to re-serialise the value (recursively).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string text =
      "{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 1, \"size\": " + deep + "}]]}";
  try {
    parse_snapshot(text, "deep.json");
    FAIL("a 100,000-level snapshot was accepted");
  } catch (const SnapshotError& e) {
    CHECK_THAT(e.what(), Catch::Contains("deep.json") && Catch::Contains("deeper than 64"));
  }
  // Within the limit, a wrongly typed field is named without printing the value's contents.
  const std::string shallow = std::string(10, '[') + std::string(10, ']');
  try {
    parse_snapshot(
        "{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 1, \"size\": " + shallow + "}]]}",
        "x.json");
    FAIL("a list as size was accepted");
  } catch (const SnapshotError& e) {
    CHECK_THAT(e.what(), Catch::Contains("device_traces[0][0].size") && Catch::Contains("(array)"));
  }
}

TEST_CASE("fuzz: mutated snapshots never crash the reader or the replay", "[fsdp][snapshot]") {
  const std::string base = example_text();
  std::mt19937_64 rng(1234);
  const char junk[] = "{}[]\":,-0123456789eE.truefalsenull \n\\x";
  int errors = 0, ok = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string t = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % t.size();
      switch (rng() % 4) {
        case 0:
          t[pos] = junk[rng() % (sizeof(junk) - 1)];
          break;
        case 1:
          t.erase(pos, 1 + rng() % 8);
          break;
        case 2:
          t.insert(pos, 1, junk[rng() % (sizeof(junk) - 1)]);
          break;
        default:
          t.resize(pos);
          break;
      }
      if (t.empty()) t = "x";
    }
    try {
      const Snapshot s = parse_snapshot(t, "fuzz");
      SimulatedDevice dev(64 * MiB);
      replay_snapshot(s, dev, AllocatorSettings{});
      ++ok;
    } catch (const SnapshotError& e) {
      CHECK(std::string(e.what()).rfind("fuzz", 0) == 0);
      ++errors;
    }
  }
  CHECK(errors > 0);
  CHECK(ok + errors == 3000);
}
