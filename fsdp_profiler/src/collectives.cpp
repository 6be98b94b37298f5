// Role-driven collective assignment (see collectives.hpp).
#include "mlprio/fsdp/collectives.hpp"

#include <string>

#include "mlprio/util/errors.hpp"

namespace mlprio::fsdp {

namespace {

[[noreturn]] void disagree(const std::string& what, const Op& op) {
  throw ::mlprio::InvariantError("collective plan: " + what + " (tensor " +
                                 std::to_string(op.tensor) + ", " + std::to_string(op.bytes) +
                                 " bytes, role " + role_name(op.role) + ")");
}

}  // namespace

CollectivePlan::CollectivePlan(int ranks, int elem_bytes, ShardingStrategy sharding)
    : enabled_(ranks > 1 && sharding != ShardingStrategy::NO_SHARD),
      ranks_(static_cast<uint64_t>(ranks > 0 ? ranks : 1)),
      elem_bytes_(static_cast<uint64_t>(elem_bytes > 0 ? elem_bytes : 1)) {}

Collective CollectivePlan::on_op(const Op& op) {
  Collective c;
  if (op.kind == OpKind::FREE) {
    if (op.tensor == mp_shard_) mp_shard_ = 0;
    if (op.tensor == rs_input_) rs_input_ = 0;
    return c;
  }
  if (op.kind != OpKind::ALLOC || !enabled_) return c;
  switch (op.role) {
    case Role::MP_SHARD:
      mp_shard_ = op.tensor;
      mp_shard_bytes_ = op.bytes;
      return c;
    case Role::RS_INPUT:
      rs_input_ = op.tensor;
      rs_input_bytes_ = op.bytes;
      return c;
    case Role::ALL_GATHER_OUTPUT:
      if (op.bytes % (elem_bytes_ * ranks_) != 0)
        disagree("an all-gather output that is not ranks x whole elements", op);
      c.kind = CollectiveKind::ALL_GATHER;
      c.output = op.tensor;
      c.count = op.bytes / ranks_ / elem_bytes_;
      if (mp_shard_ != 0) {
        if (mp_shard_bytes_ * ranks_ != op.bytes)
          disagree("the low-precision shard is not 1/ranks of the all-gather output", op);
        c.input = mp_shard_;
        mp_shard_ = 0;
      } else {
        c.in_place = true;
      }
      return c;
    case Role::RS_OUTPUT:
      if (rs_input_ == 0) disagree("a reduce-scatter output without a live input", op);
      if (op.bytes % elem_bytes_ != 0 || op.bytes * ranks_ != rs_input_bytes_)
        disagree("the reduce-scatter output is not 1/ranks of its input", op);
      c.kind = CollectiveKind::REDUCE_SCATTER;
      c.input = rs_input_;
      c.output = op.tensor;
      c.count = op.bytes / elem_bytes_;
      return c;
    default:
      return c;
  }
}

}  // namespace mlprio::fsdp
