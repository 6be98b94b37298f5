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
//    compute stream and is freed at the next unit's reduce-scatter, after the compute stream
//    waits for the event recorded behind the reduce-scatter that read it.
// Activations per layer follow the usual accounting (Korthikanti et al. 2022: ~34 s*b*h bytes
// plus 5 a*s^2*b for eager attention), allocated tensor by tensor in execution order so that the
// allocator sees realistic sizes and lifetimes. StepGenerator keeps the state that lives across
// steps; one step is built by StepBuilder, whose members are the phases and layer parts by name.
// One file (about 970 lines) so that a step's phases read top to bottom in PyTorch's order.
#include "mlprio/fsdp/step_generator.hpp"

#include <algorithm>
#include <deque>
#include <stdexcept>

#include "mlprio/fsdp/settings.hpp"
#include "mlprio/util/errors.hpp"

namespace mlprio::fsdp {

const char* role_name(Role r) {
  switch (r) {
    case Role::UNKNOWN:
      return "unknown";
    case Role::PARAM_SHARD:
      return "param_shard";
    case Role::MP_SHARD:
      return "mp_shard";
    case Role::ALL_GATHER_OUTPUT:
      return "all_gather_output";
    case Role::UNSHARDED_PARAM:
      return "unsharded_param";
    case Role::ACTIVATION:
      return "activation";
    case Role::DROPOUT_MASK:
      return "dropout_mask";
    case Role::TEMPORARY:
      return "temporary";
    case Role::ACTIVATION_GRAD:
      return "activation_grad";
    case Role::WEIGHT_GRAD:
      return "weight_grad";
    case Role::RS_INPUT:
      return "reduce_scatter_input";
    case Role::RS_OUTPUT:
      return "reduce_scatter_output";
    case Role::GRAD_SHARD:
      return "grad_shard";
    case Role::LOGITS:
      return "logits";
    case Role::LOSS:
      return "loss";
    case Role::WORKSPACE:
      return "workspace";
    case Role::OPTIMIZER_STATE:
      return "optimizer_state";
    case Role::OPTIMIZER_TEMP:
      return "optimizer_temp";
  }
  return "unknown";
}

namespace {

// Appends operations to a trace. Tensor ids and marks come from the generator, so they stay
// unique across the initialisation and every step.
struct TraceWriter {
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
  void stream_wait(uint8_t consumer, uint8_t producer, uint32_t m) {
    push(Op{OpKind::STREAM_WAIT, consumer, m, producer});
  }
  void sync_all() { push(Op{OpKind::SYNC_ALL, 0, 0, 0}); }
  void phase(Phase p) { push(Op{OpKind::PHASE, 0, 0, static_cast<uint64_t>(p)}); }
};

// A tensor saved for backward by the layer that is being built.
struct Saved {
  uint32_t id;
  int64_t bytes;
  int64_t weight_numel;      // weight grad produced when backward reaches this tensor
  bool owned;                // false: an input owned elsewhere (not freed by this layer)
  bool is_mask;              // no gradient flows through it (dropout masks, index tensors)
  bool cross_input = false;  // the encoder output read by cross attention
};

struct LayerSpec {
  int64_t s;                    // query sequence length
  int64_t s_enc;                // cross-attention key length (0: no cross attention)
  uint32_t enc_out;             // encoder output tensor read by cross attention
  bool first_in_stack = false;  // T5: this layer computes the stack's position bias
};

// The layer internals a shape selects. A new family whose layers are made of these parts is a
// new TransformerShape (built in or in configs/models.json); a new kind of part is one member
// function of StepBuilder and one value here.
enum class NormKind { LAYER_NORM, RMS_NORM };  // GPT-2; T5 / LLaMA
enum class ScoresKind { T5_BIAS, GPT2_CAUSAL, LLAMA_CAUSAL };
enum class MlpKind { RELU, GELU_NEW, SWIGLU, MOE_SWIGLU };  // T5; GPT-2; LLaMA; Mixtral

struct LayerKinds {
  NormKind norm;
  ScoresKind scores;
  MlpKind mlp;
  bool rotary;  // rotary embeddings keep rotated q and k
};

LayerKinds layer_kinds(const TransformerShape& m) {
  if (m.encoder_decoder()) return {NormKind::RMS_NORM, ScoresKind::T5_BIAS, MlpKind::RELU, false};
  if (!m.gated_mlp)
    return {NormKind::LAYER_NORM, ScoresKind::GPT2_CAUSAL, MlpKind::GELU_NEW, false};
  return {NormKind::RMS_NORM, ScoresKind::LLAMA_CAUSAL,
          m.n_experts > 0 ? MlpKind::MOE_SWIGLU : MlpKind::SWIGLU, true};
}

}  // namespace

StepGenerator::StepGenerator(FsdpConfig cfg) : cfg_(std::move(cfg)) {
  if (cfg_.world_size < 1) throw ::mlprio::UsageError("world size must be >= 1");
  if (cfg_.micro_batch < 1) throw ::mlprio::UsageError("minibatch must be >= 1");
  if (cfg_.seq_len < 0 || cfg_.tgt_len < 0)
    throw ::mlprio::UsageError("sequence lengths must be >= 0 (0: the model's)");
  if (cfg_.cublas_workspace_bytes < 0)
    throw ::mlprio::UsageError("cuBLAS workspace must be >= 0 bytes");
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
    // Parameters (at most 7 d^2 per layer and expert, plus embeddings and head) x 18 bytes of
    // model state.
    const double experts = static_cast<double>(std::max<int64_t>(m.n_experts, 1));
    const double params =
        18.0 * (static_cast<double>(m.n_layers + m.n_dec_layers) * 7.0 * width * width * experts +
                2.0 * vocab * static_cast<double>(m.d_model));
    if (std::max({scores, rows, params}) > static_cast<double>(MAX_SIZE_BYTES))
      throw ::mlprio::UsageError(
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
double StepGenerator::flops_per_sample() const {
  const auto tokens =
      static_cast<double>(enc_seq_len() + (cfg_.model.encoder_decoder() ? dec_seq_len() : 0));
  return (cfg_.activation_checkpointing ? 8.0 : 6.0) *
         static_cast<double>(cfg_.model.total_params()) * tokens;
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
  TraceWriter b{t, next_id_, next_mark_};
  b.phase(Phase::INIT);
  param_ids_.clear();
  workspace_id_ = 0;
  for (size_t u = 0; u < unit_numel_.size(); ++u)
    param_ids_.push_back(
        b.alloc(shard_numel(u) * 4, COMPUTE_STREAM, Role::PARAM_SHARD, "fsdp.param_shard"));
  b.sync_all();
  return t;
}

// Builds one training step of StepGenerator: forward through the FSDP units (unshard, layer
// forward, reshard), the LM head and loss, backward in reverse (unshard with prefetch,
// recompute under activation checkpointing, layer backward, reshard, gradient reduction), and
// the Adam step. Each member emits what the PyTorch code it is named after allocates, in order.
class StepBuilder {
 public:
  StepBuilder(StepGenerator& gen, StepTrace& t);
  void build(int iteration) {
    forward();
    loss_forward();
    backward();
    optimizer(iteration);
  }

 private:
  // ---- allocations on the compute stream
  uint32_t alloc(int64_t bytes, Role r, const char* n) {
    return w_.alloc(bytes, COMPUTE_STREAM, r, n);
  }
  // A temporary that every implementation makes (matmul outputs).
  uint32_t matmul_temp(int64_t bytes, const char* n) { return alloc(bytes, Role::TEMPORARY, n); }
  // A kernel transient that the kernel_transients switch controls (0 when off).
  uint32_t transient(int64_t bytes, const char* n) {
    return cfg_.kernel_transients ? alloc(bytes, Role::TEMPORARY, n) : 0;
  }
  uint32_t save(std::vector<Saved>& sv, int64_t bytes, int64_t wnumel, const char* n,
                bool mask = false) {
    const uint32_t id = alloc(bytes, mask ? Role::DROPOUT_MASK : Role::ACTIVATION, n);
    sv.push_back({id, bytes, wnumel, true, mask});
    return id;
  }
  // Replaces `cur` by a kernel transient computed from it (when transients are generated).
  void chain_transient(uint32_t& cur, int64_t bytes, const char* n) {
    const uint32_t next = transient(bytes, n);
    if (next) {
      w_.free(cur);
      cur = next;
    }
  }

  // ---- FSDP
  void unshard(int64_t u);
  void reshard(int64_t u);
  void reduce_grads(int64_t u, std::vector<uint32_t>& wgrads);

  // ---- one transformer layer
  void norm(std::vector<Saved>& sv, int64_t s, int64_t w_next);
  uint32_t t5_position_bias(std::vector<Saved>& sv, int64_t s, int64_t s_kv);
  void attention(std::vector<Saved>& sv, int64_t s_q, int64_t s_kv);
  uint32_t attention_softmax(std::vector<Saved>& sv, uint32_t scores, int64_t mat);
  uint32_t residual_out(std::vector<Saved>& sv, int64_t s);
  uint32_t mlp(std::vector<Saved>& sv, int64_t s);
  void mlp_gelu_new(std::vector<Saved>& sv, int64_t sbf);
  uint32_t moe_experts(std::vector<Saved>& sv, int64_t s);
  uint32_t layer_forward(uint32_t x, const LayerSpec& L, std::vector<Saved>& sv);
  uint32_t layer_backward(uint32_t g_out, std::vector<Saved>& sv, std::vector<uint32_t>& wgrads);

  // ---- phases
  void forward();
  void enter_decoder();
  void forward_unit(int64_t u);
  void loss_forward();
  void backward();
  void loss_backward();
  void backward_unit(int64_t u);
  void optimizer(int iteration);
  void free_stack_bias(bool encoder);

  StepGenerator& gen_;
  const FsdpConfig& cfg_;
  const TransformerShape& m_;
  TraceWriter w_;
  const LayerKinds kinds_;
  const int64_t bs_;
  const int64_t ab_;  // activation / compute parameter bytes
  const int64_t n_units_;
  const bool fsdp1_, sharded_, reshard_after_forward_;
  const int64_t world_;
  const bool t5_;  // encoder-decoder with relative position bias
  const bool ac_;
  const int64_t d_, da_, h_, ff_;
  const int64_t s_enc_, s_dec_;

  // FSDP state of the step.
  std::vector<std::vector<uint32_t>> unsharded_;
  std::deque<uint32_t> free_events_;  // FSDP1 limit_all_gathers queue
  std::vector<uint32_t> sharded_grads_;
  uint32_t fsdp2_rs_input_ = 0;
  uint32_t fsdp2_rs_event_ = 0;  // mark taken right after fsdp2_rs_input_'s reduce-scatter
  void release_fsdp2_rs_input();
  // Forward state kept for backward.
  std::vector<std::vector<Saved>> saved_;
  std::vector<uint32_t> inputs_;
  std::vector<LayerSpec> specs_;
  uint32_t x_ = 0;  // the hidden state between layers
  uint32_t enc_out_ = 0;
  // T5 stack-level tensors: position biases (held for the stack's forward; with activation
  // checkpointing they are checkpoint inputs, held until the stack's first layer's backward)
  // and the decoder's extended causal mask.
  uint32_t enc_bias_ = 0, dec_bias_ = 0, cross_bias_ = 0, causal_mask_ = 0;
  // LM head and loss.
  uint32_t final_norm_ = 0, logits_ = 0, log_probs_ = 0;
  int64_t rows_out_ = 0, lsb_ = 0, logits_bytes_ = 0;
  bool shift_copy_ = false;
  uint32_t g_ = 0;  // the gradient flowing backward
  uint32_t g_enc_ = 0;
  uint32_t g_bias_ = 0;  // T5: accumulated gradient of the stack's self-attention position bias
  std::vector<uint32_t> root_wgrads_;  // LM head and embedding weight grads
};

StepBuilder::StepBuilder(StepGenerator& gen, StepTrace& t)
    : gen_(gen),
      cfg_(gen.cfg_),
      m_(gen.cfg_.model),
      w_{t, gen.next_id_, gen.next_mark_},
      kinds_(layer_kinds(gen.cfg_.model)),
      bs_(cfg_.micro_batch),
      ab_(cfg_.mixed_precision ? 2 : 4),
      n_units_(static_cast<int64_t>(gen.unit_numel_.size())),
      fsdp1_(cfg_.version == FsdpVersion::FSDP1),
      sharded_(cfg_.sharding != ShardingStrategy::NO_SHARD),
      reshard_after_forward_(cfg_.sharding == ShardingStrategy::FULL_SHARD),
      world_(sharded_ ? cfg_.world_size : 1),
      t5_(m_.encoder_decoder()),
      ac_(cfg_.activation_checkpointing),
      d_(m_.d_model),
      da_(m_.d_attn),
      h_(m_.n_heads),
      ff_(m_.d_ff),
      s_enc_(gen.enc_seq_len()),
      s_dec_(gen.dec_seq_len()) {
  const auto n = static_cast<size_t>(n_units_);
  unsharded_.resize(n);
  sharded_grads_.assign(n, 0);
  saved_.resize(n);
  inputs_.assign(n, 0);
  specs_.resize(n);
}

// ---- unshard / reshard of one FSDP unit ---------------------------------------------------

void StepBuilder::unshard(int64_t u) {
  auto& held = unsharded_[static_cast<size_t>(u)];
  if (!held.empty()) return;
  const int64_t shard = gen_.shard_numel(static_cast<size_t>(u));
  if (!sharded_) {
    // NO_SHARD: only a low-precision copy when mixed precision is on.
    if (cfg_.mixed_precision)
      held.push_back(w_.alloc(shard * ab_, UNSHARD_STREAM, Role::MP_SHARD, "fsdp.mp_param"));
    else
      held.push_back(0);
    return;
  }
  if (fsdp1_) {
    // torch >= 2.1 (_runtime_utils._unshard): the low-precision shard is made (pre_unshard)
    // before the rate limiter waits; the all-gather output after it. post_unshard frees the
    // shard inside the unshard-stream context, so its record_stream names the stream it is
    // used on: no cross-stream delay (modelled as a plain free on the unshard stream).
    uint32_t mp_shard = 0;
    if (cfg_.mixed_precision)
      mp_shard = w_.alloc(shard * ab_, UNSHARD_STREAM, Role::MP_SHARD, "fsdp.mp_shard");
    if (cfg_.limit_all_gathers > 0 &&
        static_cast<int>(free_events_.size()) >= cfg_.limit_all_gathers) {
      w_.wait(free_events_.front());
      free_events_.pop_front();
    }
    held.push_back(w_.alloc(shard * world_ * ab_, UNSHARD_STREAM, Role::ALL_GATHER_OUTPUT,
                            "fsdp.all_gather_output"));
    w_.free(mp_shard);
  } else {
    const uint32_t ag_out = w_.alloc(shard * world_ * ab_, UNSHARD_STREAM, Role::ALL_GATHER_OUTPUT,
                                     "fsdp.all_gather_output");
    // Copy-out into per-parameter tensors: attention, MLP and norm weights as separate sizes.
    const int64_t numel = gen_.unit_numel_[static_cast<size_t>(u)];
    const int64_t parts[] = {numel / 2, numel / 3, numel - numel / 2 - numel / 3};
    for (int64_t p : parts)
      held.push_back(alloc(p * ab_, Role::UNSHARDED_PARAM, "fsdp.unsharded_param"));
    w_.free(ag_out);
  }
}

void StepBuilder::reshard(int64_t u) {
  auto& held = unsharded_[static_cast<size_t>(u)];
  if (held.empty()) return;
  for (uint32_t id : held) {
    if (id == 0) continue;
    // FSDP1 _free_unsharded_flat_param: record_stream on the current (compute) stream, so
    // the block returns to the pool only when the compute stream passes this point.
    if (fsdp1_) w_.record(id, COMPUTE_STREAM);
    w_.free(id);
  }
  held.clear();
  if (fsdp1_ && sharded_ && cfg_.limit_all_gathers > 0) free_events_.push_back(w_.mark());
}

// Gradient reduction of one unit. FSDP1: per-weight grads are concatenated into the flat
// unsharded grad (RS_INPUT), reduce-scattered on the post-backward stream into RS_OUTPUT and cast
// to the fp32 sharded grad. FSDP2: the reduce-scatter input lives on the compute stream until
// the next unit's reduce-scatter. measure.cpp pairs each RS_OUTPUT with the latest RS_INPUT.
void StepBuilder::reduce_grads(int64_t u, std::vector<uint32_t>& wgrads) {
  const auto su = static_cast<size_t>(u);
  const int64_t numel = gen_.unit_numel_[su];
  const int64_t shard = gen_.shard_numel(su);
  if (fsdp1_) {
    const uint32_t flat = alloc(shard * world_ * ab_, Role::RS_INPUT, "fsdp.flat_grad");
    for (uint32_t wg : wgrads) w_.free(wg);
    wgrads.clear();
    if (sharded_) {
      const uint32_t out =
          w_.alloc(shard * ab_, POST_BACKWARD_STREAM, Role::RS_OUTPUT, "fsdp.rs_output");
      if (ab_ != 4 || sharded_grads_[su] == 0) {
        const uint32_t fp32 =
            w_.alloc(shard * 4, POST_BACKWARD_STREAM, Role::GRAD_SHARD, "fsdp.grad_shard");
        if (sharded_grads_[su] == 0)
          sharded_grads_[su] = fp32;
        else
          w_.free(fp32);
      }
      w_.free(out);
    } else if (sharded_grads_[su] == 0) {
      sharded_grads_[su] = w_.alloc(numel * 4, POST_BACKWARD_STREAM, Role::GRAD_SHARD,
                                    "fsdp.grad_shard");  // all-reduced, cast
    }
    w_.record(flat, POST_BACKWARD_STREAM);
    w_.free(flat);
  } else {
    release_fsdp2_rs_input();  // the previous unit's
    fsdp2_rs_input_ = alloc(shard * world_ * ab_, Role::RS_INPUT, "fsdp.rs_input");
    for (uint32_t wg : wgrads) w_.free(wg);
    wgrads.clear();
    const uint32_t out =
        w_.alloc(shard * ab_, POST_BACKWARD_STREAM, Role::RS_OUTPUT, "fsdp.rs_output");
    fsdp2_rs_event_ = w_.mark();  // torch: reduce_scatter_event, recorded behind the collective
    if (sharded_grads_[su] == 0)
      sharded_grads_[su] =
          w_.alloc(shard * 4, POST_BACKWARD_STREAM, Role::GRAD_SHARD, "fsdp.grad_shard");
    w_.free(out);
  }
}

// ---- one transformer layer ----------------------------------------------------------------

// Pre-norm. GPT-2: native_layer_norm saves its output (the next linear's input) and fp32
// mean/rstd per row. T5LayerNorm / LlamaRMSNorm: x.to(fp32) (saved by pow), pow (temporary),
// mean, +eps, rsqrt (saved), x * rsqrt in fp32 (temporary), .to(bf16) (saved by the weight
// multiply), weight * that (saved by the next linear, whose weights are `w_next` elements).
void StepBuilder::norm(std::vector<Saved>& sv, int64_t s, int64_t w_next) {
  const int64_t rows = bs_ * s;
  if (kinds_.norm == NormKind::LAYER_NORM) {
    save(sv, rows * d_ * ab_, w_next, "norm.out");
    save(sv, rows * 4, 0, "norm.mean");
    save(sv, rows * 4, 0, "norm.rstd");
    return;
  }
  if (ab_ != 4) save(sv, rows * d_ * 4, 0, "norm.x_fp32");
  const uint32_t p = transient(rows * d_ * 4, "norm.pow");
  const uint32_t var = transient(rows * 4, "norm.variance");
  w_.free(p);
  const uint32_t ve = transient(rows * 4, "norm.variance_eps");
  w_.free(var);
  save(sv, rows * 4, 0, "norm.rstd");
  w_.free(ve);
  if (ab_ != 4) {
    const uint32_t prod = transient(rows * d_ * 4, "norm.normed_fp32");
    save(sv, rows * d_ * ab_, 0, "norm.normed");
    w_.free(prod);
  } else {
    save(sv, rows * d_ * 4, 0, "norm.normed");
  }
  save(sv, rows * d_ * ab_, w_next, "norm.out");
}

// T5's position bias for a stack (HF T5Attention.compute_bias in the layer that has
// relative_attention_bias): int64 [s, s_kv] bucket arithmetic, the embedding lookup
// [1, h, s, s_kv] (bucket indices saved for its backward), then bias + mask -> [b, h, s, s_kv],
// passed to every layer of the stack.
uint32_t StepBuilder::t5_position_bias(std::vector<Saved>& sv, int64_t s, int64_t s_kv) {
  const int64_t pairs = s * s_kv;
  const uint32_t rel = transient(pairs * 8, "t5.relative_position");
  const uint32_t large = transient(pairs * 8, "t5.bucket_if_large");
  const uint32_t logf = transient(pairs * 4, "t5.bucket_log_fp32");
  w_.free(logf);
  const uint32_t buckets = alloc(pairs * 8, Role::ACTIVATION, "t5.position_buckets");
  sv.push_back({buckets, pairs * 8, 0, true, true});  // embedding indices: no gradient
  w_.free(large);
  w_.free(rel);
  const uint32_t values = matmul_temp(h_ * pairs * ab_, "t5.bias_values");
  const uint32_t bias = alloc(bs_ * h_ * pairs * ab_, Role::ACTIVATION, "t5.position_bias");
  w_.free(values);
  return bias;
}

// From the q k^T scores (`mat` elements) to the probabilities; returns the second bmm's input
// when it still has to be saved (0 when softmax's own saved output is that input).
uint32_t StepBuilder::attention_softmax(std::vector<Saved>& sv, uint32_t scores, int64_t mat) {
  switch (kinds_.scores) {
    case ScoresKind::T5_BIAS: {
      // scores += position_bias (in place); softmax(scores.float()).type_as(scores); the
      // `scores` local lives until the function returns (freed by attention()). softmax saves
      // its fp32 output.
      const uint32_t f = transient(mat * 4, "attn.scores_fp32");
      save(sv, mat * 4, 0, "attn.softmax_fp32");
      w_.free(f);
      return transient(mat * ab_, "attn.softmax_bf16");
    }
    case ScoresKind::GPT2_CAUSAL: {
      // attn_weights / sqrt(d) ; torch.where(causal_mask, ., min) ; softmax (saved)
      uint32_t cur = scores;
      chain_transient(cur, mat * ab_, "attn.scores_scaled");
      chain_transient(cur, mat * ab_, "attn.scores_masked");
      save(sv, mat * ab_, 0, "attn.softmax");
      w_.free(cur);
      return 0;
    }
    case ScoresKind::LLAMA_CAUSAL: {
      // LLaMA eager: (q k^T) * scale + causal_mask; softmax(dtype=fp32) saved; .to(bf16).
      uint32_t cur = scores;
      chain_transient(cur, mat * ab_, "attn.scores_scaled");
      chain_transient(cur, mat * ab_, "attn.scores_masked");
      save(sv, mat * 4, 0, "attn.softmax_fp32");
      w_.free(cur);
      return transient(mat * ab_, "attn.softmax_bf16");
    }
  }
  return 0;
}

// Eager attention for one (self or cross) attention block. q, k, v are the projection outputs
// (held by Python locals until the function returns; torch.matmul on the [b, h, s, dk] views
// copies them into contiguous [b*h, s, dk] operands, which bmm saves).
void StepBuilder::attention(std::vector<Saved>& sv, int64_t s_q, int64_t s_kv) {
  if (cfg_.flash_attention) {
    // SDPA/flash: the projections are saved as they are, plus the output and the fp32 LSE.
    save(sv, bs_ * s_q * da_ * ab_, 0, "attn.q");
    save(sv, 2 * bs_ * s_kv * da_ * ab_, 0, "attn.kv");
    save(sv, bs_ * s_q * da_ * ab_, da_ * d_, "attn.flash_out");
    save(sv, bs_ * h_ * s_q * 4, 0, "attn.lse");
    return;
  }
  const uint32_t q = transient(bs_ * s_q * da_ * ab_, "attn.q_proj");
  const uint32_t kv = transient(2 * bs_ * s_kv * da_ * ab_, "attn.kv_proj");
  save(sv, bs_ * s_q * da_ * ab_, 0, "attn.q_bmm");
  save(sv, bs_ * s_kv * da_ * ab_, 0, "attn.k_bmm");
  const int64_t mat = bs_ * h_ * s_q * s_kv;
  const uint32_t scores = matmul_temp(mat * ab_, "attn.scores");
  const uint32_t held_scores = kinds_.scores == ScoresKind::T5_BIAS ? scores : 0;
  const uint32_t probs = attention_softmax(sv, scores, mat);
  if (m_.dropout) {
    save(sv, mat, 0, "attn.dropout_mask", true);
    save(sv, mat * ab_, 0, "attn.dropout_out");
    w_.free(probs);
  } else if (probs) {
    sv.push_back({probs, mat * ab_, 0, true, false});  // saved by the second bmm
  }
  save(sv, bs_ * s_kv * da_ * ab_, 0, "attn.v_bmm");
  const uint32_t ctx = matmul_temp(bs_ * s_q * da_ * ab_, "attn.bmm_out");
  save(sv, bs_ * s_q * da_ * ab_, da_ * d_, "attn.context");  // transpose().contiguous()
  w_.free(ctx);
  w_.free(held_scores);
  w_.free(kv);
  w_.free(q);
}

// Output projection, dropout, residual add; returns the new hidden state.
uint32_t StepBuilder::residual_out(std::vector<Saved>& sv, int64_t s) {
  const int64_t sbd = bs_ * s * d_ * ab_;
  uint32_t cur = matmul_temp(sbd, "proj.out");
  if (m_.dropout) {
    save(sv, bs_ * s * d_, 0, "proj.dropout_mask", true);
    chain_transient(cur, sbd, "proj.dropout_out");
  }
  const uint32_t out = alloc(sbd, Role::ACTIVATION, "residual.out");
  w_.free(cur);
  return out;
}

// GPT-2's c_fc, then NewGELUActivation in Python:
// 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))).
void StepBuilder::mlp_gelu_new(std::vector<Saved>& sv, int64_t sbf) {
  save(sv, sbf, 0, "mlp.fc_out");
  save(sv, sbf, 0, "gelu.half_x");
  const uint32_t cube = transient(sbf, "gelu.cube");
  const uint32_t scaled = transient(sbf, "gelu.cube_scaled");
  w_.free(cube);
  const uint32_t inner = transient(sbf, "gelu.inner");
  w_.free(scaled);
  const uint32_t arg = transient(sbf, "gelu.tanh_arg");
  w_.free(inner);
  save(sv, sbf, 0, "gelu.tanh");
  w_.free(arg);
  save(sv, sbf, 0, "gelu.one_plus_tanh");
  save(sv, sbf, ff_ * d_, "mlp.act_out");
}

// Mixtral-style sparse MoE block (HF MixtralSparseMoeBlock, eager): the router's logits
// [b*s, E] (its weight grad d x E), softmax in fp32 and top-k (weights fp32, indices int64,
// saved), the bf16 routing weights, the output buffer (zeros, index_add_ target), then per
// expert: the gathered tokens (saved; w1 and w3 grads), w1 and w3 outputs, SiLU and the product
// (saved; w2 grad), w2's output scaled by the routing weight (saved by the multiply), added
// into the output. Routing is assumed balanced: the b*s*k (token, expert) pairs are spread as
// evenly as possible, the first experts taking one more when they do not divide. Returns the
// block's output (the down projection's counterpart in a dense MLP).
uint32_t StepBuilder::moe_experts(std::vector<Saved>& sv, int64_t s) {
  const int64_t tokens = bs_ * s;
  const int64_t e = m_.n_experts, k = m_.experts_per_token;
  const uint32_t router = matmul_temp(tokens * e * ab_, "moe.router_logits");
  save(sv, tokens * e * 4, 0, "moe.routing_softmax");
  w_.free(router);
  save(sv, tokens * k * 4, 0, "moe.topk_weights");
  save(sv, tokens * k * 8, 0, "moe.topk_indices", true);
  save(sv, tokens * k * ab_, 0, "moe.routing_weights");
  const uint32_t out = alloc(tokens * d_ * ab_, Role::TEMPORARY, "moe.output");
  const int64_t pairs = tokens * k;
  for (int64_t x = 0; x < e; ++x) {
    const int64_t n = pairs / e + (x < pairs % e ? 1 : 0);
    save(sv, n * d_ * ab_, 2 * d_ * ff_, "moe.expert_input");
    save(sv, n * ff_ * ab_, 0, "moe.expert_w1");
    save(sv, n * ff_ * ab_, 0, "moe.expert_w3");
    save(sv, n * ff_ * ab_, 0, "moe.expert_silu");
    save(sv, n * ff_ * ab_, ff_ * d_, "moe.expert_product");
    save(sv, n * d_ * ab_, 0, "moe.expert_w2");
    const uint32_t scaled = matmul_temp(n * d_ * ab_, "moe.expert_scaled");
    w_.free(scaled);  // index_add_ into the output
  }
  return out;
}

uint32_t StepBuilder::mlp(std::vector<Saved>& sv, int64_t s) {
  const int64_t sbf = bs_ * s * ff_ * ab_;
  const int64_t router = kinds_.mlp == MlpKind::MOE_SWIGLU ? d_ * m_.n_experts : 0;
  norm(sv, s, router ? router : (m_.gated_mlp ? 2 : 1) * d_ * ff_);
  switch (kinds_.mlp) {
    case MlpKind::RELU: {
      // T5DenseActDense: wi -> relu (saves its output) -> dropout -> wo.
      const uint32_t wi = matmul_temp(sbf, "mlp.wi_out");
      save(sv, sbf, m_.dropout ? 0 : ff_ * d_, "mlp.relu");
      w_.free(wi);
      if (m_.dropout) {
        save(sv, bs_ * s * ff_, 0, "mlp.dropout_mask", true);
        save(sv, sbf, ff_ * d_, "mlp.dropout_out");
      }
      break;
    }
    case MlpKind::GELU_NEW:
      mlp_gelu_new(sv, sbf);
      break;
    case MlpKind::SWIGLU: {
      const char* names[] = {"mlp.gate", "mlp.up", "mlp.silu", "mlp.product"};
      for (int k = 0; k < 4; ++k) save(sv, sbf, k == 3 ? ff_ * d_ : 0, names[k]);
      break;
    }
    case MlpKind::MOE_SWIGLU: {
      // No dropout and no projection after the experts: the residual add reads the output.
      const uint32_t out = moe_experts(sv, s);
      const uint32_t r = alloc(bs_ * s * d_ * ab_, Role::ACTIVATION, "residual.out");
      w_.free(out);
      return r;
    }
  }
  return residual_out(sv, s);
}

// Forward of one layer from input x; returns the output and fills the saved list.
uint32_t StepBuilder::layer_forward(uint32_t x, const LayerSpec& L, std::vector<Saved>& sv) {
  const int64_t s = L.s;
  const int64_t sbd = bs_ * s * d_ * ab_;
  sv.push_back({x, sbd, 0, false, false});
  if (gen_.workspace_id_ == 0 && cfg_.cublas_workspace_bytes > 0)  // first GEMM of the process
    gen_.workspace_id_ = alloc(cfg_.cublas_workspace_bytes, Role::WORKSPACE, "cublas.workspace");
  norm(sv, s, 3 * d_ * da_);
  if (kinds_.rotary) save(sv, 2 * bs_ * s * da_ * ab_, 0, "attn.rotary_qk");
  attention(sv, s, s);
  uint32_t r = residual_out(sv, s);
  sv.push_back({r, sbd, 0, true, false});
  if (L.s_enc > 0) {
    norm(sv, s, d_ * da_);
    sv.push_back({L.enc_out, bs_ * L.s_enc * d_ * ab_, 2 * d_ * da_, false, false, true});
    attention(sv, s, L.s_enc);
    r = residual_out(sv, s);
    sv.push_back({r, sbd, 0, true, false});
  }
  return mlp(sv, s);
}

// Backward of one layer: walks the saved tensors in reverse, producing a gradient the size of
// each, freeing the previous gradient and the saved tensor; weight grads are kept until the
// unit's grads are gathered (returned in wgrads).
uint32_t StepBuilder::layer_backward(uint32_t g_out, std::vector<Saved>& sv,
                                     std::vector<uint32_t>& wgrads) {
  uint32_t g = g_out;
  for (auto it = sv.rbegin(); it != sv.rend(); ++it) {
    if (it->weight_numel > 0)
      wgrads.push_back(alloc(it->weight_numel * ab_, Role::WEIGHT_GRAD, "grad.weight"));
    if (it->cross_input) {
      // Gradient for the encoder output: accumulated into a buffer held by the caller.
      const uint32_t tmp = alloc(it->bytes, Role::ACTIVATION_GRAD, "grad.encoder_out_part");
      w_.free(tmp);
      continue;
    }
    if (!it->is_mask) {
      const uint32_t ng = alloc(it->bytes, Role::ACTIVATION_GRAD, "grad.activation");
      w_.free(g);
      g = ng;
    }
    if (it->owned) w_.free(it->id);
  }
  // The layer input (sv.front(), not owned) is freed by the caller: it may be a checkpoint.
  sv.clear();
  return g;
}

// ---- forward --------------------------------------------------------------------------------

void StepBuilder::free_stack_bias(bool encoder) {
  if (encoder) {
    w_.free(enc_bias_);
    enc_bias_ = 0;
  } else {
    w_.free(dec_bias_);
    w_.free(cross_bias_);
    dec_bias_ = cross_bias_ = 0;
  }
}

// T5: the encoder's final norm becomes the encoder output; the decoder starts from its own
// embedding with the extended causal mask.
void StepBuilder::enter_decoder() {
  enc_out_ = alloc(bs_ * s_enc_ * d_ * ab_, Role::ACTIVATION, "encoder.final_norm");
  const uint32_t np = transient(bs_ * s_enc_ * d_ * 4, "norm.pow");
  w_.free(np);
  w_.free(x_);
  if (!ac_) free_stack_bias(true);
  x_ = alloc(bs_ * s_dec_ * d_ * ab_, Role::ACTIVATION, "decoder.embedding_out");
  causal_mask_ = alloc(bs_ * s_dec_ * s_dec_ * ab_, Role::ACTIVATION, "t5.extended_causal_mask");
}

void StepBuilder::forward_unit(int64_t u) {
  const auto su = static_cast<size_t>(u);
  const bool dec_layer = t5_ && u > m_.n_layers;
  if (dec_layer && enc_out_ == 0) enter_decoder();
  LayerSpec L{dec_layer ? s_dec_ : s_enc_, dec_layer ? s_enc_ : 0, enc_out_};
  L.first_in_stack = t5_ && (u == 1 || u == m_.n_layers + 1);
  specs_[su] = L;
  unshard(u);
  auto& sv = saved_[su];
  inputs_[su] = x_;
  if (L.first_in_stack && !cfg_.flash_attention) {
    if (!dec_layer) {
      enc_bias_ = t5_position_bias(sv, s_enc_, s_enc_);
    } else {
      dec_bias_ = t5_position_bias(sv, s_dec_, s_dec_);
      const uint32_t zeros = matmul_temp(h_ * s_dec_ * s_enc_ * ab_, "t5.cross_bias_zeros");
      cross_bias_ =
          alloc(bs_ * h_ * s_dec_ * s_enc_ * ab_, Role::ACTIVATION, "t5.cross_position_bias");
      w_.free(zeros);
    }
  }
  const uint32_t y = layer_forward(x_, L, sv);
  if (ac_) {
    for (const Saved& s : sv)
      if (s.owned) w_.free(s.id);
    sv.clear();
  }
  if (reshard_after_forward_) reshard(u);
  x_ = y;
}

void StepBuilder::forward() {
  w_.phase(Phase::FORWARD);
  unshard(0);
  x_ = alloc(bs_ * s_enc_ * d_ * ab_, Role::ACTIVATION, "embedding.out");
  for (int64_t u = 1; u < n_units_; ++u) forward_unit(u);
}

// Final norm, LM head, loss. The logits stay referenced by the model output until the end of
// the step. Cross-entropy: (GPT-2 without fp32 loss: a contiguous shifted copy; with fp32 loss:
// logits.float()) then log_softmax, whose output (the vocabulary-sized softmax buffer) is saved;
// the copy is freed when the loss function returns.
void StepBuilder::loss_forward() {
  const int64_t s_out = s_dec_;
  const bool loss32 = gen_.loss_in_fp32();
  lsb_ = loss32 ? 4 : ab_;  // log_softmax dtype
  // transformers < 4.46: lm_logits[..., :-1, :].contiguous()
  shift_copy_ = kinds_.mlp == MlpKind::GELU_NEW && !loss32;
  rows_out_ = bs_ * (shift_copy_ ? s_out - 1 : s_out);
  logits_bytes_ = bs_ * s_out * m_.vocab * ab_;
  final_norm_ = alloc(bs_ * s_out * d_ * ab_, Role::ACTIVATION, "decoder.final_norm");
  {
    const uint32_t np = transient(bs_ * s_out * d_ * 4, "norm.pow");
    w_.free(np);
  }
  if (t5_) {
    w_.free(causal_mask_);
    if (!ac_) free_stack_bias(false);
  }
  logits_ = alloc(logits_bytes_, Role::LOGITS, "lm_head.logits");
  uint32_t ce_in = 0;
  if (loss32 && ab_ != 4)
    ce_in = alloc(bs_ * s_out * m_.vocab * 4, Role::LOSS, "loss.logits_fp32");
  else if (shift_copy_)
    ce_in = alloc(rows_out_ * m_.vocab * ab_, Role::LOSS, "loss.shifted_logits");
  log_probs_ = alloc(rows_out_ * m_.vocab * lsb_, Role::LOSS, "loss.log_softmax");
  w_.free(ce_in);
}

// ---- backward -------------------------------------------------------------------------------

// nll_loss backward (zeros + scatter), log_softmax backward, the upcast's / shift's backward,
// the LM head and the final norm; leaves the gradient of the last layer's output in g_.
void StepBuilder::loss_backward() {
  const int64_t s_out = s_dec_;
  uint32_t g = alloc(rows_out_ * m_.vocab * lsb_, Role::LOSS, "loss.nll_grad");
  const uint32_t g_ls = alloc(rows_out_ * m_.vocab * lsb_, Role::LOSS, "loss.log_softmax_grad");
  w_.free(g);
  w_.free(log_probs_);
  g = g_ls;
  if (lsb_ != ab_ || shift_copy_) {
    const uint32_t g_logits = alloc(logits_bytes_, Role::LOSS, "loss.logits_grad");
    w_.free(g);
    g = g_logits;
  }
  root_wgrads_.push_back(alloc(m_.vocab * d_ * ab_, Role::WEIGHT_GRAD, "grad.lm_head"));
  const uint32_t g_hidden =
      alloc(bs_ * s_out * d_ * ab_, Role::ACTIVATION_GRAD, "grad.lm_head_input");
  w_.free(g);
  w_.free(final_norm_);
  const uint32_t g2 = alloc(bs_ * s_out * d_ * ab_, Role::ACTIVATION_GRAD, "grad.final_norm");
  w_.free(g_hidden);
  w_.free(x_);  // the last layer's output, saved by the final norm
  g_ = g2;
}

void StepBuilder::backward_unit(int64_t u) {
  const auto su = static_cast<size_t>(u);
  const LayerSpec& L = specs_[su];
  if (t5_ && u == m_.n_layers) {
    // Leaving the decoder: the gradient now flows from the encoder output.
    w_.free(g_);  // gradient of the decoder embedding output
    w_.free(enc_out_);
    g_ = g_enc_;
    enc_out_ = 0;
  }
  if (t5_ && L.s_enc > 0 && g_enc_ == 0)
    g_enc_ = alloc(bs_ * s_enc_ * d_ * ab_, Role::ACTIVATION_GRAD, "grad.encoder_out");
  const int64_t s_kv = L.s;
  if (t5_ && !cfg_.flash_attention && g_bias_ == 0)
    g_bias_ = alloc(bs_ * h_ * L.s * s_kv * ab_, Role::ACTIVATION_GRAD, "grad.position_bias");
  unshard(u);
  if (u - 1 >= 1) unshard(u - 1);  // BACKWARD_PRE prefetch of the next unit's parameters
  auto& sv = saved_[su];
  if (ac_) {
    if (L.first_in_stack && !cfg_.flash_attention) {  // the recompute computes the bias again
      const uint32_t bias = t5_position_bias(sv, L.s, L.s);
      w_.free(bias);  // the recomputed copy; the original is the checkpoint's input
    }
    const uint32_t y = layer_forward(inputs_[su], L, sv);  // recompute
    w_.free(y);
  }
  std::vector<uint32_t> wgrads;
  const uint32_t gin = layer_backward(g_, sv, wgrads);
  w_.free(inputs_[su]);  // the previous layer's output or an embedding output
  g_ = gin;
  if (L.first_in_stack && g_bias_) {
    // bias + mask backward: sum to [1, h, s, s_kv], then the bias embedding's (tiny) grad.
    const uint32_t red = matmul_temp(h_ * L.s * s_kv * ab_, "grad.position_bias_sum");
    w_.free(g_bias_);
    w_.free(red);
    g_bias_ = 0;
    if (ac_) free_stack_bias(L.s_enc == 0);
  }
  reshard(u);
  reduce_grads(u, wgrads);
}

void StepBuilder::backward() {
  w_.phase(Phase::BACKWARD);
  loss_backward();
  for (int64_t u = n_units_ - 1; u >= 1; --u) backward_unit(u);
  if (enc_out_) w_.free(enc_out_);
  // Embedding backward: a dense grad of the embedding table, then the root's reduction.
  root_wgrads_.push_back(alloc(m_.vocab * d_ * ab_, Role::WEIGHT_GRAD, "grad.embedding"));
  w_.free(g_);
  w_.free(logits_);
  reshard(0);
  reduce_grads(0, root_wgrads_);
  release_fsdp2_rs_input();  // torch: the root's post-backward final callback
}

// FSDP2 frees the reduce-scatter input with a plain free on the compute stream that allocated it
// (no record_stream), so the allocator may hand its memory to the compute stream's next request
// at once. That is safe only because the compute stream first waits for the reduce-scatter's
// event (the communication context's reduce_scatter_state): the wait comes before the free.
void StepBuilder::release_fsdp2_rs_input() {
  if (!fsdp2_rs_input_) return;
  w_.stream_wait(COMPUTE_STREAM, POST_BACKWARD_STREAM, fsdp2_rs_event_);
  w_.free(fsdp2_rs_input_);
  fsdp2_rs_input_ = 0;
}

// ---- optimizer ------------------------------------------------------------------------------

void StepBuilder::optimizer(int iteration) {
  w_.phase(Phase::OPTIMIZER);
  if (iteration == 0 || gen_.exp_avg_ids_.empty()) {
    gen_.exp_avg_ids_.clear();
    gen_.exp_avg_sq_ids_.clear();
    for (int64_t u = 0; u < n_units_; ++u) {
      const int64_t bytes = gen_.shard_numel(static_cast<size_t>(u)) * 4;
      gen_.exp_avg_ids_.push_back(alloc(bytes, Role::OPTIMIZER_STATE, "adam.exp_avg"));
      gen_.exp_avg_sq_ids_.push_back(alloc(bytes, Role::OPTIMIZER_STATE, "adam.exp_avg_sq"));
    }
  }
  // foreach Adam: one temporary list (sqrt of exp_avg_sq) the size of the parameters.
  std::vector<uint32_t> tmp;
  for (int64_t u = 0; u < n_units_; ++u)
    tmp.push_back(alloc(gen_.shard_numel(static_cast<size_t>(u)) * 4, Role::OPTIMIZER_TEMP,
                        "adam.sqrt_exp_avg_sq"));
  for (uint32_t id : tmp) w_.free(id);
  // zero_grad(set_to_none=True)
  for (uint32_t& id : sharded_grads_) {
    if (id) w_.free(id);
    id = 0;
  }
  w_.sync_all();
}

StepTrace StepGenerator::step_trace(int iteration) {
  if (param_ids_.empty()) throw ::mlprio::InvariantError("step_trace() before init_trace()");
  StepTrace t;
  StepBuilder(*this, t).build(iteration);
  return t;
}

}  // namespace mlprio::fsdp
