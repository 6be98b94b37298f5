// The FSDP advice table: what `mlprio-fsdp table` precomputes with the allocator
// simulator, for each (model, GPU memory, world size, sharding, precision, activation
// checkpointing, expandable_segments) the largest minibatch without cudaMalloc retries, the first
// one with retries, the first OOM and the predicted throughput penalty of retries; the `#MLPRIO`
// directives a batch script declares its training configuration with; and the advice one gives
// for the other. The writer is in fsdp_profiler/ (it needs the simulator), the readers are
// job_submit/mlprio (slurm_plugin/) and `mlprio-replay fsdp-advice` (replay/). Lookups are a
// hash-map find: nothing here computes anything at submission time.
// The JSON schema is in fsdp_profiler/README.md ("Advice table").
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mlprio/util/errors.hpp"

namespace mlprio::model {

inline constexpr const char* FSDP_TABLE_FORMAT = "mlprio-fsdp-table";
inline constexpr int FSDP_TABLE_VERSION = 1;
inline constexpr uint64_t FSDP_TABLE_MAX_BYTES = 16ULL << 20;
inline constexpr size_t FSDP_TABLE_MAX_ENTRIES = 20000;
inline constexpr size_t FSDP_TABLE_MAX_RETRY_POINTS = 4096;  // per entry
inline constexpr int64_t FSDP_MAX_MINIBATCH = 1 << 20;
inline constexpr int64_t FSDP_MAX_WORLD_SIZE = 1 << 20;
inline constexpr int64_t FSDP_MAX_SEQ_LEN = 1 << 24;
inline constexpr int64_t FSDP_MAX_GPU_GIB = 1 << 16;
inline constexpr size_t FSDP_MAX_DIRECTIVE_LINES = 64;  // #MLPRIO lines read per script

class FsdpTableError : public ::mlprio::UsageError {
 public:
  using ::mlprio::UsageError::UsageError;
};

// What identifies one configuration in the table. Strings are canonical: model lower-case,
// sharding upper-case (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD), precision bf16|fp32.
struct FsdpKey {
  std::string model;
  int64_t gpu_memory_gib = 0;
  int64_t world_size = 0;
  std::string sharding = "FULL_SHARD";
  std::string precision = "bf16";
  bool activation_checkpointing = false;
  int64_t seq_len = 0;  // tokens per sample (encoder side), as swept (never 0 in a table)
  int64_t tgt_len = 0;  // decoder tokens (encoder-decoder models), else 0
  bool expandable_segments = false;
  std::string text() const;  // one canonical line, also the map key
};

struct FsdpEntry {
  FsdpKey key;
  std::string gpu;              // the --gpus name the memory came from (informative)
  std::string dims;             // "layers/dec_layers/d_model/heads/d_ff/vocab" for explicit shapes
  bool default_lengths = true;  // seq_len/tgt_len are the model's own (a directive without them)
  int64_t mbs_hi = 0;           // the sweep's largest minibatch
  int64_t max_safe_mbs = 0;     // largest minibatch with no steady-state retries (0: none)
  int64_t first_retry_mbs = 0;  // first minibatch with retries and no OOM (0: none swept)
  int64_t oom_mbs = 0;          // first minibatch that runs out of memory (0: none swept)
  // Per swept minibatch between max_safe_mbs and oom_mbs: (mbs, predicted fraction of throughput
  // lost to retries). Sorted by mbs.
  std::vector<std::pair<int64_t, double>> retry_points;
  // The penalty at mbs (in (max_safe_mbs, oom_mbs)): the retry point at or below it, or 0.
  double penalty_at(int64_t mbs) const;
};

class FsdpTable {
 public:
  // Parses a table document; throws FsdpTableError naming `source`, the entry and the field.
  static FsdpTable parse(std::string_view text, const std::string& source);
  // Reads and parses a file: a regular file of at most FSDP_TABLE_MAX_BYTES.
  static FsdpTable load(const std::string& path);

