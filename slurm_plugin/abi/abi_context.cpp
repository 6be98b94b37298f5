// The C entry points of mlprio_abi.h and the context behind them: parameters and model as one
// immutable snapshot swapped under a short mutex (so reconfigure, the file watcher and
// slurmctld's RPC threads never see half a state), a per-job factor cache, and a C++ worker
// thread that predicts over-budget jobs and watches the model file. The worker never touches
// Slurm: it only publishes ready job ids that the C shim applies under slurmctld's own locks.
// Each snapshot records the slurm.conf reading it was built from (conf epoch); job_submit's
// decisions (mlprio_decide) never use a snapshot older than the configuration they run under:
// the worker loads the new one (no Slurm lock held) while the caller waits, bounded.
// Every entry point catches everything; nothing thrown here can reach slurmctld.
// The optional LLM advisor (llm_url, site_factor's context only) runs its HTTP calls on its own
// thread; valid answers land in a bounded store keyed by the job's advisor key, the worker maps
// them to job ids and publishes those, and the factor applies model::combine() to the model's
// estimate, so an answer moves SITE only within llm_min_factor..llm_max_factor.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "abi_detail.hpp"
#include "mlprio/model/features.hpp"
#include "mlprio/model/predictor.hpp"
#ifdef MLPRIO_HAVE_CURL
#include "mlprio/model/llm_advisor.hpp"
#endif
#include "mlprio/util/secret_file.hpp"

namespace {

using mlprio::plugin::Params;
namespace model = mlprio::model;
using Clock = std::chrono::steady_clock;

thread_local std::string g_last_error;
std::atomic<mlprio_log_fn> g_log{nullptr};

void log_msg(int level, const std::string& msg) {
  if (auto fn = g_log.load()) fn(level, msg.c_str());
}

int fail(int code, std::string msg) {
  g_last_error = std::move(msg);
  return code;
}

// What identifies a model file version without reading it.
struct FileStamp {
  bool ok = false;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  mode_t mode = 0;
  bool operator==(const FileStamp&) const = default;
};

FileStamp stamp_of(const std::string& path) {
  FileStamp s;
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return s;
  s.ok = true;
  s.dev = st.st_dev;
  s.ino = st.st_ino;
  s.size = st.st_size;
  s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
  s.mode = st.st_mode;
  return s;
}

// Parameters + model, immutable once published.
struct State {
  Params params;
  std::shared_ptr<const model::Predictor> predictor;  // null = neutral mode
  std::string describe;                                // model line or why neutral
  FileStamp stamp;
  double per_job_ns = 0;                               // measured at load
  uint64_t generation = 0;
  uint64_t conf_epoch = 0;                             // slurm.conf reading (mlprio_conf_epoch)
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
constexpr size_t ADVICE_MAX = 65536;      // answers kept (FIFO)
constexpr size_t LLM_JOBS_MAX = 262144;   // key -> job id entries (cleared when exceeded)
constexpr size_t LLM_SCRIPT_MAX = 16384;  // script bytes handed to the advisor

struct OwnedJob {
  mlprio_job_t view{};
  std::string user, account, partition, qos, name, comment, admin_comment;
  uint64_t fingerprint = 0;
  explicit OwnedJob(const mlprio_job_t& j) : view(j) {
    auto own = [](std::string& dst, const char*& p) {
      if (p) {
        dst = p;
        p = dst.c_str();
      }
    };
    view.script = nullptr;
    own(user, view.user);
    own(account, view.account);
    own(partition, view.partition);
    own(qos, view.qos);
    own(name, view.name);
    own(comment, view.comment);
    own(admin_comment, view.admin_comment);
  }
  OwnedJob(const OwnedJob&) = delete;
};

uint64_t fnv(uint64_t h, const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}
uint64_t fnv_str(uint64_t h, const char* s) {
  if (!s) return fnv(h, "\xff", 1);
  return fnv(h, s, std::strlen(s) + 1);
}

// Everything the factor depends on; a changed job (scontrol update) misses the cache.
uint64_t fingerprint(const mlprio_job_t& j) {
  uint64_t h = 1469598103934665603ULL;
  h = fnv(h, &j.submit_time, sizeof j.submit_time);
  h = fnv(h, &j.time_limit_s, sizeof j.time_limit_s);
  h = fnv(h, &j.req_cpus, sizeof j.req_cpus);
  h = fnv(h, &j.req_nodes, sizeof j.req_nodes);
  h = fnv(h, &j.req_gpus, sizeof j.req_gpus);
  h = fnv(h, &j.req_mem_bytes, sizeof j.req_mem_bytes);
  for (const char* s : {j.user, j.account, j.partition, j.qos, j.name, j.comment})
    h = fnv_str(h, s);
  // The advisor's answer that site_factor/mlprio appends last (" mlprio_llm_run=...") is its
  // output, not an input: left out, so writing it does not recompute the factor.
  const char* ac = j.admin_comment;
  if (const char* cut = ac ? std::strstr(ac, " mlprio_llm_run=") : nullptr) {
    h = fnv(h, ac, static_cast<size_t>(cut - ac));
    return fnv(h, "", 1);
  }
  return fnv_str(h, ac);
}

constexpr size_t CACHE_MAX = 262144;  // cleared when exceeded; entries are recomputed on demand

// One ended job as the live feature store keeps it (enough for UserStats::record_run).
struct LiveFinish {
  uint64_t user = 0;
  double run = 0, end = 0, req_time = -1;
  int64_t procs = -1;
  mlprio::JobStatus status = mlprio::JobStatus::COMPLETED;
  uint64_t seq = 0;
};
constexpr size_t LIVE_LOG_MAX = 100000;    // recent finishes re-applied after a model swap
constexpr size_t LIVE_SEEN_MAX = 1 << 20;  // job ids already learned (FIFO)

// The live feature store: the model's per-user history kept current with the jobs slurmctld
// reports as ended (mlprio_observe_finished), the same UserStats the replayer feeds from its
// simulated schedule and training from the recorded one. Lock order: predict_mu, then mu.
struct LiveHistory {
  std::mutex mu;
  mlprio::model::UserHistory hist;
  double trained_until = -INFINITY;  // latest finish the model's snapshot holds
  std::deque<LiveFinish> log;
  uint64_t next_seq = 1;
  std::unordered_set<uint32_t> seen;
  std::deque<uint32_t> seen_order;
  uint64_t learned = 0;  // since the context was created
};

void live_apply(mlprio::model::UserHistory& h, const LiveFinish& f) {
  mlprio::Job j;
  j.req_time = f.req_time;
  j.req_procs = f.procs;
  j.status = f.status;
  h.by_user[f.user].record_run(j, f.run, f.end);
}

}  // namespace

struct mlprio_ctx {
  std::mutex state_mu;  // guards `state` pointer only (held for a pointer copy)
  std::shared_ptr<const State> state;
  std::condition_variable state_cv;  // a new state was published (mlprio_decide waits on it)
  std::atomic<uint64_t> next_generation{1};
  // Serialises building+publishing states (reconfigure, file watcher, conf fence), so an older
  // build can never be published over a newer one. Never held with a Slurm lock: the only callers
  // are the worker and site_factor_p_reconfig/init (no slurmctld lock held).
  std::mutex reload_mu;
  uint64_t fence_generation = 0;  // under reload_mu: state loaded by a fence, not yet seen by reconfigure

