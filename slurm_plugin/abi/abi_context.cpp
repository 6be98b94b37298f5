// The C entry points of mlprio_abi.h and the context behind them: parameters and model as one
// immutable snapshot swapped under a short mutex (so reconfigure, the file watcher and
// slurmctld's RPC threads never see half a state), a per-job factor cache, and a C++ worker
// thread that predicts over-budget jobs and watches the model file. The worker never touches
// Slurm: it only publishes ready job ids that the C shim applies under slurmctld's own locks.
// Every entry point catches everything; nothing thrown here can reach slurmctld.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "abi_detail.hpp"
#include "mlprio/model/predictor.hpp"

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
};

struct CacheEntry {
  uint64_t fingerprint = 0;
  uint64_t generation = 0;
  int64_t factor = 0;
};

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
  for (const char* s : {j.user, j.account, j.partition, j.qos, j.name, j.comment, j.admin_comment})
    h = fnv_str(h, s);
  return h;
}

constexpr size_t CACHE_MAX = 262144;  // cleared when exceeded; entries are recomputed on demand

}  // namespace

struct mlprio_ctx {
  std::mutex state_mu;  // guards `state` pointer only (held for a pointer copy)
  std::shared_ptr<const State> state;
  std::atomic<uint64_t> next_generation{1};

  std::mutex predict_mu;  // serialises predictor calls and `names` (XGBoost is not re-entrant)
  mlprio::TraceNames names;
  std::atomic<int> overruns{0};  // inline calls over budget for the current generation
  std::atomic<uint64_t> overrun_generation{0};

  std::mutex cache_mu;
  std::unordered_map<uint32_t, CacheEntry> cache;

  std::mutex work_mu;  // queue, ready list, flags
  std::condition_variable work_cv, ready_cv;
  std::deque<std::unique_ptr<OwnedJob>> queue;
  std::vector<uint32_t> ready;
  bool ready_all = false;
  bool stop = false;
  std::thread worker;

  std::shared_ptr<const State> snapshot() {
    std::lock_guard<std::mutex> g(state_mu);
    return state;
  }
  void publish(std::shared_ptr<const State> s) {
    std::lock_guard<std::mutex> g(state_mu);
    state = std::move(s);
  }
};

namespace {

// Builds a new State from params; the model is refused (neutral) when unusable. Returns the
// error text when refused.
std::shared_ptr<State> build_state(mlprio_ctx& ctx, Params params, std::string& error) {
  auto st = std::make_shared<State>();
  st->params = std::move(params);
  st->generation = ctx.next_generation.fetch_add(1);
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
            "); refusing it: run chmod go-w on it";
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
      st->predictor = std::move(p);
      return st;
    } catch (const std::exception& e) {
      error = std::string("refused: ") + e.what();  // the core's message names the file
    } catch (...) {
      error = "model file " + path + " refused: unknown error";
    }
  }
  st->describe = "neutral (" + error + ")";
  return st;
}

int64_t factor_from(const State& st, const mlprio::Job& job, const model::Prediction& p) {
  model::ScoreConfig cfg;
  cfg.age_weight = 0;  // multifactor's own age factor does the aging; keeps the factor cacheable
  const double now = job.submit >= 0 ? job.submit : 0;
  double s = model::score(job, p, now, model::ClusterState{}, cfg);
  if (!std::isfinite(s)) return 0;
  double f = st.params.weight * s;
  const auto cap = static_cast<double>(st.params.max_boost);
  f = std::clamp(f, -cap, cap);
  return static_cast<int64_t>(std::llround(f));
}

void cache_put(mlprio_ctx& ctx, uint32_t id, const CacheEntry& e) {
  std::lock_guard<std::mutex> g(ctx.cache_mu);
  if (ctx.cache.size() >= CACHE_MAX) ctx.cache.clear();
  ctx.cache[id] = e;
}

int apply_params(mlprio_ctx& ctx, const char* text, bool log_model) {
  auto parsed = mlprio::plugin::parse_params(text ? text : "");
  for (const auto& w : parsed.warnings) log_msg(0, w);
  if (!parsed.params.llm_url.empty())
    log_msg(1, "llm_url is set; the LLM advisor is not consulted by this version (see README)");
  std::string error;
  auto st = build_state(ctx, std::move(parsed.params), error);
  const bool ok = st->predictor != nullptr;
  if (log_model) log_msg(ok ? 1 : 0, ok ? "model loaded: " + st->describe : error + "; factor is neutral");
  ctx.publish(std::move(st));
  return ok ? MLPRIO_OK : fail(MLPRIO_ERR_MODEL, error);
}

