// What the subcommands of mlprio-fsdp share (each is one src/cmd_*.cpp, listed in commands.hpp):
// their parsed arguments, the FSDP option group of sweep and measure, and the turning of options
// into library settings. Input errors are thrown as the library's typed exceptions and turned into
// messages and exit statuses by main() (mlprio/cli/program.hpp).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "mlprio/fsdp/settings.hpp"
#include "mlprio/fsdp/step_generator.hpp"
#include "mlprio/fsdp/sweep.hpp"

namespace CLI {
class App;
}

namespace mlprio::fsdp::cli {

struct ReplayArgs {
  std::string snapshot;
  std::string capacity = "80GiB";
  std::string alloc_conf;
  std::string torch_version = "2.x";
  double memory_fraction = 0.0;
  int device = -1;
  bool json = false;
  std::string out;
  std::string command_line;
};

struct SweepArgs {
  std::string model;
  std::string models_file;
  int world_size = 8;
  std::string capacity = "80GiB";
  std::string mbs = "1:8";
  std::string alloc_conf;
  std::string torch_version = "2.x";
  double memory_fraction = 0.0;
  std::string sharding = "FULL_SHARD";
  std::string fsdp = "1";
  std::string precision = "bf16";
  bool activation_checkpointing = false;
  bool flash_attention = false;
  int limit_all_gathers = 2;
  int64_t seq_len = 0;  // 0: the model's own
  int64_t tgt_len = 0;
  int steps = 3;
  std::string latency;    // --latency NAME=US,...: the allocator model's device-call costs
  bool past_oom = false;  // sweep: go on after the first OOM minibatch
  bool json = false;
  std::string out;
  std::string command_line;
};

// measure: the sweep's options (capacity "auto": free GPU memory minus the headroom) plus these.
struct MeasureArgs {
  SweepArgs sweep;
  std::string headroom = "3GiB";
  bool keep_going = false;
  double compute_tflops = 0;
};

// table: the advice grid (cmd_table.cpp); every list is comma-separated.
struct TableArgs {
  std::string models = "gpt2-xl,t5-3b";
  std::string models_file;
  std::string gpus = "a100-40gb:40,a100-80gb:80";  // NAME:GIB[:TFLOPS]
  std::string world_sizes = "8";
  std::string shardings = "FULL_SHARD";
  std::string precisions = "bf16";
  std::string activation_checkpointing = "0";  // 0, 1 or 0,1
  int64_t mbs_hi = 256;
  int64_t coarse_step = 8;
  int steps = 3;
  double tflops = 312.0;  // per GPU when --gpus does not say (A100 bf16 peak)
  double mfu = 0.4;
  double retry_stall_ms = 150.0;
  std::string latency;  // --latency NAME=US,...: device-call costs (default: LatencyModel's)
  std::string out;
  std::string command_line;
};

// The options sweep and measure share (--model ... --out), into `a`; measure's --capacity
// default is whatever `a` holds ("auto").
void add_fsdp_options(CLI::App& cmd, SweepArgs& a);

// Shared by sweep, measure and table: the FSDP configuration of the options, and the allocator
// settings of a PYTORCH_CUDA_ALLOC_CONF string (SettingsError on bad input).
FsdpConfig fsdp_config(const SweepArgs& a);
AllocatorSettings make_settings(const std::string& conf, const std::string& version,
                                double fraction);
// --mbs LO:HI[:STEP] (SettingsError unless 1 <= LO <= HI <= MAX_MICRO_BATCH and STEP >= 1).
void parse_range(const std::string& text, int64_t& lo, int64_t& hi, int64_t& step);

// The per-minibatch fields `sweep --json` prints (and `measure --json` extends).
nlohmann::ordered_json point_json(const SweepPoint& p);
// The run's configuration as `sweep --json` and `measure --json` print it (key order fixed).
nlohmann::ordered_json config_json(const SweepArgs& a, const FsdpConfig& c, uint64_t capacity,
                                   const AllocatorSettings& settings, int steps,
                                   const LatencyModel& latency);

}  // namespace mlprio::fsdp::cli
