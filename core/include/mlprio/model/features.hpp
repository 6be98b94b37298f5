// The feature schema of the priority model and the causal feature builder.
//
// A feature row is a fixed-length float vector (XGBoost's input type; NaN = missing) whose column
// names and order are the schema a model file records and load_predictor() checks. Rows for a
// whole trace are built causally in submit order: a job's user-history columns only see jobs
// that had finished (start + run <= its submit time), so training and evaluation never leak the
// future. Deployed predictors use a frozen UserHistory snapshot stored in the model file.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mlprio/jobs/job.hpp"
#include "mlprio/jobs/trace.hpp"

namespace mlprio::model {

// Bump when columns change: a model file trained with another schema is refused.
inline constexpr int SCHEMA_VERSION = 3;
inline constexpr float MISSING = std::numeric_limits<float>::quiet_NaN();

enum Feature : int {
  F_REQ_PROCS,
  F_REQ_NODES,
  F_REQ_GPUS,
  F_REQ_MEM_GIB,
  F_REQ_TIME,
  F_PARTITION,
  F_QOS,
  F_QUEUE,
  F_ACCOUNT,
  F_USER,
  F_APP,
  F_NAME,
  F_NAME_TOK0,
  F_NAME_TOK1,
  F_HIST_LAST2_MEAN,
  F_HIST_LAST_RUN,
  F_HIST_RUN_REQ_RATIO,
  F_HIST_RATIO_TIMES_REQ,
  F_HIST_COUNT,
  F_HIST_FAIL_RATE,
  F_HOUR_OF_DAY,
  F_DAY_OF_WEEK,
  F_LLM_MODEL_SIZE,
  F_LLM_SEQ_LEN,
  F_LLM_BATCH_SIZE,
  F_LLM_LORA_RANK,
  F_LLM_EPOCHS,
  F_LLM_DATASET_SIZE,
  // Schema 2 (after Gaussier et al., SC15): more of the user's recent behaviour, and the time of
  // day as a circle.
  F_HIST_LAST3_MEAN,       // mean of the user's last three run times
  F_HIST_MEAN_RUN,         // mean run time over all the user's finished jobs
  F_HIST_SINCE_LAST_END,   // seconds from the user's last finish to this submission
  F_PROCS_OVER_USER_MEAN,  // this job's processors / the user's mean processors
  F_HOUR_SIN,
  F_HOUR_COS,
  // Schema 3: resubmissions. Users submit the same job again and again (Tsafrir, Etsion &
  // Feitelson 2007), so the run time of the user's latest finished job with the same request
  // says more than the user's latest job of any kind. "Similar" = the same requested time and
  // the same requested processors, among the user's last RECENT_JOBS finished jobs.
  F_SIM_LAST_RUN,          // run time of the latest similar job
  F_SIM_LAST2_MEAN,        // mean run time of the latest two similar jobs (one if only one)
  F_SIM_COUNT,             // similar jobs among the remembered ones (0 when none)
  F_SAME_REQ_LAST_RUN,     // run time of the latest job with the same requested time (any size)
  F_SAME_AS_LAST,          // 1 when the request and size equal the user's latest job's, else 0
  F_LAST_RATIO_TIMES_REQ,  // (latest job's run / its request) x this job's request
  F_LAST2_CAPPED,          // the last-two baseline itself: last-two mean capped by the request
  N_FEATURES
};

// Column names in schema order.
const std::array<std::string_view, N_FEATURES>& feature_names();

// True for the final states counted as failures (FAILED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL).
bool is_failure(JobStatus s);

// Stable 64-bit FNV-1a, the hash behind categorical columns and user keys (same on every build).
uint64_t stable_hash(std::string_view s, uint64_t seed = 14695981039346656037ULL);

// Key of a job's user: hash of the user name, or of "#<id>" when the trace has numbers only
// (SWF). 0 when the user is unknown.
uint64_t user_key(const Job& job, const TraceNames& names);

// Processors a job asked for, as known at submission: the request, else the allocation (SWF
// traces often give only the latter); -1 when neither.
inline int64_t requested_procs(const Job& job) {
  return job.req_procs > 0 ? job.req_procs : (job.alloc_procs > 0 ? job.alloc_procs : -1);
}

// One of a user's recent finished jobs, as the similar-job columns compare them.
struct RecentJob {
  double req_time = -1;  // requested seconds, -1 when unknown
  int64_t procs = -1;    // requested_procs()
  double run = 0;        // seconds it ran
};
// How many finished jobs per user the similar-job memory keeps (a fixed, bounded array).
inline constexpr int RECENT_JOBS = 16;

// What is known about one user from jobs that have finished.
struct UserStats {
  double last_run = std::numeric_limits<double>::quiet_NaN();
  double prev_run = std::numeric_limits<double>::quiet_NaN();
  double prev2_run = std::numeric_limits<double>::quiet_NaN();
  double run_sum = 0;    // over `count` jobs
  double procs_sum = 0;  // over `procs_n` jobs with a known size
  int64_t procs_n = 0;
  double last_end = std::numeric_limits<double>::quiet_NaN();  // latest finish seen
  double ratio_sum = 0;  // sum of run / requested time over jobs with a request
  int64_t ratio_n = 0;
  int64_t count = 0;  // finished jobs with a known run time
  int64_t failures = 0;
  // The last RECENT_JOBS finished jobs in finish order, a ring: recent_n valid entries, the
  // newest at recent[(recent_head + RECENT_JOBS - 1) % RECENT_JOBS].
  std::array<RecentJob, RECENT_JOBS> recent{};
  int recent_n = 0;
  int recent_head = 0;
  // The k-th newest remembered job (k = 0: the latest); k < recent_n.
  const RecentJob& recent_at(int k) const {
    return recent[static_cast<size_t>((recent_head + 2 * RECENT_JOBS - 1 - k) % RECENT_JOBS)];
  }
  // Appends to the memory (dropping the oldest when full).
  void remember(const RecentJob& r) {
    recent[static_cast<size_t>(recent_head)] = r;
    recent_head = (recent_head + 1) % RECENT_JOBS;
    if (recent_n < RECENT_JOBS) ++recent_n;
  }
  // A finished job: its run time from the record, ending at `end` (NaN: unknown).
  void record(const Job& finished, double end = std::numeric_limits<double>::quiet_NaN());
  // The same with the run time as it happened (a replayed schedule, a live cluster).
  void record_run(const Job& finished, double run, double end);
};

struct UserHistory {
  std::unordered_map<uint64_t, UserStats> by_user;
  const UserStats* find(uint64_t key) const {
    auto it = by_user.find(key);
    return it == by_user.end() ? nullptr : &it->second;
  }
};

// When a finished job becomes visible to the history: start + run, where start is submit + wait
// and a trace without wait times is taken to start at submit (the earliest it could have ended).
// NaN when the run time is unknown (such jobs never enter a history).
double finish_time(const Job& job);

// Encodes jobs of one trace into rows. Resolves the free-form feature keys of `names` once, so
// encode() neither allocates nor looks strings up.
class FeatureEncoder {
 public:
  // `epoch_offset` is added to Job::submit to get Unix time (SWF's UnixStartTime; 0 for sacct).
  explicit FeatureEncoder(const TraceNames& names, double epoch_offset = 0.0);
  // Fills row (N_FEATURES floats). `hist` is the job user's history, or nullptr when none.
  void encode(const Job& job, const UserStats* hist, std::span<float> row) const;
  uint64_t user_of(const Job& job) const { return user_key(job, names_); }

