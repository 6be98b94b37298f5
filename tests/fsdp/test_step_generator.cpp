// The FSDP step generator and driver: every configuration runs with check() after every
// operation; allocations and frees balance (only resident state stays); memory grows with the
// minibatch; and the sweep finds the boundary on a device made small enough to hit it.
#include <catch2/catch.hpp>

#include "mlprio/fsdp/sweep.hpp"

using namespace mlprio::fsdp;

TEST_CASE("generated steps keep the allocator's invariants", "[fsdp][generator]") {
  for (const char* model : {"gpt2-xl", "t5-3b", "llama2-7b"}) {
    for (auto version : {FsdpVersion::FSDP1, FsdpVersion::FSDP2}) {
      for (auto sharding : {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP,
                            ShardingStrategy::NO_SHARD}) {
        for (bool ac : {false, true}) {
          INFO(model << " fsdp" << (version == FsdpVersion::FSDP1 ? 1 : 2) << " sharding "
                     << static_cast<int>(sharding) << " ac " << ac);
          FsdpConfig c;
          c.model = find_model(model);
          c.version = version;
          c.sharding = sharding;
          c.activation_checkpointing = ac;
          c.micro_batch = 1;
          StepGenerator gen(c);
          SimulatedDevice dev(1024 * GiB);
          const RunResult r = run_steps(gen, dev, AllocatorSettings{}, 2, false, true);
          // After the step only params, Adam state remain: 12 bytes per sharded element.
          CHECK(r.final_stats.allocated_bytes[AGGREGATE].current >= gen.resident_bytes() * 12 / 16);
          // A large block is not split when <= 1 MiB would remain, so each of the 3 resident
          // tensors per unit may carry up to 1 MiB of slack in allocated_bytes (as in torch).
          CHECK(r.final_stats.allocated_bytes[AGGREGATE].current <=
                gen.resident_bytes() * 12 / 16 + static_cast<int64_t>(gen.unit_count()) * 3 *
                                                     static_cast<int64_t>(MiB));
          CHECK(r.final_stats.num_ooms == 0);
          CHECK(r.final_stats.active_bytes[AGGREGATE].current ==
                r.final_stats.allocated_bytes[AGGREGATE].current);
        }
      }
    }
  }
}

TEST_CASE("peak memory grows with the minibatch and the sweep finds a boundary",
          "[fsdp][generator]") {
  SweepOptions o;
  o.base.model = find_model("gpt2-xl");
  o.capacity = 40 * GiB;
  o.mbs_lo = 1;
  o.mbs_hi = 6;
  o.steps = 2;
  const SweepResult r = run_sweep(o);
  REQUIRE(r.points.size() == 6);
  REQUIRE(r.first_bad_mbs > 1);
  // Below the boundary memory grows with the minibatch (above it the device caps it).
  for (size_t i = 1; i < r.points.size() && r.points[i].mbs < r.first_bad_mbs; ++i)
    CHECK(r.points[i].peak_allocated > r.points[i - 1].peak_allocated);
  CHECK(r.max_safe_mbs == r.first_bad_mbs - 1);
  for (const auto& p : r.points)
    if (p.mbs < r.first_bad_mbs) CHECK(p.retries_per_step == 0.0);
  CHECK_FALSE(r.series.empty());
}

TEST_CASE("unknown models are refused with the known names", "[fsdp][generator]") {
  CHECK_THROWS_WITH(find_model("gpt5"), Catch::Contains("gpt2-xl") && Catch::Contains("t5-3b"));
  CHECK(find_model("llama2-7b").total_params() > 6'500'000'000);
  CHECK(find_model("llama2-7b").total_params() < 7'000'000'000);
  CHECK(find_model("t5-3b").total_params() > 2'800'000'000);
  CHECK(find_model("t5-3b").total_params() < 3'000'000'000);
}
