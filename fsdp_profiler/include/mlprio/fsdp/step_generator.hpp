// The FSDP step generator: turns (model shape, world size, sharding strategy, FSDP1/FSDP2,
// mixed precision, activation checkpointing, minibatch) into the sequence of allocator
// operations one rank makes in an initialisation and in each training step (forward, backward,
// Adam step, zero_grad). Ranks are symmetric (flat parameters are padded to a multiple of the
// world size), so rank 0's stream stands for every rank. The operations include stream
// assignment, record_stream and the points where the CPU waits for the GPU (limit_all_gathers,
// end of step); the sweep (sweep.hpp) feeds them to the allocator model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlprio/fsdp/model_shapes.hpp"

namespace mlprio::fsdp {

enum class ShardingStrategy { FULL_SHARD, SHARD_GRAD_OP, NO_SHARD };
enum class FsdpVersion { FSDP1, FSDP2 };

// Stream ids the generator uses (dense, as the allocator wants them).
enum GenStream : uint8_t {
  COMPUTE_STREAM = 0,        // the default stream
  UNSHARD_STREAM = 1,        // FSDP1 all-gather; FSDP2 all-gather copy-in
  POST_BACKWARD_STREAM = 2,  // FSDP1 reduce-scatter; FSDP2 reduce-scatter
  NUM_GEN_STREAMS = 3
};

struct FsdpConfig {
  TransformerShape model;
  int world_size = 8;
  ShardingStrategy sharding = ShardingStrategy::FULL_SHARD;
  FsdpVersion version = FsdpVersion::FSDP1;
  bool mixed_precision = true;  // bf16 params/activations/grad reduction, fp32 master + Adam
  bool activation_checkpointing = false;
  bool flash_attention = false;  // no s^2 attention tensors when true
  int limit_all_gathers = 2;     // FSDP1 rate limiter; 0 disables it
  int64_t micro_batch = 1;       // per-rank minibatch
  // Sequence lengths: 0 = the model's (TransformerShape::seq_len / dec_seq_len). seq_len is the
  // encoder (or decoder-only) length, tgt_len the decoder length of an encoder-decoder model.
  int64_t seq_len = 0;
  int64_t tgt_len = 0;
  // Short-lived allocations real kernels make and free within a layer (fp32 score copies, norm
  // temporaries, GELU intermediates, held projection outputs, dropout outputs, loss upcast).
  // Off: only the tensors saved for backward, matmul outputs and gradients (an ablation).
  bool kernel_transients = true;
  // Cross-entropy on fp32 logits (transformers' ForCausalLMLoss since 4.46 upcasts; T5's
  // CrossEntropyLoss runs on the bf16 logits). -1: per model (decoder-only yes, T5 no).
  int loss_fp32 = -1;
  // cuBLAS workspace per stream, allocated through the caching allocator at the first GEMM and
  // kept (PyTorch default CUBLAS_WORKSPACE_CONFIG :4096:2:16:8 = 8 MiB + 128 KiB before Hopper,
  // :4096:8 = 32 MiB on sm90). 0: none.
  int64_t cublas_workspace_bytes = 4096 * 1024 * 2 + 16 * 1024 * 8;
};

enum class OpKind : uint8_t {
  ALLOC,          // tensor, bytes, stream
  FREE,           // tensor
  RECORD_STREAM,  // tensor, stream
  MARK,           // remember every stream's current position as mark `tensor`
  WAIT,           // the CPU waits for mark `tensor`: the GPU finished everything before it
  SYNC_ALL,       // device synchronise
  PHASE,          // a new phase begins: bytes = Phase value
  STREAM_WAIT     // stream `stream` waits on the GPU (not the CPU) until stream `bytes` reaches
                  // its position at mark `tensor` (torch's Stream.wait_event); no CPU wait and no
                  // change to the allocator, which the caller's plain free relies on
};

enum class Phase : uint8_t { INIT, FORWARD, BACKWARD, OPTIMIZER };

// What an ALLOC is for (UNKNOWN on other ops). Tools such as measure.cpp can use it instead of
// recognising collective buffers from the allocation pattern.
enum class Role : uint8_t {
  UNKNOWN = 0,
  PARAM_SHARD,        // fp32 sharded flat parameter (resident)
  MP_SHARD,           // low-precision copy of the shard: the all-gather input (FSDP1 + bf16)
  ALL_GATHER_OUTPUT,  // unsharded flat parameter (FSDP1) / all-gather output (FSDP2)
  UNSHARDED_PARAM,    // FSDP2 copy-out into per-parameter tensors
  ACTIVATION,         // saved for backward or held across layers (incl. T5 position bias)
  DROPOUT_MASK,       // saved dropout mask (bool)
  TEMPORARY,          // freed within the layer / op that made it
  ACTIVATION_GRAD,    // gradient of an activation
  WEIGHT_GRAD,        // per-weight gradient before it is flattened
  RS_INPUT,           // flat unsharded gradient (reduce-scatter input)
  RS_OUTPUT,          // reduce-scatter output (low-precision gradient shard)
  GRAD_SHARD,         // fp32 sharded gradient kept until zero_grad
  LOGITS,             // LM head output (held by the model output until the end of the step)
  LOSS,               // cross-entropy buffers over the vocabulary and their gradients
  WORKSPACE,          // cuBLAS workspace (persistent)
  OPTIMIZER_STATE,    // Adam exp_avg / exp_avg_sq (persistent)
  OPTIMIZER_TEMP,     // foreach Adam temporary
};
const char* role_name(Role r);

struct Op {
  OpKind kind;
  uint8_t stream;
  uint32_t tensor;
  uint64_t bytes;
  Role role = Role::UNKNOWN;  // ALLOC only
};

struct StepTrace {
  std::vector<Op> ops;
  // Parallel to ops: a static name for each ALLOC ("attn.softmax_fp32"), nullptr otherwise.
  std::vector<const char*> names;
};

class StepGenerator {
 public:
  explicit StepGenerator(FsdpConfig cfg);
  const FsdpConfig& config() const { return cfg_; }
  // Parameters resident before training (sharded fp32 flat parameters).
  StepTrace init_trace();
  // One training step; iteration 0 also creates Adam's state.
  StepTrace step_trace(int iteration);
  int64_t unit_count() const { return static_cast<int64_t>(unit_numel_.size()); }
  int64_t largest_unit_params() const;
  // Bytes of the resident state per rank after the first step (params, grads, Adam).
  int64_t resident_bytes() const;
  // Effective sequence lengths (FsdpConfig overrides applied).
  int64_t enc_seq_len() const;
  int64_t dec_seq_len() const;
  // Training FLOPs per sample: 2 x params x tokens forward, 4 backward, 2 more for activation
  // checkpointing's recomputed forward (tokens: encoder plus decoder for encoder-decoder models).
  // The advice table's compute estimate and measure --compute-tflops both use it.
  double flops_per_sample() const;
  bool loss_in_fp32() const;
  // Persistent allocations that stay after a step besides the resident state (cuBLAS workspace).
  int64_t persistent_extra_bytes() const { return cfg_.cublas_workspace_bytes; }

 private:
  friend class StepBuilder;  // builds one step (step_generator.cpp) from this state
  FsdpConfig cfg_;
  std::vector<int64_t> unit_numel_;  // unit 0 is the root (embeddings, head)
  std::vector<uint32_t> param_ids_, exp_avg_ids_, exp_avg_sq_ids_;
  uint32_t next_id_ = 1;
  uint32_t next_mark_ = 0;
  uint32_t workspace_id_ = 0;
  int64_t shard_numel(size_t unit) const;
};

}  // namespace mlprio::fsdp
