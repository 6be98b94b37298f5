// The FSDP step generator (see step_generator.hpp). What each phase allocates, and on which
// stream, follows PyTorch's FSDP1 (torch.distributed.fsdp, flat parameters) and FSDP2
// (fully_shard) implementations as summarised in /work/shared/reference/caching_allocator.md:
//  - FSDP1 all-gathers into a buffer allocated on the unshard stream; it is freed after use with
//    record_stream on the compute stream, so it lingers until the GPU passes that point. With
//    limit_all_gathers the CPU waits for the reshard event two units back before the next
//    all-gather; those waits are the only points (besides the end of the step) where this model
//    lets the GPU catch up, i.e. the CPU is assumed to run ahead of the GPU.
//  - FSDP1 gradients: per-weight grads are concatenated into a flat unsharded grad, reduce-
//    scattered on the post-backward stream into a bf16 shard, cast to an fp32 sharded grad; the
//    unsharded grad is freed with record_stream on the post-backward stream.
//  - FSDP2: all-gather output on the copy-in stream, copied out into per-parameter tensors on the
//    compute stream and freed at once (no record_stream); the reduce-scatter input lives on the
//    compute stream and is freed at the next unit's reduce-scatter.
// Activations per layer follow the usual accounting (Korthikanti et al. 2022: ~34 s*b*h bytes
// plus 5 a*s^2*b for eager attention), allocated tensor by tensor in execution order so that the
// allocator sees realistic sizes and lifetimes.
#include "mlprio/fsdp/step_generator.hpp"

#include <algorithm>
#include <deque>
#include <stdexcept>

