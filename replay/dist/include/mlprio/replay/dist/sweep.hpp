// Parameter sweeps of the replayer (`mlprio-replay sweep`): the task list (traces x policies x
// multifactor weight grid x backfilling rules x windows), the reproducible window draw, the TOML
// config subset, the resume journal, one task's replay, and the final HDF5/JSON output. Nothing
// here needs MPI: run_sweep_serial() is the one-process loop (also the non-MPI build's), and
// sweep_mpi.hpp hands the same tasks out over MPI. Both give bit-identical results because every
// number crosses process boundaries and the journal as a C99 hex float.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mlprio/jobs/trace.hpp"
#include "mlprio/model/predictor.hpp"
#include "mlprio/replay/ml.hpp"
#include "mlprio/replay/simulator.hpp"
#include "mlprio/replay/spec.hpp"
#include "mlprio/util/errors.hpp"
#include "mlprio/util/splitmix64.hpp"

namespace mlprio::replay::dist {

inline constexpr int SWEEP_LAYOUT_VERSION = 1;
inline constexpr const char* JOURNAL_MAGIC = "mlprio-sweep-journal 1";

// A sweep that cannot run as asked (bad option, config line, window, journal of another sweep).
class SweepError : public ::mlprio::UsageError {
 public:
  using ::mlprio::UsageError::UsageError;
};

// The window draw's generator: core's SplitMix64 (mlprio/util/splitmix64.hpp).
using SplitMix64 = ::mlprio::util::SplitMix64;

// The most tasks one sweep may expand to (traces x policies x parameter sets x backfills x
// windows), and so the most random windows or parameter sets: the plan and its results are held
// in memory, one entry per task.
inline constexpr int64_t MAX_SWEEP_TASKS = 1'000'000;

// COUNT distinct window starts for windows of LEN jobs in a trace of N jobs: uniform in
// [0, N - LEN], drawn from SplitMix64(seed) with `below`, without replacement (a start already
// drawn, or listed in `taken`, is drawn again), in draw order. A draw with no repeat gives the
// same starts as the plain draw of earlier versions, so their journals stay valid. Throws
// SweepError when LEN > N, when COUNT is more than MAX_SWEEP_TASKS, or when COUNT is more than
// the distinct starts there are (N - LEN + 1, less those in `taken`).
std::vector<int64_t> draw_window_starts(int64_t count, int64_t len, int64_t trace_jobs,
                                        uint64_t seed, const std::vector<int64_t>& taken = {});

// What the user asked for (command line and/or TOML config).
struct SweepSpec {
  std::vector<std::string> traces;
  std::vector<std::string> policies{"fcfs"};
  std::vector<std::string> backfills{"easy"};
  std::vector<std::pair<int64_t, int64_t>> windows;  // explicit START:LEN
  int64_t random_count = 0, random_len = 0;           // --windows COUNTxLEN
  uint64_t seed = 1;
  bool per_job = false;                      // store per-job detail (/tasks/task_NNNN)
  // Estimate, EASY++ parts, the ml score and the machine: the options run and tune share.
  replay::ReplaySpec replay;
  // The multifactor weight grid: every combination is one parameter set (Cartesian product).
  std::vector<double> weight_age{1000}, weight_job_size{1000}, weight_fairshare{10000};
  std::vector<double> max_age{7 * 86400.0}, decay_half_life{7 * 86400.0};
  bool favor_small = false;
};

// Reads the TOML subset documented in replay/README.md ("Sweeps"): `key = value` with strings,
// integers, floats, booleans and one-line arrays of them, `[table]` headers and # comments.
// Keys it sets: top level traces, policies, backfill, windows ("START:LEN" strings), estimate,
// estimate_quantile, correction, backfill_order, allocation, kill_at_limit, too_large, per_job;
// [random_windows] count, len, seed; [machine] nodes, cores_per_node; [ml] age_weight,
// starvation_limit, size_weight, fail_weight; [multifactor] weight_age, weight_job_size, weight_fairshare, max_age,
// decay_half_life (numbers or arrays: the grid), favor_small. Unknown keys are errors naming
// file:line. Values it sets replace those in `spec`.
void apply_sweep_config(const std::string& path, SweepSpec& spec);

// Parses "START:LEN" and "COUNTxLEN"; throw SweepError with an example of a valid value.
std::pair<int64_t, int64_t> parse_window_arg(const std::string& text);
std::pair<int64_t, int64_t> parse_windows_arg(const std::string& text);

struct SweepTask {
  int64_t id = 0;          // position in the output (trace, policy, params, backfill, window)
  int trace = 0;           // index into SweepPlan::traces
  std::string policy;
  replay::Backfill backfill = replay::Backfill::EASY;
  int params = 0;          // index into SweepPlan::params (0 for orders without weights)
  int64_t window_start = 0, window_len = 0;
  double cost = 0;         // jobs replayed, times a factor for costlier rules: largest first
  std::string key;         // unique, human-readable name: used in messages and the journal
};

// Everything every rank needs, built identically on each: the loaded traces, the parameter sets
// and the task list.
struct SweepPlan {
  SweepSpec spec;
  std::vector<Trace> traces;
  std::vector<replay::PolicyOptions> params;
  std::vector<SweepTask> tasks;   // by id
  // Task id by key, built once with the tasks: the journal reader and the MPI master look every
  // record up here (the index used to be rebuilt per journal line, which made resume quadratic).
  std::unordered_map<std::string, int64_t> task_ids;
  std::string fingerprint;        // the settings every task shares; a journal must match it
  replay::SimConfig base;         // machine etc. (per trace machine when nodes == 0)
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
  std::string error;          // when !ok
  replay::Summary summary;    // when ok
  // Per-job detail (spec.per_job and ok): the tables of `run --out`. Never journaled.
  bool has_detail = false;
  std::vector<replay::JobOutcome> jobs;
  std::vector<replay::UserSummary> users;
  replay::TimeSeries series;
};

// The per-job detail as bytes (counts, then the arrays as stored in memory: the ranks of one job
// run the same binary) and back. decode_detail throws SweepError for a malformed buffer.
std::string encode_detail(const TaskResult& r);
void decode_detail(std::string_view bytes, TaskResult& r);

// Replays one task; never throws for a failing replay (the failure is the result).
TaskResult run_task(const SweepPlan& plan, const SweepTask& task);

// One journal record, one line: "R\t<key>\tok\t<jobs>\t...\t<hex floats>\t<fnv1a>" or
// "R\t<key>\tfailed\t<message>\t<fnv1a>". Parsing checks the checksum and rejects torn lines.
std::string result_line(const SweepPlan& plan, const TaskResult& r);
// Dispatch note: "S\t<key>\t<rank>\t<fnv1a>": the task was handed to a rank.
std::string started_line(const SweepPlan& plan, int64_t task, int rank);

// The journal beside the output (<out>.journal): records appended with one write() each and
// fsync'd, so a killed run leaves every finished task recorded. Reading keeps the last record of
// each task and the tasks that were started but never finished, in time linear in its length.
class Journal {
 public:
  Journal(const std::string& path, const SweepPlan& plan);  // opens, checks the header, reads
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  void append(const std::string& line);
  // Parses a result line against the plan (nullopt when torn or not one of this plan's tasks).
  static std::optional<TaskResult> parse_result(const SweepPlan& plan, const std::string& line);
  const std::map<int64_t, TaskResult>& done() const { return done_; }
  // Tasks started in an earlier run and never finished: (task, rank).
  const std::vector<std::pair<int64_t, int>>& interrupted() const { return interrupted_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::map<int64_t, TaskResult> done_;
  std::vector<std::pair<int64_t, int>> interrupted_;
};

struct SweepRunOptions {
  std::string out;            // HDF5 output; the journal is out + ".journal"
  bool progress = false;      // progress line on stderr (rank 0, terminals only)
  std::string command_line;
};

struct SweepOutcome {
  std::vector<TaskResult> results;  // by task id (rank 0 only)
  int64_t resumed = 0;              // tasks taken from the journal
  int64_t failed = 0;
  double seconds = 0;
  // Stopped on this signal (SIGTERM/SIGINT, see mlprio/util/stop_signal.hpp) before the output
  // was written: no output file, the journal holds `journaled` results (rank 0 only) from which
  // the same command resumes. 0 when the sweep ran to its end.
  int interrupted = 0;
  int64_t journaled = 0;
};

// Runs every task not yet in the journal, one after the other, then writes the output. The
// first SIGTERM/SIGINT stops it after the task running then is journaled (outcome.interrupted).
SweepOutcome run_sweep_serial(const SweepPlan& plan, const SweepRunOptions& opts);

// Writes `results` (all tasks, by id) to opts.out through mlprio::h5 (temp + rename).
void write_sweep_hdf5(const SweepPlan& plan, const std::vector<TaskResult>& results,
                      const SweepRunOptions& opts);
// {"runs":[...]} as `mlprio-replay run --json` (successful tasks, by id), plus "failed":[keys].
std::string sweep_json(const SweepPlan& plan, const std::vector<TaskResult>& results);

// Takes the journal's successful results into `out` (out.results sized to the plan) and returns
// the ids still to compute, in dispatch order: tasks without an ok record and, with
// spec.per_job, also the journaled ones, whose per-job detail is recomputed (it is not journaled).
std::vector<int64_t> resume_tasks(const SweepPlan& plan, const Journal& journal, SweepOutcome& out);
// True when the journal already holds an ok record of the task (then it is not appended again).
bool journaled_ok(const Journal& journal, int64_t task);
// A journaled task recomputed for its detail must reproduce the journal's summary bit for bit;
// throws SweepError naming the task otherwise (the journal is from another model file or build).
void check_recomputed(const SweepPlan& plan, const Journal& journal, const TaskResult& r);

// Reports journal state (resumed count, interrupted tasks by name) on stderr.
void report_resume(const SweepPlan& plan, const Journal& journal);

// The tasks with a good result among `results` (by task id): those whose journaled result a
// resumed run reuses (SweepOutcome::journaled of an interrupted sweep).
int64_t count_journaled(const std::vector<TaskResult>& results);

// The progress line: "done/total, tasks/s, ETA" (only when stderr is a terminal).
class Progress {
 public:
  Progress(int64_t total, int64_t already, bool enabled);
  void update(int64_t done);
  void finish();

 private:
  int64_t total_, already_;
  bool enabled_;
  double t0_, last_ = -1;
};

// Test hook (never documented for users): MLPRIO_SWEEP_TEST_KILL_RANK=r and
// MLPRIO_SWEEP_TEST_KILL_AFTER=k make rank r raise SIGKILL after computing its k-th task, before
// reporting it. Returns the configured k for `rank`, or -1.
int64_t test_kill_after(int rank);

}  // namespace mlprio::replay::dist
