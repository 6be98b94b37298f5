// The lock-owning parts of the plugin context (mlprio_ctx, abi_context.cpp): each class below
// owns one mutex (ModelSlot two, taken in a fixed order inside it), keeps it private, and its
// methods are the only way to its data. Internal to the plugin ABI; nothing here knows Slurm.
//
// Lock order. A part may call into another part while holding its own lock only where the
// arrow allows it, never the reverse; every other call between parts is made with no plugin
// lock held:
//
//   ModelSlot::Reload (reload lock) -> PredictorGate -> LiveHistory
//                                   -> LiveHistory
//                                   -> AdviceHub
//                                   -> ModelSlot's state lock
//   leaves (call no other part while locked): LiveHistory, FactorCache, WorkQueue, AdviceHub,
//                                              ModelSlot's state lock
//
// The order shows in the types: the only part holding a reference to another is PredictorGate
// (a LiveHistory&, RANK 2 -> 3); the code that builds and publishes a State is handed a
// ModelSlot::Reload (RANK 1), which only ModelSlot creates, and AdviceHub::sync() takes one as
// proof that it runs under the reload lock. AdviceHub wakes the WorkQueue (push_arrived) only
// after releasing its own lock. The static_asserts at the end of this file state the ranks.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "abi_detail.hpp"
#include "mlprio/model/features.hpp"
#include "mlprio/model/fsdp_table.hpp"
#include "mlprio/model/predictor.hpp"
#ifdef MLPRIO_HAVE_CURL
#include "mlprio/model/llm_advisor.hpp"
#endif

namespace mlprio::plugin {

using Clock = std::chrono::steady_clock;

// The plugin's log callback (mlprio_set_log); safe from any thread.
void log_msg(int level, const std::string& msg);

// What identifies a model file version without reading it. ctime is in it because `cp -p` and
// `touch -r` put the old mtime back on new contents of the same size; nothing can set ctime.
struct FileStamp {
  bool ok = false;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  mode_t mode = 0;
  bool operator==(const FileStamp&) const = default;
};
FileStamp stamp_of(const std::string& path);

// Parameters + model, immutable once published.
struct State {
  Params params;
  std::shared_ptr<const model::Predictor> predictor;  // null = neutral mode
  std::string describe;                               // model line or why neutral
  FileStamp stamp;
  double per_job_ns = 0;  // measured at load
  uint64_t generation = 0;
  uint64_t conf_epoch = 0;  // slurm.conf reading (mlprio_conf_epoch)
  // The FSDP advice table (fsdp_table=), loaded beside the model with the same checks; null =
  // no advice. Independent of the model: a neutral state may still advise.
  std::shared_ptr<const model::FsdpTable> fsdp_table;
  FileStamp fsdp_stamp;
  std::string fsdp_describe;  // table line or why there is no advice
};

struct CacheEntry {
  uint64_t fingerprint = 0;
  uint64_t generation = 0;
  int64_t factor = 0;
  uint64_t llm_key = 0;  // advisor key of the job (0: none)
  bool advised = false;  // the factor includes the advisor's answer
};

// A valid advisor answer, as much of it as combine() needs.
struct AdviceEntry {
  double runtime_s = 0;
  double confidence = 0;
};

// A job copied out of Slurm's memory for the worker (no Slurm pointer survives the hook).
struct OwnedJob {
  mlprio_job_t view{};
  std::string user, account, partition, qos, name, comment, admin_comment;
  uint64_t fingerprint = 0;
  explicit OwnedJob(const mlprio_job_t& j);
  OwnedJob(const OwnedJob&) = delete;
  OwnedJob& operator=(const OwnedJob&) = delete;
};

// One ended job as the live feature store keeps it (enough for UserStats::record_run).
struct LiveFinish {
  uint64_t user = 0;
  double run = 0, end = 0, req_time = -1;
  int64_t procs = -1;
  JobStatus status = JobStatus::COMPLETED;
  uint64_t seq = 0;
};

// The model slot: the published State (state lock, held for a pointer copy) and the reload lock
// that serialises building + publishing states (reconfigure, file watcher, conf fence), so an
// older build is never published over a newer one. The reload lock is never held with a Slurm
// lock: its holders are the worker and site_factor_p_reconfig/init.
class ModelSlot {
 public:
  static constexpr int RANK = 1;  // the reload lock; the state lock is a leaf

  std::shared_ptr<const State> snapshot() const;
  // Waits (at most `wait`) until a state of `conf_epoch` is published or `running` turns false;
  // returns the state then in force.
  std::shared_ptr<const State> wait_for_epoch(uint64_t conf_epoch, std::chrono::milliseconds wait,
                                              const std::atomic<bool>& running);
  // Wakes wait_for_epoch() callers (the worker stopped).
  void wake_waiters();

