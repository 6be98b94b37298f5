// What the subcommands of mlprio-fsdp share (cli.hpp): the FSDP option group of sweep and
// measure, and the turning of parsed options into library settings and JSON configuration.
#include "cli.hpp"

#include <CLI/CLI.hpp>
#include <charconv>

#include "mlprio/util/errors.hpp"

namespace mlprio::fsdp::cli {

using nlohmann::ordered_json;

void add_fsdp_options(CLI::App& cmd, SweepArgs& a) {
  cmd.add_option("--model", a.model, "gpt2-xl, t5-3b, llama2-7b, llama2-13b or a models-file name")
      ->required();
  cmd.add_option("--models-file", a.models_file, "Extra shapes (default configs/models.json)");
  cmd.add_option("--world-size", a.world_size, "Number of GPUs")->capture_default_str();
  cmd.add_option("--capacity", a.capacity,
                 "Memory per GPU, e.g. 80GiB (measure: auto = free GPU memory - headroom)")
      ->capture_default_str();
  cmd.add_option("--mbs", a.mbs, "Per-GPU minibatch range LO:HI[:STEP]")->capture_default_str();
  cmd.add_option("--alloc-conf", a.alloc_conf, "PYTORCH_CUDA_ALLOC_CONF string");
  cmd.add_option("--torch-version", a.torch_version, "Allocator rules: 1.13 or 2.x")
      ->capture_default_str();
  cmd.add_option("--memory-fraction", a.memory_fraction,
                 "set_per_process_memory_fraction (0: not set)")
      ->capture_default_str();
  cmd.add_option("--sharding", a.sharding, "FULL_SHARD, SHARD_GRAD_OP or NO_SHARD")
      ->capture_default_str();
  cmd.add_option("--fsdp", a.fsdp, "FSDP implementation: 1 (flat params) or 2 (fully_shard)")
      ->capture_default_str();
  cmd.add_option("--precision", a.precision, "bf16 (mixed) or fp32")->capture_default_str();
  cmd.add_flag("--activation-checkpointing", a.activation_checkpointing,
               "Checkpoint every transformer block");
  cmd.add_flag("--flash-attention", a.flash_attention, "No s^2 attention tensors");
  cmd.add_option("--limit-all-gathers", a.limit_all_gathers,
                 "FSDP1 all-gathers in flight (0: unlimited)")
      ->capture_default_str();
  cmd.add_option("--seq-len", a.seq_len,
                 "Tokens per sample (encoder length for encoder-decoder models; 0: the model's)")
      ->capture_default_str();
  cmd.add_option("--tgt-len", a.tgt_len,
                 "Decoder tokens of an encoder-decoder model (0: the model's)")
      ->capture_default_str();
  cmd.add_option("--steps", a.steps, "Training steps per minibatch")->capture_default_str();
  cmd.add_option("--latency", a.latency,
                 "Device-call costs the allocator model charges, NAME=MICROSECONDS,... of "
                 "malloc_us, malloc_us_per_gib, free_us, map_page_us, unmap_page_us, "
                 "sync_all_streams_us (measure prints a fitted line)");
  cmd.add_flag("--json", a.json, "Print the result as JSON");
  cmd.add_option("--out", a.out, "Write an HDF5 result file");
}

AllocatorSettings make_settings(const std::string& conf, const std::string& version,
                                double fraction) {
  AllocatorSettings base;
  if (version == "1.13")
    base.version = TorchVersion::TORCH_1_13;
  else if (version != "2.x")
    throw SettingsError("--torch-version: expected 1.13 or 2.x, got '" + version + "'");
  if (fraction < 0.0 || fraction > 1.0)
    throw SettingsError("--memory-fraction: expected a number in [0, 1]");
  base.memory_fraction = fraction;
  return parse_alloc_conf(conf, base);
}

void parse_range(const std::string& text, int64_t& lo, int64_t& hi, int64_t& step) {
  const std::string hint = "--mbs: expected LO:HI or LO:HI:STEP with 1 <= LO <= HI, e.g. 1:64";
  // Each part whole, decimal and in range: "4abc", "1:64:2x" or 1e3 are not numbers here.
  const auto whole = [&](const std::string& part) {
    int64_t v = 0;
    const auto r = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || r.ec != std::errc() || r.ptr != part.data() + part.size())
      throw SettingsError(hint + " (got '" + text + "': '" + part + "' is not a whole number)");
    return v;
  };
  const size_t a = text.find(':');
  if (a == std::string::npos) {
    lo = hi = whole(text);
  } else {
    const size_t b = text.find(':', a + 1);
    lo = whole(text.substr(0, a));
    hi = whole(text.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1));
    if (b != std::string::npos) step = whole(text.substr(b + 1));
  }
  if (lo < 1 || hi < lo || step < 1) throw SettingsError(hint + " (got '" + text + "')");
  if (hi > MAX_MICRO_BATCH)
    throw SettingsError("--mbs: HI " + std::to_string(hi) + " is more than the bound of " +
                        std::to_string(MAX_MICRO_BATCH) + " (MAX_MICRO_BATCH)");
}

