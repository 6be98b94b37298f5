// `mlprio-fsdp table`: precomputes the FSDP advice table (mlprio/model/fsdp_table.hpp) that
// job_submit/mlprio and `mlprio-replay fsdp-advice` read. For each grid point (model, GPU,
// world size, sharding, precision, activation checkpointing, expandable_segments off and on) it
// runs the simulator's minibatch sweep twice: coarse (every STEP sizes, up to the first OOM), then
// one by one across the last coarse interval, so the retry band right below OOM is found exactly
// at a fraction of a full sweep's cost. The throughput penalty of a retrying minibatch is
//   extra / (compute + extra),  extra = (allocator device time above the last safe minibatch's)
//                                       + retries/step x retry_stall_ms
// with compute = (6, or 8 with activation checkpointing) x params x tokens x minibatch /
// (TFLOPS x MFU). retry_stall_ms stands for what the allocator model does not time: a retry's
// cudaFree synchronises the device and drains the prefetched all-gathers (the overlap of
// communication and compute is lost for that step). Its default is calibrated to the published
// anchor (T5-3B, about 12 % at a minibatch just past the cliff), not predicted.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "commands.hpp"
#include "mlprio/cli/program.hpp"
#include "mlprio/fsdp/sweep.hpp"
#include "mlprio/model/fsdp_table.hpp"
#include "mlprio/util/errors.hpp"
#include "mlprio/util/stop_signal.hpp"

namespace mlprio::fsdp::cli {

namespace {

using nlohmann::ordered_json;

std::vector<std::string> split_list(const std::string& text, const char* option) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(pos, end - pos);
    if (item.empty()) throw SettingsError(std::string(option) + ": empty item in '" + text + "'");
    out.push_back(item);
    pos = end + 1;
  }
  if (out.size() > 64) throw SettingsError(std::string(option) + ": more than 64 items");
  return out;
}

int64_t whole(const std::string& s, const std::string& what, int64_t lo, int64_t hi) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || v < lo || v > hi)
    throw SettingsError(what + ": expected a whole number in " + std::to_string(lo) + ".." +
                        std::to_string(hi) + ", got '" + s + "'");
  return v;
}

struct Gpu {
  std::string name;
  int64_t gib = 0;
  double tflops = 0;
};

// NAME:GIB[:TFLOPS], e.g. a100-80gb:80:312
std::vector<Gpu> parse_gpus(const std::string& text, double default_tflops) {
  std::vector<Gpu> out;
  for (const std::string& item : split_list(text, "--gpus")) {
    const size_t a = item.find(':');
    if (a == std::string::npos || a == 0)
      throw SettingsError("--gpus: expected NAME:GIB[:TFLOPS] items, e.g. a100-80gb:80:312, got '" +
                          item + "'");
    Gpu g;
    g.name = item.substr(0, a);
    const size_t b = item.find(':', a + 1);
    g.gib = whole(item.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1),
                  "--gpus " + g.name + " memory (GiB)", 1, model::FSDP_MAX_GPU_GIB);
    g.tflops = default_tflops;
    if (b != std::string::npos) {
      try {
        g.tflops = std::stod(item.substr(b + 1));
      } catch (const std::exception&) {
        g.tflops = -1;
      }
      if (!(g.tflops > 0 && g.tflops < 1e6))
        throw SettingsError("--gpus " + g.name + ": TFLOPS must be a number in (0, 1e6)");
    }
    out.push_back(g);
  }
  return out;
}

bool parse_flag(const std::string& s, const char* option) {
  if (s == "0" || s == "off" || s == "false") return false;
  if (s == "1" || s == "on" || s == "true") return true;
  throw SettingsError(std::string(option) + ": expected 0 or 1 items, got '" + s + "'");
}