  std::mutex predict_mu;  // serialises predictor calls and `names` (XGBoost is not re-entrant)
  mlprio::TraceNames names;
  std::atomic<int> overruns{0};  // inline calls over budget for the current generation
  std::atomic<uint64_t> overrun_generation{0};

  std::mutex cache_mu;
  std::unordered_map<uint32_t, CacheEntry> cache;

  LiveHistory live;

  std::mutex noted_mu;  // guards noted: jobs whose admin note was logged (mlprio_first_sight)
  std::unordered_set<uint32_t> noted;

  std::mutex work_mu;  // queue, ready list, flags
  std::condition_variable work_cv, ready_cv;
  std::deque<std::unique_ptr<OwnedJob>> queue;
  std::vector<uint32_t> ready;
  bool ready_all = false;
  bool check_now = false;  // mlprio_ctx_poke: stat the model file at the next wake-up
  bool stop = false;
  // A caller of mlprio_decide saw a newer slurm.conf than the state's: load for it (worker).
  bool fence_requested = false;
  std::string fence_params;
  uint64_t fence_epoch = 0;
  std::thread worker;
  std::atomic<bool> worker_running{false};

  // LLM advisor (only after mlprio_llm_enable). Lock order: never hold two of these at once.
  std::atomic<bool> llm_enabled{false};
  std::mutex llm_mu;  // guards llm, llm_sig
#ifdef MLPRIO_HAVE_CURL
  std::shared_ptr<model::LlmAdvisor> llm;
#endif
  std::string llm_sig;
  std::mutex advice_mu;  // guards advice, advice_order, llm_jobs
  std::unordered_map<uint64_t, AdviceEntry> advice;
  std::deque<uint64_t> advice_order;
  std::unordered_map<uint64_t, uint32_t> llm_jobs;
  std::vector<uint64_t> arrived;  // keys with a new valid answer; under work_mu
  std::atomic<uint64_t> advised_jobs{0};
  // Steady-clock ms of the last "request failed" line (at most one per 10 s; the counters say
  // how many). Written on the advisor's thread.
  std::atomic<int64_t> llm_error_logged_ms{INT64_MIN / 2};

  std::shared_ptr<const State> snapshot() {
    std::lock_guard<std::mutex> g(state_mu);
    return state;
  }
  void publish(std::shared_ptr<const State> s) {
    {
      std::lock_guard<std::mutex> g(state_mu);
      state = std::move(s);
    }
    state_cv.notify_all();
  }
};

namespace {

// Seeds the live store from a newly loaded model's snapshot, then re-applies the finishes learned
// live that the snapshot does not hold (ended after its last finish). The copy is made with no
// lock held (it can be large); finishes learned meanwhile are applied under the lock at the swap.
void live_reseed(mlprio_ctx& ctx, const model::Predictor& p) {
  std::deque<LiveFinish> log;
  uint64_t seq0 = 0;
  {
    std::lock_guard<std::mutex> g(ctx.live.mu);
    log = ctx.live.log;
    seq0 = ctx.live.next_seq;
  }
  model::UserHistory h;
  if (const model::UserHistory* frozen = p.frozen_history()) h = *frozen;
  double until = -INFINITY;
  for (const auto& [key, st] : h.by_user)
    if (std::isfinite(st.last_end)) until = std::max(until, st.last_end);
  for (const LiveFinish& f : log)
    if (f.end > until) live_apply(h, f);
  {
    std::lock_guard<std::mutex> g(ctx.live.mu);
    for (const LiveFinish& f : ctx.live.log)
      if (f.seq >= seq0 && f.end > until) live_apply(h, f);
    ctx.live.hist.by_user.swap(h.by_user);
    ctx.live.trained_until = until;
  }  // the old history is freed here, outside the lock
}

// Predicts for jobs (already converted into ctx.names) from the live store. Caller holds
// predict_mu. `rows` receives the encoded rows (jobs.size() x N_FEATURES).
void predict_live(mlprio_ctx& ctx, const model::Predictor& p, std::span<const mlprio::Job> jobs,
                  std::span<model::Prediction> out, std::vector<float>& rows) {
  rows.resize(jobs.size() * model::N_FEATURES);
  const model::FeatureEncoder enc(ctx.names, p.epoch_offset());
  {
    std::lock_guard<std::mutex> g(ctx.live.mu);
    for (size_t i = 0; i < jobs.size(); ++i) {
      const uint64_t key = enc.user_of(jobs[i]);
      enc.encode(jobs[i], key ? ctx.live.hist.find(key) : nullptr,
                 std::span<float>(rows.data() + i * model::N_FEATURES, model::N_FEATURES));
    }
  }
  p.predict_rows(rows, jobs, out);
}

void predict_live(mlprio_ctx& ctx, const model::Predictor& p, const mlprio::Job& job,
                  model::Prediction& out) {
  thread_local std::vector<float> rows;
  predict_live(ctx, p, {&job, 1}, {&out, 1}, rows);
}

// The user's finished-job count in the live store: part of a job's cache fingerprint, so a
// pending job's factor is recomputed once its user's history has moved.
uint64_t live_version(mlprio_ctx& ctx, const char* user) {
  if (!user || !*user) return 0;
  uint64_t key = model::stable_hash(user);
  if (key == 0) key = 1;
  std::lock_guard<std::mutex> g(ctx.live.mu);
  const model::UserStats* s = ctx.live.hist.find(key);
  return s ? static_cast<uint64_t>(s->count) : 0;
}

// Builds a new State from params; the model is refused (neutral) when unusable. Returns the
// error text when refused.
std::shared_ptr<State> build_state(mlprio_ctx& ctx, Params params, uint64_t conf_epoch,
                                   std::string& error) {
  auto st = std::make_shared<State>();
  st->params = std::move(params);
  st->generation = ctx.next_generation.fetch_add(1);
  st->conf_epoch = conf_epoch;
  const std::string& path = st->params.model;
  st->stamp = stamp_of(path);
  if (path.empty()) {
    error = "no model= in PrioritySiteFactorParameters";
  } else if (!st->stamp.ok) {
    error = "model file " + path + " cannot be read: " + std::strerror(errno);
  } else if (!S_ISREG(st->stamp.mode)) {
    error = "model file " + path + " is not a regular file";
  } else if (st->stamp.mode & (S_IWGRP | S_IWOTH)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st->stamp.mode & 07777));
    error = "model file " + path + " is writable by group or others (mode " + mode +
            "); rejected: run chmod go-w on it";
  } else {
    try {
      std::shared_ptr<const model::Predictor> p = model::load_predictor(path);
      // Time a few single-job predictions so the hot path knows whether it fits the budget.
      mlprio::Job probe;
      probe.req_procs = 1;
      probe.req_time = 3600;
      model::Prediction out;
      auto t0 = Clock::now();
      constexpr int N = 32;
      {
        std::lock_guard<std::mutex> g(ctx.predict_mu);
        for (int i = 0; i < N; ++i) p->predict({&probe, 1}, ctx.names, {&out, 1});
      }
      st->per_job_ns =
          std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / N;
      st->describe = p->describe();
      live_reseed(ctx, *p);
      st->predictor = std::move(p);
      return st;
    } catch (const std::exception& e) {
      // "rejected" for model files, "refused" only for jobs: an admin greps for one or the other.
      error = std::string("model rejected: ") + e.what();  // the core's message names the file
    } catch (...) {
      error = "model file " + path + " rejected: unknown error";
    }
  }
  st->describe = "neutral (" + error + ")";
  return st;
}

