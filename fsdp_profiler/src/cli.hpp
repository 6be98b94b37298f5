// The commands of mlprio-fsdp, called by main() after it has parsed the arguments. Each
// returns the process exit status; input errors are thrown as the library's typed exceptions
// and turned into messages by main().
#pragma once

#include <cstdint>
#include <string>

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
};

int run_replay(const ReplayArgs& args);
int run_sweep_command(const SweepArgs& args);
// Exit status 3 when there is no CUDA device (or the build has no CUDA).
int run_measure_command(const MeasureArgs& args);

}  // namespace mlprio::fsdp::cli