std::string dims_of(const TransformerShape& m) {
  return std::to_string(m.n_layers) + "/" + std::to_string(m.n_dec_layers) + "/" +
         std::to_string(m.d_model) + "/" + std::to_string(m.n_heads) + "/" +
         std::to_string(m.d_ff) + "/" + std::to_string(m.vocab);
}

struct Point {
  int64_t mbs = 0;
  bool oom = false;
  double retries = 0;
  double overhead_ms = 0;
};

// One grid point: coarse sweep to the first OOM, then one by one over the last interval.
model::FsdpEntry sweep_entry(const TableArgs& a, SweepOptions o, const Gpu& gpu, size_t& sims) {
  std::vector<Point> pts;
  auto run = [&](int64_t lo, int64_t hi, int64_t step) {
    o.mbs_lo = lo;
    o.mbs_hi = hi;
    o.mbs_step = step;
    o.stop_after_oom = true;
    const SweepResult r = run_sweep(o);
    if (r.interrupted)
      throw InterruptedError(util::stop_signal(), "table interrupted; nothing written");
    for (const SweepPoint& p : r.points) {
      ++sims;
      pts.push_back({p.mbs, p.oom, p.retries_per_step, p.alloc_overhead_ms_per_step});
    }
  };
  const int64_t coarse = a.coarse_step;
  run(coarse, a.mbs_hi, coarse);
  int64_t first_bad = 0;
  for (const Point& p : pts)
    if (p.oom || p.retries > 0) {
      first_bad = p.mbs;
      break;
    }
  const int64_t last = pts.empty() ? 0 : pts.back().mbs;
  const int64_t fine_lo = first_bad ? std::max<int64_t>(1, first_bad - coarse + 1) : 1;
  const int64_t fine_hi = first_bad ? last : std::min<int64_t>(coarse - 1, a.mbs_hi);
  if (fine_hi >= fine_lo) run(fine_lo, fine_hi, 1);
  std::sort(pts.begin(), pts.end(), [](const Point& x, const Point& y) { return x.mbs < y.mbs; });
  pts.erase(std::unique(pts.begin(), pts.end(),
                        [](const Point& x, const Point& y) { return x.mbs == y.mbs; }),
            pts.end());

  model::FsdpEntry e;
  e.mbs_hi = a.mbs_hi;
  const Point* safe = nullptr;
  for (const Point& p : pts) {
    if (p.oom) {
      e.oom_mbs = p.mbs;
      break;
    }
    if (p.retries > 0) {
      if (!e.first_retry_mbs) e.first_retry_mbs = p.mbs;
      continue;
    }
    if (!e.first_retry_mbs) safe = &p;
  }
  e.max_safe_mbs = safe ? safe->mbs : 0;
  // The penalty of each retrying size between the last safe one and the OOM.
  const FsdpConfig& c = o.base;
  const double flops_per_sample = StepGenerator(c).flops_per_sample();
  for (const Point& p : pts) {
    if (p.mbs <= e.max_safe_mbs || p.oom || p.retries <= 0) continue;
    const double compute_ms =
        flops_per_sample * static_cast<double>(p.mbs) / (gpu.tflops * 1e12 * a.mfu) * 1e3;
    const double extra = std::max(0.0, p.overhead_ms - (safe ? safe->overhead_ms : 0.0)) +
                         p.retries * a.retry_stall_ms;
    e.retry_points.emplace_back(p.mbs, extra / (compute_ms + extra));
  }
  return e;
}