FsdpConfig fsdp_config(const SweepArgs& a) {
  if (a.steps < 1 || a.steps > 1000) throw SettingsError("--steps: expected 1..1000");
  if (a.world_size < 1) throw SettingsError("--world-size: expected >= 1");
  FsdpConfig c;
  c.model = find_model(a.model, a.models_file);
  c.world_size = a.world_size;
  if (a.sharding == "FULL_SHARD")
    c.sharding = ShardingStrategy::FULL_SHARD;
  else if (a.sharding == "SHARD_GRAD_OP")
    c.sharding = ShardingStrategy::SHARD_GRAD_OP;
  else if (a.sharding == "NO_SHARD")
    c.sharding = ShardingStrategy::NO_SHARD;
  else
    throw SettingsError("--sharding: expected FULL_SHARD, SHARD_GRAD_OP or NO_SHARD, got '" +
                        a.sharding + "'");
  if (a.fsdp == "1")
    c.version = FsdpVersion::FSDP1;
  else if (a.fsdp == "2")
    c.version = FsdpVersion::FSDP2;
  else
    throw SettingsError("--fsdp: expected 1 or 2, got '" + a.fsdp + "'");
  if (a.precision == "bf16")
    c.mixed_precision = true;
  else if (a.precision == "fp32")
    c.mixed_precision = false;
  else
    throw SettingsError("--precision: expected bf16 or fp32, got '" + a.precision + "'");
  c.activation_checkpointing = a.activation_checkpointing;
  c.flash_attention = a.flash_attention;
  c.limit_all_gathers = a.limit_all_gathers;
  if (a.seq_len < 0 || a.tgt_len < 0 || a.seq_len > MAX_SEQ_LEN || a.tgt_len > MAX_SEQ_LEN)
    throw SettingsError("--seq-len/--tgt-len: expected 0 (the model's) to " +
                        std::to_string(MAX_SEQ_LEN) + " (MAX_SEQ_LEN)");
  c.seq_len = a.seq_len;
  c.tgt_len = a.tgt_len;
  return c;
}

ordered_json point_json(const SweepPoint& p) {
  return ordered_json{{"mbs", p.mbs},
                      {"retries_per_step", p.retries_per_step},
                      {"first_step_retries", p.first_step_retries},
                      {"oom", p.oom},
                      {"ooms", p.ooms},
                      {"peak_reserved_bytes", p.peak_reserved},
                      {"peak_allocated_bytes", p.peak_allocated},
                      {"fragmentation", p.fragmentation},
                      {"alloc_overhead_ms_per_step", p.alloc_overhead_ms_per_step}};
}

ordered_json config_json(const SweepArgs& a, const FsdpConfig& c, uint64_t capacity,
                         const AllocatorSettings& settings, int steps,
                         const LatencyModel& latency) {
  return ordered_json{{"model", c.model.name},
                      {"params", c.model.total_params()},
                      {"world_size", c.world_size},
                      {"seq_len", c.seq_len},
                      {"tgt_len", c.tgt_len},
                      {"sharding", a.sharding},
                      {"fsdp", a.fsdp},
                      {"precision", a.precision},
                      {"activation_checkpointing", c.activation_checkpointing},
                      {"flash_attention", c.flash_attention},
                      {"limit_all_gathers", c.limit_all_gathers},
                      {"capacity_bytes", capacity},
                      {"alloc_conf", settings.to_alloc_conf()},
                      {"steps", steps},
                      {"latency", latency_text(latency)}};
}

}  // namespace mlprio::fsdp::cli
