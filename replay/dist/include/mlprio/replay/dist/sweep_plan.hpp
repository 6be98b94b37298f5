// A sweep expanded into tasks (traces x policies x multifactor weight grid x backfilling rules x
// windows), built identically on every rank; one task's replay and its result, with the per-job
// detail's byte codec that carries it between ranks. Nothing here needs MPI.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mlprio/jobs/trace.hpp"
#include "mlprio/replay/dist/sweep_spec.hpp"
#include "mlprio/replay/ml.hpp"
#include "mlprio/replay/simulator.hpp"
#include "mlprio/replay/slurm_replay.hpp"
#include "mlprio/replay/spec.hpp"

namespace mlprio::replay::dist {

struct SweepTask {
  int64_t id = 0;  // position in the output (trace, policy, params, backfill, window)
  int trace = 0;   // index into SweepPlan::traces
  std::string policy;
  replay::Backfill backfill = replay::Backfill::EASY;
  int params = 0;  // index into SweepPlan::params (0 for orders without weights)
  int slurm = -1;  // index into SweepPlan::slurm: a deployed-stack task (policy = the file's name)
  int64_t window_start = 0, window_len = 0;
  double cost = 0;  // jobs replayed, times a factor for costlier rules: largest first
  std::string key;  // unique, human-readable name: used in messages and the journal
};

// Everything every rank needs, built identically on each: the loaded traces, the parameter sets
// and the task list.
struct SweepPlan {
  SweepSpec spec;
  std::vector<Trace> traces;
  std::vector<replay::PolicyOptions> params;
  // The slurm.conf files of the deployed-stack tasks (spec.slurm_confs, read once per rank), the
  // release they are replayed as, and the models their plugins load (each loaded once).
  std::vector<replay::SlurmStack> slurm;
  int slurm_release = 0;
  std::shared_ptr<replay::SlurmModelCache> slurm_models;
  std::vector<SweepTask> tasks;  // by id
  // Task id by key, built once with the tasks: the journal reader and the MPI master look every
  // record up here (the index used to be rebuilt per journal line, which made resume quadratic).
  std::unordered_map<std::string, int64_t> task_ids;
  std::string fingerprint;                // the settings every task shares; a journal must match it
  replay::SimConfig base;                 // machine etc. (per trace machine when nodes == 0)
  std::vector<replay::Machine> machines;  // per trace
  // The checked replay options, with the model of --estimate model:FILE loaded (each rank loads
  // it and predicts the same way, so every rank computes the same bits).
  std::shared_ptr<const replay::ReplaySetup> setup;
};

// Loads the traces and expands the tasks. Throws SweepError, InputError, ConfigError.
SweepPlan make_sweep_plan(const SweepSpec& spec);

// The id of the task named `key`, or -1 (plan.task_ids).
int64_t find_task(const SweepPlan& plan, const std::string& key);

// Task ids in dispatch order: largest cost first, ties by id.
std::vector<int64_t> dispatch_order(const SweepPlan& plan);

struct TaskResult {
  int64_t task = -1;
  bool ok = false;
  std::string error;        // when !ok
  replay::Summary summary;  // when ok
  // Per-job detail (spec.per_job and ok): the tables of `run --out`. Never journaled.
  bool has_detail = false;
  std::vector<replay::JobOutcome> jobs;
  std::vector<replay::UserSummary> users;
  replay::TimeSeries series;
  replay::AgentStats agent;  // external:CMD and llm:URL tasks, with the per-job detail
};

// Replays one task; never throws for a failing replay (the failure is the result).
TaskResult run_task(const SweepPlan& plan, const SweepTask& task);

// The per-job detail as bytes (counts, then the arrays as stored in memory: the ranks of one job
// run the same binary) and back. decode_detail throws SweepError for a malformed buffer.
std::string encode_detail(const TaskResult& r);
void decode_detail(std::string_view bytes, TaskResult& r);

}  // namespace mlprio::replay::dist
