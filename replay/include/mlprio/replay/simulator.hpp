// The replayer's entry point: simulate(jobs, config) -> result, one deterministic, event-driven
// run of a job list on a cluster of nodes x cores (+ GPUs per node) under one queue order and one
// backfilling rule. The CLI (replay/src/cmd_run.cpp), the MPI driver and the Slurm plugin tests
// all call this; nothing here reads files or prints. Two profiles share the config: STANDARD (the
// usual EASY/conservative semantics, see replay/README.md for the tie-breaking rules) and
// RLSCHEDULER (a step-by-step copy of RLScheduler's simulator so the SC20 tables can be checked).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <memory>

#include "mlprio/jobs/job.hpp"
#include "mlprio/model/predictor.hpp"
#include "mlprio/replay/policy.hpp"
#include "mlprio/util/errors.hpp"

namespace mlprio {
struct TraceHeader;
}

namespace mlprio::replay {

enum class Backfill { NONE, EASY, CONSERVATIVE, RLSCHEDULER };
enum class Profile { STANDARD, RLSCHEDULER };
enum class EstimateMode { REQUEST, ACTUAL, CUSTOM };
enum class Allocation { NODES, CORES };  // whole nodes per job, or single cores
enum class TooLarge { ERROR, SKIP };     // jobs the machine can never hold
// What EASY does when a running job reaches its estimated end and is still running (Tsafrir,
// Etsion and Feitelson 2007): NONE treats it as ending now (the shadow time never lies in the
// past); REQUEST raises the estimate to the request; TSAFRIR does that and, once the request
// too has passed (a job that was not killed), adds 1, 5, 15, 30 min, 1, 2, 5, 10, 20, 50,
// 100 h in turn (then 100 h at a time). Each correction recomputes the reservation.
enum class Correction { NONE, REQUEST, TSAFRIR };
// The order EASY tries backfill candidates in: QUEUE (the queue order; CLI name "fcfs") or SJBF
// (shortest estimate first, ties in queue order). The head job keeps its reservation either way.
enum class BackfillOrder { QUEUE, SJBF };

std::string_view backfill_name(Backfill b);
std::string_view profile_name(Profile p);
std::string_view allocation_name(Allocation a);
std::string_view too_large_name(TooLarge t);
std::string_view correction_name(Correction c);
std::string_view backfill_order_name(BackfillOrder o);
// Parsers throw ConfigError naming the valid values.
Backfill parse_backfill(std::string_view s);
Profile parse_profile(std::string_view s);
Allocation parse_allocation(std::string_view s);
TooLarge parse_too_large(std::string_view s);
Correction parse_correction(std::string_view s);
BackfillOrder parse_backfill_order(std::string_view s);

// A configuration that cannot be simulated (unknown name, empty machine, ...).
class ConfigError : public ::mlprio::UsageError {
 public:
  using ::mlprio::UsageError::UsageError;
};
// A job the machine can never hold, under TooLarge::ERROR.
class JobTooLargeError : public ::mlprio::UsageError {
 public:
  using ::mlprio::UsageError::UsageError;
};
// An invariant of the simulation broke (a bug, never bad input): the one mlprio::InvariantError,
// which the allocator model (fsdp::InvariantError) throws too.
using InvariantError = ::mlprio::InvariantError;

struct Machine {
  int64_t nodes = 0;
  int64_t cores_per_node = 1;
  int64_t gpus_per_node = 0;
  Allocation allocation = Allocation::NODES;
  int64_t total_cores() const { return nodes * cores_per_node; }
};

// The largest machine accepted, so that nodes x cores (<= 2^44) and nodes x GPUs (<= 2^34), and
// sums of them over a trace, stay far inside 64 bits.
inline constexpr int64_t MACHINE_MAX_NODES = int64_t{1} << 24;
inline constexpr int64_t MACHINE_MAX_CORES_PER_NODE = int64_t{1} << 20;
inline constexpr int64_t MACHINE_MAX_GPUS_PER_NODE = int64_t{1} << 10;

// Throws ConfigError naming `source` (the options or header the machine came from) unless
// 1 <= nodes <= MACHINE_MAX_NODES, 1 <= cores_per_node <= MACHINE_MAX_CORES_PER_NODE and
// 0 <= gpus_per_node <= MACHINE_MAX_GPUS_PER_NODE.
inline void check_machine_bounds(const Machine& m, const std::string& source) {
  auto bad = [&](const char* what, int64_t v, int64_t lo, int64_t hi) {
    throw ConfigError(source + ": " + what + " " + std::to_string(v) +
                      " is out of range; expected " + std::to_string(lo) + " to " +
                      std::to_string(hi));
  };
  if (m.nodes < 1 || m.nodes > MACHINE_MAX_NODES) bad("nodes", m.nodes, 1, MACHINE_MAX_NODES);
  if (m.cores_per_node < 1 || m.cores_per_node > MACHINE_MAX_CORES_PER_NODE)
    bad("cores per node", m.cores_per_node, 1, MACHINE_MAX_CORES_PER_NODE);
  if (m.gpus_per_node < 0 || m.gpus_per_node > MACHINE_MAX_GPUS_PER_NODE)
    bad("GPUs per node", m.gpus_per_node, 0, MACHINE_MAX_GPUS_PER_NODE);
}

// A machine from a trace header: MaxNodes nodes of MaxProcs/MaxNodes cores (MaxProcs alone:
// that many one-core nodes). Throws ConfigError when the header has neither.
Machine machine_from_header(const TraceHeader& header);

// Gives a job's runtime estimate in seconds; called once per job when it is submitted. This is
// the hook a runtime predictor plugs into (EstimateMode::CUSTOM).
using EstimateFn = std::function<double(const Job&)>;

// Runtime knowledge that learns from the schedule being replayed (Tsafrir's last-two predictor,
// the model with per-user history fed by this run's finishes): the engine asks it once per job
// at submission and tells it of every finish as it applies it, so a job's estimate only uses
// jobs that had finished by its submit time *in this schedule*. One instance per run.
struct OnlineEstimate {
  double estimate = 0;           // seconds, for backfilling (finite, >= 0)
  model::Prediction prediction;  // what the `ml` order scores (NaN fields when none)
};
class OnlineEstimator {
 public:
  virtual ~OnlineEstimator() = default;
  // `index` is the job's position in the replayed list (JobView::index); `now` its submit time.
  virtual OnlineEstimate submit(const Job& job, int64_t index, double now) = 0;
  // The job ran from `start` to `end` (its run as simulated: cut at the limit when killed).
  virtual void finish(const Job& job, double start, double end) = 0;
};
using OnlineEstimatorFactory = std::function<std::unique_ptr<OnlineEstimator>()>;

class ResultSink;
struct SlurmRun;  // slurm_conf.hpp

struct SimConfig {
  Machine machine;
  std::string policy = "fcfs";
  PolicyOptions policy_options;
  Backfill backfill = Backfill::EASY;
  Profile profile = Profile::STANDARD;
  EstimateMode estimate = EstimateMode::REQUEST;
  EstimateFn estimate_fn;  // EstimateMode::CUSTOM only
  // When set, replaces `estimate`/`estimate_fn`: a fresh estimator per run (see above). Not with
  // the rlscheduler profile, nor in time segments (its history is not part of a segment state).
  OnlineEstimatorFactory online;
  Correction correction = Correction::NONE;             // EASY: estimates that run out
  BackfillOrder backfill_order = BackfillOrder::QUEUE;  // EASY: candidate order
  bool kill_at_limit = false;  // end jobs at their requested time, as Slurm does
  TooLarge too_large = TooLarge::ERROR;
  double bsld_threshold = 10.0;  // seconds, the bounded-slowdown floor on run time
  bool record_jobs = true;       // per-job outcomes (memory grows with the trace)
  bool record_series = true;     // queue length / busy cores over time
  // Where recorded outcomes and series points go as they are made (see ResultSink); null keeps
  // them in SimResult. The standard profile only.
  ResultSink* sink = nullptr;
  // Non-null: the deployed-stack replay of a slurm.conf (`run --slurm-conf`, slurm_engine.cpp),
  // which replaces the queue order, backfilling, estimates and kill_at_limit above (Slurm
  // always enforces limits); `online`, when set, gives the site model's predictions. Not with
  // a result sink, time segments or the rlscheduler profile.
  std::shared_ptr<const SlurmRun> slurm;
#ifdef NDEBUG
  bool check_invariants = false;  // costly checks (reservation never delayed, ...)
#else
  bool check_invariants = true;
#endif
};

struct JobOutcome {
  int64_t id = 0;
  int32_t user = -1;
  double submit = 0, start = 0, end = 0, wait = 0, run = 0, bsld = 0, estimate = 0;
  int64_t procs = 0;
  int8_t killed = 0;  // ended at its limit (--kill-at-limit)
  // Deployed-stack replay (--slurm-conf) only, else 0: the job's SITE factor and its priority
  // when it started, as sprio would have shown them.
  int64_t site = 0, priority = 0;
};

struct UserSummary {
  int32_t user = -1;
  int64_t jobs = 0;
  double mean_wait = 0, mean_bsld = 0, core_seconds = 0;
};

struct Summary {
  int64_t jobs = 0;  // jobs simulated (started and finished)
  // Starvation and fairness (replay/README.md, "Metrics"): the largest wait, the 95th and 99th
  // percentile waits (nearest rank), the largest per-user mean bounded slowdown, and Jain's
  // fairness index over the per-user mean bounded slowdowns (1 = every user the same).
  double max_wait = 0, p95_wait = 0, p99_wait = 0;
  double max_user_bsld = 0, jain_user_bsld = 1;
  int64_t skipped = 0;           // too large (TooLarge::SKIP) or unusable (no run time / size)
  int64_t killed = 0;            // ended at their limit
  int64_t estimates_raised = 0;  // conservative: estimates below the run time raised to it
  double avg_wait = 0, avg_bsld = 0, avg_turnaround = 0;
  // Standard: core-seconds used / (makespan x cores). rlscheduler profile: the protocol's
  // sum(run x procs) / ((last start - first submit) x MaxProcs).
  double utilization = 0;
  double makespan = 0;  // last end - first submit
  double first_submit = 0, last_end = 0;
};

// Queue length, busy cores and the running mean bounded slowdown after each scheduling pass
// where any changed. mean_bsld is the mean bounded slowdown of the jobs finished so far (NaN
// before the first finish); the rlscheduler profile and the sweep's carried series leave it
// empty.
struct TimeSeries {
  std::vector<double> time;
  std::vector<int64_t> queue_length;
  std::vector<int64_t> busy_cores;
  std::vector<double> mean_bsld;
};

// Takes a run's recorded rows as the engine makes them (SimConfig::sink): per-job outcomes in
// start order (record_jobs) and series points in time order (record_series), a block at a time,
// the same rows SimResult::jobs and ::series would hold, which a run with a sink leaves empty.
// Memory then follows the queue, not the trace, for a streamed input.
class ResultSink {
 public:
  virtual ~ResultSink() = default;
  virtual void jobs(std::span<const JobOutcome> rows) = 0;
  // The first `n` points of `s` (every column of `s` has at least `n`).
  virtual void series(const TimeSeries& s, size_t n) = 0;
};

struct SimResult {
  Summary summary;
  std::vector<JobOutcome> jobs;    // in start order; empty unless record_jobs
  std::vector<UserSummary> users;  // sorted by user id
  TimeSeries series;               // empty unless record_series
  AgentStats agent;                // external:CMD and llm:URL orders only
  std::string agent_error;         // the last unusable answer's reason (empty when none)
};

// Simulates `jobs`, which must be sorted by submit time (STANDARD) or be the prepared list of
// the rlscheduler profile (see rlscheduler.hpp). Throws ConfigError, JobTooLargeError.
SimResult simulate(std::span<const Job> jobs, const SimConfig& config);

// Streaming form for the STANDARD profile: `next` yields jobs in submit order and returns false
// at the end; memory then grows with the queue, not with the trace (with record_jobs and
// record_series off).
using JobSource = std::function<bool(Job&)>;
SimResult simulate_stream(const JobSource& next, const SimConfig& config);

// Jobs START..START+LEN-1 of `jobs` (cut at the end; empty past it).
std::span<const Job> select_window(std::span<const Job> jobs, int64_t start, int64_t len);

}  // namespace mlprio::replay
