// `mlprio-fsdp sweep`: runs the generated FSDP steps for each minibatch size of a range on the
// simulated device and reports retries, OOMs, peaks and fragmentation, and the largest minibatch
// without cudaMalloc retries (a table, or JSON with --json; HDF5 with --out). SIGTERM/SIGINT stop
// it between minibatch sizes with nothing written (exit 128 + signo).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "commands.hpp"
#include "h5_output.hpp"
#include "mlprio/cli/program.hpp"
#include "mlprio/util/errors.hpp"
#include "mlprio/util/stop_signal.hpp"

namespace mlprio::fsdp::cli {

namespace {

using nlohmann::ordered_json;

void run_sweep(const SweepArgs& a) {
  SweepOptions o;
  o.settings = make_settings(a.alloc_conf, a.torch_version, a.memory_fraction);
  o.latency = parse_latency(a.latency);
  o.capacity = parse_bytes(a.capacity);
  parse_range(a.mbs, o.mbs_lo, o.mbs_hi, o.mbs_step);
  o.stop_after_oom = !a.past_oom;
  if (a.past_oom && (o.mbs_hi - o.mbs_lo) / o.mbs_step + 1 > MAX_SWEEP_POINTS)
    throw SettingsError("--mbs " + a.mbs + " with --past-oom: " +
                        std::to_string((o.mbs_hi - o.mbs_lo) / o.mbs_step + 1) +
                        " minibatch sizes is more than the bound of " +
                        std::to_string(MAX_SWEEP_POINTS) + " (MAX_SWEEP_POINTS); give a STEP");
  o.steps = a.steps;
  o.base = fsdp_config(a);
  const FsdpConfig& c = o.base;
  if (isatty(STDERR_FILENO)) {
    o.progress = [](int64_t mbs, size_t done, size_t total) {
      if (mbs == 0)
        std::fprintf(stderr, "\r%zu/%zu minibatch sizes done.            \n", done, total);
      else
        std::fprintf(stderr, "\rmbs %lld (%zu/%zu)   ", static_cast<long long>(mbs), done + 1,
                     total);
    };
  }
  // SIGTERM/SIGINT stop the sweep between minibatch sizes, before anything is written; one that
  // comes during the write only is recorded, so the output is written whole (temp + rename).
  const util::StopOnSignal stop_on_signal;
  o.stop = [] { return util::stop_signal() != 0; };
  const SweepResult r = run_sweep(o);
  if (r.interrupted) {
    if (o.progress) std::fputc('\n', stderr);
    throw InterruptedError(
        util::stop_signal(),
        "sweep interrupted by " + util::signal_name(util::stop_signal()) + " after " +
            std::to_string(r.points.size()) + " minibatch sizes; nothing written (the profiler " +
            "sweep keeps no journal): run the same command again for the whole result");
  }
  if (r.stopped_at_point_bound)
    std::fprintf(stderr,
                 "mlprio-fsdp sweep: stopped after %lld minibatch sizes without an OOM (the bound "
                 "MAX_SWEEP_POINTS); narrow --mbs or give it a STEP\n",
                 static_cast<long long>(MAX_SWEEP_POINTS));
  StepGenerator probe(c);
  const int64_t params = c.model.total_params();
  const auto zero3 =
      static_cast<int64_t>(4 * probe.largest_unit_params() + 18 * params / c.world_size);
  const ordered_json cfg = config_json(a, c, o.capacity, o.settings, o.steps, o.latency);
  if (a.json) {
    ordered_json j = cfg;
    j["zero3_estimate_bytes"] = zero3;
    j["points"] = ordered_json::array();
    for (const auto& p : r.points) j["points"].push_back(point_json(p));
    j["max_safe_mbs"] = r.max_safe_mbs;
    j["first_bad_mbs"] = r.first_bad_mbs ? ordered_json(r.first_bad_mbs) : ordered_json(nullptr);
    j["stopped_at_point_bound"] = r.stopped_at_point_bound;
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("%s (%.2fB params), %d GPUs, %s, %s; DeepSpeed ZeRO-3 model-state estimate %s\n",
                c.model.name.c_str(), static_cast<double>(params) / 1e9, c.world_size,
                format_bytes(o.capacity).c_str(), o.settings.to_alloc_conf().c_str(),
                format_bytes(static_cast<uint64_t>(zero3)).c_str());
    std::printf("%6s %10s %8s %5s %14s %14s %6s\n", "mbs", "retries/st", "1st", "oom",
                "peak_reserved", "peak_alloc", "frag");
    for (const auto& p : r.points)
      std::printf("%6lld %10.2f %8lld %5s %14s %14s %6.3f\n", static_cast<long long>(p.mbs),
                  p.retries_per_step, static_cast<long long>(p.first_step_retries),
                  p.oom ? "yes" : "no",
                  format_bytes(static_cast<uint64_t>(p.peak_reserved)).c_str(),
                  format_bytes(static_cast<uint64_t>(p.peak_allocated)).c_str(), p.fragmentation);
    std::printf("max_safe_mbs %lld\n", static_cast<long long>(r.max_safe_mbs));
  }
  if (!a.out.empty()) write_sweep_h5(a.out, RunInfo{a.command_line, cfg.dump(), ""}, r);
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto args = std::make_shared<SweepArgs>();
  auto* cmd = app.add_subcommand("sweep", "Find the largest minibatch without cudaMalloc retries");
  add_fsdp_options(*cmd, *args);
  cmd->add_flag("--past-oom", args->past_oom,
                "Go on after the first minibatch that runs out of memory (default: stop there; "
                "the range may then hold at most 4096 sizes)");
  cmd->callback([args] {
    args->command_line = mlprio::cli::command_line();
    run_sweep(*args);
  });
}

}  // namespace mlprio::fsdp::cli
