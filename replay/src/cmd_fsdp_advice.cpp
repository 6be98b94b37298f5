// `mlprio-replay fsdp-advice`: the GPU-hours job_submit/mlprio's FSDP advice would
// have saved on a list of FSDP jobs, with the retry penalty the profiler's table predicts
// (mlprio/replay/fsdp_advice.hpp). The jobs come from a job list (`--jobs`: JOB_ID and #MLPRIO
// training keys per line), optionally joined by job id to an SWF/sacct trace (`--trace`) for the
// recorded run times and GPU counts, or are drawn from the table (`--generate N`). With --trace,
// `--write-trace` writes the trace with the advised run times as SWF, to replay both with `run`.
#include <fstream>
#include <iostream>
#include <memory>
#include <unordered_map>

#include "commands.hpp"
#include "mlprio/jobs/trace.hpp"
#include "mlprio/replay/fsdp_advice.hpp"

namespace mlprio::cli {

namespace {

struct FsdpAdviceArgs {
  std::string table;
  std::string jobs;
  std::string trace;
  size_t generate = 0;
  uint64_t seed = 16;
  int64_t gpu_gib = 80;
  std::string write_jobs;
  std::string write_trace;
  bool json = false;
  bool rows = false;
};

void run_fsdp_advice(const FsdpAdviceArgs& a) {
  if (a.jobs.empty() == (a.generate == 0))
    throw UsageError("fsdp-advice: give exactly one of --jobs FILE or --generate N");
  if (!a.write_trace.empty() && a.trace.empty())
    throw UsageError("fsdp-advice: --write-trace needs --trace");
  if (a.generate > replay::FSDP_JOBS_MAX)
    throw UsageError("fsdp-advice: --generate is bounded by " +
                     std::to_string(replay::FSDP_JOBS_MAX));
  const model::FsdpTable table = model::FsdpTable::load(a.table);
  std::vector<replay::FsdpJob> jobs = a.generate
                                          ? replay::generate_fsdp_jobs(table, a.generate, a.seed)
                                          : replay::read_fsdp_jobs(a.jobs);
  Trace trace;
  if (!a.trace.empty()) {
    trace = load_trace(a.trace);
    std::unordered_map<int64_t, const Job*> by_id;
    for (const Job& j : trace.jobs) by_id.emplace(j.id, &j);
    for (auto& j : jobs) {
      const auto it = by_id.find(j.id);
      if (it == by_id.end()) continue;
      if (j.run_s < 0 && it->second->run >= 0) j.run_s = it->second->run;
      if (j.directive.world_size == 0) {
        const double g =
            it->second->alloc_gpus >= 0 ? it->second->alloc_gpus : it->second->req_gpus;
        if (g >= 1) j.directive.world_size = static_cast<int64_t>(g);
      }
    }
  }
  if (!a.write_jobs.empty()) {
    std::ofstream out(a.write_jobs);
    replay::write_fsdp_jobs(out, jobs);
    if (!out.flush()) throw RuntimeError("cannot write " + a.write_jobs);
  }
  const replay::FsdpAdviceReport r = replay::apply_fsdp_advice(table, jobs, a.gpu_gib);
  if (!a.write_trace.empty()) {
    std::unordered_map<int64_t, double> advised;
    for (const auto& row : r.rows)
      if (row.verdict == model::FsdpVerdict::RETRIES && row.run_s >= 0)
        advised[row.id] = row.advised_run_s;
    for (Job& j : trace.jobs)
      if (const auto it = advised.find(j.id); it != advised.end()) j.run = it->second;
    std::ofstream out(a.write_trace);
    write_swf(out, trace.header, trace.jobs);
    if (!out.flush()) throw RuntimeError("cannot write " + a.write_trace);
  }
  if (a.json) {
    std::cout << r.to_json(a.rows).dump(2) << "\n";
    return;
  }
  std::printf(
      "jobs %zu: %zu below the retry point, %zu past it, %zu predicted OOM, %zu without "
      "advice (no table entry), %zu without a run time\n",
      r.jobs, r.ok, r.retries, r.oom, r.no_advice, r.unknown_run);
  std::printf(
      "GPU-hours recorded %.1f; of the retrying jobs %.1f; saved by the advice %.1f "
      "(%.2f %% of all, %.1f %% of theirs)\n",
      r.gpu_hours, r.gpu_hours_retry, r.gpu_hours_saved,
      r.gpu_hours > 0 ? 100.0 * r.gpu_hours_saved / r.gpu_hours : 0.0,
      r.gpu_hours_retry > 0 ? 100.0 * r.gpu_hours_saved / r.gpu_hours_retry : 0.0);
  std::printf(
      "GPU-hours of predicted-OOM jobs %.1f (warned, or refused with fsdp_refuse_oom=1, "
      "before they start; not counted as saved)\n",
      r.gpu_hours_oom);
}

}  // namespace

void add_fsdp_advice_command(CLI::App& app) {
  auto args = std::make_shared<FsdpAdviceArgs>();
  auto* cmd = app.add_subcommand(
      "fsdp-advice",
      "GPU-hours the FSDP minibatch advice of job_submit/mlprio saves on a list of FSDP jobs "
      "(retry penalty from the mlprio-fsdp table)");
  cmd->add_option("--table", args->table, "FSDP advice table (mlprio-fsdp table -o FILE)")
      ->required();
  cmd->add_option("--jobs", args->jobs,
                  "Job list: JOB_ID then #MLPRIO training keys, run_s=SECONDS, gpu_gib=N per "
                  "line");
  cmd->add_option("--trace", args->trace,
                  "SWF/sacct trace joined by job id: run times and GPU counts the list lacks");
  cmd->add_option("--generate", args->generate, "Draw N jobs from the table instead of --jobs");
  cmd->add_option("--seed", args->seed, "Seed of --generate")->capture_default_str();
  cmd->add_option("--gpu-gib", args->gpu_gib, "GPU memory of jobs without gpu_gib=")
      ->capture_default_str();
  cmd->add_option("--write-jobs", args->write_jobs, "Write the job list used (e.g. generated)");
  cmd->add_option("--write-trace", args->write_trace,
                  "Write --trace as SWF with the advised run times (replay it with `run`)");
  cmd->add_flag("--json", args->json, "Print the report as JSON");
  cmd->add_flag("--rows", args->rows, "With --json: one row per job");
  cmd->callback([args]() { run_fsdp_advice(*args); });
}

}  // namespace mlprio::cli