// The model's prediction, its run time moved by the advisor's answer within the bounds.
model::Prediction advised(const State& st, model::Prediction p, const AdviceEntry* adv) {
#ifdef MLPRIO_HAVE_CURL
  if (adv) {
    model::Advice a;
    a.runtime_seconds = adv->runtime_s;
    a.confidence = adv->confidence;
    model::CombineBounds b;
    b.min_factor = st.params.llm_min_factor;
    b.max_factor = st.params.llm_max_factor;
    b.min_confidence = st.params.llm_min_confidence;
    p.runtime = model::combine(p.runtime, a, b);
  }
#else
  (void)st;
  (void)adv;
#endif
  return p;
}

int64_t factor_from(const State& st, const mlprio::Job& job, const model::Prediction& p) {
  // The score parameters `mlprio-replay tune` stored in the model file (size and failure
  // weights; defaults when untuned). The age term and the starvation limit are left to
  // multifactor's own age factor (PriorityWeightAge/PriorityMaxAge), which keeps the factor
  // cacheable: that part of the tuned policy is not enforced by the plugin.
  model::ScoreConfig cfg = st.predictor ? st.predictor->policy().score : model::ScoreConfig{};
  cfg.age_weight = 0;
  const double now = job.submit >= 0 ? job.submit : 0;
  double s = model::score(job, p, now, model::ClusterState{}, cfg);
  if (!std::isfinite(s)) return 0;
  return mlprio::plugin::factor_value(st.params.weight * s, st.params.max_boost);
}

void cache_put(mlprio_ctx& ctx, uint32_t id, const CacheEntry& e) {
  std::lock_guard<std::mutex> g(ctx.cache_mu);
  if (ctx.cache.size() >= CACHE_MAX) ctx.cache.clear();
  ctx.cache[id] = e;
}

// Registers key -> job id (so a later answer finds the job) and returns the answer if there is
// one. Both under one lock: either this call sees the answer or the worker sees the job.
bool advice_for(mlprio_ctx& ctx, uint64_t key, uint32_t job_id, AdviceEntry* out) {
  std::lock_guard<std::mutex> g(ctx.advice_mu);
  if (job_id) {
    if (ctx.llm_jobs.size() >= LLM_JOBS_MAX) ctx.llm_jobs.clear();
    ctx.llm_jobs[key] = job_id;
  }
  auto it = ctx.advice.find(key);
  if (it == ctx.advice.end()) return false;
  if (out) *out = it->second;
  return true;
}

// Whether the job's factor should use the advisor: key in admin_comment and an advisor running.
uint64_t llm_key_for(mlprio_ctx& ctx, const State& st, const mlprio_job_t& job) {
  if (!ctx.llm_enabled.load(std::memory_order_relaxed) || st.params.llm_url.empty()) return 0;
  return mlprio::plugin::llm_key_of(job.admin_comment);
}

#ifdef MLPRIO_HAVE_CURL
// Called on the advisor's thread for every finished request: stores valid answers and wakes
// the worker. Short locks only; never calls back into the advisor.
void on_advice(mlprio_ctx* ctx, uint64_t key, const model::AdviceResult& r) {
  if (r.status != model::AdviceStatus::OK) {
    // The first failure, then at most one per 10 s: r.error carries the server's own message for
    // an HTTP error, already sanitised and cut (it is untrusted). A skipped request (breaker
    // open) is no news.
    const int64_t now =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
            .count();
    int64_t last = ctx->llm_error_logged_ms.load();
    if (r.status != model::AdviceStatus::BREAKER_OPEN && now - last >= 10000 &&
        ctx->llm_error_logged_ms.compare_exchange_strong(last, now))
      log_msg(1, std::string("LLM advisor: request failed: ") + model::to_string(r.status) + ": " +
                     r.error);
    return;
  }
  {
    std::lock_guard<std::mutex> g(ctx->advice_mu);
    if (ctx->advice.emplace(key, AdviceEntry{r.advice.runtime_seconds, r.advice.confidence})
            .second) {
      ctx->advice_order.push_back(key);
      while (ctx->advice_order.size() > ADVICE_MAX) {
        ctx->advice.erase(ctx->advice_order.front());
        ctx->advice_order.pop_front();
      }
    }
  }
  {
    std::lock_guard<std::mutex> g(ctx->work_mu);
    ctx->arrived.push_back(key);
  }
  ctx->work_cv.notify_one();
}
#endif

// "http://h:p/v1/" -> "http://h:p" (the advisor appends /v1/chat/completions).
std::string advisor_base(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (url.size() >= 3 && url.compare(url.size() - 3, 3, "/v1") == 0) url.resize(url.size() - 3);
  return url;
}

// Starts, replaces or stops the advisor to match the parameters. The old advisor is stopped
// (in-flight request aborted, thread joined) outside every plugin lock.
void sync_llm(mlprio_ctx& ctx, const Params& p) {
  if (!ctx.llm_enabled.load()) return;
  // The API key is read, owner and mode checked, at every parameter change, so a fixed or
  // rotated key file takes effect at the next reconfigure. The key is never logged.
  std::string api_key, key_error;
  if (!p.llm_url.empty() && !p.llm_api_key_file.empty()) {
    try {
      api_key = mlprio::read_secret_file(p.llm_api_key_file, ::geteuid());
    } catch (const std::exception& e) {
      key_error = std::string("llm_api_key_file ") + e.what();
    }
  }
  const std::string sig =
      p.llm_url.empty() ? std::string()
                        : p.llm_url + "\n" + p.llm_model + "\n" + std::to_string(p.llm_timeout_ms) +
                              "\n" + model::to_string(p.llm_response_format) + "\n" +
                              p.llm_ca_file + "\n" + p.llm_api_key_file + "\n" + key_error + "\n" +
                              std::to_string(std::hash<std::string>{}(api_key));
  {
    std::lock_guard<std::mutex> g(ctx.llm_mu);
    if (sig == ctx.llm_sig) return;
  }
#ifdef MLPRIO_HAVE_CURL
  std::shared_ptr<model::LlmAdvisor> fresh;
  if (!sig.empty()) {
    model::AdvisorConfig c;
    c.base_url = advisor_base(p.llm_url);
    c.model = p.llm_model;
    c.timeout_ms = p.llm_timeout_ms;
    c.connect_timeout_ms = std::min<int64_t>(500, p.llm_timeout_ms);
    c.api_key = api_key;
    c.ca_file = p.llm_ca_file;
    c.response_format = p.llm_response_format;
    try {
      if (!key_error.empty()) throw model::AdvisorError(key_error);
      mlprio_ctx* raw = &ctx;
      fresh = std::make_shared<model::LlmAdvisor>(
          c, [raw](uint64_t key, const model::AdviceResult& r) { on_advice(raw, key, r); });
      log_msg(1, "LLM advisor started: " + c.base_url + "/v1/chat/completions, model " + c.model +
                     ", timeout " + std::to_string(c.timeout_ms) + " ms, response_format " +
                     model::to_string(c.response_format) + ", bounds x" +
                     std::to_string(p.llm_min_factor) + "..x" + std::to_string(p.llm_max_factor) +
                     (c.api_key.empty() ? "" : ", API key from " + p.llm_api_key_file) +
                     (c.ca_file.empty() ? "" : ", CA file " + c.ca_file));
    } catch (const std::exception& e) {
      log_msg(0, std::string("LLM advisor not started: ") + e.what());
    }
  }
  std::shared_ptr<model::LlmAdvisor> old;
  {
    std::lock_guard<std::mutex> g(ctx.llm_mu);
    old = std::move(ctx.llm);
    // After a failed start the next reconfigure tries again (a key file fixed in between).
    ctx.llm_sig = fresh || sig.empty() ? sig : std::string();
    ctx.llm = std::move(fresh);
  }
  if (old) {
    old->stop();
    if (sig.empty()) log_msg(1, "LLM advisor stopped (no llm_url)");
  }
#else
  {
    std::lock_guard<std::mutex> g(ctx.llm_mu);
    ctx.llm_sig = sig;
  }
  if (!sig.empty()) log_msg(0, "llm_url is set but this build has no libcurl; the LLM advisor is off");
#endif
}