void run_table(const TableArgs& a) {
  if (a.out.empty()) throw SettingsError("table: -o FILE is required");
  if (a.mbs_hi < 1 || a.mbs_hi > 4096) throw SettingsError("--mbs-hi: expected 1..4096");
  if (a.coarse_step < 1 || a.coarse_step > 256)
    throw SettingsError("--coarse-step: expected 1..256");
  if (!(a.mfu > 0 && a.mfu <= 1)) throw SettingsError("--mfu: expected a number in (0, 1]");
  if (!(a.retry_stall_ms >= 0 && a.retry_stall_ms < 1e6))
    throw SettingsError("--retry-stall-ms: expected a number >= 0");
  const LatencyModel latency = parse_latency(a.latency);
  const auto models = split_list(a.models, "--models");
  const auto gpus = parse_gpus(a.gpus, a.tflops);
  std::vector<int64_t> worlds;
  for (const auto& w : split_list(a.world_sizes, "--world-sizes"))
    worlds.push_back(whole(w, "--world-sizes", 1, model::FSDP_MAX_WORLD_SIZE));
  const auto shardings = split_list(a.shardings, "--shardings");
  const auto precisions = split_list(a.precisions, "--precisions");
  std::vector<bool> acs;
  for (const auto& s : split_list(a.activation_checkpointing, "--activation-checkpointing"))
    acs.push_back(parse_flag(s, "--activation-checkpointing"));
  const size_t total = models.size() * gpus.size() * worlds.size() * shardings.size() *
                       precisions.size() * acs.size() * 2;
  if (total > model::FSDP_TABLE_MAX_ENTRIES)
    throw SettingsError("table: " + std::to_string(total) + " grid points is more than " +
                        std::to_string(model::FSDP_TABLE_MAX_ENTRIES));

  const util::StopOnSignal stop_on_signal;
  model::FsdpTable table;
  size_t done = 0, sims = 0;
  for (const auto& m : models)
    for (const Gpu& g : gpus)
      for (int64_t w : worlds)
        for (const auto& sh : shardings)
          for (const auto& pr : precisions)
            for (bool ac : acs)
              for (bool exp : {false, true}) {
                SweepArgs sa;
                sa.model = m;
                sa.models_file = a.models_file;
                sa.world_size = static_cast<int>(w);
                sa.sharding = sh;
                sa.precision = pr;
                sa.activation_checkpointing = ac;
                sa.steps = a.steps;
                SweepOptions o;
                o.base = fsdp_config(sa);
                o.settings = make_settings(exp ? "expandable_segments:True" : "", "2.x", 0.0);
                o.capacity = static_cast<uint64_t>(g.gib) << 30;
                o.latency = latency;
                o.steps = a.steps;
                o.stop = [] { return util::stop_signal() != 0; };
                if (isatty(STDERR_FILENO))
                  std::fprintf(stderr, "\r%zu/%zu %s %s x%lld ...        ", done + 1, total,
                               m.c_str(), g.name.c_str(), static_cast<long long>(w));
                model::FsdpEntry e = sweep_entry(a, o, g, sims);
                StepGenerator probe(o.base);
                e.key.model = o.base.model.name;
                e.key.gpu_memory_gib = g.gib;
                e.key.world_size = w;
                e.key.sharding = sh;
                e.key.precision = pr;
                e.key.activation_checkpointing = ac;
                e.key.seq_len = probe.enc_seq_len();
                e.key.tgt_len = o.base.model.encoder_decoder() ? probe.dec_seq_len() : 0;
                e.key.expandable_segments = exp;
                e.gpu = g.name;
                e.dims = dims_of(o.base.model);
                e.default_lengths = true;
                table.add(std::move(e));
                ++done;
              }
  if (isatty(STDERR_FILENO)) std::fputc('\n', stderr);
  const ordered_json gen = {{"tool", "mlprio-fsdp table"},
                            {"command_line", a.command_line},
                            {"steps", a.steps},
                            {"coarse_step", a.coarse_step},
                            {"mfu", a.mfu},
                            {"retry_stall_ms", a.retry_stall_ms},
                            {"latency", latency_text(latency)},
                            {"simulations", sims}};
  const std::string text = table.to_json(gen).dump(1) + "\n";
  // Written whole (temp + rename): the plugin may be reading the old table.
  const std::string tmp = a.out + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) throw mlprio::RuntimeError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), a.out.c_str()) != 0)
    throw mlprio::RuntimeError("cannot rename " + tmp + " to " + a.out);
  std::printf("%-18s %5s %5s %-13s %-5s %3s %4s %8s %8s %6s %8s\n", "model", "GiB", "world",
              "sharding", "prec", "ac", "exp", "max_safe", "1st_retr", "oom", "penalty");
  for (const auto& e : table.entries())
    std::printf(
        "%-18s %5lld %5lld %-13s %-5s %3s %4s %8lld %8s %6s %8s\n", e.key.model.c_str(),
        static_cast<long long>(e.key.gpu_memory_gib), static_cast<long long>(e.key.world_size),
        e.key.sharding.c_str(), e.key.precision.c_str(),
        e.key.activation_checkpointing ? "yes" : "no", e.key.expandable_segments ? "on" : "off",
        static_cast<long long>(e.max_safe_mbs),
        e.first_retry_mbs ? std::to_string(e.first_retry_mbs).c_str() : "-",
        e.oom_mbs ? std::to_string(e.oom_mbs).c_str() : "-",
        e.retry_points.empty()
            ? "-"
            : (std::to_string(static_cast<int>(e.retry_points.front().second * 100 + 0.5)) + "%")
                  .c_str());
  std::printf("%zu entries, %zu simulations -> %s\n", table.entries().size(), sims, a.out.c_str());
}

}  // namespace

