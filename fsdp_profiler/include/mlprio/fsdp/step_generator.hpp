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
  COMPUTE_STREAM = 0,         // the default stream
  UNSHARD_STREAM = 1,         // FSDP1 all-gather; FSDP2 all-gather copy-in
  POST_BACKWARD_STREAM = 2,   // FSDP1 reduce-scatter; FSDP2 reduce-scatter
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
};

enum class OpKind : uint8_t {
  ALLOC,          // tensor, bytes, stream
  FREE,           // tensor
  RECORD_STREAM,  // tensor, stream
  MARK,           // remember every stream's current position as mark `tensor`
  WAIT,           // the CPU waits for mark `tensor`: the GPU finished everything before it
  SYNC_ALL,       // device synchronise
  PHASE           // a new phase begins: bytes = Phase value
};

enum class Phase : uint8_t { INIT, FORWARD, BACKWARD, OPTIMIZER };

struct Op {
  OpKind kind;
  uint8_t stream;
  uint32_t tensor;
  uint64_t bytes;
};

struct StepTrace {
  std::vector<Op> ops;
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

 private:
  struct Builder;
  FsdpConfig cfg_;
  std::vector<int64_t> unit_numel_;  // unit 0 is the root (embeddings, head)
  std::vector<uint32_t> param_ids_, exp_avg_ids_, exp_avg_sq_ids_;
  uint32_t next_id_ = 1;
  uint32_t next_mark_ = 0;
  int64_t shard_numel(size_t unit) const;
};

}  // namespace mlprio::fsdp