int check_reload(mlprio_ctx& ctx, int* reloaded) {
  if (reloaded) *reloaded = 0;
  auto cur = ctx.snapshot();
  if (!cur || cur->params.model.empty()) return MLPRIO_OK;
  if (stamp_of(cur->params.model) == cur->stamp) return MLPRIO_OK;
  log_msg(1, "model file " + cur->params.model + " changed; reloading");
  std::string error;
  auto st = build_state(ctx, cur->params, error);
  const bool ok = st->predictor != nullptr;
  log_msg(ok ? 1 : 0, ok ? "model reloaded: " + st->describe : error + "; factor is neutral");
  ctx.publish(std::move(st));
  if (reloaded) *reloaded = 1;
  return ok ? MLPRIO_OK : fail(MLPRIO_ERR_MODEL, error);
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
  for (;;) {
    std::vector<std::unique_ptr<OwnedJob>> batch;
    {
      std::unique_lock<std::mutex> lk(ctx->work_mu);
      ctx->work_cv.wait_until(lk, next_check, [&] { return ctx->stop || !ctx->queue.empty(); });
      if (ctx->stop) return;
      while (!ctx->queue.empty() && batch.size() < 4096) {
        batch.push_back(std::move(ctx->queue.front()));
        ctx->queue.pop_front();
      }
    }
    try {
      if (Clock::now() >= next_check) {
        int reloaded = 0;
        check_reload(*ctx, &reloaded);
        if (reloaded) notify_all_changed(*ctx);
        auto st = ctx->snapshot();
        next_check = Clock::now() + std::chrono::milliseconds(st ? st->params.check_period_ms : 5000);
      }
      if (batch.empty()) continue;
      auto st = ctx->snapshot();
      std::vector<uint32_t> done;
      if (st && st->predictor) {
        std::vector<mlprio::Job> jobs;
        std::vector<model::Prediction> preds(batch.size());
        std::lock_guard<std::mutex> g(ctx->predict_mu);
        jobs.reserve(batch.size());
        for (auto& b : batch) jobs.push_back(mlprio::plugin::to_core_job(b->view, ctx->names));
        st->predictor->predict(jobs, ctx->names, preds);
        for (size_t i = 0; i < batch.size(); ++i) {
          cache_put(*ctx, batch[i]->view.job_id,
                    {batch[i]->fingerprint, st->generation, factor_from(*st, jobs[i], preds[i])});
          done.push_back(batch[i]->view.job_id);
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

int mlprio_ctx_create(const char* params, mlprio_ctx_t** out) {
  MLPRIO_GUARD_BEGIN
  if (!out) return fail(MLPRIO_ERR_PARAM, "mlprio_ctx_create: out is NULL");
  *out = nullptr;
  auto ctx = std::make_unique<mlprio_ctx>();
  int rc = apply_params(*ctx, params, true);
  *out = ctx.release();
  return rc;
  MLPRIO_GUARD_END
}

void mlprio_ctx_free(mlprio_ctx_t* ctx) {
  if (!ctx) return;
  mlprio_worker_stop(ctx);
  try {
    delete ctx;
  } catch (...) {
  }
}

int mlprio_ctx_reconfigure(mlprio_ctx_t* ctx, const char* params) {
  MLPRIO_GUARD_BEGIN
  if (!ctx) return fail(MLPRIO_ERR_PARAM, "NULL context");
  int rc = apply_params(*ctx, params, true);
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
  const Params& p = st->params;
  out->weight = p.weight;
  out->max_boost = p.max_boost;
  out->limit_margin = p.limit_margin;
  out->refuse_above = p.refuse_above;
  out->refuse_mode = p.refuse_mode;
  out->budget_us = p.budget_us;
  out->check_period_ms = p.check_period_ms;
  out->llm_timeout_ms = p.llm_timeout_ms;
  out->have_model_path = !p.model.empty();
  return st->predictor ? MLPRIO_OK : MLPRIO_NO_MODEL;
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
    st->predictor->predict({&j, 1}, ctx->names, {&p, 1});
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
  const uint64_t fp = fingerprint(*job);
  {
    std::lock_guard<std::mutex> g(ctx->cache_mu);
    auto it = ctx->cache.find(job->job_id);
    if (it != ctx->cache.end() && it->second.fingerprint == fp &&
        it->second.generation == st->generation) {
      *factor = it->second.factor;
      return MLPRIO_OK;
    }
  }
  const int64_t budget_ns = st->params.budget_us * 1000;
  const bool over = ctx->overrun_generation.load() == st->generation && ctx->overruns.load() >= 3;
  if (budget_ns > 0 && st->per_job_ns <= static_cast<double>(budget_ns) && !over) {
    auto t0 = Clock::now();
    model::Prediction p;
    int64_t f = 0;
    {
      std::lock_guard<std::mutex> g(ctx->predict_mu);
      mlprio::Job j = mlprio::plugin::to_core_job(*job, ctx->names);
      st->predictor->predict({&j, 1}, ctx->names, {&p, 1});
      f = factor_from(*st, j, p);
    }
    const auto took = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    if (took > budget_ns) {
      if (ctx->overrun_generation.exchange(st->generation) != st->generation) ctx->overruns = 0;
      if (++ctx->overruns == 3)
        log_msg(0, "inline model calls exceed budget_us=" + std::to_string(st->params.budget_us) +
                       "; switching this model to the worker thread");
    }
    cache_put(*ctx, job->job_id, {fp, st->generation, f});
    *factor = f;
    return MLPRIO_OK;
  }
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

void mlprio_forget(mlprio_ctx_t* ctx, uint32_t job_id) {
  if (!ctx) return;
  try {
    std::lock_guard<std::mutex> g(ctx->cache_mu);
    ctx->cache.erase(job_id);
  } catch (...) {
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
    if (ctx->worker.joinable()) ctx->worker.join();
  } catch (...) {
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

void mlprio_format_duration(double seconds, char* buf, size_t len) {
  if (!buf || !len) return;
  try {
    std::snprintf(buf, len, "%s", mlprio::plugin::format_duration(seconds).c_str());
  } catch (...) {
    buf[0] = '\0';
  }
}

}  // extern "C"
