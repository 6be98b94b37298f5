// Running a sweep plan to its output: the serial loop (also the non-MPI build's; mpi_support.hpp
// has the MPI master/worker over the same tasks), resuming from the journal, and the final
// HDF5/JSON output. Both drivers give bit-identical results because every number crosses
// process boundaries and the journal as a C99 hex float.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlprio/replay/dist/sweep_journal.hpp"
#include "mlprio/replay/dist/sweep_plan.hpp"

namespace mlprio::replay::dist {

inline constexpr int SWEEP_LAYOUT_VERSION = 2;

struct SweepRunOptions {
  std::string out;        // HDF5 output; the journal is out + ".journal"
  bool progress = false;  // progress line on stderr (rank 0, terminals only)
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

// The tasks with a good result among `results` (by task id): those whose journaled result a
// resumed run reuses (SweepOutcome::journaled of an interrupted sweep).
int64_t count_journaled(const std::vector<TaskResult>& results);

}  // namespace mlprio::replay::dist