// One info line with the advisor's counters, when they changed and at most every 10 s.
void log_llm_stats(mlprio_ctx& ctx, Clock::time_point& last, std::string& last_line) {
#ifdef MLPRIO_HAVE_CURL
  if (Clock::now() - last < std::chrono::seconds(10)) return;
  std::shared_ptr<model::LlmAdvisor> a;
  {
    std::lock_guard<std::mutex> g(ctx.llm_mu);
    a = ctx.llm;
  }
  if (!a) return;
  const auto c = a->counters();
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "LLM advisor: submitted=%llu answers_ok=%llu cache_hits=%llu timeouts=%llu "
                "http_errors=%llu transport_errors=%llu invalid=%llu too_large=%llu "
                "breaker_skipped=%llu breaker_opened=%llu dropped=%llu advised_jobs=%llu",
                (unsigned long long)c.submitted, (unsigned long long)c.answers_ok,
                (unsigned long long)c.cache_hits, (unsigned long long)c.timeouts,
                (unsigned long long)c.http_errors, (unsigned long long)c.transport_errors,
                (unsigned long long)c.invalid_answers, (unsigned long long)c.too_large,
                (unsigned long long)c.skipped_breaker_open, (unsigned long long)c.breaker_opened,
                (unsigned long long)c.dropped_queue_full,
                (unsigned long long)ctx.advised_jobs.load());
  if (last_line == buf) return;
  last_line = buf;
  last = Clock::now();
  log_msg(1, buf);
#else
  (void)ctx;
  (void)last;
  (void)last_line;
#endif
}

// Parameters that can have no effect with this model, each as a warning for the log.
std::vector<std::string> ineffective_params(const State& st) {
  std::vector<std::string> w;
  const Params& p = st.params;
  if (p.max_boost_given && static_cast<double>(p.max_boost) > p.weight)
    w.push_back("max_boost=" + std::to_string(p.max_boost) + " has no effect: it is above weight=" +
                mlprio::plugin::format_number(p.weight) +
                " and |SITE| <= weight (the score is below 1 at submission)");
  if (st.predictor && p.refuse_above < 1.0 && st.predictor->kind() == "xgboost") {
    mlprio::Job probe;
    probe.req_procs = 1;
    probe.req_time = 3600;
    model::Prediction out;
    mlprio::TraceNames names;
    st.predictor->predict({&probe, 1}, names, {&out, 1});
    if (std::isnan(out.fail_prob))
      w.push_back("refuse_above=" + mlprio::plugin::format_number(p.refuse_above) +
                  " has no effect: the model has no failure classifier (its training data had "
                  "no failed jobs, as in every SWF trace), so no job is ever refused or warned");
  }
  return w;
}

// Parses `text` and loads its model as the state of `conf_epoch`. Caller holds reload_mu.
int apply_params(mlprio_ctx& ctx, const char* text, uint64_t conf_epoch, const char* why) {
  auto parsed = mlprio::plugin::parse_params(text ? text : "");
  for (const auto& w : parsed.warnings) log_msg(0, w);
  // 22.05's `scontrol show config` prints PrioritySiteFactorParameters as (null): this line is
  // where an admin sees what is in force, defaults included.
  log_msg(1, std::string(why) + "parameters: " + mlprio::plugin::format_params(parsed.params));
  sync_llm(ctx, parsed.params);
  std::string error;
  auto st = build_state(ctx, std::move(parsed.params), conf_epoch, error);
  const bool ok = st->predictor != nullptr;
  log_msg(ok ? 1 : 0, std::string(why) + (ok ? "model loaded: " + st->describe
                                             : error + "; factor is neutral"));
  for (const auto& w : ineffective_params(*st)) log_msg(0, std::string(why) + w);
  ctx.publish(std::move(st));
  return ok ? MLPRIO_OK : fail(MLPRIO_ERR_MODEL, error);
}

// The worker's half of the conf fence: a caller saw slurm.conf re-read (epoch) before any
// reconfigure hook loaded the model for it. Returns whether a new state was published.
bool fence_load(mlprio_ctx& ctx, const std::string& params, uint64_t epoch) {
  std::lock_guard<std::mutex> g(ctx.reload_mu);
  if (ctx.snapshot()->conf_epoch == epoch) return false;  // a reconfigure hook was first
  apply_params(ctx, params.c_str(), epoch, "slurm.conf re-read: ");
  ctx.fence_generation = ctx.snapshot()->generation;
  return true;
}

int check_reload(mlprio_ctx& ctx, int* reloaded) {
  if (reloaded) *reloaded = 0;
  std::lock_guard<std::mutex> g(ctx.reload_mu);
  auto cur = ctx.snapshot();
  if (!cur || cur->params.model.empty()) return MLPRIO_OK;
  if (stamp_of(cur->params.model) == cur->stamp) return MLPRIO_OK;
  log_msg(1, "model file " + cur->params.model + " changed; reloading");
  std::string error;
  auto st = build_state(ctx, cur->params, cur->conf_epoch, error);
  const bool ok = st->predictor != nullptr;
  log_msg(ok ? 1 : 0, ok ? "model reloaded: " + st->describe : error + "; factor is neutral");
  for (const auto& w : ineffective_params(*st)) log_msg(0, w);
  ctx.publish(std::move(st));
  if (reloaded) *reloaded = 1;
  return ok ? MLPRIO_OK : fail(MLPRIO_ERR_MODEL, error);
}

void fill_params(const Params& p, mlprio_params_t* out) {
  out->weight = p.weight;
  out->max_boost = p.max_boost;
  out->limit_margin = p.limit_margin;
  out->refuse_above = p.refuse_above;
  out->refuse_mode = p.refuse_mode;
  out->budget_us = p.budget_us;
  out->check_period_ms = p.check_period_ms;
  out->llm_timeout_ms = p.llm_timeout_ms;
  out->reload_wait_ms = p.reload_wait_ms;
  out->have_model_path = !p.model.empty();
  out->have_llm = !p.llm_url.empty();
  out->mode = p.mode;
  out->override_default_time = p.override_default_time ? 1 : 0;
}

void notify_all_changed(mlprio_ctx& ctx) {
  {
    std::lock_guard<std::mutex> g(ctx.work_mu);
    ctx.ready_all = true;
  }
  ctx.ready_cv.notify_all();
}

