// Exact-output test of the FSDP step generator: a 64-bit FNV-1a digest of every generated
// operation (kind, stream, tensor id, bytes, role, allocation name) of init_trace() and two
// step_trace()s, for each existing model shape under several configurations. The expected
// digests were taken from the generator before it became the StepBuilder class; any change to a
// generated trace (an allocation moved, resized, renamed or given another role) changes them.
// A deliberate change to the generated traces updates this table in the same commit.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "mlprio/fsdp/step_generator.hpp"

using namespace mlprio::fsdp;

namespace {

struct Fnv1a {
  uint64_t h = 14695981039346656037ull;
  void byte(uint8_t b) {
    h ^= b;
    h *= 1099511628211ull;
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  void str(const char* s) {
    if (!s) {
      byte(0xff);
      return;
    }
    for (; *s; ++s) byte(static_cast<uint8_t>(*s));
    byte(0);
  }
};

void add(Fnv1a& f, const StepTrace& t) {
  REQUIRE(t.names.size() == t.ops.size());
  f.u64(t.ops.size());
  for (size_t i = 0; i < t.ops.size(); ++i) {
    const Op& op = t.ops[i];
    f.byte(static_cast<uint8_t>(op.kind));
    f.byte(op.stream);
    f.u64(op.tensor);
    f.u64(op.bytes);
    f.byte(static_cast<uint8_t>(op.role));
    f.str(t.names[i]);
  }
}

// Named configurations: the default (FSDP1, FULL_SHARD, bf16) and one change each.
FsdpConfig config(const std::string& model, int variant) {
  FsdpConfig c;
  c.model = find_model(model);
  c.world_size = 8;
  c.micro_batch = 2;
  switch (variant) {
    case 0:
      break;
    case 1:
      c.version = FsdpVersion::FSDP2;
      break;
    case 2:
      c.sharding = ShardingStrategy::SHARD_GRAD_OP;
      c.activation_checkpointing = true;
      break;
    case 3:
      c.sharding = ShardingStrategy::NO_SHARD;
      c.mixed_precision = false;
      break;
    case 4:
      c.flash_attention = true;
      c.kernel_transients = false;
      c.limit_all_gathers = 0;
      break;
    case 5:
      c.version = FsdpVersion::FSDP2;
      c.activation_checkpointing = true;
      c.mixed_precision = false;
      c.seq_len = 96;
      c.tgt_len = 40;
      break;
  }
  return c;
}

uint64_t digest(const FsdpConfig& c) {
  StepGenerator gen(c);
  Fnv1a f;
  add(f, gen.init_trace());
  add(f, gen.step_trace(0));
  add(f, gen.step_trace(1));
  return f.h;
}

struct Expected {
  const char* model;
  int variant;
  uint64_t digest;
};

}  // namespace

TEST_CASE("generated traces of every existing shape are unchanged", "[fsdp][generator]") {
  const Expected table[] = {
      {"gpt2-xl", 0, 0xf93159a10c6328c7ull},         {"gpt2-xl", 1, 0xe6c9398b1702597dull},
      {"gpt2-xl", 2, 0x3d9d623c2b51849bull},         {"gpt2-xl", 3, 0xd0a5f2c1b02e8646ull},
      {"gpt2-xl", 4, 0x653ee414c6f17a97ull},         {"gpt2-xl", 5, 0x72cf92b9513fa0bcull},
      {"t5-3b", 0, 0x1a4a3fb6b31b7a95ull},           {"t5-3b", 1, 0xae6c518d73cf3467ull},
      {"t5-3b", 2, 0xc32c9f00a49d7f3eull},           {"t5-3b", 3, 0x8e51bd867d8acadcull},
      {"t5-3b", 4, 0x756c931bbddbcc0aull},           {"t5-3b", 5, 0xbb40e721810ad416ull},
      {"llama2-7b", 0, 0x1d0b06e1f33f5d2dull},       {"llama2-7b", 1, 0xd51995b0348bca62ull},
      {"llama2-7b", 2, 0x94efb2738a1fc3baull},       {"llama2-7b", 3, 0xa9d7ed0d23033747ull},
      {"llama2-7b", 4, 0x9f9899b6218f60a6ull},       {"llama2-7b", 5, 0xe4b64f6d784bad91ull},
      {"llama2-13b", 0, 0x7efc1852794151a7ull},      {"llama2-13b", 1, 0x2bf2006260337ce3ull},
      {"llama2-13b", 2, 0x27fe535f907786baull},      {"llama2-13b", 3, 0x8f3a52091996f95full},
      {"llama2-13b", 4, 0x86a8a5371c39355cull},      {"llama2-13b", 5, 0x1fb788c2296fe454ull},
      {"gpt2-large", 0, 0x5b08a2ef3c2325e4ull},      {"gpt2-large", 2, 0x9a0745dda7a524a7ull},
      {"t5-large", 0, 0xa6c6da5fa020f33dull},        {"t5-large", 2, 0x6b23e0f1902aa1aaull},
      {"llama3-8b", 0, 0x299e5060c88376adull},       {"llama3-8b", 2, 0x80d973a8ba5d6b96ull},
      {"t5-3b-s128-t128", 0, 0x26b753b96a5efb45ull}, {"t5-3b-s128-t128", 2, 0xd196835fd28176aull},
      {"t5-3b-s256-t64", 0, 0x387aa4811c098fc1ull},  {"t5-3b-s256-t64", 2, 0x27e0d12d77876376ull},
  };
  for (const Expected& e : table) {
    INFO(e.model << " variant " << e.variant);
    CHECK(digest(config(e.model, e.variant)) == e.digest);
  }
}
