// Which generated allocations a collective fills, and from which input, decided by the Role the
// step generator gives each ALLOC (step_generator.hpp) rather than by sizes or order. The
// measuring runner (measure.cpp) runs NCCL on what this returns; tests check it on the CPU.
//  - ALL_GATHER_OUTPUT: all-gathered from the live MP_SHARD (FSDP1 with mixed precision: the
//    low-precision shard made for it), otherwise in place from this rank's slice of the output.
//  - RS_OUTPUT: reduce-scattered from the latest live RS_INPUT (the flat unsharded gradient).
#pragma once

#include <cstdint>

#include "mlprio/fsdp/step_generator.hpp"

namespace mlprio::fsdp {

enum class CollectiveKind : uint8_t { NONE, ALL_GATHER, REDUCE_SCATTER };

struct Collective {
  CollectiveKind kind = CollectiveKind::NONE;
  uint32_t input = 0;     // tensor read; 0 when in_place
  uint32_t output = 0;    // the tensor just allocated, which the collective writes
  bool in_place = false;  // all-gather input = this rank's chunk of the output
  uint64_t count = 0;     // elements per rank: all-gather send count, reduce-scatter receive count
};

class CollectivePlan {
 public:
  // `ranks` processes take part; `elem_bytes` is the element size of the collective buffers
  // (2 with mixed precision, else 4). With one rank or NO_SHARD there are no collectives.
  CollectivePlan(int ranks, int elem_bytes, ShardingStrategy sharding);
  // Feed every op of a trace in order; returns the collective that fills an ALLOC (kind NONE for
  // every other op). Throws mlprio::InvariantError when a collective's input is missing or its
  // size does not fit: the generator and this plan disagree about the roles.
  Collective on_op(const Op& op);

 private:
  bool enabled_;
  uint64_t ranks_, elem_bytes_;
  uint32_t mp_shard_ = 0, rs_input_ = 0;
  uint64_t mp_shard_bytes_ = 0, rs_input_bytes_ = 0;
};

}  // namespace mlprio::fsdp
