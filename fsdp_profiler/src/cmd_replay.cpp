// `mlprio-fsdp replay`: re-runs the device_traces of a PyTorch memory snapshot on the simulated
// device under given allocator settings and prints the allocator's statistics (a summary, or
// JSON with --json), optionally writing them to HDF5 with --out.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "commands.hpp"
#include "h5_output.hpp"
#include "mlprio/cli/program.hpp"
#include "mlprio/fsdp/snapshot.hpp"

namespace mlprio::fsdp::cli {

namespace {

using nlohmann::ordered_json;

ordered_json stats_json(const MemoryStats& s) {
  ordered_json j = ordered_json::object();
  for (const auto& [k, v] : s.flatten()) j[k] = v;
  return j;
}

void run_replay(const ReplayArgs& a) {
  const AllocatorSettings settings =
      make_settings(a.alloc_conf, a.torch_version, a.memory_fraction);
  const uint64_t capacity = parse_bytes(a.capacity);
  const Snapshot snap = read_snapshot(a.snapshot);
  SimulatedDevice dev(capacity);
  ReplayOptions opts;
  opts.device_index = a.device;
  const ReplayResult r = replay_snapshot(snap, dev, settings, opts);
  ordered_json summary = {{"device", r.device_index},
                          {"entries", r.entries},
                          {"allocs", r.allocs},
                          {"frees", r.frees},
                          {"failed_allocs", r.failed_allocs},
                          {"unmatched_frees", r.unmatched_frees},
                          {"other_actions", r.other_actions}};
  if (a.json) {
    ordered_json j;
    j["stats"] = stats_json(r.stats);
    j["replay"] = summary;
    j["capacity_bytes"] = capacity;
    j["alloc_conf"] = settings.to_alloc_conf();
    std::cout << j.dump(2) << "\n";
  } else {
    const auto& s = r.stats;
    std::printf("replayed %lld entries of device %d on %s (%s)\n",
                static_cast<long long>(r.entries), r.device_index, format_bytes(capacity).c_str(),
                settings.to_alloc_conf().c_str());
    std::printf(
        "  num_alloc_retries %lld, num_ooms %lld, failed allocs %lld, unmatched frees %lld\n",
        static_cast<long long>(s.num_alloc_retries), static_cast<long long>(s.num_ooms),
        static_cast<long long>(r.failed_allocs), static_cast<long long>(r.unmatched_frees));
    std::printf("  peak allocated %s, peak reserved %s, segments now %lld\n",
                format_bytes(static_cast<uint64_t>(s.allocated_bytes[AGGREGATE].peak)).c_str(),
                format_bytes(static_cast<uint64_t>(s.reserved_bytes[AGGREGATE].peak)).c_str(),
                static_cast<long long>(s.segment[AGGREGATE].current));
  }
  if (!a.out.empty()) {
    ordered_json cfg = {{"snapshot", a.snapshot},
                        {"capacity_bytes", capacity},
                        {"alloc_conf", settings.to_alloc_conf()},
                        {"torch_version", a.torch_version}};
    write_replay_h5(a.out, RunInfo{a.command_line, cfg.dump(), ""}, r);
  }
}

}  // namespace

void add_replay_command(CLI::App& app) {
  auto args = std::make_shared<ReplayArgs>();
  auto* cmd = app.add_subcommand("replay", "Re-run a memory snapshot's device_traces");
  cmd->add_option("--snapshot", args->snapshot, "Snapshot as JSON (scripts/snapshot_to_json.py)")
      ->required();
  cmd->add_option("--capacity", args->capacity, "Device memory, e.g. 80GiB")->capture_default_str();
  cmd->add_option("--alloc-conf", args->alloc_conf, "PYTORCH_CUDA_ALLOC_CONF string");
  cmd->add_option("--torch-version", args->torch_version, "Allocator rules: 1.13 or 2.x")
      ->capture_default_str();
  cmd->add_option("--memory-fraction", args->memory_fraction,
                  "set_per_process_memory_fraction (0: not set)")
      ->capture_default_str();
  cmd->add_option("--device", args->device, "Device index in the snapshot (-1: first non-empty)")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print {\"stats\": memory_stats} as JSON");
  cmd->add_option("--out", args->out, "Write an HDF5 result file");
  cmd->callback([args] {
    args->command_line = mlprio::cli::command_line();
    run_replay(*args);
  });
}

}  // namespace mlprio::fsdp::cli
