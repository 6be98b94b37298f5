// The FSDP step generator and driver: every configuration runs with check() after every
// operation; allocations and frees balance (only resident state stays); memory grows with the
// minibatch; and the sweep finds the boundary on a device made small enough to hit it.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "mlprio/fsdp/sweep.hpp"

using namespace mlprio::fsdp;

namespace {

// Every FSDP version, sharding strategy and checkpointing choice of one model, check() after
// every operation. One test case per model, so that the three can run side by side.
void check_generated_steps(const char* model) {
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
              gen.resident_bytes() * 12 / 16 +
                  static_cast<int64_t>(gen.unit_count()) * 3 * static_cast<int64_t>(MiB));
        CHECK(r.final_stats.num_ooms == 0);
        CHECK(r.final_stats.active_bytes[AGGREGATE].current ==
              r.final_stats.allocated_bytes[AGGREGATE].current);
      }
    }
  }
}

}  // namespace

TEST_CASE("generated steps keep the allocator's invariants: gpt2-xl", "[fsdp][generator]") {
  check_generated_steps("gpt2-xl");
}

TEST_CASE("generated steps keep the allocator's invariants: t5-3b", "[fsdp][generator]") {
  check_generated_steps("t5-3b");
}

TEST_CASE("generated steps keep the allocator's invariants: llama2-7b", "[fsdp][generator]") {
  check_generated_steps("llama2-7b");
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

// ---- allocation roles, kernel transients, balance, determinism -----------------------------

namespace {

TransformerShape tiny_t5() {
  TransformerShape t;
  t.name = "tiny-t5";
  t.n_layers = 1;
  t.n_dec_layers = 1;
  t.d_model = 8;
  t.n_heads = 2;
  t.d_attn = 8;
  t.d_ff = 16;
  t.vocab = 32;
  t.seq_len = 4;
  t.dec_seq_len = 2;
  return t;
}

TransformerShape tiny_gpt2() {
  TransformerShape g;
  g.name = "tiny-gpt2";
  g.n_layers = 1;
  g.d_model = 8;
  g.n_heads = 2;
  g.d_attn = 8;
  g.d_ff = 32;
  g.vocab = 32;
  g.seq_len = 4;
  return g;
}

// Sizes of the ALLOCs named `name` in `t`, in order.
std::vector<uint64_t> sizes(const StepTrace& t, const std::string& name) {
  std::vector<uint64_t> v;
  for (size_t i = 0; i < t.ops.size(); ++i)
    if (t.ops[i].kind == OpKind::ALLOC && t.names[i] && name == t.names[i])
      v.push_back(t.ops[i].bytes);
  return v;
}

FsdpConfig tiny_cfg(TransformerShape m) {
  FsdpConfig c;
  c.model = std::move(m);
  c.world_size = 2;
  c.micro_batch = 3;  // bf16 (2 bytes), FULL_SHARD, FSDP1
  return c;
}

}  // namespace

TEST_CASE("T5 kernel transients have hand-derived sizes", "[fsdp][generator]") {
  // b=3, h=2, encoder s=4, decoder t=2, d=8, d_ff=16, vocab 32, bf16.
  StepGenerator gen(tiny_cfg(tiny_t5()));
  gen.init_trace();
  const StepTrace t = gen.step_trace(0);
  REQUIRE(t.names.size() == t.ops.size());
  using V = std::vector<uint64_t>;
  // scores.float(): b*h*s_q*s_kv*4 — encoder self 3*2*4*4*4, decoder self 3*2*2*2*4, cross
  // 3*2*2*4*4; the fp32 softmax output (saved) has the same sizes.
  CHECK(sizes(t, "attn.scores_fp32") == V{384, 96, 192});
  CHECK(sizes(t, "attn.softmax_fp32") == V{384, 96, 192});
  CHECK(sizes(t, "attn.scores") == V{192, 48, 96});       // bf16 bmm output
  CHECK(sizes(t, "attn.dropout_mask") == V{96, 24, 48});  // bool
  // Position bias + mask [b, h, s, s]: encoder 3*2*4*4*2, decoder 3*2*2*2*2; cross [b,h,t,s].
  CHECK(sizes(t, "t5.position_bias") == V{192, 48});
  CHECK(sizes(t, "t5.cross_position_bias") == V{96});
  CHECK(sizes(t, "t5.position_buckets") == V{128, 32});  // int64 [s, s]
  // MLP: wi output (temporary) b*s*d_ff*2: encoder 3*4*16*2, decoder 3*2*16*2.
  CHECK(sizes(t, "mlp.wi_out") == V{384, 192});
  // RMS norm: x.to(fp32) b*s*d*4 (2 norms in the encoder layer, 3 in the decoder layer);
  // rstd b*s*4.
  CHECK(sizes(t, "norm.x_fp32") == V{384, 384, 192, 192, 192});
  CHECK(sizes(t, "norm.rstd") == V{48, 48, 24, 24, 24});
  // Loss on bf16 logits (T5 default): logits and log_softmax b*t*V*2 = 3*2*32*2; nll and
  // log_softmax grads the same; no fp32 copy.
  CHECK(sizes(t, "lm_head.logits") == V{384});
  CHECK(sizes(t, "loss.log_softmax") == V{384});
  CHECK(sizes(t, "loss.nll_grad") == V{384});
  CHECK(sizes(t, "loss.logits_fp32").empty());
  // cuBLAS workspace: once, at the first GEMM of the process.
  CHECK(sizes(t, "cublas.workspace") == V{4096 * 1024 * 2 + 16 * 1024 * 8});
  const StepTrace t1 = gen.step_trace(1);
  CHECK(sizes(t1, "cublas.workspace").empty());
}

TEST_CASE("fp32 loss, sequence overrides and GPT-2's GELU have hand-derived sizes",
          "[fsdp][generator]") {
  using V = std::vector<uint64_t>;
  {
    FsdpConfig c = tiny_cfg(tiny_t5());
    c.loss_fp32 = 1;
    c.seq_len = 6;
    c.tgt_len = 3;
    StepGenerator gen(c);
    gen.init_trace();
    const StepTrace t = gen.step_trace(0);
    CHECK(sizes(t, "loss.logits_fp32") == V{3 * 3 * 32 * 4});
    CHECK(sizes(t, "loss.log_softmax") == V{3 * 3 * 32 * 4});
    CHECK(sizes(t, "loss.logits_grad") == V{3 * 3 * 32 * 2});  // back to bf16
    CHECK(sizes(t, "attn.scores_fp32") ==
          V{3 * 2 * 6 * 6 * 4, 3 * 2 * 3 * 3 * 4, 3 * 2 * 3 * 6 * 4});
  }
  {
    StepGenerator gen(tiny_cfg(tiny_gpt2()));  // decoder-only: fp32 loss by default
    gen.init_trace();
    const StepTrace t = gen.step_trace(0);
    const uint64_t sbf = 3 * 4 * 32 * 2;
    CHECK(sizes(t, "gelu.cube") == V{sbf});
    CHECK(sizes(t, "gelu.tanh") == V{sbf});
    CHECK(sizes(t, "attn.scores_masked") == V{3 * 2 * 4 * 4 * 2});
    CHECK(sizes(t, "norm.mean") == V{48, 48});
    CHECK(sizes(t, "loss.logits_fp32") == V{3 * 4 * 32 * 4});
    CHECK(sizes(t, "t5.position_bias").empty());
    FsdpConfig off = tiny_cfg(tiny_gpt2());
    off.kernel_transients = false;
    StepGenerator g2(off);
    g2.init_trace();
    const StepTrace t2 = g2.step_trace(0);
    CHECK(sizes(t2, "gelu.cube").empty());
    CHECK(sizes(t2, "attn.scores_masked").empty());
    CHECK(sizes(t2, "gelu.tanh") == V{sbf});  // saved tensors stay
  }
}

TEST_CASE("generated streams balance by role and are deterministic", "[fsdp][generator]") {
  for (const char* model : {"gpt2-xl", "t5-3b", "llama2-7b"}) {
    for (bool ac : {false, true}) {
      for (auto version : {FsdpVersion::FSDP1, FsdpVersion::FSDP2}) {
        INFO(model << " ac " << ac << " fsdp" << (version == FsdpVersion::FSDP1 ? 1 : 2));
        FsdpConfig c;
        c.model = find_model(model);
        c.micro_batch = 2;
        c.activation_checkpointing = ac;
        c.version = version;
        StepGenerator gen(c);
        std::map<uint32_t, Role> live;
        auto apply = [&](const StepTrace& t) {
          REQUIRE(t.names.size() == t.ops.size());
          for (size_t i = 0; i < t.ops.size(); ++i) {
            const Op& op = t.ops[i];
            if (op.kind == OpKind::ALLOC) {
              CHECK(op.role != Role::UNKNOWN);
              CHECK(t.names[i] != nullptr);
              CHECK(live.emplace(op.tensor, op.role).second);
            } else if (op.kind == OpKind::FREE) {
              CHECK(live.erase(op.tensor) == 1);
            } else if (op.kind == OpKind::RECORD_STREAM) {
              CHECK(live.count(op.tensor) == 1);
            }
          }
        };
        apply(gen.init_trace());
        for (int k = 0; k < 2; ++k) {
          apply(gen.step_trace(k));
          std::map<Role, int64_t> by_role;
          for (const auto& [id, r] : live) ++by_role[r];
          CHECK(by_role[Role::PARAM_SHARD] == gen.unit_count());
          CHECK(by_role[Role::OPTIMIZER_STATE] == 2 * gen.unit_count());
          CHECK(by_role[Role::WORKSPACE] == 1);
          CHECK(live.size() == static_cast<size_t>(3 * gen.unit_count() + 1));
        }
        // Determinism: a second generator with the same configuration emits the same stream.
        StepGenerator again(c);
        const StepTrace a0 = again.init_trace();
        (void)a0;
        StepGenerator first(c);
        first.init_trace();
        again.step_trace(0);
        first.step_trace(0);
        const StepTrace x = first.step_trace(1), y = again.step_trace(1);
        REQUIRE(x.ops.size() == y.ops.size());
        bool same = true;
        for (size_t i = 0; i < x.ops.size(); ++i)
          same = same && x.ops[i].kind == y.ops[i].kind && x.ops[i].stream == y.ops[i].stream &&
                 x.ops[i].tensor == y.ops[i].tensor && x.ops[i].bytes == y.ops[i].bytes &&
                 x.ops[i].role == y.ops[i].role && x.names[i] == y.names[i];
        CHECK(same);
      }
    }
  }
  CHECK(std::string(role_name(Role::ALL_GATHER_OUTPUT)) == "all_gather_output");
}

TEST_CASE("FSDP2 frees a reduce-scatter input only after the compute stream waits for it",
          "[fsdp][generator]") {
  // torch's FSDP2 keeps the reduce-scatter input (allocated on the compute stream) until the
  // next unit's reduce-scatter, then makes the compute stream wait for the event recorded behind
  // the collective that read it, and drops it with a plain free. FSDP1 uses record_stream.
  for (const char* model : {"gpt2-xl", "t5-3b"}) {
    for (auto version : {FsdpVersion::FSDP1, FsdpVersion::FSDP2}) {
      const bool v2 = version == FsdpVersion::FSDP2;
      INFO(model << " fsdp" << (v2 ? 2 : 1));
      FsdpConfig c;
      c.model = find_model(model);
      c.micro_batch = 2;
      c.version = version;
      StepGenerator gen(c);
      gen.init_trace();
      const StepTrace t = gen.step_trace(0);
      std::map<uint32_t, size_t> rs_input_at;    // live RS_INPUT -> index of its ALLOC
      uint32_t latest_input = 0;                 // the reduce-scatter reads the latest input
      std::map<uint32_t, size_t> collective_at;  // RS_INPUT -> index of its RS_OUTPUT ALLOC
      std::map<uint32_t, size_t> mark_at;
      int64_t waits = 0, freed = 0;
      for (size_t i = 0; i < t.ops.size(); ++i) {
        const Op& op = t.ops[i];
        if (op.kind == OpKind::ALLOC && op.role == Role::RS_INPUT) {
          rs_input_at[op.tensor] = i;
          latest_input = op.tensor;
        } else if (op.kind == OpKind::ALLOC && op.role == Role::RS_OUTPUT) {
          collective_at[latest_input] = i;
        } else if (op.kind == OpKind::MARK) {
          mark_at[op.tensor] = i;
        } else if (op.kind == OpKind::STREAM_WAIT) {
          ++waits;
          CHECK(op.stream == COMPUTE_STREAM);
          CHECK(op.bytes == POST_BACKWARD_STREAM);
          CHECK(mark_at.count(op.tensor) == 1);
        } else if (op.kind == OpKind::FREE && rs_input_at.count(op.tensor)) {
          ++freed;
          if (!v2) continue;
          // The op before the free is the wait, on a mark taken after this input's collective.
          REQUIRE(i > 0);
          const Op& w = t.ops[i - 1];
          REQUIRE(w.kind == OpKind::STREAM_WAIT);
          REQUIRE(collective_at.count(op.tensor) == 1);
          CHECK(mark_at.at(w.tensor) > collective_at.at(op.tensor));
          rs_input_at.erase(op.tensor);
        }
      }
      CHECK(freed == gen.unit_count());  // every unit's input is freed within the step
      CHECK(waits == (v2 ? gen.unit_count() : 0));
    }
  }
}

// ---- a model family added as a shape: Mixtral-style mixture of experts ----------------------

namespace {

TransformerShape tiny_moe() {
  TransformerShape x;
  x.name = "tiny-moe";
  x.n_layers = 1;
  x.d_model = 8;
  x.n_heads = 2;
  x.d_attn = 8;
  x.d_ff = 16;
  x.vocab = 32;
  x.seq_len = 5;
  x.gated_mlp = true;
  x.tied_embeddings = false;
  x.dropout = false;
  x.n_experts = 4;
  x.experts_per_token = 2;
  return x;
}

}  // namespace

TEST_CASE("a mixture-of-experts shape has hand-derived parameter and expert allocations",
          "[fsdp][generator][moe]") {
  using V = std::vector<uint64_t>;
  // Layer: q, k, v, o 4*8*8 = 256; 4 experts x (w1, w3, w2) 3*8*16 = 1536; router 8*4 = 32;
  // two RMS norms 2*8 = 16: 1840. Root: embedding 32*8 + untied head 32*8 + final norm 2*8 = 528.
  CHECK(tiny_moe().layer_params(false) == 1840);
  CHECK(tiny_moe().root_params() == 528);
  // Mixtral-8x7B as modelled (q, k, v, o all 4096 wide): 32 x (4*4096^2 + 8*3*4096*14336 +
  // 4096*8 + 2*4096) + 2*32000*4096 + 2*4096.
  CHECK(find_model("mixtral-8x7b").total_params() == 47'508'103'168);

  StepGenerator gen(tiny_cfg(tiny_moe()));  // world 2, minibatch 3, bf16, FSDP1 FULL_SHARD
  gen.init_trace();
  const StepTrace t = gen.step_trace(0);
  // All-gather outputs (bf16, shard x world): root 264*2*2, the layer 920*2*2 in forward and
  // again in backward (FULL_SHARD resharded it after forward).
  CHECK(sizes(t, "fsdp.all_gather_output") == V{1056, 3680, 3680});
  CHECK(sizes(t, "fsdp.flat_grad") == V{3680, 1056});
  // 3*5 = 15 tokens x 2 experts each = 30 (token, expert) pairs over 4 experts: 8, 8, 7, 7.
  CHECK(sizes(t, "moe.expert_input") == V{8 * 8 * 2, 8 * 8 * 2, 7 * 8 * 2, 7 * 8 * 2});
  CHECK(sizes(t, "moe.expert_w1") == V{8 * 16 * 2, 8 * 16 * 2, 7 * 16 * 2, 7 * 16 * 2});
  CHECK(sizes(t, "moe.router_logits") == V{15 * 4 * 2});
  CHECK(sizes(t, "moe.routing_softmax") == V{15 * 4 * 4});  // fp32
  CHECK(sizes(t, "moe.topk_indices") == V{15 * 2 * 8});     // int64
  CHECK(sizes(t, "mlp.gate").empty());                      // no dense MLP
  // Weight grads of the layer, in backward order: per expert (last first) w2 16*8*2 and
  // w1 + w3 2*8*16*2, the router 8*4*2, o 8*8*2, q, k, v 3*8*8*2; the root's head and
  // embedding 32*8*2 come separately. They add up to the layer's non-norm parameters in bf16.
  const V wg = sizes(t, "grad.weight");
  CHECK(wg == V{256, 512, 256, 512, 256, 512, 256, 512, 64, 128, 384});
  uint64_t sum = 0;
  for (uint64_t b : wg) sum += b;
  CHECK(sum == (1840 - 16) * 2);

  // The allocator's invariants hold for every FSDP variant of the new family.
  for (auto version : {FsdpVersion::FSDP1, FsdpVersion::FSDP2}) {
    for (bool ac : {false, true}) {
      FsdpConfig c = tiny_cfg(tiny_moe());
      c.version = version;
      c.activation_checkpointing = ac;
      StepGenerator g(c);
      SimulatedDevice dev(1 * GiB);
      const RunResult r = run_steps(g, dev, AllocatorSettings{}, 2, false, true);
      CHECK(r.final_stats.num_ooms == 0);
    }
  }
}

TEST_CASE("a mixture-of-experts entry in a models file is checked", "[fsdp][generator][moe]") {
  const std::string path = "test_moe_models.json";
  {
    std::ofstream f(path);
    f << R"({"models": [{"name": "bad-moe", "n_layers": 2, "d_model": 8, "n_heads": 2,
           "d_ff": 16, "vocab": 32, "seq_len": 4, "gated_mlp": true,
           "n_experts": 4, "experts_per_token": 5}]})";
  }
  CHECK_THROWS_WITH(find_model("bad-moe", path), Catch::Contains("experts_per_token"));
  std::remove(path.c_str());
}