void worker_loop(mlprio_ctx* ctx) {
  auto next_check = Clock::now();
  auto stats_logged = Clock::now();
  std::string stats_line;
  for (;;) {
    std::vector<std::unique_ptr<OwnedJob>> batch;
    std::vector<uint64_t> arrived;
    bool fence = false;
    std::string fence_params;
    uint64_t fence_epoch = 0;
    {
      std::unique_lock<std::mutex> lk(ctx->work_mu);
      ctx->work_cv.wait_until(lk, next_check, [&] {
        return ctx->stop || !ctx->queue.empty() || !ctx->arrived.empty() || ctx->check_now ||
               ctx->fence_requested;
      });
      if (ctx->stop) return;
      if (ctx->fence_requested) {
        fence = true;
        fence_params.swap(ctx->fence_params);
        fence_epoch = ctx->fence_epoch;
        ctx->fence_requested = false;
      }
      if (ctx->check_now) {
        ctx->check_now = false;
        next_check = Clock::now();
      }
      while (!ctx->queue.empty() && batch.size() < 4096) {
        batch.push_back(std::move(ctx->queue.front()));
        ctx->queue.pop_front();
      }
      arrived.swap(ctx->arrived);
    }
    try {
      // First, so that a caller waiting in mlprio_decide is released as early as possible.
      if (fence && fence_load(*ctx, fence_params, fence_epoch)) notify_all_changed(*ctx);
      if (!arrived.empty()) {
        // New answers: the jobs they belong to (if the site factor has seen them) are
        // re-prioritised by the applier; their cache entries are unadvised, so they recompute.
        std::vector<uint32_t> ids;
        {
          std::lock_guard<std::mutex> g(ctx->advice_mu);
          for (uint64_t k : arrived)
            if (auto it = ctx->llm_jobs.find(k); it != ctx->llm_jobs.end()) ids.push_back(it->second);
        }
        if (!ids.empty()) {
          {
            std::lock_guard<std::mutex> g(ctx->work_mu);
            ctx->ready.insert(ctx->ready.end(), ids.begin(), ids.end());
          }
          ctx->ready_cv.notify_all();
        }
      }
      if (Clock::now() >= next_check) {
        int reloaded = 0;
        check_reload(*ctx, &reloaded);
        if (reloaded) notify_all_changed(*ctx);
        auto st = ctx->snapshot();
        next_check = Clock::now() + std::chrono::milliseconds(st ? st->params.check_period_ms : 5000);
      }
      log_llm_stats(*ctx, stats_logged, stats_line);
      if (batch.empty()) continue;
      auto st = ctx->snapshot();
      std::vector<uint32_t> done;
      if (st && st->predictor) {
        std::vector<mlprio::Job> jobs;
        std::vector<model::Prediction> preds(batch.size());
        std::lock_guard<std::mutex> g(ctx->predict_mu);
        jobs.reserve(batch.size());
        for (auto& b : batch) jobs.push_back(mlprio::plugin::to_core_job(b->view, ctx->names));
        std::vector<float> rows;
        predict_live(*ctx, *st->predictor, jobs, preds, rows);
        for (size_t i = 0; i < batch.size(); ++i) {
          const uint32_t id = batch[i]->view.job_id;
          const uint64_t key = llm_key_for(*ctx, *st, batch[i]->view);
          AdviceEntry adv;
          const bool has = key && advice_for(*ctx, key, id, &adv);
          if (has) ctx->advised_jobs++;
          cache_put(*ctx, id,
                    {batch[i]->fingerprint, st->generation,
                     factor_from(*st, jobs[i], advised(*st, preds[i], has ? &adv : nullptr)), key,
                     has});
          done.push_back(id);
        }
      }
      if (!done.empty()) {
        {
          std::lock_guard<std::mutex> g(ctx->work_mu);
          ctx->ready.insert(ctx->ready.end(), done.begin(), done.end());
        }
        ctx->ready_cv.notify_all();
      }
    } catch (const std::exception& e) {
      log_msg(0, std::string("worker: ") + e.what());
    } catch (...) {
      log_msg(0, "worker: unknown exception");
    }
  }
}

#define MLPRIO_GUARD_BEGIN try {
#define MLPRIO_GUARD_END                                                      \
  }                                                                           \
  catch (const std::exception& e) {                                           \
    return fail(MLPRIO_ERR_INTERNAL, std::string(__func__) + ": " + e.what()); \
  }                                                                           \
  catch (...) {                                                               \
    return fail(MLPRIO_ERR_INTERNAL, std::string(__func__) + ": unknown exception"); \
  }

}  // namespace

