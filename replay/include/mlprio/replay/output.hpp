// Writing replay results: the HDF5 file (layout in replay/README.md), the `--json` object whose
// field names are a contract with scripts, and the summary table on stdout. One RunRecord per
// policy x window of a `mlprio-replay run`.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mlprio/replay/simulator.hpp"

namespace mlprio::h5 {
struct Provenance;
class Group;
template <class T>
class CompoundType;
}  // namespace mlprio::h5

namespace mlprio::replay {

// 2: series/mean_bsld and the agent_* run attributes (external:CMD, llm:URL) added.
// 3: the scheduler, slurm_conf and slurm_conf_sha256 run attributes of deployed-stack runs.
// 4: the jobs table's site and priority columns (deployed-stack runs; 0 in the others).
inline constexpr int REPLAY_LAYOUT_VERSION = 4;

struct RunRecord {
  std::string policy;
  Backfill backfill = Backfill::EASY;
  Profile profile = Profile::STANDARD;
  int64_t window_start = 0;
  int64_t window_len = 0;
  SimResult result;
  // Deployed-stack runs (--slurm-conf): scheduler "slurm", the file and its checksum, and what
  // is reported as their backfill ("sched/backfill" or "sched/builtin"). Empty otherwise.
  std::string scheduler;
  std::string slurm_conf;
  std::string slurm_conf_sha256;
  std::string slurm_sched;
};

// {"runs":[{"policy","backfill","window":[start,len],"jobs","avg_wait","avg_bsld",
// "avg_turnaround","utilization","makespan",...},...]} on one line; deployed-stack runs add
// "scheduler": "slurm" and "slurm_conf_sha256" (backfill: "sched/backfill" or "sched/builtin").
std::string runs_json(const std::vector<RunRecord>& runs);

// A fixed-width table, one line per run.
void print_runs_table(std::ostream& out, const std::vector<RunRecord>& runs);

// The HDF5 compound type of a run's `jobs` table (fields named as in replay/README.md).
const h5::CompoundType<JobOutcome>& job_table_type();

// Writes every run to `path` (created under a temporary name, renamed when complete). Throws
// mlprio::h5::H5Error.
// Writes one run into `g` as write_runs_hdf5 lays out /runs/run_NNNN: its attributes, the `jobs`
// and `users` tables and the `series` group (the sweep's --per-job groups use it too).
void write_run_group(const h5::Group& g, const RunRecord& run);

void write_runs_hdf5(const std::string& path, const std::vector<RunRecord>& runs,
                     const h5::Provenance& provenance, const Machine& machine);

// The file write_runs_hdf5 writes for one run, written while the run goes: pass it as
// SimConfig::sink (the jobs table and the series go into the file block by block), then call
// finish() with the run's record (attributes, users; its jobs and series are empty). The file is
// built in memory as every result file is (so memory follows the compressed file, not the rows)
// and appears at `path` only when finish() returns; destroyed before that, it leaves nothing.
class RunFileWriter final : public ResultSink {
 public:
  RunFileWriter(const std::string& path, const h5::Provenance& provenance, const Machine& machine);
  ~RunFileWriter() override;
  RunFileWriter(const RunFileWriter&) = delete;
  RunFileWriter& operator=(const RunFileWriter&) = delete;
  void jobs(std::span<const JobOutcome> rows) override;
  void series(const TimeSeries& s, size_t n) override;
  void finish(const RunRecord& run);

 private:
  struct State;
  std::unique_ptr<State> st_;
};

}  // namespace mlprio::replay