void add_table_command(CLI::App& app) {
  auto args = std::make_shared<TableArgs>();
  TableArgs& a = *args;
  auto* cmd = app.add_subcommand(
      "table",
      "Precompute the FSDP advice table job_submit/mlprio and mlprio-replay fsdp-advice read: "
      "per configuration the largest safe minibatch, the first with retries, the OOM point and "
      "the retry throughput penalty (expandable_segments off and on)");
  cmd->add_option("--models", a.models, "Models, comma-separated")->capture_default_str();
  cmd->add_option("--models-file", a.models_file, "Extra shapes (default configs/models.json)");
  cmd->add_option("--gpus", a.gpus, "GPUs as NAME:GIB[:TFLOPS], comma-separated")
      ->capture_default_str();
  cmd->add_option("--world-sizes", a.world_sizes, "World sizes, comma-separated")
      ->capture_default_str();
  cmd->add_option("--shardings", a.shardings, "FULL_SHARD, SHARD_GRAD_OP and/or NO_SHARD")
      ->capture_default_str();
  cmd->add_option("--precisions", a.precisions, "bf16 and/or fp32")->capture_default_str();
  cmd->add_option("--activation-checkpointing", a.activation_checkpointing, "0, 1 or 0,1")
      ->capture_default_str();
  cmd->add_option("--mbs-hi", a.mbs_hi, "Largest minibatch swept (1..4096)")->capture_default_str();
  cmd->add_option("--coarse-step", a.coarse_step,
                  "Coarse sweep step; the last interval before the first bad size is swept "
                  "one by one")
      ->capture_default_str();
  cmd->add_option("--steps", a.steps, "Training steps per minibatch")->capture_default_str();
  cmd->add_option("--tflops", a.tflops, "GPU peak TFLOPS where --gpus does not say")
      ->capture_default_str();
  cmd->add_option("--mfu", a.mfu, "Model FLOPs utilisation for the compute-time estimate")
      ->capture_default_str();
  cmd->add_option("--retry-stall-ms", a.retry_stall_ms,
                  "Stall per retry not timed by the allocator model (calibrated: T5-3B ~12 %)")
      ->capture_default_str();
  cmd->add_option("--latency", a.latency,
                  "Device-call costs of the allocator model, as for sweep (e.g. the line "
                  "measure printed on the site's GPU)");
  cmd->add_option("-o,--out", a.out, "Table file (JSON) to write")->required();
  cmd->callback([args] {
    args->command_line = mlprio::cli::command_line();
    run_table(*args);
  });
}

}  // namespace mlprio::fsdp::cli