  void add(FsdpEntry e);  // a later entry with the same key replaces the earlier one
  const FsdpEntry* find(const FsdpKey& k) const;
  // An entry whose `dims` equals `dims` (explicit shapes), else nullptr; the key's model is
  // ignored.
  const FsdpEntry* find_dims(const std::string& dims, FsdpKey k) const;
  // Fills k.seq_len/tgt_len with the model's own when k.seq_len is 0; false when unknown.
  bool resolve_lengths(FsdpKey& k) const;
  const std::vector<FsdpEntry>& entries() const { return entries_; }
  nlohmann::ordered_json to_json(const nlohmann::ordered_json& generator) const;
  std::string describe() const;  // "N entries (models: a, b; GPUs: 40, 80 GiB)"

 private:
  std::vector<FsdpEntry> entries_;
  std::unordered_map<std::string, size_t> index_;
  std::unordered_map<std::string, std::string> dims_model_;  // dims -> model name
  // model -> its own (seq_len, tgt_len), for directives that do not name them
  std::unordered_map<std::string, std::pair<int64_t, int64_t>> default_len_;
};

// A job's declared training configuration, from `#MLPRIO key=value ...` lines of its batch
// script and an `export PYTORCH_CUDA_ALLOC_CONF=...` line (the directive's alloc_conf wins).
struct FsdpDirective {
  std::string model;  // lower-case name, or empty with dims
  std::string dims;   // from n_layers/d_model/... keys, FsdpEntry::dims form
  std::string sharding = "FULL_SHARD";
  std::string precision = "bf16";
  int64_t world_size = 0;  // 0: not declared
  int64_t minibatch = 0;   // per GPU; 0: not declared (no advice)
  int64_t seq_len = 0;     // 0: the model's
  int64_t tgt_len = 0;
  bool activation_checkpointing = false;
  std::string alloc_conf;  // as declared or exported
  bool expandable_segments = false;
  bool any = false;  // some FSDP key was given
  bool complete() const { return minibatch > 0 && (!model.empty() || !dims.empty()); }
};

struct DirectiveParse {
  FsdpDirective directive;
  std::vector<std::string> problems;  // each "key=value (why; expected ...)", at most 16
};

// Whether `key` (any case) is one of the FSDP directive keys; the LLM feature scanner of
// job_submit/mlprio leaves these to parse_fsdp_directives().
bool is_fsdp_directive_key(std::string_view key);
// The first 64 KiB of a batch script, at most FSDP_MAX_DIRECTIVE_LINES #MLPRIO lines of it; never
// throws on its content.
DirectiveParse parse_fsdp_directives(std::string_view script);
// Whether a PYTORCH_CUDA_ALLOC_CONF value turns expandable segments on.
bool alloc_conf_expandable(std::string_view conf);

enum class FsdpVerdict { NO_ADVICE = 0, OK = 1, RETRIES = 2, OOM = 3 };

struct FsdpAdvice {
  FsdpVerdict verdict = FsdpVerdict::NO_ADVICE;
  std::string why;  // NO_ADVICE: why (for a debug log line)
  const FsdpEntry* entry = nullptr;
  const FsdpEntry* other = nullptr;  // the same configuration with expandable segments flipped
  int64_t minibatch = 0;
  double penalty = 0;   // RETRIES: predicted fraction of throughput lost
  std::string message;  // for the user (RETRIES and OOM)
  std::string note;     // for admin_comment: "mlprio_fsdp=retries:69>64"
};

// The advice for `d` on GPUs of gpu_memory_gib; world_size_fallback is used when the directive
// does not say (the job's GPU count). Microseconds: two hash lookups and some formatting.
FsdpAdvice advise(const FsdpTable& table, const FsdpDirective& d, int64_t gpu_memory_gib,
                  int64_t world_size_fallback);

}  // namespace mlprio::model
