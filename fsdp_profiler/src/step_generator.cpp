// The FSDP step generator (see step_generator.hpp). What each phase allocates, and on which
// stream, follows PyTorch's FSDP1 (torch.distributed.fsdp, flat parameters) and FSDP2
// (fully_shard) implementations as summarised in ../shared/reference/caching_allocator.md:
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

#include "mlprio/fsdp/settings.hpp"

namespace mlprio::fsdp {

const char* role_name(Role r) {
  switch (r) {
    case Role::UNKNOWN: return "unknown";
    case Role::PARAM_SHARD: return "param_shard";
    case Role::MP_SHARD: return "mp_shard";
    case Role::ALL_GATHER_OUTPUT: return "all_gather_output";
    case Role::UNSHARDED_PARAM: return "unsharded_param";
    case Role::ACTIVATION: return "activation";
    case Role::DROPOUT_MASK: return "dropout_mask";
    case Role::TEMPORARY: return "temporary";
    case Role::ACTIVATION_GRAD: return "activation_grad";
    case Role::WEIGHT_GRAD: return "weight_grad";
    case Role::RS_INPUT: return "reduce_scatter_input";
    case Role::RS_OUTPUT: return "reduce_scatter_output";
    case Role::GRAD_SHARD: return "grad_shard";
    case Role::LOGITS: return "logits";
    case Role::LOSS: return "loss";
    case Role::WORKSPACE: return "workspace";
    case Role::OPTIMIZER_STATE: return "optimizer_state";
    case Role::OPTIMIZER_TEMP: return "optimizer_temp";
  }
  return "unknown";
}

struct StepGenerator::Builder {
  StepTrace& t;
  uint32_t& next_id;
  uint32_t& next_mark;
  void push(Op op, const char* name = nullptr) {
    t.ops.push_back(op);
    t.names.push_back(name);
  }
  uint32_t alloc(int64_t bytes, uint8_t stream, Role role, const char* name) {
    const uint32_t id = next_id++;
    push(Op{OpKind::ALLOC, stream, id, static_cast<uint64_t>(std::max<int64_t>(bytes, 1)), role},
         name);
    return id;
  }
  void free(uint32_t id) {  // id 0: nothing (a transient that was not generated)
    if (id) push(Op{OpKind::FREE, 0, id, 0});
  }
  void record(uint32_t id, uint8_t stream) {
    if (id) push(Op{OpKind::RECORD_STREAM, stream, id, 0});
  }
  uint32_t mark() {
    const uint32_t m = next_mark++;
    push(Op{OpKind::MARK, 0, m, 0});
    return m;
  }
  void wait(uint32_t m) { push(Op{OpKind::WAIT, 0, m, 0}); }
  void sync_all() { push(Op{OpKind::SYNC_ALL, 0, 0, 0}); }
  void phase(Phase p) { push(Op{OpKind::PHASE, 0, 0, static_cast<uint64_t>(p)}); }
};

namespace {

struct Saved {
  uint32_t id;
  int64_t bytes;
  int64_t weight_numel;  // weight grad produced when backward reaches this tensor
  bool owned;            // false: an input owned elsewhere (not freed by this layer)
  bool is_mask;          // no gradient flows through it (dropout masks, index tensors)
  bool cross_input = false;  // the encoder output read by cross attention
};

struct LayerSpec {
  int64_t s;          // query sequence length
  int64_t s_enc;      // cross-attention key length (0: no cross attention)
  uint32_t enc_out;   // encoder output tensor read by cross attention
  uint32_t self_bias = 0;   // T5: position bias (+ mask) shared by the stack's self attention
  uint32_t cross_bias = 0;  // T5: zero position bias + encoder mask for cross attention
  bool first_in_stack = false;  // T5: this layer computes the stack's position bias
};

}  // namespace

StepGenerator::StepGenerator(FsdpConfig cfg) : cfg_(std::move(cfg)) {
  if (cfg_.world_size < 1) throw std::invalid_argument("world size must be >= 1");
  if (cfg_.micro_batch < 1) throw std::invalid_argument("minibatch must be >= 1");
  if (cfg_.seq_len < 0 || cfg_.tgt_len < 0)
    throw std::invalid_argument("sequence lengths must be >= 0 (0: the model's)");
  if (cfg_.cublas_workspace_bytes < 0)
    throw std::invalid_argument("cuBLAS workspace must be >= 0 bytes");
  const auto& m = cfg_.model;
  // Tensor sizes are products of the minibatch, the sequence lengths and the model's widths, in
  // 64 bits. Bound the largest ones (in double, which cannot overflow) by the largest device
  // size (1 PiB): such a step could never run, and every product below stays far from 2^63.
  {
    const double bs = static_cast<double>(cfg_.micro_batch);
    const double s = static_cast<double>(std::max({enc_seq_len(), dec_seq_len(), int64_t{1}}));
    const double width = static_cast<double>(std::max({m.d_model, m.d_attn, m.d_ff}));
    const double vocab = static_cast<double>(m.vocab);
    const double scores = bs * static_cast<double>(m.n_heads) * s * s * 4.0;
    const double rows = bs * s * std::max(width, vocab) * 4.0;
    // Parameters (at most 7 d^2 per layer, plus embeddings and head) x 18 bytes of model state.
    const double params =
        18.0 * (static_cast<double>(m.n_layers + m.n_dec_layers) * 7.0 * width * width +
                2.0 * vocab * static_cast<double>(m.d_model));
    if (std::max({scores, rows, params}) > static_cast<double>(MAX_SIZE_BYTES))
      throw std::invalid_argument(
          "this configuration's largest tensors (minibatch " + std::to_string(cfg_.micro_batch) +
          ", sequence " + std::to_string(static_cast<int64_t>(s)) + ", model " + m.name +
          ") would exceed 1 PiB (MAX_SIZE_BYTES); lower the minibatch or the sequence length");
  }
  unit_numel_.push_back(m.root_params());
  for (int64_t i = 0; i < m.n_layers; ++i) unit_numel_.push_back(m.layer_params(false));
  for (int64_t i = 0; i < m.n_dec_layers; ++i) unit_numel_.push_back(m.layer_params(true));
}

int64_t StepGenerator::enc_seq_len() const {
  return cfg_.seq_len > 0 ? cfg_.seq_len : cfg_.model.seq_len;
}
int64_t StepGenerator::dec_seq_len() const {
  if (!cfg_.model.encoder_decoder()) return enc_seq_len();
  return cfg_.tgt_len > 0 ? cfg_.tgt_len : cfg_.model.dec_seq_len;
}
bool StepGenerator::loss_in_fp32() const {
  if (cfg_.loss_fp32 >= 0) return cfg_.loss_fp32 > 0;
  return !cfg_.model.encoder_decoder();
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
  Builder b{t, next_id_, next_mark_};
  b.phase(Phase::INIT);
  param_ids_.clear();
  workspace_id_ = 0;
  for (size_t u = 0; u < unit_numel_.size(); ++u)
    param_ids_.push_back(b.alloc(shard_numel(u) * 4, COMPUTE_STREAM, Role::PARAM_SHARD,
                                 "fsdp.param_shard"));
  b.sync_all();
  return t;
}

StepTrace StepGenerator::step_trace(int iteration) {
  if (param_ids_.empty()) throw std::logic_error("step_trace() before init_trace()");
  StepTrace t;
  Builder b{t, next_id_, next_mark_};
  const auto& m = cfg_.model;
  const int64_t bs = cfg_.micro_batch;
  const int64_t ab = cfg_.mixed_precision ? 2 : 4;  // activation / compute parameter bytes
  const int64_t n_units = static_cast<int64_t>(unit_numel_.size());
  const bool fsdp1 = cfg_.version == FsdpVersion::FSDP1;
  const bool sharded = cfg_.sharding != ShardingStrategy::NO_SHARD;
  const bool reshard_after_forward = cfg_.sharding == ShardingStrategy::FULL_SHARD;
  const int64_t world = sharded ? cfg_.world_size : 1;
  const bool t5 = m.encoder_decoder();
  const bool gpt2 = !t5 && !m.gated_mlp;  // GPT-2 family: LayerNorm, fused qkv, gelu_new
  const bool tr = cfg_.kernel_transients;
  const bool ac = cfg_.activation_checkpointing;
  const uint8_t C = COMPUTE_STREAM;

  auto A = [&](int64_t bytes, Role r, const char* n) { return b.alloc(bytes, C, r, n); };
  // A temporary that every implementation makes (matmul outputs).
  auto Tm = [&](int64_t bytes, const char* n) { return A(bytes, Role::TEMPORARY, n); };
  // A kernel transient that the kernel_transients switch controls (0 when off).
  auto T = [&](int64_t bytes, const char* n) -> uint32_t {
    return tr ? A(bytes, Role::TEMPORARY, n) : 0;
  };
  auto save = [&](std::vector<Saved>& sv, int64_t bytes, int64_t wnumel, const char* n,
                  bool mask = false) {
    const uint32_t id = A(bytes, mask ? Role::DROPOUT_MASK : Role::ACTIVATION, n);
    sv.push_back({id, bytes, wnumel, true, mask});
    return id;
  };

  // ---- unshard / reshard of one FSDP unit -------------------------------------------------
  std::vector<std::vector<uint32_t>> unsharded(static_cast<size_t>(n_units));
  std::deque<uint32_t> free_events;  // FSDP1 limit_all_gathers queue
  auto unshard = [&](int64_t u) {
    auto& held = unsharded[static_cast<size_t>(u)];
    if (!held.empty()) return;
    const int64_t shard = shard_numel(static_cast<size_t>(u));
    if (!sharded) {
      // NO_SHARD: only a low-precision copy when mixed precision is on.
      if (cfg_.mixed_precision)
        held.push_back(b.alloc(shard * ab, UNSHARD_STREAM, Role::MP_SHARD, "fsdp.mp_param"));
      else held.push_back(0);
      return;
    }
    if (fsdp1) {
      // torch >= 2.1 (_runtime_utils._unshard): the low-precision shard is made (pre_unshard)
      // before the rate limiter waits; the all-gather output after it. post_unshard frees the
      // shard inside the unshard-stream context, so its record_stream names the stream it is
      // used on: no cross-stream delay (modelled as a plain free on the unshard stream).
      uint32_t mp_shard = 0;
      if (cfg_.mixed_precision)
        mp_shard = b.alloc(shard * ab, UNSHARD_STREAM, Role::MP_SHARD, "fsdp.mp_shard");
      if (cfg_.limit_all_gathers > 0 &&
          static_cast<int>(free_events.size()) >= cfg_.limit_all_gathers) {
        b.wait(free_events.front());
        free_events.pop_front();
      }
      held.push_back(b.alloc(shard * world * ab, UNSHARD_STREAM, Role::ALL_GATHER_OUTPUT,
                             "fsdp.all_gather_output"));
      b.free(mp_shard);
    } else {
      const uint32_t ag_out = b.alloc(shard * world * ab, UNSHARD_STREAM,
                                      Role::ALL_GATHER_OUTPUT, "fsdp.all_gather_output");
      // Copy-out into per-parameter tensors: attention, MLP and norm weights as separate sizes.
      const int64_t numel = unit_numel_[static_cast<size_t>(u)];
      const int64_t parts[] = {numel / 2, numel / 3, numel - numel / 2 - numel / 3};
      for (int64_t p : parts)
        held.push_back(A(p * ab, Role::UNSHARDED_PARAM, "fsdp.unsharded_param"));
      b.free(ag_out);
    }
  };
  auto reshard = [&](int64_t u) {
    auto& held = unsharded[static_cast<size_t>(u)];
    if (held.empty()) return;
    for (uint32_t id : held) {
      if (id == 0) continue;
      // FSDP1 _free_unsharded_flat_param: record_stream on the current (compute) stream, so
      // the block returns to the pool only when the compute stream passes this point.
      if (fsdp1) b.record(id, COMPUTE_STREAM);
      b.free(id);
    }
    held.clear();
    if (fsdp1 && sharded && cfg_.limit_all_gathers > 0) free_events.push_back(b.mark());
  };

  // ---- one transformer layer ----------------------------------------------------------------
  const int64_t d = m.d_model, da = m.d_attn, h = m.n_heads, ff = m.d_ff;
  // Pre-norm. GPT-2: native_layer_norm saves its output (the next linear's input) and fp32
  // mean/rstd per row. T5LayerNorm / LlamaRMSNorm: x.to(fp32) (saved by pow), pow (temporary),
  // mean, +eps, rsqrt (saved), x * rsqrt in fp32 (temporary), .to(bf16) (saved by the weight
  // multiply), weight * that (saved by the next linear).
  auto norm = [&](std::vector<Saved>& sv, int64_t s, int64_t w_next) {
    const int64_t rows = bs * s;
    if (gpt2) {
      save(sv, rows * d * ab, w_next, "norm.out");
      save(sv, rows * 4, 0, "norm.mean");
      save(sv, rows * 4, 0, "norm.rstd");
      return;
    }
    if (ab != 4) save(sv, rows * d * 4, 0, "norm.x_fp32");
    const uint32_t p = T(rows * d * 4, "norm.pow");
    const uint32_t var = T(rows * 4, "norm.variance");
    b.free(p);
    const uint32_t ve = T(rows * 4, "norm.variance_eps");
    b.free(var);
    save(sv, rows * 4, 0, "norm.rstd");
    b.free(ve);
    if (ab != 4) {
      const uint32_t prod = T(rows * d * 4, "norm.normed_fp32");
      save(sv, rows * d * ab, 0, "norm.normed");
      b.free(prod);
    } else {
      save(sv, rows * d * 4, 0, "norm.normed");
    }
    save(sv, rows * d * ab, w_next, "norm.out");
  };
  // T5's position bias for a stack (HF T5Attention.compute_bias in the layer that has
  // relative_attention_bias): int64 [s, s_kv] bucket arithmetic, the embedding lookup
  // [1, h, s, s_kv] (bucket indices saved for its backward), then bias + mask -> [b, h, s, s_kv],
  // passed to every layer of the stack.
  auto t5_position_bias = [&](std::vector<Saved>& sv, int64_t s, int64_t s_kv) {
    const int64_t pairs = s * s_kv;
    const uint32_t rel = T(pairs * 8, "t5.relative_position");
    const uint32_t large = T(pairs * 8, "t5.bucket_if_large");
    const uint32_t logf = T(pairs * 4, "t5.bucket_log_fp32");
    b.free(logf);
    const uint32_t buckets = A(pairs * 8, Role::ACTIVATION, "t5.position_buckets");
    sv.push_back({buckets, pairs * 8, 0, true, true});  // embedding indices: no gradient
    b.free(large);
    b.free(rel);
    const uint32_t values = Tm(h * pairs * ab, "t5.bias_values");
    const uint32_t bias = A(bs * h * pairs * ab, Role::ACTIVATION, "t5.position_bias");
    b.free(values);
    return bias;
  };
  // Eager attention for one (self or cross) attention block. q, k, v are the projection outputs
  // (held by Python locals until the function returns; torch.matmul on the [b, h, s, dk] views
  // copies them into contiguous [b*h, s, dk] operands, which bmm saves).
  auto attention = [&](std::vector<Saved>& sv, int64_t s_q, int64_t s_kv) {
    if (cfg_.flash_attention) {
      // SDPA/flash: the projections are saved as they are, plus the output and the fp32 LSE.
      save(sv, bs * s_q * da * ab, 0, "attn.q");
      save(sv, 2 * bs * s_kv * da * ab, 0, "attn.kv");
      save(sv, bs * s_q * da * ab, da * d, "attn.flash_out");
      save(sv, bs * h * s_q * 4, 0, "attn.lse");
      return;
    }
    const uint32_t q = T(bs * s_q * da * ab, "attn.q_proj");
    const uint32_t kv = T(2 * bs * s_kv * da * ab, "attn.kv_proj");
    save(sv, bs * s_q * da * ab, 0, "attn.q_bmm");
    save(sv, bs * s_kv * da * ab, 0, "attn.k_bmm");
    const int64_t mat = bs * h * s_q * s_kv;
    uint32_t scores = Tm(mat * ab, "attn.scores");
    uint32_t held_scores = 0;
    uint32_t probs = 0;  // input of the second bmm if there is no dropout
    if (t5) {
      // scores += position_bias (in place); softmax(scores.float()).type_as(scores); the
      // `scores` local lives until the function returns. softmax saves its fp32 output.
      held_scores = scores;
      const uint32_t f = T(mat * 4, "attn.scores_fp32");
      save(sv, mat * 4, 0, "attn.softmax_fp32");
      b.free(f);
      probs = T(mat * ab, "attn.softmax_bf16");
    } else if (gpt2) {
      // attn_weights / sqrt(d) ; torch.where(causal_mask, ., min) ; softmax (saved)
      uint32_t cur = scores;
      for (const char* n : {"attn.scores_scaled", "attn.scores_masked"}) {
        const uint32_t next = T(mat * ab, n);
        if (next) {
          b.free(cur);
          cur = next;
        }
      }
      save(sv, mat * ab, 0, "attn.softmax");
      b.free(cur);
    } else {
      // LLaMA eager: (q k^T) * scale + causal_mask; softmax(dtype=fp32) saved; .to(bf16).
      uint32_t cur = scores;
      for (const char* n : {"attn.scores_scaled", "attn.scores_masked"}) {
        const uint32_t next = T(mat * ab, n);
        if (next) {
          b.free(cur);
          cur = next;
        }
      }
      save(sv, mat * 4, 0, "attn.softmax_fp32");
      b.free(cur);
      probs = T(mat * ab, "attn.softmax_bf16");
    }
    if (m.dropout) {
      save(sv, mat, 0, "attn.dropout_mask", true);
      save(sv, mat * ab, 0, "attn.dropout_out");
      b.free(probs);
    } else if (probs) {
      sv.push_back({probs, mat * ab, 0, true, false});  // saved by the second bmm
    }
    save(sv, bs * s_kv * da * ab, 0, "attn.v_bmm");
    const uint32_t ctx = Tm(bs * s_q * da * ab, "attn.bmm_out");
    save(sv, bs * s_q * da * ab, da * d, "attn.context");  // transpose().contiguous()
    b.free(ctx);
    b.free(held_scores);
    b.free(kv);
    b.free(q);
  };
  // Output projection, dropout, residual add; returns the new hidden state.
  auto residual_out = [&](std::vector<Saved>& sv, int64_t s) {
    const int64_t sbd = bs * s * d * ab;
    uint32_t cur = Tm(sbd, "proj.out");
    if (m.dropout) {
      save(sv, bs * s * d, 0, "proj.dropout_mask", true);
      const uint32_t dout = T(sbd, "proj.dropout_out");
      if (dout) {
        b.free(cur);
        cur = dout;
      }
    }
    const uint32_t out = A(sbd, Role::ACTIVATION, "residual.out");
    b.free(cur);
    return out;
  };
  auto mlp = [&](std::vector<Saved>& sv, int64_t s) {
    const int64_t sbf = bs * s * ff * ab;
    norm(sv, s, (m.gated_mlp ? 2 : 1) * d * ff);
    if (t5) {
      // T5DenseActDense: wi -> relu (saves its output) -> dropout -> wo.
      const uint32_t wi = Tm(sbf, "mlp.wi_out");
      save(sv, sbf, m.dropout ? 0 : ff * d, "mlp.relu");
      b.free(wi);
      if (m.dropout) {
        save(sv, bs * s * ff, 0, "mlp.dropout_mask", true);
        save(sv, sbf, ff * d, "mlp.dropout_out");
      }
    } else if (gpt2) {
      // c_fc, then NewGELUActivation in Python:
      // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))).
      save(sv, sbf, 0, "mlp.fc_out");
      save(sv, sbf, 0, "gelu.half_x");
      const uint32_t cube = T(sbf, "gelu.cube");
      const uint32_t scaled = T(sbf, "gelu.cube_scaled");
      b.free(cube);
      const uint32_t inner = T(sbf, "gelu.inner");
      b.free(scaled);
      const uint32_t arg = T(sbf, "gelu.tanh_arg");
      b.free(inner);
      save(sv, sbf, 0, "gelu.tanh");
      b.free(arg);
      save(sv, sbf, 0, "gelu.one_plus_tanh");
      save(sv, sbf, ff * d, "mlp.act_out");
    } else {
      const char* names[] = {"mlp.gate", "mlp.up", "mlp.silu", "mlp.product"};
      for (int k = 0; k < 4; ++k) save(sv, sbf, k == 3 ? ff * d : 0, names[k]);
    }
    return residual_out(sv, s);
  };
  // Forward of one layer from input x; returns the output and fills the saved list.
  auto layer_forward = [&](uint32_t x, const LayerSpec& L, std::vector<Saved>& sv) {
    const int64_t s = L.s;
    const int64_t sbd = bs * s * d * ab;
    sv.push_back({x, sbd, 0, false, false});
    if (workspace_id_ == 0 && cfg_.cublas_workspace_bytes > 0)  // first GEMM of the process
      workspace_id_ = A(cfg_.cublas_workspace_bytes, Role::WORKSPACE, "cublas.workspace");
    norm(sv, s, 3 * d * da);
    if (m.gated_mlp)  // rotary embeddings keep rotated q and k
      save(sv, 2 * bs * s * da * ab, 0, "attn.rotary_qk");
    attention(sv, s, s);
    uint32_t r = residual_out(sv, s);
    sv.push_back({r, sbd, 0, true, false});
    if (L.s_enc > 0) {
      norm(sv, s, d * da);
      sv.push_back({L.enc_out, bs * L.s_enc * d * ab, 2 * d * da, false, false, true});
      attention(sv, s, L.s_enc);
      r = residual_out(sv, s);
      sv.push_back({r, sbd, 0, true, false});
    }
    return mlp(sv, s);
  };
  // Backward of one layer: walks the saved tensors in reverse, producing a gradient the size of
  // each, freeing the previous gradient and the saved tensor; weight grads are kept until the
  // unit's grads are gathered (returned in wgrads).
  auto layer_backward = [&](uint32_t g_out, std::vector<Saved>& sv,
                            std::vector<uint32_t>& wgrads) {
    uint32_t g = g_out;
    for (auto it = sv.rbegin(); it != sv.rend(); ++it) {
      if (it->weight_numel > 0)
        wgrads.push_back(A(it->weight_numel * ab, Role::WEIGHT_GRAD, "grad.weight"));
      if (it->cross_input) {
        // Gradient for the encoder output: accumulated into a buffer held by the caller.
        const uint32_t tmp = A(it->bytes, Role::ACTIVATION_GRAD, "grad.encoder_out_part");
        b.free(tmp);
        continue;
      }
      if (!it->is_mask) {
        const uint32_t ng = A(it->bytes, Role::ACTIVATION_GRAD, "grad.activation");
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
    // measure.cpp recognises the reduce-scatter as the post-backward allocation 1/world of the
    // last compute-stream allocation: keep the flat gradient the last compute allocation here.
    if (fsdp1) {
      const uint32_t flat = A(shard * world * ab, Role::RS_INPUT, "fsdp.flat_grad");
      for (uint32_t w : wgrads) b.free(w);
      wgrads.clear();
      if (sharded) {
        const uint32_t out =
            b.alloc(shard * ab, POST_BACKWARD_STREAM, Role::RS_OUTPUT, "fsdp.rs_output");
        if (ab != 4 || sharded_grads[su] == 0) {
          const uint32_t fp32 =
              b.alloc(shard * 4, POST_BACKWARD_STREAM, Role::GRAD_SHARD, "fsdp.grad_shard");
          if (sharded_grads[su] == 0) sharded_grads[su] = fp32;
          else b.free(fp32);
        }
        b.free(out);
      } else if (sharded_grads[su] == 0) {
        sharded_grads[su] = b.alloc(numel * 4, POST_BACKWARD_STREAM, Role::GRAD_SHARD,
                                    "fsdp.grad_shard");  // all-reduced, cast
      }
      b.record(flat, POST_BACKWARD_STREAM);
      b.free(flat);
    } else {
      if (fsdp2_rs_input) b.free(fsdp2_rs_input);  // the previous unit's, now safe to reuse
      fsdp2_rs_input = A(shard * world * ab, Role::RS_INPUT, "fsdp.rs_input");
      for (uint32_t w : wgrads) b.free(w);
      wgrads.clear();
      const uint32_t out =
          b.alloc(shard * ab, POST_BACKWARD_STREAM, Role::RS_OUTPUT, "fsdp.rs_output");
      if (sharded_grads[su] == 0)
        sharded_grads[su] =
            b.alloc(shard * 4, POST_BACKWARD_STREAM, Role::GRAD_SHARD, "fsdp.grad_shard");
      b.free(out);
    }
  };

  // ================================================================ forward
  b.phase(Phase::FORWARD);
  unshard(0);
  const int64_t s_enc = enc_seq_len();
  const int64_t s_dec = dec_seq_len();
  std::vector<std::vector<Saved>> saved(static_cast<size_t>(n_units));
  std::vector<uint32_t> inputs(static_cast<size_t>(n_units), 0);
  std::vector<LayerSpec> specs(static_cast<size_t>(n_units));
  uint32_t x = A(bs * s_enc * d * ab, Role::ACTIVATION, "embedding.out");
  uint32_t enc_out = 0;
  // T5 stack-level tensors: position biases (held for the stack's forward; with activation
  // checkpointing they are checkpoint inputs, held until the stack's first layer's backward)
  // and the decoder's extended causal mask.
  uint32_t enc_bias = 0, dec_bias = 0, cross_bias = 0, causal_mask = 0;
  auto free_stack_bias = [&](bool encoder) {
    if (encoder) {
      b.free(enc_bias);
      enc_bias = 0;
    } else {
      b.free(dec_bias);
      b.free(cross_bias);
      dec_bias = cross_bias = 0;
    }
  };
  for (int64_t u = 1; u < n_units; ++u) {
    const bool dec_layer = t5 && u > m.n_layers;
    if (dec_layer && enc_out == 0) {
      enc_out = A(bs * s_enc * d * ab, Role::ACTIVATION, "encoder.final_norm");
      const uint32_t np = T(bs * s_enc * d * 4, "norm.pow");
      b.free(np);
      b.free(x);
      if (!ac) free_stack_bias(true);
      x = A(bs * s_dec * d * ab, Role::ACTIVATION, "decoder.embedding_out");
      causal_mask = A(bs * s_dec * s_dec * ab, Role::ACTIVATION, "t5.extended_causal_mask");
    }
    LayerSpec L{dec_layer ? s_dec : s_enc, dec_layer ? s_enc : 0, enc_out};
    L.first_in_stack = t5 && (u == 1 || u == m.n_layers + 1);
    specs[static_cast<size_t>(u)] = L;
    unshard(u);
    auto& sv = saved[static_cast<size_t>(u)];
    inputs[static_cast<size_t>(u)] = x;
    if (L.first_in_stack && !cfg_.flash_attention) {
      if (!dec_layer) {
        enc_bias = t5_position_bias(sv, s_enc, s_enc);
      } else {
        dec_bias = t5_position_bias(sv, s_dec, s_dec);
        const uint32_t zeros = Tm(h * s_dec * s_enc * ab, "t5.cross_bias_zeros");
        cross_bias = A(bs * h * s_dec * s_enc * ab, Role::ACTIVATION, "t5.cross_position_bias");
        b.free(zeros);
      }
    }
    const uint32_t y = layer_forward(x, L, sv);
    if (ac) {
      for (const Saved& s : sv)
        if (s.owned) b.free(s.id);
      sv.clear();
    }
    if (reshard_after_forward) reshard(u);
    x = y;
  }
  // Final norm, LM head, loss. The logits stay referenced by the model output until the end of
  // the step. Cross-entropy: (GPT-2 without fp32 loss: a contiguous shifted copy; with fp32 loss:
  // logits.float()) then log_softmax, whose output (the vocabulary-sized softmax buffer) is saved;
  // the copy is freed when the loss function returns.
  const int64_t s_out = s_dec;
  const bool loss32 = loss_in_fp32();
  const int64_t lsb = loss32 ? 4 : ab;  // log_softmax dtype
  const bool shift_copy = gpt2 && !loss32;  // transformers < 4.46: lm_logits[..., :-1, :].contiguous()
  const int64_t rows_out = bs * (shift_copy ? s_out - 1 : s_out);
  const int64_t logits_bytes = bs * s_out * m.vocab * ab;
  const uint32_t final_norm = A(bs * s_out * d * ab, Role::ACTIVATION, "decoder.final_norm");
  {
    const uint32_t np = T(bs * s_out * d * 4, "norm.pow");
    b.free(np);
  }
  if (t5) {
    b.free(causal_mask);
    if (!ac) free_stack_bias(false);
  }
  const uint32_t logits = b.alloc(logits_bytes, C, Role::LOGITS, "lm_head.logits");
  uint32_t ce_in = 0;
  if (loss32 && ab != 4) ce_in = A(bs * s_out * m.vocab * 4, Role::LOSS, "loss.logits_fp32");
  else if (shift_copy) ce_in = A(rows_out * m.vocab * ab, Role::LOSS, "loss.shifted_logits");
  const uint32_t log_probs = A(rows_out * m.vocab * lsb, Role::LOSS, "loss.log_softmax");
  b.free(ce_in);

  // ================================================================ backward
  b.phase(Phase::BACKWARD);
  std::vector<uint32_t> root_wgrads;
  // nll_loss backward (zeros + scatter), log_softmax backward, the upcast's / shift's backward.
  uint32_t g = A(rows_out * m.vocab * lsb, Role::LOSS, "loss.nll_grad");
  const uint32_t g_ls = A(rows_out * m.vocab * lsb, Role::LOSS, "loss.log_softmax_grad");
  b.free(g);
  b.free(log_probs);
  g = g_ls;
  if (lsb != ab || shift_copy) {
    const uint32_t g_logits = A(logits_bytes, Role::LOSS, "loss.logits_grad");
    b.free(g);
    g = g_logits;
  }
  root_wgrads.push_back(A(m.vocab * d * ab, Role::WEIGHT_GRAD, "grad.lm_head"));
  const uint32_t g_hidden = A(bs * s_out * d * ab, Role::ACTIVATION_GRAD, "grad.lm_head_input");
  b.free(g);
  b.free(final_norm);
  const uint32_t g2 = A(bs * s_out * d * ab, Role::ACTIVATION_GRAD, "grad.final_norm");
  b.free(g_hidden);
  b.free(x);  // the last layer's output, saved by the final norm
  g = g2;
  uint32_t g_enc = 0;
  uint32_t g_bias = 0;  // T5: accumulated gradient of the stack's self-attention position bias
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
    if (t5 && L.s_enc > 0 && g_enc == 0)
      g_enc = A(bs * s_enc * d * ab, Role::ACTIVATION_GRAD, "grad.encoder_out");
    const int64_t s_kv = L.s;
    if (t5 && !cfg_.flash_attention && g_bias == 0)
      g_bias = A(bs * h * L.s * s_kv * ab, Role::ACTIVATION_GRAD, "grad.position_bias");
    unshard(u);
    if (u - 1 >= 1) unshard(u - 1);  // BACKWARD_PRE prefetch of the next unit's parameters
    auto& sv = saved[su];
    if (ac) {
      if (L.first_in_stack && !cfg_.flash_attention) {  // the recompute computes the bias again
        const uint32_t bias = t5_position_bias(sv, L.s, L.s);
        b.free(bias);  // the recomputed copy; the original is the checkpoint's input
      }
      const uint32_t y = layer_forward(inputs[su], L, sv);  // recompute
      b.free(y);
    }
    std::vector<uint32_t> wgrads;
    const uint32_t gin = layer_backward(g, sv, wgrads);
    b.free(inputs[su]);  // the previous layer's output or an embedding output
    g = gin;
    if (L.first_in_stack && g_bias) {
      // bias + mask backward: sum to [1, h, s, s_kv], then the bias embedding's (tiny) grad.
      const uint32_t red = Tm(h * L.s * s_kv * ab, "grad.position_bias_sum");
      b.free(g_bias);
      b.free(red);
      g_bias = 0;
      if (ac) free_stack_bias(L.s_enc == 0);
    }
    reshard(u);
    reduce_grads(u, wgrads);
  }
  if (enc_out) b.free(enc_out);
  // Embedding backward: a dense grad of the embedding table, then the root's reduction.
  root_wgrads.push_back(A(m.vocab * d * ab, Role::WEIGHT_GRAD, "grad.embedding"));
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
      const int64_t bytes = shard_numel(static_cast<size_t>(u)) * 4;
      exp_avg_ids_.push_back(A(bytes, Role::OPTIMIZER_STATE, "adam.exp_avg"));
      exp_avg_sq_ids_.push_back(A(bytes, Role::OPTIMIZER_STATE, "adam.exp_avg_sq"));
    }
  }
  // foreach Adam: one temporary list (sqrt of exp_avg_sq) the size of the parameters.
  std::vector<uint32_t> tmp;
  for (int64_t u = 0; u < n_units; ++u)
    tmp.push_back(A(shard_numel(static_cast<size_t>(u)) * 4, Role::OPTIMIZER_TEMP,
                    "adam.sqrt_exp_avg_sq"));
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