  // Holds the reload lock for its lifetime: the only way to publish a state. Whoever holds one
  // may call PredictorGate, LiveHistory and AdviceHub (see the order at the top of this file).
  class Reload {
   public:
    explicit Reload(ModelSlot& slot) : slot_(slot), lock_(slot.reload_mu_) {}
    Reload(const Reload&) = delete;
    Reload& operator=(const Reload&) = delete;
    std::shared_ptr<const State> current() const { return slot_.snapshot(); }
    uint64_t next_generation() { return slot_.next_generation_++; }
    void publish(std::shared_ptr<const State> s);
    // The state a configuration fence loaded that no reconfigure hook has seen yet (0: none).
    uint64_t fence_generation() const { return slot_.fence_generation_; }
    void set_fence_generation(uint64_t g) { slot_.fence_generation_ = g; }

   private:
    ModelSlot& slot_;
    std::lock_guard<std::mutex> lock_;
  };

 private:
  mutable std::mutex state_mu_;  // guards state_ (a pointer copy)
  std::condition_variable state_cv_;
  std::shared_ptr<const State> state_;
  std::mutex reload_mu_;           // taken before state_mu_, never after
  uint64_t fence_generation_ = 0;  // under reload_mu_
  uint64_t next_generation_ = 1;   // under reload_mu_
};

// The live feature store: the model's per-user history kept current with the jobs slurmctld
// reports as ended (mlprio_observe_finished), the same UserStats the replayer feeds from its
// simulated schedule and training from the recorded one. A leaf: calls nothing while locked.
class LiveHistory {
 public:
  static constexpr int RANK = 3;
  struct Finish {
    uint32_t job_id = 0;
    LiveFinish f;
  };

  // Seeds the store from a newly loaded model's snapshot, then re-applies the finishes learned
  // live that the snapshot does not hold. The copy is made with no lock held (it can be large).
  void reseed(const model::Predictor& p);
  // The rows of `jobs` (jobs.size() x N_FEATURES) from the store.
  void encode(const model::FeatureEncoder& enc, std::span<const Job> jobs,
              std::span<float> rows) const;
  // The user's finished-job count: part of a job's cache fingerprint, so a pending job's factor
  // is recomputed once its user's history has moved.
  uint64_t version(const char* user) const;
  // Learns `items` (in the order given; jobs already seen or held by the snapshot are skipped).
  // Returns how many were learned.
  size_t learn(std::vector<Finish>& items);

 private:
  mutable std::mutex mu_;
  model::UserHistory hist_;
  double trained_until_ = -INFINITY;  // latest finish the model's snapshot holds
  std::deque<LiveFinish> log_;
  uint64_t next_seq_ = 1;
  std::unordered_set<uint32_t> seen_;
  std::deque<uint32_t> seen_order_;
  uint64_t learned_ = 0;  // since the context was created
};

// The predictor gate: serialises predictor calls (XGBoost is not re-entrant) and the interned
// names they share. While locked it reads the live store, the one part it may call.
class PredictorGate {
 public:
  static constexpr int RANK = 2;
  explicit PredictorGate(LiveHistory& live) : live_(live) {}
  PredictorGate(const PredictorGate&) = delete;
  PredictorGate& operator=(const PredictorGate&) = delete;

  // Mean time of a single-job prediction, so the hot path knows whether it fits the budget.
  double time_per_job(const model::Predictor& p);
  // Converts `views` into core jobs (`jobs`) and predicts them from the live store; `rows`
  // receives the encoded rows.
  void predict(const model::Predictor& p, std::span<const mlprio_job_t* const> views,
               std::vector<Job>& jobs, std::vector<model::Prediction>& out,
               std::vector<float>& rows);
  // One job; `row` receives its encoded row.
  void predict_one(const model::Predictor& p, const mlprio_job_t& view, Job& job,
                   model::Prediction& out, std::vector<float>& row);
  // The failure prediction's per-feature contributions for an encoded row (TreeSHAP).
  bool explain_fail(const model::Predictor& p, std::span<const float> row,
                    std::span<double> contrib);

 private:
  std::mutex mu_;
  TraceNames names_;
  LiveHistory& live_;
};

// Per-job factors (keyed by job id, checked against fingerprint and generation) and the jobs
// whose admin note was logged (mlprio_first_sight). Both bounded: cleared when full. A leaf.
class FactorCache {
 public:
  static constexpr int RANK = 4;
  static constexpr size_t CACHE_MAX = 262144;  // entries are recomputed on demand
  static constexpr size_t NOTED_MAX = 65536;   // a job may be logged twice

  std::optional<CacheEntry> find(uint32_t job_id, uint64_t fingerprint, uint64_t generation) const;
  void put(uint32_t job_id, const CacheEntry& e);
  void forget(uint32_t job_id);
  bool first_sight(uint32_t job_id);

 private:
  mutable std::mutex mu_;
  std::unordered_map<uint32_t, CacheEntry> cache_;
  std::unordered_set<uint32_t> noted_;
};

// The worker's inbox and the applier's outbox: jobs to predict, advisor keys with new answers,
// fence requests, the file-check and stop flags; job ids whose factor is ready (or "all").
// A leaf: its condition variables are the only waits on it.
class WorkQueue {
 public:
  static constexpr int RANK = 4;
  static constexpr size_t QUEUE_MAX = 100000;  // jobs beyond it are dropped (recomputed later)
  static constexpr size_t BATCH_MAX = 4096;