namespace mlprio::fsdp {

struct StepGenerator::Builder {
  std::vector<Op>& ops;
  uint32_t& next_id;
  uint32_t& next_mark;
  uint32_t alloc(int64_t bytes, uint8_t stream) {
    const uint32_t id = next_id++;
    ops.push_back(Op{OpKind::ALLOC, stream, id, static_cast<uint64_t>(std::max<int64_t>(bytes, 1))});
    return id;
  }
  void free(uint32_t id) { ops.push_back(Op{OpKind::FREE, 0, id, 0}); }
  void record(uint32_t id, uint8_t stream) {
    ops.push_back(Op{OpKind::RECORD_STREAM, stream, id, 0});
  }
  uint32_t mark() {
    const uint32_t m = next_mark++;
    ops.push_back(Op{OpKind::MARK, 0, m, 0});
    return m;
  }
  void wait(uint32_t m) { ops.push_back(Op{OpKind::WAIT, 0, m, 0}); }
  void sync_all() { ops.push_back(Op{OpKind::SYNC_ALL, 0, 0, 0}); }
  void phase(Phase p) { ops.push_back(Op{OpKind::PHASE, 0, 0, static_cast<uint64_t>(p)}); }
};

namespace {

struct Saved {
  uint32_t id;
  int64_t bytes;
  int64_t weight_numel;  // weight grad produced when backward reaches this tensor
  bool owned;            // false: an input owned elsewhere (not freed by this layer)
  bool is_mask;          // dropout masks get no gradient
  bool cross_input = false;  // the encoder output read by cross attention
};

struct LayerSpec {
  int64_t s;          // query sequence length
  int64_t s_enc;      // cross-attention key length (0: no cross attention)
  uint32_t enc_out;   // encoder output tensor read by cross attention
};

}  // namespace

StepGenerator::StepGenerator(FsdpConfig cfg) : cfg_(std::move(cfg)) {
  if (cfg_.world_size < 1) throw std::invalid_argument("world size must be >= 1");
  if (cfg_.micro_batch < 1) throw std::invalid_argument("minibatch must be >= 1");
  const auto& m = cfg_.model;
  unit_numel_.push_back(m.root_params());
  for (int64_t i = 0; i < m.n_layers; ++i) unit_numel_.push_back(m.layer_params(false));
  for (int64_t i = 0; i < m.n_dec_layers; ++i) unit_numel_.push_back(m.layer_params(true));
}

int64_t StepGenerator::shard_numel(size_t unit) const {
  if (cfg_.sharding == ShardingStrategy::NO_SHARD) return unit_numel_[unit];
  const int64_t n = cfg_.world_size;
  return (unit_numel_[unit] + n - 1) / n;
}

int64_t StepGenerator::largest_unit_params() const {
  return *std::max_element(unit_numel_.begin(), unit_numel_.end());
}

int64_t StepGenerator::resident_bytes() const {
  int64_t total = 0;
  for (size_t u = 0; u < unit_numel_.size(); ++u) total += shard_numel(u) * (4 + 4 + 8);
  return total;
}

StepTrace StepGenerator::init_trace() {
  StepTrace t;
  Builder b{t.ops, next_id_, next_mark_};
  b.phase(Phase::INIT);
  param_ids_.clear();
  for (size_t u = 0; u < unit_numel_.size(); ++u)
    param_ids_.push_back(b.alloc(shard_numel(u) * 4, COMPUTE_STREAM));
  b.sync_all();
  return t;
}

StepTrace StepGenerator::step_trace(int iteration) {
  if (param_ids_.empty()) throw std::logic_error("step_trace() before init_trace()");
  StepTrace t;
  Builder b{t.ops, next_id_, next_mark_};
  const auto& m = cfg_.model;
  const int64_t bs = cfg_.micro_batch;
  const int64_t ab = cfg_.mixed_precision ? 2 : 4;  // activation / compute parameter bytes
  const int64_t n_units = static_cast<int64_t>(unit_numel_.size());
  const bool fsdp1 = cfg_.version == FsdpVersion::FSDP1;
  const bool sharded = cfg_.sharding != ShardingStrategy::NO_SHARD;
  const bool reshard_after_forward = cfg_.sharding == ShardingStrategy::FULL_SHARD;
  const int64_t world = sharded ? cfg_.world_size : 1;

  // ---- unshard / reshard of one FSDP unit -------------------------------------------------
  std::vector<std::vector<uint32_t>> unsharded(static_cast<size_t>(n_units));
  std::deque<uint32_t> free_events;  // FSDP1 limit_all_gathers queue
  auto unshard = [&](int64_t u) {
    auto& held = unsharded[static_cast<size_t>(u)];
    if (!held.empty()) return;
    const int64_t shard = shard_numel(static_cast<size_t>(u));
    if (!sharded) {
      // NO_SHARD: only a low-precision copy when mixed precision is on.
      if (cfg_.mixed_precision) held.push_back(b.alloc(shard * ab, UNSHARD_STREAM));
      else held.push_back(0);
      return;
    }
    if (fsdp1) {
      if (cfg_.limit_all_gathers > 0 &&
          static_cast<int>(free_events.size()) >= cfg_.limit_all_gathers) {
        b.wait(free_events.front());
        free_events.pop_front();
      }
      uint32_t mp_shard = 0;
      if (cfg_.mixed_precision) mp_shard = b.alloc(shard * ab, UNSHARD_STREAM);
      held.push_back(b.alloc(shard * world * ab, UNSHARD_STREAM));
      if (mp_shard) {
        b.record(mp_shard, COMPUTE_STREAM);
        b.free(mp_shard);
      }
    } else {
      const uint32_t ag_out = b.alloc(shard * world * ab, UNSHARD_STREAM);
      // Copy-out into per-parameter tensors: attention, MLP and norm weights as separate sizes.
      const int64_t numel = unit_numel_[static_cast<size_t>(u)];
      const int64_t parts[] = {numel / 2, numel / 3, numel - numel / 2 - numel / 3};
      for (int64_t p : parts) held.push_back(b.alloc(p * ab, COMPUTE_STREAM));
      b.free(ag_out);
    }
  };
  auto reshard = [&](int64_t u) {
    auto& held = unsharded[static_cast<size_t>(u)];
    if (held.empty()) return;
    for (uint32_t id : held) {
      if (id == 0) continue;
      if (fsdp1) b.record(id, COMPUTE_STREAM);
      b.free(id);
    }
    held.clear();
    if (fsdp1 && sharded && cfg_.limit_all_gathers > 0) free_events.push_back(b.mark());
  };

  // ---- one transformer layer ----------------------------------------------------------------
  const int64_t d = m.d_model, da = m.d_attn, h = m.n_heads, ff = m.d_ff;
  auto attention = [&](std::vector<Saved>& sv, int64_t s_q, int64_t s_kv) {
    if (cfg_.flash_attention) {
      sv.push_back({b.alloc(bs * s_q * da * ab, COMPUTE_STREAM), bs * s_q * da * ab, 0, true, false});
      sv.push_back({b.alloc(bs * h * s_q * 4, COMPUTE_STREAM), bs * h * s_q * 4, 0, true, true});
      return;
    }
    const int64_t mat = bs * h * s_q * s_kv;
    const uint32_t scores = b.alloc(mat * (m.gated_mlp ? 4 : ab), COMPUTE_STREAM);
    sv.push_back({b.alloc(mat * ab, COMPUTE_STREAM), mat * ab, 0, true, false});  // softmax out
    b.free(scores);
    if (m.dropout) {
      sv.push_back({b.alloc(mat, COMPUTE_STREAM), mat, 0, true, true});
      sv.push_back({b.alloc(mat * ab, COMPUTE_STREAM), mat * ab, 0, true, false});
    }
    sv.push_back({b.alloc(bs * s_q * da * ab, COMPUTE_STREAM), bs * s_q * da * ab, da * d, true,
                  false});  // context, input of the output projection
  };
  auto residual_out = [&](std::vector<Saved>& sv, int64_t s) {
    const int64_t sbd = bs * s * d * ab;
    const uint32_t proj = b.alloc(sbd, COMPUTE_STREAM);
    if (m.dropout) sv.push_back({b.alloc(bs * s * d, COMPUTE_STREAM), bs * s * d, 0, true, true});
    const uint32_t out = b.alloc(sbd, COMPUTE_STREAM);
    b.free(proj);
    return out;
  };
  // Forward of one layer from input x; returns the output and fills the saved list.
  auto layer_forward = [&](uint32_t x, const LayerSpec& L, std::vector<Saved>& sv) {
    const int64_t s = L.s;
    const int64_t sbd = bs * s * d * ab;
    sv.push_back({x, sbd, 0, false, false});
    sv.push_back({b.alloc(sbd, COMPUTE_STREAM), sbd, 3 * d * da, true, false});  // norm out
    sv.push_back({b.alloc(3 * bs * s * da * ab, COMPUTE_STREAM), 3 * bs * s * da * ab, 0, true,
                  false});  // q, k, v
    if (m.gated_mlp)  // rotary embeddings keep rotated q and k
      sv.push_back({b.alloc(2 * bs * s * da * ab, COMPUTE_STREAM), 2 * bs * s * da * ab, 0, true,
                    false});
    attention(sv, s, s);
    uint32_t r = residual_out(sv, s);
    sv.push_back({r, sbd, 0, true, false});
    if (L.s_enc > 0) {
      sv.push_back({b.alloc(sbd, COMPUTE_STREAM), sbd, d * da, true, false});
      sv.push_back({L.enc_out, bs * L.s_enc * d * ab, 2 * d * da, false, false, true});
      sv.push_back({b.alloc(bs * s * da * ab, COMPUTE_STREAM), bs * s * da * ab, 0, true, false});
      sv.push_back({b.alloc(2 * bs * L.s_enc * da * ab, COMPUTE_STREAM), 2 * bs * L.s_enc * da * ab,
                    0, true, false});
      attention(sv, s, L.s_enc);
      r = residual_out(sv, s);
      sv.push_back({r, sbd, 0, true, false});
    }
    sv.push_back({b.alloc(sbd, COMPUTE_STREAM), sbd, (m.gated_mlp ? 2 : 1) * d * ff, true, false});
    const int64_t sbf = bs * s * ff * ab;
    const int n_ff_saved = m.gated_mlp ? 4 : 2;  // gate, up, silu, product | fc1, activation
    for (int k = 0; k < n_ff_saved; ++k)
      sv.push_back({b.alloc(sbf, COMPUTE_STREAM), sbf, k == n_ff_saved - 1 ? ff * d : 0, true,
                    false});
    if (m.dropout && m.encoder_decoder())
      sv.push_back({b.alloc(bs * s * ff, COMPUTE_STREAM), bs * s * ff, 0, true, true});
    return residual_out(sv, s);
  };
  // Backward of one layer: walks the saved tensors in reverse, producing a gradient the size of
  // each, freeing the previous gradient and the saved tensor; weight grads are kept until the
  // unit's grads are gathered (returned in wgrads).
  auto layer_backward = [&](uint32_t g_out, std::vector<Saved>& sv,
                            std::vector<uint32_t>& wgrads) {
    uint32_t g = g_out;
    for (auto it = sv.rbegin(); it != sv.rend(); ++it) {
      if (it->weight_numel > 0) wgrads.push_back(b.alloc(it->weight_numel * ab, COMPUTE_STREAM));
      if (it->cross_input) {
        // Gradient for the encoder output: accumulated into a buffer held by the caller.
        const uint32_t tmp = b.alloc(it->bytes, COMPUTE_STREAM);
        b.free(tmp);
        continue;
      }
      if (!it->is_mask) {
        const uint32_t ng = b.alloc(it->bytes, COMPUTE_STREAM);
        b.free(g);
        g = ng;
      }
      if (it->owned) b.free(it->id);
    }
    // The layer input (sv.front(), not owned) is freed by the caller: it may be a checkpoint.
    sv.clear();
    return g;
  };

  // ---- gradient reduction of one unit ---------------------------------------------------------
  std::vector<uint32_t> sharded_grads(static_cast<size_t>(n_units), 0);
  uint32_t fsdp2_rs_input = 0;
  auto reduce_grads = [&](int64_t u, std::vector<uint32_t>& wgrads) {
    const int64_t numel = unit_numel_[static_cast<size_t>(u)];
    const int64_t shard = shard_numel(static_cast<size_t>(u));
    const auto su = static_cast<size_t>(u);
    if (fsdp1) {
      const uint32_t flat = b.alloc(shard * world * ab, COMPUTE_STREAM);  // cat of weight grads
      for (uint32_t w : wgrads) b.free(w);
      wgrads.clear();
      if (sharded) {
        const uint32_t out = b.alloc(shard * ab, POST_BACKWARD_STREAM);
        if (ab != 4 || sharded_grads[su] == 0) {
          const uint32_t fp32 = b.alloc(shard * 4, POST_BACKWARD_STREAM);
          if (sharded_grads[su] == 0) sharded_grads[su] = fp32;
          else b.free(fp32);
        }
        b.free(out);
      } else if (sharded_grads[su] == 0) {
        sharded_grads[su] = b.alloc(numel * 4, POST_BACKWARD_STREAM);  // all-reduced, cast
      }
      b.record(flat, POST_BACKWARD_STREAM);
      b.free(flat);
    } else {
      if (fsdp2_rs_input) b.free(fsdp2_rs_input);  // the previous unit's, now safe to reuse
      fsdp2_rs_input = b.alloc(shard * world * ab, COMPUTE_STREAM);
      for (uint32_t w : wgrads) b.free(w);
      wgrads.clear();
      const uint32_t out = b.alloc(shard * ab, POST_BACKWARD_STREAM);
      if (sharded_grads[su] == 0) sharded_grads[su] = b.alloc(shard * 4, POST_BACKWARD_STREAM);
      b.free(out);
    }
  };

  // ================================================================ forward
  b.phase(Phase::FORWARD);
  unshard(0);
  const bool t5 = m.encoder_decoder();
  const int64_t s_enc = m.seq_len;
  const int64_t s_dec = t5 ? m.dec_seq_len : m.seq_len;
  std::vector<std::vector<Saved>> saved(static_cast<size_t>(n_units));
  std::vector<uint32_t> inputs(static_cast<size_t>(n_units), 0);
  std::vector<LayerSpec> specs(static_cast<size_t>(n_units));
  uint32_t x = b.alloc(bs * s_enc * d * ab, COMPUTE_STREAM);  // embedding output
  uint32_t enc_out = 0;
  for (int64_t u = 1; u < n_units; ++u) {
    const bool dec_layer = t5 && u > m.n_layers;
    if (dec_layer && enc_out == 0) {
      enc_out = b.alloc(bs * s_enc * d * ab, COMPUTE_STREAM);  // final encoder norm
      b.free(x);
      x = b.alloc(bs * s_dec * d * ab, COMPUTE_STREAM);  // decoder embedding output
    }
    LayerSpec L{dec_layer ? s_dec : s_enc, dec_layer ? s_enc : 0, enc_out};
    specs[static_cast<size_t>(u)] = L;
    unshard(u);
    auto& sv = saved[static_cast<size_t>(u)];
    inputs[static_cast<size_t>(u)] = x;
    const uint32_t y = layer_forward(x, L, sv);
    if (cfg_.activation_checkpointing) {
      for (const Saved& s : sv)
        if (s.owned) b.free(s.id);
      sv.clear();
    }
    if (reshard_after_forward) reshard(u);
    x = y;
  }
  // Final norm, LM head, loss. The logits stay referenced by the model output until the end of
  // the step; the shifted copy feeds log_softmax, whose output is saved.
  const int64_t s_out = s_dec;
  const int64_t logits_bytes = bs * s_out * m.vocab * ab;
  const uint32_t final_norm = b.alloc(bs * s_out * d * ab, COMPUTE_STREAM);
  const uint32_t logits = b.alloc(logits_bytes, COMPUTE_STREAM);
  const uint32_t shifted = b.alloc(logits_bytes, COMPUTE_STREAM);
  const uint32_t log_probs = b.alloc(logits_bytes, COMPUTE_STREAM);
  b.free(shifted);

  // ================================================================ backward
  b.phase(Phase::BACKWARD);
  std::vector<uint32_t> root_wgrads;
  uint32_t g = b.alloc(logits_bytes, COMPUTE_STREAM);  // d loss / d log_probs input
  b.free(log_probs);
  const uint32_t g_logits = b.alloc(logits_bytes, COMPUTE_STREAM);
  b.free(g);
  root_wgrads.push_back(b.alloc(m.vocab * d * ab, COMPUTE_STREAM));  // LM head weight grad
  g = b.alloc(bs * s_out * d * ab, COMPUTE_STREAM);
  b.free(g_logits);
  b.free(final_norm);
  const uint32_t g2 = b.alloc(bs * s_out * d * ab, COMPUTE_STREAM);  // through the final norm
  b.free(g);
  b.free(x);  // the last layer's output, saved by the final norm
  g = g2;
  uint32_t g_enc = 0;
  for (int64_t u = n_units - 1; u >= 1; --u) {
    const auto su = static_cast<size_t>(u);
    const LayerSpec& L = specs[su];
    if (t5 && u == m.n_layers) {
      // Leaving the decoder: the gradient now flows from the encoder output.
      b.free(g);  // gradient of the decoder embedding output
      b.free(enc_out);
      g = g_enc;
      enc_out = 0;
    }
    if (t5 && L.s_enc > 0 && g_enc == 0) g_enc = b.alloc(bs * s_enc * d * ab, COMPUTE_STREAM);
    unshard(u);
    if (u - 1 >= 1) unshard(u - 1);  // BACKWARD_PRE prefetch of the next unit's parameters
    auto& sv = saved[su];
    if (cfg_.activation_checkpointing) {
      const uint32_t y = layer_forward(inputs[su], L, sv);  // recompute
      b.free(y);
    }
    std::vector<uint32_t> wgrads;
    const uint32_t gin = layer_backward(g, sv, wgrads);
    b.free(inputs[su]);  // the previous layer's output or an embedding output
    g = gin;
    reshard(u);
    reduce_grads(u, wgrads);
  }
  if (enc_out) b.free(enc_out);
  // Embedding backward: a dense grad of the embedding table, then the root's reduction.
  root_wgrads.push_back(b.alloc(m.vocab * d * ab, COMPUTE_STREAM));
  b.free(g);
  b.free(logits);
  reshard(0);
  reduce_grads(0, root_wgrads);
  if (fsdp2_rs_input) b.free(fsdp2_rs_input);

  // ================================================================ optimizer
  b.phase(Phase::OPTIMIZER);
  if (iteration == 0 || exp_avg_ids_.empty()) {
    exp_avg_ids_.clear();
    exp_avg_sq_ids_.clear();
    for (int64_t u = 0; u < n_units; ++u) {
      exp_avg_ids_.push_back(b.alloc(shard_numel(static_cast<size_t>(u)) * 4, COMPUTE_STREAM));
      exp_avg_sq_ids_.push_back(b.alloc(shard_numel(static_cast<size_t>(u)) * 4, COMPUTE_STREAM));
    }
  }
  // foreach Adam: one temporary list (sqrt of exp_avg_sq) the size of the parameters.
  std::vector<uint32_t> tmp;
  for (int64_t u = 0; u < n_units; ++u)
    tmp.push_back(b.alloc(shard_numel(static_cast<size_t>(u)) * 4, COMPUTE_STREAM));
  for (uint32_t id : tmp) b.free(id);
  // zero_grad(set_to_none=True)
  for (uint32_t& id : sharded_grads) {
    if (id) b.free(id);
    id = 0;
  }
  b.sync_all();
  return t;
}

}  // namespace mlprio::fsdp