extern "C" {

const char* mlprio_last_error(void) { return g_last_error.c_str(); }

void mlprio_set_log(mlprio_log_fn fn) { g_log.store(fn); }

int mlprio_ctx_create(const char* params, uint64_t conf_epoch, mlprio_ctx_t** out) {
  MLPRIO_GUARD_BEGIN
  if (!out) return fail(MLPRIO_ERR_PARAM, "mlprio_ctx_create: out is NULL");
  *out = nullptr;
  auto ctx = std::make_unique<mlprio_ctx>();
  int rc;
  {
    std::lock_guard<std::mutex> g(ctx->reload_mu);
    rc = apply_params(*ctx, params, conf_epoch, "");
  }
  *out = ctx.release();
  return rc;
  MLPRIO_GUARD_END
}

uint64_t mlprio_conf_epoch(const char* params, int64_t conf_time) {
  uint64_t h = fnv_str(1469598103934665603ULL, params);
  h = fnv(h, &conf_time, sizeof conf_time);
  // The string is re-allocated by every read_slurm_conf(): its address tells apart two readings
  // within one second (last_update's resolution) unless the allocator hands the same block back.
  const auto addr = reinterpret_cast<uintptr_t>(params);
  return fnv(h, &addr, sizeof addr);
}

void mlprio_ctx_free(mlprio_ctx_t* ctx) {
  if (!ctx) return;
  mlprio_worker_stop(ctx);
  try {
#ifdef MLPRIO_HAVE_CURL
    std::shared_ptr<model::LlmAdvisor> a;
    {
      std::lock_guard<std::mutex> g(ctx->llm_mu);
      a = std::move(ctx->llm);
    }
    if (a) a->stop();  // joins its thread; the callback it may still run needs ctx alive
    a.reset();
#endif
    delete ctx;
  } catch (...) {
  }
}

int mlprio_ctx_reconfigure(mlprio_ctx_t* ctx, const char* params, uint64_t conf_epoch) {
  MLPRIO_GUARD_BEGIN
  if (!ctx) return fail(MLPRIO_ERR_PARAM, "NULL context");
  int rc;
  {
    std::lock_guard<std::mutex> g(ctx->reload_mu);
    auto cur = ctx->snapshot();
    if (cur->conf_epoch == conf_epoch && cur->generation == ctx->fence_generation) {
      // A submission's fence loaded this configuration's model moments ago, after slurm.conf
      // was re-read: loading it again would only bump the generation. Once only, so a second
      // reconfigure within the same second still reloads.
      ctx->fence_generation = 0;
      log_msg(1, "reconfigure: model already loaded for this slurm.conf (generation " +
                     std::to_string(cur->generation) + ")");
      return cur->predictor ? MLPRIO_OK : fail(MLPRIO_ERR_MODEL, cur->describe);
    }
    rc = apply_params(*ctx, params, conf_epoch, "reconfigure: ");
  }
  notify_all_changed(*ctx);
  return rc;
  MLPRIO_GUARD_END
}

int mlprio_ctx_check_reload(mlprio_ctx_t* ctx, int* reloaded) {
  MLPRIO_GUARD_BEGIN
  if (!ctx) return fail(MLPRIO_ERR_PARAM, "NULL context");
  return check_reload(*ctx, reloaded);
  MLPRIO_GUARD_END
}

int mlprio_ctx_params(const mlprio_ctx_t* ctx, mlprio_params_t* out) {
  MLPRIO_GUARD_BEGIN
  if (!ctx || !out) return fail(MLPRIO_ERR_PARAM, "NULL argument");
  auto st = const_cast<mlprio_ctx_t*>(ctx)->snapshot();
  fill_params(st->params, out);
  return st->predictor ? MLPRIO_OK : MLPRIO_NO_MODEL;
  MLPRIO_GUARD_END
}

int mlprio_decide(mlprio_ctx_t* ctx, const char* params, uint64_t conf_epoch,
                  const mlprio_job_t* job, mlprio_decision_t* out) {
  MLPRIO_GUARD_BEGIN
  if (!ctx || !job || !out) return fail(MLPRIO_ERR_PARAM, "NULL argument");
  *out = mlprio_decision_t{};
  out->pred.runtime_s = out->pred.runtime_upper_s = out->pred.fail_prob = NAN;
  std::shared_ptr<const State> st = ctx->snapshot();
  if (st->conf_epoch != conf_epoch) {
    const int64_t wait_ms = st->params.reload_wait_ms;
    if (wait_ms <= 0 || !ctx->worker_running.load())
      return fail(MLPRIO_TIMEOUT, "slurm.conf was re-read and the model for it is not loaded yet");
    {
      std::lock_guard<std::mutex> g(ctx->work_mu);
      ctx->fence_requested = true;
      ctx->fence_params = params ? params : "";
      ctx->fence_epoch = conf_epoch;
    }
    ctx->work_cv.notify_all();
    std::unique_lock<std::mutex> lk(ctx->state_mu);
    const bool ok = ctx->state_cv.wait_for(lk, std::chrono::milliseconds(wait_ms), [&] {
      return ctx->state->conf_epoch == conf_epoch || !ctx->worker_running.load();
    });
    st = ctx->state;
    if (!ok || st->conf_epoch != conf_epoch)
      return fail(MLPRIO_TIMEOUT, "slurm.conf was re-read and the model for it was not loaded "
                                  "within reload_wait_ms=" + std::to_string(wait_ms));
  }
  fill_params(st->params, &out->params);
  out->generation = st->generation;
  if (!st->predictor) return fail(MLPRIO_NO_MODEL, st->describe);
  if (!mlprio::plugin::in_scope(st->params, job->partition, job->qos, job->account))
    return fail(MLPRIO_OUT_OF_SCOPE, "outside scope_partitions/scope_qos/scope_accounts");
  model::Prediction p;
  mlprio::plugin::FailText text;
  const bool failing = [&] {
    std::lock_guard<std::mutex> g(ctx->predict_mu);
    mlprio::Job j = mlprio::plugin::to_core_job(*job, ctx->names);
    std::vector<float> row;
    predict_live(*ctx, *st->predictor, {&j, 1}, {&p, 1}, row);
    if (!(std::isfinite(p.fail_prob) && p.fail_prob > st->params.refuse_above)) return false;
    // Only for jobs about to be refused or warned: TreeSHAP took 30 us (51 failure trees) to
    // 160 us (400 trees) here, against ~1 us for the prediction.
    std::vector<double> contrib(model::N_FEATURES + 1);
    const bool explained = st->predictor->explain_fail_row(row, contrib);
    text = mlprio::plugin::failure_text(
        explained ? mlprio::plugin::top_fail_reasons(contrib, row)
                  : std::vector<mlprio::plugin::FailContribution>{},
        explained, p.fail_prob, st->params.refuse_above, st->params.allow_override);
    return true;
  }();
  out->pred.runtime_s = p.runtime;
  out->pred.runtime_upper_s = p.runtime_upper;
  out->pred.fail_prob = p.fail_prob;
  if (!failing) return MLPRIO_OK;
  const Params& prm = st->params;
  std::string message = text.message + " " + text.advice, log = text.log, note;
  out->verdict = prm.refuse_mode == MLPRIO_REFUSE ? MLPRIO_VERDICT_REFUSE : MLPRIO_VERDICT_WARN;
  if (out->verdict == MLPRIO_VERDICT_REFUSE) {
    // The admin's ways through a refusal: exempt QOS or account, or the user's opt-in override.
    // The listed (lower-case) name when v is on the list, as Slurm compares them, else "".
    auto listed = [](const std::vector<std::string>& names, const char* v) -> std::string {
      if (!v || !*v) return {};
      std::string low(v);
      for (char& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return std::find(names.begin(), names.end(), low) != names.end() ? low : std::string();
    };
    std::string by;
    if (auto q = listed(prm.exempt_qos, job->qos); !q.empty()) by = "qos:" + q;
    else if (auto a = listed(prm.exempt_accounts, job->account); !a.empty()) by = "account:" + a;
    if (!by.empty()) {
      out->verdict = MLPRIO_VERDICT_EXEMPT;
      message = text.message + " Not refused: " + (by[0] == 'q' ? "QOS " : "account ") +
                by.substr(by.find(':') + 1) + " is exempt.";
      log = "exempt (" + by + "): " + log;
      note = "mlprio_exempt=" + by;
    } else if (prm.allow_override && mlprio::plugin::has_override_token(job->comment)) {
      out->verdict = MLPRIO_VERDICT_OVERRIDE;
      message = text.message + " Submitted anyway: --comment=" +
                mlprio::plugin::OVERRIDE_TOKEN + " (recorded with the job and in the log).";
      log = "override (--comment " + std::string(mlprio::plugin::OVERRIDE_TOKEN) + "): " + log;
      note = "mlprio_override=1";
    }
  }
  char fail[32];
  std::snprintf(fail, sizeof fail, "%.2f", p.fail_prob);
  if (!note.empty()) note += std::string(" mlprio_fail=") + fail;
  std::snprintf(out->message, sizeof out->message, "%s", message.c_str());
  std::snprintf(out->log, sizeof out->log, "%s", log.c_str());
  std::snprintf(out->admin_note, sizeof out->admin_note, "%s", note.c_str());
  return MLPRIO_OK;
  MLPRIO_GUARD_END
}

int mlprio_ctx_describe(const mlprio_ctx_t* ctx, char* buf, size_t len) {
  MLPRIO_GUARD_BEGIN
  if (!ctx || !buf || !len) return fail(MLPRIO_ERR_PARAM, "NULL argument");
  auto st = const_cast<mlprio_ctx_t*>(ctx)->snapshot();
  std::snprintf(buf, len, "%s", st->describe.c_str());
  return st->predictor ? MLPRIO_OK : MLPRIO_NO_MODEL;
  MLPRIO_GUARD_END
}

uint64_t mlprio_ctx_generation(const mlprio_ctx_t* ctx) {
  if (!ctx) return 0;
  try {
    return const_cast<mlprio_ctx_t*>(ctx)->snapshot()->generation;
  } catch (...) {
    return 0;
  }
}

int mlprio_predict(mlprio_ctx_t* ctx, const mlprio_job_t* job, mlprio_prediction_t* out) {
  MLPRIO_GUARD_BEGIN
  if (!ctx || !job || !out) return fail(MLPRIO_ERR_PARAM, "NULL argument");
  out->runtime_s = out->runtime_upper_s = out->fail_prob = NAN;
  auto st = ctx->snapshot();
  if (!st->predictor) return fail(MLPRIO_NO_MODEL, st->describe);
  model::Prediction p;
  {
    std::lock_guard<std::mutex> g(ctx->predict_mu);
    mlprio::Job j = mlprio::plugin::to_core_job(*job, ctx->names);
    predict_live(*ctx, *st->predictor, j, p);
  }
  out->runtime_s = p.runtime;
  out->runtime_upper_s = p.runtime_upper;
  out->fail_prob = p.fail_prob;
  return MLPRIO_OK;
  MLPRIO_GUARD_END
}

int mlprio_site_factor(mlprio_ctx_t* ctx, const mlprio_job_t* job, int64_t* factor) {
  MLPRIO_GUARD_BEGIN
  if (!ctx || !job || !factor) return fail(MLPRIO_ERR_PARAM, "NULL argument");
  *factor = 0;
  auto st = ctx->snapshot();
  if (!st->predictor) return MLPRIO_NO_MODEL;
  if (!mlprio::plugin::in_scope(st->params, job->partition, job->qos, job->account))
    return MLPRIO_OUT_OF_SCOPE;
  uint64_t fp = fingerprint(*job);
  const uint64_t hv = live_version(*ctx, job->user);
  fp = fnv(fp, &hv, sizeof hv);
  const uint64_t key = llm_key_for(*ctx, *st, *job);
  {
    bool recheck = false;
    {
      std::lock_guard<std::mutex> g(ctx->cache_mu);
      auto it = ctx->cache.find(job->job_id);
      if (it != ctx->cache.end() && it->second.fingerprint == fp &&
          it->second.generation == st->generation) {
        *factor = it->second.factor;
        recheck = key && !it->second.advised;
        if (!recheck) return MLPRIO_OK;
      }
    }
    // Cached without advice: still right unless an answer has arrived since.
    if (recheck && !advice_for(*ctx, key, job->job_id, nullptr)) return MLPRIO_OK;
  }
  const int64_t budget_ns = st->params.budget_us * 1000;
  const bool over = ctx->overrun_generation.load() == st->generation && ctx->overruns.load() >= 3;
  if (budget_ns > 0 && st->per_job_ns <= static_cast<double>(budget_ns) && !over) {
    auto t0 = Clock::now();
    model::Prediction p;
    int64_t f = 0;
    AdviceEntry adv;
    const bool has = key && advice_for(*ctx, key, job->job_id, &adv);
    {
      std::lock_guard<std::mutex> g(ctx->predict_mu);
      mlprio::Job j = mlprio::plugin::to_core_job(*job, ctx->names);
      predict_live(*ctx, *st->predictor, j, p);
      f = factor_from(*st, j, advised(*st, p, has ? &adv : nullptr));
    }
    if (has) ctx->advised_jobs++;
    const auto took = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    if (took > budget_ns) {
      if (ctx->overrun_generation.exchange(st->generation) != st->generation) ctx->overruns = 0;
      if (++ctx->overruns == 3)
        log_msg(0, "inline model calls exceed budget_us=" + std::to_string(st->params.budget_us) +
                       "; switching this model to the worker thread");
    }
    cache_put(*ctx, job->job_id, {fp, st->generation, f, key, has});
    *factor = f;
    return MLPRIO_OK;
  }
  if (key) advice_for(*ctx, key, job->job_id, nullptr);  // register: a later answer finds it
  auto owned = std::make_unique<OwnedJob>(*job);
  owned->fingerprint = fp;
  {
    std::lock_guard<std::mutex> g(ctx->work_mu);
    if (ctx->queue.size() < 100000) ctx->queue.push_back(std::move(owned));
  }
  ctx->work_cv.notify_one();
  return MLPRIO_PENDING;
  MLPRIO_GUARD_END
}

int mlprio_first_sight(mlprio_ctx_t* ctx, uint32_t job_id) {
  if (!ctx) return 0;
  try {
    std::lock_guard<std::mutex> g(ctx->noted_mu);
    if (ctx->noted.size() >= 65536) ctx->noted.clear();  // bounded; a job may be logged twice
    return ctx->noted.insert(job_id).second ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

void mlprio_forget(mlprio_ctx_t* ctx, uint32_t job_id) {
  if (!ctx) return;
  try {
    std::lock_guard<std::mutex> g(ctx->cache_mu);
    ctx->cache.erase(job_id);
  } catch (...) {
  }
}

int mlprio_observe_finished(mlprio_ctx_t* ctx, const mlprio_finish_t* jobs, size_t n,
                            size_t* learned) {
  MLPRIO_GUARD_BEGIN
  if (learned) *learned = 0;
  if (!ctx || (n && !jobs)) return fail(MLPRIO_ERR_PARAM, "NULL argument");
  if (ctx->snapshot()->params.history_period_ms == 0) return MLPRIO_OK;
  struct Item {
    uint32_t id;
    LiveFinish f;
  };
  std::vector<Item> items;
  items.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const mlprio_finish_t& in = jobs[i];
    const char* user = in.job.user;
    if (!user || !*user || !(in.start_time > 0) || !std::isfinite(in.end_time) ||
        !(in.end_time >= in.start_time))
      continue;
    Item it{in.job.job_id, {}};
    it.f.user = model::stable_hash(std::string_view(user, ::strnlen(user, 256)));
    if (it.f.user == 0) it.f.user = 1;
    it.f.run = in.end_time - in.start_time;
    it.f.end = in.end_time;
    it.f.req_time = in.job.time_limit_s > 0 ? in.job.time_limit_s : -1;
    it.f.procs = in.job.req_cpus > 0 ? in.job.req_cpus : -1;
    using S = mlprio::JobStatus;
    switch (in.state) {
      case MLPRIO_END_COMPLETED: it.f.status = S::COMPLETED; break;
      case MLPRIO_END_FAILED: it.f.status = S::FAILED; break;
      case MLPRIO_END_TIMEOUT: it.f.status = S::TIMEOUT; break;
      case MLPRIO_END_OOM: it.f.status = S::OUT_OF_MEMORY; break;
      case MLPRIO_END_NODE_FAIL: it.f.status = S::NODE_FAIL; break;
      case MLPRIO_END_CANCELLED: it.f.status = S::CANCELLED; break;
      default: it.f.status = S::UNKNOWN_STATE; break;
    }
    items.push_back(it);
  }
  // In the order they ended, so each user's "last" and "previous" runs are in time order.
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.f.end < b.f.end; });
  size_t k = 0;
  LiveHistory& L = ctx->live;
  std::lock_guard<std::mutex> g(L.mu);
  for (Item& it : items) {
    if (!(it.f.end > L.trained_until)) continue;  // the model's snapshot has it
    if (!L.seen.insert(it.id).second) continue;
    L.seen_order.push_back(it.id);
    if (L.seen_order.size() > LIVE_SEEN_MAX) {
      L.seen.erase(L.seen_order.front());
      L.seen_order.pop_front();
    }
    it.f.seq = L.next_seq++;
    live_apply(L.hist, it.f);
    L.log.push_back(it.f);
    if (L.log.size() > LIVE_LOG_MAX) L.log.pop_front();
    ++k;
  }
  L.learned += k;
  if (learned) *learned = k;
  return MLPRIO_OK;
  MLPRIO_GUARD_END
}

int64_t mlprio_history_period_ms(mlprio_ctx_t* ctx) {
  if (!ctx) return 0;
  try {
    return ctx->snapshot()->params.history_period_ms;
  } catch (...) {
    return 0;
  }
}

int mlprio_worker_start(mlprio_ctx_t* ctx) {
  MLPRIO_GUARD_BEGIN
  if (!ctx) return fail(MLPRIO_ERR_PARAM, "NULL context");
  if (ctx->worker.joinable()) return MLPRIO_OK;
  {
    std::lock_guard<std::mutex> g(ctx->work_mu);
    ctx->stop = false;
  }
  ctx->worker = std::thread(worker_loop, ctx);
  ctx->worker_running = true;
  return MLPRIO_OK;
  MLPRIO_GUARD_END
}

void mlprio_worker_stop(mlprio_ctx_t* ctx) {
  if (!ctx) return;
  try {
    {
      std::lock_guard<std::mutex> g(ctx->work_mu);
      ctx->stop = true;
    }
    ctx->work_cv.notify_all();
    ctx->ready_cv.notify_all();
    ctx->state_cv.notify_all();
    if (ctx->worker.joinable()) ctx->worker.join();
    ctx->worker_running = false;
  } catch (...) {
  }
}

int mlprio_advice_of(mlprio_ctx_t* ctx, const char* admin_comment, double* runtime_s,
                     double* confidence) {
  if (!ctx || !admin_comment || !runtime_s || !confidence) return MLPRIO_PENDING;
  try {
    const uint64_t key = mlprio::plugin::llm_key_of(admin_comment);
    AdviceEntry adv;
    if (!key || !advice_for(*ctx, key, 0, &adv)) return MLPRIO_PENDING;
    *runtime_s = adv.runtime_s;
    *confidence = adv.confidence;
    return MLPRIO_OK;
  } catch (...) {
    return fail(MLPRIO_ERR_INTERNAL, "mlprio_advice_of: unexpected exception");
  }
}

int mlprio_take_ready(mlprio_ctx_t* ctx, uint32_t* ids, size_t cap, size_t* n, int* all,
                      int timeout_ms) {
  MLPRIO_GUARD_BEGIN
  if (!ctx || !n || !all) return fail(MLPRIO_ERR_PARAM, "NULL argument");
  *n = 0;
  *all = 0;
  std::unique_lock<std::mutex> lk(ctx->work_mu);
  ctx->ready_cv.wait_for(lk, std::chrono::milliseconds(std::max(timeout_ms, 0)),
                         [&] { return ctx->stop || ctx->ready_all || !ctx->ready.empty(); });
  if (ctx->ready_all) {
    ctx->ready_all = false;
    ctx->ready.clear();
    *all = 1;
    return MLPRIO_OK;
  }
  const size_t k = std::min(cap, ctx->ready.size());
  if (ids) std::copy(ctx->ready.begin(), ctx->ready.begin() + static_cast<std::ptrdiff_t>(k), ids);
  ctx->ready.erase(ctx->ready.begin(), ctx->ready.begin() + static_cast<std::ptrdiff_t>(k));
  *n = k;
  return k ? MLPRIO_OK : MLPRIO_TIMEOUT;
  MLPRIO_GUARD_END
}

void mlprio_ctx_poke(mlprio_ctx_t* ctx) {
  if (!ctx) return;
  try {
    {
      std::lock_guard<std::mutex> g(ctx->work_mu);
      ctx->check_now = true;
    }
    ctx->work_cv.notify_all();
  } catch (...) {
  }
}

void mlprio_wake(mlprio_ctx_t* ctx) {
  if (!ctx) return;
  try {
    {
      std::lock_guard<std::mutex> g(ctx->work_mu);
      ctx->stop = true;
    }
    ctx->ready_cv.notify_all();
    ctx->work_cv.notify_all();
  } catch (...) {
  }
}

int mlprio_llm_enable(mlprio_ctx_t* ctx) {
  MLPRIO_GUARD_BEGIN
  if (!ctx) return fail(MLPRIO_ERR_PARAM, "NULL context");
  ctx->llm_enabled = true;
  sync_llm(*ctx, ctx->snapshot()->params);
  return MLPRIO_OK;
  MLPRIO_GUARD_END
}

int mlprio_llm_submit(mlprio_ctx_t* ctx, uint64_t key, const mlprio_job_t* job) {
  MLPRIO_GUARD_BEGIN
  if (!ctx || !job || !key) return fail(MLPRIO_ERR_PARAM, "NULL context/job or key 0");
#ifdef MLPRIO_HAVE_CURL
  std::shared_ptr<model::LlmAdvisor> a;
  {
    std::lock_guard<std::mutex> g(ctx->llm_mu);
    a = ctx->llm;
  }
  if (!a) return fail(MLPRIO_NO_MODEL, "no LLM advisor running");
  model::AdvisorRequest req;
  if (job->script) req.script.assign(job->script, ::strnlen(job->script, LLM_SCRIPT_MAX));
  auto num = [&](const char* k, double v) {
    if (v >= 0 && std::isfinite(v)) {
      char b[64];
      std::snprintf(b, sizeof b, "%.6g", v);
      req.features.emplace_back(k, b);
    }
  };
  auto str = [&](const char* k, const char* v) {
    if (v && *v) req.features.emplace_back(k, std::string(v, ::strnlen(v, 256)));
  };
  num("requested_time_limit_s", job->time_limit_s);
  num("requested_cpus", static_cast<double>(job->req_cpus));
  num("requested_nodes", static_cast<double>(job->req_nodes));
  num("requested_gpus", job->req_gpus);
  num("requested_memory_bytes", static_cast<double>(job->req_mem_bytes));
  str("partition", job->partition);
  str("job_name", job->name);
  if (job->admin_comment)
    for (const auto& [k, v] : mlprio::plugin::extract_features("", job->admin_comment, ""))
      num(k.c_str(), v);
  const auto rc = a->submit(key, std::move(req));
  if (rc != model::SubmitStatus::QUEUED)
    return fail(MLPRIO_PENDING, rc == model::SubmitStatus::DROPPED_QUEUE_FULL
                                    ? "LLM advisor queue full; request dropped"
                                    : "LLM advisor stopped");
  return MLPRIO_OK;
#else
  return fail(MLPRIO_NO_MODEL, "built without libcurl: no LLM advisor");
#endif
  MLPRIO_GUARD_END
}

int mlprio_extract_features(const char* script, const char* comment, const char* name, char* buf,
                            size_t len) {
  try {
    auto f = mlprio::plugin::extract_features(script ? script : "", comment ? comment : "",
                                              name ? name : "");
    if (buf && len) std::snprintf(buf, len, "%s", mlprio::plugin::format_features(f).c_str());
    return static_cast<int>(f.size());
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return -1;
  } catch (...) {
    return -1;
  }
}

int mlprio_feature_problems(const char* script, const char* comment, const char* name, char* buf,
                            size_t len) {
  try {
    std::vector<std::string> problems;
    mlprio::plugin::extract_features(script ? script : "", comment ? comment : "",
                                     name ? name : "", problems);
    std::string text;
    for (const auto& p : problems) text += (text.empty() ? "" : "; ") + p;
    if (buf && len) std::snprintf(buf, len, "%s", text.c_str());
    return static_cast<int>(problems.size());
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return -1;
  } catch (...) {
    return -1;
  }
}

void mlprio_format_duration(double seconds, char* buf, size_t len) {
  if (!buf || !len) return;
  try {
    std::snprintf(buf, len, "%s", mlprio::plugin::format_duration(seconds).c_str());
  } catch (...) {
    buf[0] = '\0';
  }
}

}  // extern "C"