 private:
  const TraceNames& names_;
  double epoch_offset_;
  static constexpr int N_LLM = F_LLM_DATASET_SIZE - F_LLM_MODEL_SIZE + 1;
  static constexpr int MAX_ALIASES = 4;
  std::array<std::array<int32_t, MAX_ALIASES>, N_LLM> llm_ids_{};
};

struct FeatureMatrix {
  size_t rows = 0;
  std::vector<float> values;  // row-major, rows x N_FEATURES
  std::span<const float> row(size_t i) const {
    return {values.data() + i * N_FEATURES, static_cast<size_t>(N_FEATURES)};
  }
};

// Rows for every job, history computed causally in submit order (jobs must be sorted by submit;
// throws std::invalid_argument otherwise). When `final_history` is given it receives the history
// after every job of the trace has finished (the snapshot a model file stores).
FeatureMatrix build_features(std::span<const Job> jobs, const TraceNames& names,
                             double epoch_offset = 0.0, UserHistory* final_history = nullptr);

// The feature store the replayer and the Slurm plugin share: per-user history fed by finishes as
// they happen (in the schedule being replayed, or live in slurmctld), encoded at submission.
// Training (build_features) feeds it the recorded finishes in time order, so the three see the
// same columns for the same history. Not thread-safe: the plugin holds it under its own lock.
class OnlineHistory {
 public:
  // `names` must outlive the store.
  explicit OnlineHistory(const TraceNames& names, double epoch_offset = 0.0)
      : enc_(names, epoch_offset) {}
  // The job ran `run` seconds and ended at `end`; jobs of unknown users are not recorded.
  void record_finish(const Job& job, double run, double end) {
    const uint64_t key = enc_.user_of(job);
    if (key != 0) hist_.by_user[key].record_run(job, run, end);
  }
  // The row for a job submitted now (Job::submit), from what has been recorded so far.
  void encode(const Job& job, std::span<float> row) const {
    const uint64_t key = enc_.user_of(job);
    enc_.encode(job, key != 0 ? hist_.find(key) : nullptr, row);
  }
  const UserStats* stats_of(const Job& job) const {
    const uint64_t key = enc_.user_of(job);
    return key != 0 ? hist_.find(key) : nullptr;
  }
  UserHistory& history() { return hist_; }
  const UserHistory& history() const { return hist_; }

 private:
  FeatureEncoder enc_;
  UserHistory hist_;
};

// Rows from a frozen history (the deployed path): no job of the batch sees another.
void encode_with_history(std::span<const Job> jobs, const TraceNames& names,
                         const UserHistory& history, double epoch_offset, std::span<float> out);

}  // namespace mlprio::model
