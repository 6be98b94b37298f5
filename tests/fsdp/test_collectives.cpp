// The role-driven collective plan that the measuring runner (measure.cpp) runs NCCL on, checked
// on the CPU over generated traces: every all-gather output is filled from the low-precision
// shard made for it (FSDP1 + bf16) or in place, every reduce-scatter output from the live flat
// gradient; hand-counted collectives per step; and the pairing survives allocations inserted
// between a collective's input and output, which the former size-and-order matching did not.
#include <catch2/catch.hpp>

#include <map>

#include "mlprio/fsdp/collectives.hpp"
#include "mlprio/util/errors.hpp"

using namespace mlprio::fsdp;

namespace {

TransformerShape tiny(bool t5) {
  TransformerShape m;
  m.name = t5 ? "tiny-t5" : "tiny-gpt2";
  m.n_layers = 1;
  m.d_model = 8;
  m.n_heads = 2;
  m.d_attn = 8;
  m.d_ff = 16;
  m.vocab = 32;
  m.seq_len = 4;
  if (t5) {
    m.n_dec_layers = 1;
    m.dec_seq_len = 2;
  }
  return m;
}

struct Live {
  Role role;
  uint64_t bytes;
  uint8_t stream;
};

struct Counts {
  int all_gathers = 0, reduce_scatters = 0;
};

// Feeds `t` to `plan` and checks every collective against the live tensors it names.
Counts check_trace(const StepTrace& t, CollectivePlan& plan, std::map<uint32_t, Live>& live,
                   const FsdpConfig& c, uint64_t ranks) {
  const uint64_t elem = c.mixed_precision ? 2 : 4;
  const bool from_mp_shard = c.version == FsdpVersion::FSDP1 && c.mixed_precision;
  const bool sharded = c.sharding != ShardingStrategy::NO_SHARD && ranks > 1;
  Counts n;
  for (const Op& op : t.ops) {
    if (op.kind == OpKind::ALLOC) live[op.tensor] = {op.role, op.bytes, op.stream};
    const Collective col = plan.on_op(op);
    if (op.kind == OpKind::FREE) live.erase(op.tensor);
    if (op.kind != OpKind::ALLOC) {
      CHECK(col.kind == CollectiveKind::NONE);
      continue;
    }
    const bool ag_out = op.role == Role::ALL_GATHER_OUTPUT, rs_out = op.role == Role::RS_OUTPUT;
    if (!sharded || (!ag_out && !rs_out)) {
      CHECK(col.kind == CollectiveKind::NONE);
      continue;
    }
    CHECK(col.output == op.tensor);
    if (ag_out) {
      ++n.all_gathers;
      REQUIRE(col.kind == CollectiveKind::ALL_GATHER);
      CHECK(op.stream == UNSHARD_STREAM);
      CHECK(col.count * elem * ranks == op.bytes);
      CHECK(col.in_place == !from_mp_shard);
      if (from_mp_shard) {
        REQUIRE(live.count(col.input) == 1);
        CHECK(live[col.input].role == Role::MP_SHARD);
        CHECK(live[col.input].bytes * ranks == op.bytes);
      }
    } else {
      ++n.reduce_scatters;
      REQUIRE(col.kind == CollectiveKind::REDUCE_SCATTER);
      CHECK(op.stream == POST_BACKWARD_STREAM);
      REQUIRE(live.count(col.input) == 1);
      CHECK(live[col.input].role == Role::RS_INPUT);
      CHECK(live[col.input].bytes == op.bytes * ranks);
      CHECK(col.count * elem == op.bytes);
    }
  }
  return n;
}

// Inserts a compute-stream temporary before every collective output and an unshard-stream one
// after every low-precision shard: new allocations between a collective's input and output.
StepTrace with_interlopers(const StepTrace& t, uint32_t& next_id) {
  StepTrace out;
  for (const Op& op : t.ops) {
    const bool output = op.kind == OpKind::ALLOC &&
                        (op.role == Role::ALL_GATHER_OUTPUT || op.role == Role::RS_OUTPUT);
    if (output)
      out.ops.push_back(Op{OpKind::ALLOC, COMPUTE_STREAM, next_id++, 4096, Role::TEMPORARY});
    out.ops.push_back(op);
    if (op.kind == OpKind::ALLOC && op.role == Role::MP_SHARD)
      out.ops.push_back(
          Op{OpKind::ALLOC, UNSHARD_STREAM, next_id++, op.bytes * 8, Role::TEMPORARY});
  }
  out.names.assign(out.ops.size(), nullptr);
  return out;
}

}  // namespace

