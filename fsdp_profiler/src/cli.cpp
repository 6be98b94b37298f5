// The replay, sweep and measure commands of mlprio-fsdp: turn parsed arguments into library calls
// and print the results (a table, or JSON with --json), optionally writing HDF5 with --out.
#include "cli.hpp"

#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "h5_output.hpp"
#include "mlprio/fsdp/snapshot.hpp"
#include "mlprio/fsdp/sweep.hpp"
#include "mlprio/util/errors.hpp"
#include "mlprio/util/stop_signal.hpp"
#if MLPRIO_FSDP_MEASURE_MODULE
#include <dlfcn.h>

#include <climits>

#include "measure_module.hpp"
#endif

namespace mlprio::fsdp::cli {

using nlohmann::ordered_json;

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

namespace {

ordered_json stats_json(const MemoryStats& s) {
  ordered_json j = ordered_json::object();
  for (const auto& [k, v] : s.flatten()) j[k] = v;
  return j;
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

}  // namespace

int run_replay(const ReplayArgs& a) {
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
  return 0;
}

// The FSDP configuration shared by sweep and measure.
// The per-minibatch fields `sweep --json` prints (and `measure --json` extends).
static ordered_json point_json(const SweepPoint& p) {
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

// The run's configuration as `sweep --json` and `measure --json` print it (key order fixed).
template <class Options>
static ordered_json config_json(const SweepArgs& a, const FsdpConfig& c, uint64_t capacity,
                                const Options& o) {
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
                      {"alloc_conf", o.settings.to_alloc_conf()},
                      {"steps", o.steps},
                      {"latency", latency_text(o.latency)}};
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

int run_sweep_command(const SweepArgs& a) {
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
  const ordered_json cfg = config_json(a, c, o.capacity, o);
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
  return 0;
}

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
#endif

int run_measure_command(const MeasureArgs& m) {
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
  const FsdpConfig& c = o.base;
  ordered_json cfg = config_json(a, c, r.capacity, o);
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
  return 0;
#endif
}

}  // namespace mlprio::fsdp::cli
