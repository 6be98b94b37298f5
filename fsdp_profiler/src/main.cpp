// mlprio-fsdp: predicts CUDA caching-allocator retries and fragmentation for FSDP training on a
// simulated device, or measures them on GPUs (measure, built with CUDA). main() declares every
// option (with help and default) and dispatches to cli.cpp; errors become one message on stderr and
// the exit status of mlprio/util/errors.hpp (mlprio/cli/program.hpp): 2 for usage or bad input, 1
// for a runtime failure, 3 for no CUDA device (measure), 128 + signo for a sweep stopped by
// SIGTERM/SIGINT.
#include <CLI/CLI.hpp>
#include <string>

#include "cli.hpp"
#include "mlprio/cli/program.hpp"

int main(int argc, char** argv) {
  using namespace mlprio::fsdp;
  CLI::App app{
      "mlprio-fsdp: CUDA caching-allocator model for FSDP training (simulated device; measure on "
      "GPUs)"};
  app.require_subcommand(1);
  const std::string command_line = mlprio::cli::join_command_line(argc, argv);

  cli::ReplayArgs ra;
  ra.command_line = command_line;
  auto* replay = app.add_subcommand("replay", "Re-run a memory snapshot's device_traces");
  replay->add_option("--snapshot", ra.snapshot, "Snapshot as JSON (scripts/snapshot_to_json.py)")
      ->required();
  replay->add_option("--capacity", ra.capacity, "Device memory, e.g. 80GiB")->capture_default_str();
  replay->add_option("--alloc-conf", ra.alloc_conf, "PYTORCH_CUDA_ALLOC_CONF string");
  replay->add_option("--torch-version", ra.torch_version, "Allocator rules: 1.13 or 2.x")
      ->capture_default_str();
  replay
      ->add_option("--memory-fraction", ra.memory_fraction,
                   "set_per_process_memory_fraction (0: not set)")
      ->capture_default_str();
  replay->add_option("--device", ra.device, "Device index in the snapshot (-1: first non-empty)")
      ->capture_default_str();
  replay->add_flag("--json", ra.json, "Print {\"stats\": memory_stats} as JSON");
  replay->add_option("--out", ra.out, "Write an HDF5 result file");

  // The options sweep and measure share (measure: --capacity defaults to "auto").
  auto add_fsdp_options = [](CLI::App* sub, cli::SweepArgs& a) {
    sub->add_option("--model", a.model,
                    "gpt2-xl, t5-3b, llama2-7b, llama2-13b or a models-file name")
        ->required();
    sub->add_option("--models-file", a.models_file, "Extra shapes (default configs/models.json)");
    sub->add_option("--world-size", a.world_size, "Number of GPUs")->capture_default_str();
    sub->add_option("--capacity", a.capacity,
                    "Memory per GPU, e.g. 80GiB (measure: auto = free GPU memory - headroom)")
        ->capture_default_str();
    sub->add_option("--mbs", a.mbs, "Per-GPU minibatch range LO:HI[:STEP]")->capture_default_str();
    sub->add_option("--alloc-conf", a.alloc_conf, "PYTORCH_CUDA_ALLOC_CONF string");
    sub->add_option("--torch-version", a.torch_version, "Allocator rules: 1.13 or 2.x")
        ->capture_default_str();
    sub->add_option("--memory-fraction", a.memory_fraction,
                    "set_per_process_memory_fraction (0: not set)")
        ->capture_default_str();
    sub->add_option("--sharding", a.sharding, "FULL_SHARD, SHARD_GRAD_OP or NO_SHARD")
        ->capture_default_str();
    sub->add_option("--fsdp", a.fsdp, "FSDP implementation: 1 (flat params) or 2 (fully_shard)")
        ->capture_default_str();
    sub->add_option("--precision", a.precision, "bf16 (mixed) or fp32")->capture_default_str();
    sub->add_flag("--activation-checkpointing", a.activation_checkpointing,
                  "Checkpoint every transformer block");
    sub->add_flag("--flash-attention", a.flash_attention, "No s^2 attention tensors");
    sub->add_option("--limit-all-gathers", a.limit_all_gathers,
                    "FSDP1 all-gathers in flight (0: unlimited)")
        ->capture_default_str();
    sub->add_option("--seq-len", a.seq_len,
                    "Tokens per sample (encoder length for encoder-decoder models; 0: the model's)")
        ->capture_default_str();
    sub->add_option("--tgt-len", a.tgt_len,
                    "Decoder tokens of an encoder-decoder model (0: the model's)")
        ->capture_default_str();
    sub->add_option("--steps", a.steps, "Training steps per minibatch")->capture_default_str();
    sub->add_option("--latency", a.latency,
                    "Device-call costs the allocator model charges, NAME=MICROSECONDS,... of "
                    "malloc_us, malloc_us_per_gib, free_us, map_page_us, unmap_page_us, "
                    "sync_all_streams_us (measure prints a fitted line)");
    sub->add_flag("--json", a.json, "Print the result as JSON");
    sub->add_option("--out", a.out, "Write an HDF5 result file");
  };

  cli::SweepArgs sa;
  sa.command_line = command_line;
  auto* sweep =
      app.add_subcommand("sweep", "Find the largest minibatch without cudaMalloc retries");
  add_fsdp_options(sweep, sa);
  sweep->add_flag("--past-oom", sa.past_oom,
                  "Go on after the first minibatch that runs out of memory (default: stop there; "
                  "the range may then hold at most 4096 sizes)");

  cli::MeasureArgs ma;
  ma.sweep.command_line = command_line;
  ma.sweep.capacity = "auto";
  auto* measure = app.add_subcommand(
      "measure",
      "Run the sweep's FSDP steps on this GPU (one rank per GPU under mpirun/srun; "
      "NCCL between ranks) and measure step time");
  add_fsdp_options(measure, ma.sweep);
  measure
      ->add_option("--headroom", ma.headroom,
                   "GPU memory left outside the allocator for the CUDA context, NCCL and "
                   "kernels (with --capacity auto)")
      ->capture_default_str();
  measure
      ->add_option("--compute-tflops", ma.compute_tflops,
                   "Model the GEMMs as GPU time at this rate (e.g. 400 for bf16 on an H100 at "
                   "~40 % of peak): 6 x params x tokens per sample, 8 with activation "
                   "checkpointing (0: no compute, only memory traffic)")
      ->capture_default_str();
  measure->add_flag("--keep-going", ma.keep_going,
                    "Measure larger minibatches after the first out-of-memory one");

  cli::TableArgs ta;
  ta.command_line = command_line;
  auto* table = app.add_subcommand(
      "table",
      "Precompute the FSDP advice table job_submit/mlprio and mlprio-replay fsdp-advice read: "
      "per configuration the largest safe minibatch, the first with retries, the OOM point and "
      "the retry throughput penalty (expandable_segments off and on)");
  table->add_option("--models", ta.models, "Models, comma-separated")->capture_default_str();
  table->add_option("--models-file", ta.models_file, "Extra shapes (default configs/models.json)");
  table->add_option("--gpus", ta.gpus, "GPUs as NAME:GIB[:TFLOPS], comma-separated")
      ->capture_default_str();
  table->add_option("--world-sizes", ta.world_sizes, "World sizes, comma-separated")
      ->capture_default_str();
  table->add_option("--shardings", ta.shardings, "FULL_SHARD, SHARD_GRAD_OP and/or NO_SHARD")
      ->capture_default_str();
  table->add_option("--precisions", ta.precisions, "bf16 and/or fp32")->capture_default_str();
  table->add_option("--activation-checkpointing", ta.activation_checkpointing, "0, 1 or 0,1")
      ->capture_default_str();
  table->add_option("--mbs-hi", ta.mbs_hi, "Largest minibatch swept (1..4096)")
      ->capture_default_str();
  table
      ->add_option("--coarse-step", ta.coarse_step,
                   "Coarse sweep step; the last interval before the first bad size is swept "
                   "one by one")
      ->capture_default_str();
  table->add_option("--steps", ta.steps, "Training steps per minibatch")->capture_default_str();
  table->add_option("--tflops", ta.tflops, "GPU peak TFLOPS where --gpus does not say")
      ->capture_default_str();
  table->add_option("--mfu", ta.mfu, "Model FLOPs utilisation for the compute-time estimate")
      ->capture_default_str();
  table
      ->add_option("--retry-stall-ms", ta.retry_stall_ms,
                   "Stall per retry not timed by the allocator model (calibrated: T5-3B ~12 %)")
      ->capture_default_str();
  table->add_option("--latency", ta.latency,
                    "Device-call costs of the allocator model, as for sweep (e.g. the line "
                    "measure printed on the site's GPU)");
  table->add_option("-o,--out", ta.out, "Table file (JSON) to write")->required();

  // Bad input (SettingsError, SnapshotError, ModelConfigError, ...) is reported without the
  // "error:" prefix, as this program always has.
  const mlprio::cli::ProgramStyle style{.name = "mlprio-fsdp", .plain_input_errors = true};
  return mlprio::cli::run_program(app, argc, argv, style, [&] {
    if (replay->parsed()) return cli::run_replay(ra);
    if (measure->parsed()) return cli::run_measure_command(ma);
    if (table->parsed()) return cli::run_table_command(ta);
    return cli::run_sweep_command(sa);
  });
}