TEST_CASE("each collective gets its buffers by role", "[fsdp][collectives]") {
  for (bool t5 : {false, true}) {
    for (auto version : {FsdpVersion::FSDP1, FsdpVersion::FSDP2}) {
      for (auto sharding : {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP,
                            ShardingStrategy::NO_SHARD}) {
        for (bool mp : {true, false}) {
          for (int ranks : {1, 2, 8}) {
            for (bool interlopers : {false, true}) {
              INFO((t5 ? "t5" : "gpt2")
                   << " fsdp" << (version == FsdpVersion::FSDP1 ? 1 : 2) << " sharding "
                   << static_cast<int>(sharding) << " mp " << mp << " ranks " << ranks
                   << " interlopers " << interlopers);
              FsdpConfig c;
              c.model = tiny(t5);
              c.world_size = ranks;
              c.version = version;
              c.sharding = sharding;
              c.mixed_precision = mp;
              c.micro_batch = 2;
              StepGenerator gen(c);
              CollectivePlan plan(ranks, mp ? 2 : 4, sharding);
              std::map<uint32_t, Live> live;
              uint32_t extra = 1u << 30;
              auto feed = [&](const StepTrace& t) {
                return check_trace(interlopers ? with_interlopers(t, extra) : t, plan, live, c,
                                   static_cast<uint64_t>(ranks));
              };
              const Counts init = feed(gen.init_trace());
              CHECK(init.all_gathers + init.reduce_scatters == 0);
              for (int step = 0; step < 2; ++step) {
                const Counts n = feed(gen.step_trace(step));
                if (sharding == ShardingStrategy::NO_SHARD || ranks == 1) {
                  CHECK(n.all_gathers == 0);
                  CHECK(n.reduce_scatters == 0);
                  continue;
                }
                // Units: root + 1 layer (gpt2) or root + encoder + decoder layer (t5). One
                // reduce-scatter per unit. All-gathers: the root once, each layer in forward,
                // and again in backward only when FULL_SHARD resharded it after forward.
                const int layers = t5 ? 2 : 1;
                const bool full = sharding == ShardingStrategy::FULL_SHARD;
                CHECK(n.reduce_scatters == 1 + layers);
                CHECK(n.all_gathers == 1 + layers * (full ? 2 : 1));
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("a collective without its input is an invariant error", "[fsdp][collectives]") {
  CollectivePlan plan(2, 2, ShardingStrategy::FULL_SHARD);
  CHECK_THROWS_AS(plan.on_op(Op{OpKind::ALLOC, POST_BACKWARD_STREAM, 7, 64, Role::RS_OUTPUT}),
                  mlprio::InvariantError);
  // An input of the wrong size is refused too.
  plan.on_op(Op{OpKind::ALLOC, COMPUTE_STREAM, 8, 100, Role::RS_INPUT});
  CHECK_THROWS_AS(plan.on_op(Op{OpKind::ALLOC, POST_BACKWARD_STREAM, 9, 64, Role::RS_OUTPUT}),
                  mlprio::InvariantError);
  // A freed input is no longer a partner.
  plan.on_op(Op{OpKind::ALLOC, COMPUTE_STREAM, 10, 128, Role::RS_INPUT});
  plan.on_op(Op{OpKind::FREE, 0, 10, 0});
  CHECK_THROWS_AS(plan.on_op(Op{OpKind::ALLOC, POST_BACKWARD_STREAM, 11, 64, Role::RS_OUTPUT}),
                  mlprio::InvariantError);
  plan.on_op(Op{OpKind::ALLOC, UNSHARD_STREAM, 12, 32, Role::MP_SHARD});
  CHECK_THROWS_AS(plan.on_op(Op{OpKind::ALLOC, UNSHARD_STREAM, 13, 128, Role::ALL_GATHER_OUTPUT}),
                  mlprio::InvariantError);
}
