// `mlprio-fsdp measure`: runs the sweep's FSDP steps on this node's GPU (one rank per GPU under
// mpirun/srun, NCCL between ranks) through the CUDA module (measure_module.hpp) and reports
// step time, retries and the device-call costs, with a fitted --latency line for sweep. Exit 3
// when there is no CUDA device, no loadable module, or the build has no CUDA.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "cli.hpp"
#include "commands.hpp"
#include "h5_output.hpp"
#include "mlprio/cli/program.hpp"
#include "mlprio/util/errors.hpp"
#if MLPRIO_FSDP_MEASURE_MODULE
#include <dlfcn.h>

#include <climits>

#include "measure_module.hpp"
#endif

namespace mlprio::fsdp::cli {

namespace {

using nlohmann::ordered_json;

#if MLPRIO_FSDP_MEASURE_MODULE
// Opens mlprio-fsdp-cuda.so (measure_module.hpp): $MLPRIO_FSDP_CUDA_MODULE, else
// <program's folder>/../lib/mlprio/mlprio-fsdp-cuda.so, the same place in the build tree and in
// an install. nullptr with the reason when it cannot be loaded: on a node without the CUDA or
// NCCL libraries dlopen names the missing library, which is "no CUDA here" (exit 3). A module
// of another build is a fault to fix (RuntimeError).
MeasureEntry load_measure_module(std::string& why) {
  std::string path;
  if (const char* env = std::getenv("MLPRIO_FSDP_CUDA_MODULE"); env != nullptr && *env != '\0') {
    path = env;
  } else {
    char exe[PATH_MAX] = {};
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    std::string dir = n > 0 ? std::string(exe, static_cast<size_t>(n)) : std::string(".");
    dir = dir.substr(0, dir.find_last_of('/') == std::string::npos ? 0 : dir.find_last_of('/'));
    path = (dir.empty() ? std::string(".") : dir) + "/../lib/mlprio/mlprio-fsdp-cuda.so";
  }
  // RTLD_GLOBAL: Open MPI, loaded with the module, dlopens its own components, which need its
  // symbols visible (as mpi4py loads it).
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) {
    const char* e = dlerror();
    why = "cannot load the CUDA module " + path + ": " + (e ? e : "unknown dlopen error");
    return nullptr;
  }
  auto abi = reinterpret_cast<MeasureAbiEntry>(dlsym(h, "mlprio_fsdp_measure_abi"));
  auto entry = reinterpret_cast<MeasureEntry>(dlsym(h, "mlprio_fsdp_measure"));
  if (abi == nullptr || entry == nullptr || abi() != MEASURE_MODULE_ABI)
    throw mlprio::RuntimeError(
        "the CUDA module " + path + " belongs to another build of mlprio-fsdp (ABI " +
        std::to_string(abi ? abi() : 0L) + ", expected " + std::to_string(MEASURE_MODULE_ABI) +
        "): install both from one build");
  return entry;  // never closed: the program ends after measuring
}

// Rank 0's report: the table (or JSON with --json) and the fitted latency line; the HDF5 file
// with --out.
void report_measure(const MeasureArgs& m, const MeasureOptions& o, const MeasureResult& r) {
  const SweepArgs& a = m.sweep;
  const FsdpConfig& c = o.base;
  ordered_json cfg = config_json(a, c, r.capacity, o.settings, o.steps, o.latency);
  cfg["device"] = "cuda";
  cfg["gpu"] = r.device_name;
  cfg["ranks"] = r.ranks;
  cfg["collectives"] = r.collectives;
  cfg["compute_tflops"] = m.compute_tflops;
  if (r.nccl_version) cfg["nccl_version"] = r.nccl_version;
  const LatencyModel fitted = fit_latency(r.calls, o.latency);
  if (a.json) {
    ordered_json j = cfg;
    j["points"] = ordered_json::array();
    for (const auto& mp : r.points) {
      ordered_json pj = point_json(mp.model);
      pj["step_ms"] = mp.step_ms;
      pj["first_step_ms"] = mp.first_step_ms;
      pj["device_call_ms_per_step"] = mp.device_call_ms_per_step;
      pj["retry_sync_ms_per_step"] = mp.retry_sync_ms_per_step;
      pj["compute_ms_per_step"] = mp.compute_ms_per_step;
      pj["samples_per_s"] = mp.samples_per_s;
      pj["collectives_per_step"] = mp.collectives_per_step;
      j["points"].push_back(std::move(pj));
    }
    j["max_safe_mbs"] = r.max_safe_mbs;
    j["first_bad_mbs"] = r.first_bad_mbs ? ordered_json(r.first_bad_mbs) : ordered_json(nullptr);
    const DeviceCallTimes& t = r.calls;
    j["device_calls"] = ordered_json{{"mallocs", t.mallocs}, {"malloc_ms", t.malloc_us / 1000},
                                     {"frees", t.frees},     {"free_ms", t.free_us / 1000},
                                     {"maps", t.maps},       {"map_ms", t.map_us / 1000},
                                     {"unmaps", t.unmaps},   {"unmap_ms", t.unmap_us / 1000},
                                     {"syncs", t.syncs},     {"sync_ms", t.sync_us / 1000},
                                     {"failed", t.failed},   {"failed_ms", t.failed_us / 1000}};
    j["fitted_latency"] = latency_text(fitted);
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("%s on %d x %s, budget %s per GPU, %s, collectives %s\n", c.model.name.c_str(),
                r.ranks, r.device_name.c_str(), format_bytes(r.capacity).c_str(),
                o.settings.to_alloc_conf().c_str(), r.collectives ? "NCCL" : "not run");
    std::printf("%6s %10s %5s %14s %6s %10s %10s %12s\n", "mbs", "retries/st", "oom",
                "peak_reserved", "frag", "step_ms", "calls_ms", "samples/s");
    for (const auto& mp : r.points) {
      const SweepPoint& p = mp.model;
      std::printf("%6lld %10.2f %5s %14s %6.3f %10.2f %10.2f %12.1f\n",
                  static_cast<long long>(p.mbs), p.retries_per_step, p.oom ? "yes" : "no",
                  format_bytes(static_cast<uint64_t>(p.peak_reserved)).c_str(), p.fragmentation,
                  mp.step_ms, mp.device_call_ms_per_step, mp.samples_per_s);
    }
    std::printf("max_safe_mbs %lld\n", static_cast<long long>(r.max_safe_mbs));
    std::printf("fitted latency (for sweep --latency): %s\n", latency_text(fitted).c_str());
  }
  if (!a.out.empty()) write_measure_h5(a.out, RunInfo{a.command_line, cfg.dump(), ""}, r, fitted);
}

#endif

int run_measure(const MeasureArgs& m) {
  const SweepArgs& a = m.sweep;
  const FsdpConfig base = fsdp_config(a);
  int64_t lo = 1, hi = 1, step = 1;
  parse_range(a.mbs, lo, hi, step);
  const AllocatorSettings settings =
      make_settings(a.alloc_conf, a.torch_version, a.memory_fraction);
  const uint64_t capacity = a.capacity == "auto" ? 0 : parse_bytes(a.capacity);
  const uint64_t headroom = parse_bytes(m.headroom);
  const LatencyModel latency = parse_latency(a.latency);
  if (!(m.compute_tflops >= 0 && m.compute_tflops <= 1e6))
    throw SettingsError("--compute-tflops: expected a number in [0, 1e6]");
#if !MLPRIO_FSDP_MEASURE_MODULE
  (void)base, (void)settings, (void)capacity, (void)headroom, (void)latency;
  std::fprintf(stderr,
               "mlprio-fsdp: no CUDA device: this build has no CUDA support; use `mlprio-fsdp "
               "sweep` for the simulated device\n");
  return mlprio::EXIT_NO_DEVICE;
#else
  MeasureOptions o;
  o.base = base;
  o.mbs_lo = lo;
  o.mbs_hi = hi;
  o.mbs_step = step;
  o.settings = settings;
  o.latency = latency;
  o.capacity = capacity;
  o.headroom = headroom;
  o.steps = a.steps;
  o.stop_after_oom = !m.keep_going;
  o.compute_tflops = m.compute_tflops;
  if (isatty(STDERR_FILENO)) {
    o.progress = [](int64_t mbs, size_t done, size_t total) {
      if (mbs == 0)
        std::fprintf(stderr, "\r%zu/%zu minibatch sizes measured.            \n", done, total);
      else
        std::fprintf(stderr, "\rmbs %lld (%zu/%zu)   ", static_cast<long long>(mbs), done + 1,
                     total);
    };
  }
  std::string why;
  const MeasureEntry measure = load_measure_module(why);
  MeasureResult r;
  char err[4096] = "";
  const int rc = measure != nullptr ? measure(&o, &r, err, sizeof err) : mlprio::EXIT_NO_DEVICE;
  if (measure == nullptr || rc == mlprio::EXIT_NO_DEVICE) {
    std::fprintf(stderr,
                 "mlprio-fsdp: no CUDA device: use `mlprio-fsdp sweep` for the simulated device "
                 "(%s)\n",
                 measure == nullptr ? why.c_str() : err);
    return mlprio::EXIT_NO_DEVICE;
  }
  if (rc == mlprio::EXIT_USAGE) throw mlprio::UsageError(err);
  if (rc != 0) throw mlprio::RuntimeError(err);
  if (r.rank != 0) return 0;
  report_measure(m, o, r);
  return 0;
#endif
}

}  // namespace

void add_measure_command(CLI::App& app) {
  auto args = std::make_shared<MeasureArgs>();
  args->sweep.capacity = "auto";
  auto* cmd = app.add_subcommand(
      "measure",
      "Run the sweep's FSDP steps on this GPU (one rank per GPU under mpirun/srun; "
      "NCCL between ranks) and measure step time");
  add_fsdp_options(*cmd, args->sweep);
  cmd->add_option("--headroom", args->headroom,
                  "GPU memory left outside the allocator for the CUDA context, NCCL and "
                  "kernels (with --capacity auto)")
      ->capture_default_str();
  cmd->add_option("--compute-tflops", args->compute_tflops,
                  "Model the GEMMs as GPU time at this rate (e.g. 400 for bf16 on an H100 at "
                  "~40 % of peak): 6 x params x tokens per sample, 8 with activation "
                  "checkpointing (0: no compute, only memory traffic)")
      ->capture_default_str();
  cmd->add_flag("--keep-going", args->keep_going,
                "Measure larger minibatches after the first out-of-memory one");
  cmd->callback([args] {
    args->sweep.command_line = mlprio::cli::command_line();
    mlprio::cli::exit_code() = run_measure(*args);
  });
}

}  // namespace mlprio::fsdp::cli