  // What the worker takes at one wake-up.
  struct Batch {
    bool stop = false;
    bool fence = false;  // a caller of mlprio_decide saw a newer slurm.conf: load it
    std::string fence_params;
    uint64_t fence_epoch = 0;
    bool check_now = false;  // mlprio_ctx_poke: stat the model file now
    std::vector<std::unique_ptr<OwnedJob>> jobs;
    std::vector<uint64_t> arrived;  // advisor keys with a new valid answer
  };
  // Waits until there is work, a flag or `deadline`, and takes it.
  Batch wait(Clock::time_point deadline);

  void push_job(std::unique_ptr<OwnedJob> job);
  void push_arrived(uint64_t key);
  void request_fence(std::string params, uint64_t epoch);
  void poke();
  void set_stop(bool stop);  // true wakes the worker and the applier
  void publish_ready(const std::vector<uint32_t>& ids);
  void publish_all();
  // The applier's wait: MLPRIO_OK with ids or *all, MLPRIO_TIMEOUT with none.
  int take_ready(uint32_t* ids, size_t cap, size_t* n, int* all, int timeout_ms);

 private:
  std::mutex mu_;
  std::condition_variable work_cv_, ready_cv_;
  std::deque<std::unique_ptr<OwnedJob>> queue_;
  std::vector<uint64_t> arrived_;
  std::vector<uint32_t> ready_;
  bool ready_all_ = false;
  bool check_now_ = false;
  bool stop_ = false;
  bool fence_requested_ = false;
  std::string fence_params_;
  uint64_t fence_epoch_ = 0;
};

// The LLM advisor hub (site_factor's context only, after enable()): the running advisor and its
// parameter signature, the bounded store of valid answers and the advisor key -> job id map. One
// lock, a leaf; the advisor's callback stores an answer, releases it, then wakes the worker
// through the WorkQueue. An old advisor is stopped (request aborted, thread joined) with no lock.
class AdviceHub {
 public:
  static constexpr int RANK = 4;
  static constexpr size_t ADVICE_MAX = 65536;      // answers kept (FIFO)
  static constexpr size_t LLM_JOBS_MAX = 262144;   // key -> job id entries (cleared when exceeded)
  static constexpr size_t LLM_SCRIPT_MAX = 16384;  // script bytes handed to the advisor

  explicit AdviceHub(WorkQueue& work) : work_(work) {}
  AdviceHub(const AdviceHub&) = delete;
  AdviceHub& operator=(const AdviceHub&) = delete;

  void enable() { enabled_ = true; }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // Starts, replaces or stops the advisor to match `p` (the reload lock held by the caller).
  void sync(const Params& p, const ModelSlot::Reload& proof);
  // Stops and releases the advisor (context teardown; its callback needs the hub alive).
  void shutdown();
  // Registers key -> job id (job_id 0: only looks) and returns the answer if there is one.
  // One lock: either this call sees the answer or the worker sees the job.
  bool find(uint64_t key, uint32_t job_id, AdviceEntry* out);
  // The job ids registered for these keys.
  std::vector<uint32_t> jobs_of(const std::vector<uint64_t>& keys) const;
  void count_advised() { advised_jobs_++; }
  // One info line with the advisor's counters, when they changed and at most every 10 s.
  void log_stats(Clock::time_point& last, std::string& last_line);
  // Hands a job to the advisor: MLPRIO_OK, or an error status with the message in `why`.
  int submit(uint64_t key, const mlprio_job_t& job, std::string& why);

 private:
#ifdef MLPRIO_HAVE_CURL
  void on_advice(uint64_t key, const model::AdviceResult& r);
  std::shared_ptr<model::LlmAdvisor> advisor() const;
#endif

  WorkQueue& work_;
  std::atomic<bool> enabled_{false};
  std::atomic<uint64_t> advised_jobs_{0};
  // Steady-clock ms of the last "request failed" line (at most one per 10 s; the counters say
  // how many). Written on the advisor's thread only; atomic, no lock.
  std::atomic<int64_t> error_logged_ms_{INT64_MIN / 2};
  mutable std::mutex mu_;
#ifdef MLPRIO_HAVE_CURL
  std::shared_ptr<model::LlmAdvisor> advisor_;
#endif
  std::string sig_;
  std::unordered_map<uint64_t, AdviceEntry> advice_;
  std::deque<uint64_t> advice_order_;
  std::unordered_map<uint64_t, uint32_t> jobs_;
};

// The lock order above, checked where it can be: a part calls only parts of a higher rank while
// holding its lock.
static_assert(ModelSlot::RANK < PredictorGate::RANK && PredictorGate::RANK < LiveHistory::RANK);
static_assert(ModelSlot::RANK < AdviceHub::RANK && ModelSlot::RANK < LiveHistory::RANK);
static_assert(LiveHistory::RANK <= FactorCache::RANK && FactorCache::RANK == WorkQueue::RANK &&
              WorkQueue::RANK == AdviceHub::RANK);

}  // namespace mlprio::plugin
