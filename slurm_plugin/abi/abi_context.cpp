// The C entry points of mlprio_abi.h and the context behind them. The context (mlprio_ctx) is a
// set of parts, each owning one lock (abi_parts.hpp, which states the lock order): the model
// slot (parameters and model as one immutable snapshot swapped under a short mutex, so
// reconfigure, the file watcher and slurmctld's RPC threads never see half a state), the
// predictor gate, the live feature store, the per-job factor cache, the work queue of a C++
// worker thread that predicts over-budget jobs and watches the model file, and the LLM advice
// hub. The worker never touches Slurm: it only publishes ready job ids that the C shim applies
// under slurmctld's own locks.
// Each snapshot records the slurm.conf reading it was built from (conf epoch); job_submit's
// decisions (mlprio_decide) never use a snapshot older than the configuration they run under:
// the worker loads the new one (no Slurm lock held) while the caller waits, bounded.
// Every entry point catches everything; nothing thrown here can reach slurmctld.
// One file (about 930 lines): one wrapper per function of mlprio_abi.h, each catching
// everything, kept together so the catch-all rule can be checked in one reading; the parts
// behind them live in abi_parts.cpp.
// The optional LLM advisor (llm_url, site_factor's context only) runs its HTTP calls on its own
// thread; valid answers land in the hub's bounded store keyed by the job's advisor key, the
// worker maps them to job ids and publishes those, and the factor applies model::combine() to
// the model's estimate, so an answer moves SITE only within llm_min_factor..llm_max_factor.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include "abi_detail.hpp"
#include "abi_parts.hpp"
#include "mlprio/model/features.hpp"
#include "mlprio/model/predictor.hpp"

namespace {

using mlprio::plugin::AdviceEntry;
using mlprio::plugin::AdviceHub;
using mlprio::plugin::CacheEntry;
using mlprio::plugin::Clock;
using mlprio::plugin::FactorCache;
using mlprio::plugin::LiveHistory;
using mlprio::plugin::log_msg;
using mlprio::plugin::ModelSlot;
using mlprio::plugin::OwnedJob;
using mlprio::plugin::Params;
using mlprio::plugin::PredictorGate;
using mlprio::plugin::stamp_of;
using mlprio::plugin::State;
using mlprio::plugin::WorkQueue;
namespace model = mlprio::model;

thread_local std::string g_last_error;
std::atomic<mlprio_log_fn> g_log{nullptr};

int fail(int code, std::string msg) {
  g_last_error = std::move(msg);
  return code;
}

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

}  // namespace

namespace mlprio::plugin {
void log_msg(int level, const std::string& msg) {
  if (auto fn = g_log.load()) fn(level, msg.c_str());
}
}  // namespace mlprio::plugin

// The parts, declared in dependency order (a part is constructed after those it refers to and
// destroyed before them). No lock of its own: the worker thread and its running flag are touched
// only by mlprio_worker_start/stop (the plugin's init/fini), and the inline-budget counters are
// atomics.
struct mlprio_ctx {
  ModelSlot slot;
  LiveHistory live;
  PredictorGate predictor{live};
  FactorCache cache;
  WorkQueue work;
  AdviceHub advice{work};

  std::atomic<int> overruns{0};  // inline calls over budget for the current generation
  std::atomic<uint64_t> overrun_generation{0};
  std::thread worker;
  std::atomic<bool> worker_running{false};

  std::shared_ptr<const State> snapshot() const { return slot.snapshot(); }
};

namespace {

// Loads the FSDP advice table of st->params into st (or says why not). Same file checks as the
// model: a regular file, not writable by group or others, bounded size; a parse error is logged
// by the caller and means no advice, never a refused job.
void load_fsdp_table(State& st) {
  const std::string& path = st.params.fsdp_table;
  st.fsdp_table.reset();
  st.fsdp_stamp = stamp_of(path);
  if (path.empty()) {
    st.fsdp_describe = "no fsdp_table=";
    return;
  }
  std::string error;
  if (!st.fsdp_stamp.ok) {
    error = "cannot be read: " + std::string(std::strerror(errno));
  } else if (!S_ISREG(st.fsdp_stamp.mode)) {
    error = "is not a regular file";
  } else if (st.fsdp_stamp.mode & (S_IWGRP | S_IWOTH)) {
    error = "is writable by group or others; rejected: run chmod go-w on it";
  } else {
    try {
      auto t = std::make_shared<const model::FsdpTable>(model::FsdpTable::load(path));
      st.fsdp_describe = "FSDP table " + path + ": " + t->describe();
      st.fsdp_table = std::move(t);
      return;
    } catch (const std::exception& e) {
      st.fsdp_describe = std::string("FSDP table rejected: ") + e.what() + " (no FSDP advice)";
      return;
    } catch (...) {
      error = "rejected: unknown error";
    }
  }
  st.fsdp_describe = "FSDP table " + path + " " + error + " (no FSDP advice)";
}

void log_fsdp_table(const State& st, const std::string& why) {
  if (st.params.fsdp_table.empty()) return;
  log_msg(st.fsdp_table ? 1 : 0, why + st.fsdp_describe);
}

// Builds a new State from params; the model is refused (neutral) when unusable. Returns the
// error text when refused. Runs under the reload lock (`r`), and calls the predictor gate and
// the live store from under it.
std::shared_ptr<State> build_state(mlprio_ctx& ctx, ModelSlot::Reload& r, Params params,
                                   uint64_t conf_epoch, std::string& error) {
  auto st = std::make_shared<State>();
  st->params = std::move(params);
  st->generation = r.next_generation();
  st->conf_epoch = conf_epoch;
  load_fsdp_table(*st);
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
      st->per_job_ns = ctx.predictor.time_per_job(*p);
      st->describe = p->describe();
      ctx.live.reseed(*p);
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
  // weights; defaults when untuned); model::site_factor leaves the age term and the starvation
  // limit to multifactor's own age factor. The deployed-stack replay calls the same function.
  const model::ScoreConfig cfg = st.predictor ? st.predictor->policy().score : model::ScoreConfig{};
  return model::site_factor(job, p, cfg, st.params.weight, st.params.max_boost);
}

// Whether the job's factor should use the advisor: key in admin_comment and an advisor running.
uint64_t llm_key_for(const mlprio_ctx& ctx, const State& st, const mlprio_job_t& job) {
  if (!ctx.advice.enabled() || st.params.llm_url.empty()) return 0;
  return mlprio::plugin::llm_key_of(job.admin_comment);
}

// Parameters that can have no effect with this model, each as a warning for the log.
std::vector<std::string> ineffective_params(const State& st) {
  std::vector<std::string> w;
  const Params& p = st.params;
  if (p.max_boost_given && static_cast<double>(p.max_boost) > p.weight)
    w.push_back("max_boost=" + std::to_string(p.max_boost) +
                " has no effect: it is above weight=" + mlprio::plugin::format_number(p.weight) +
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

// Parses `text` and loads its model as the state of `conf_epoch`, under the reload lock.
int apply_params(mlprio_ctx& ctx, ModelSlot::Reload& r, const char* text, uint64_t conf_epoch,
                 const char* why) {
  auto parsed = mlprio::plugin::parse_params(text ? text : "");
  for (const auto& w : parsed.warnings) log_msg(0, w);
  // 22.05's `scontrol show config` prints PrioritySiteFactorParameters as (null): this line is
  // where an admin sees what is in force, defaults included.
  log_msg(1, std::string(why) + "parameters: " + mlprio::plugin::format_params(parsed.params));
  ctx.advice.sync(parsed.params, r);
  std::string error;
  auto st = build_state(ctx, r, std::move(parsed.params), conf_epoch, error);
  const bool ok = st->predictor != nullptr;
  log_msg(ok ? 1 : 0, std::string(why) +
                          (ok ? "model loaded: " + st->describe : error + "; factor is neutral"));
  for (const auto& w : ineffective_params(*st)) log_msg(0, std::string(why) + w);
  log_fsdp_table(*st, why);
  r.publish(std::move(st));
  return ok ? MLPRIO_OK : fail(MLPRIO_ERR_MODEL, error);
}

// The worker's half of the conf fence: a caller saw slurm.conf re-read (epoch) before any
// reconfigure hook loaded the model for it. Returns whether a new state was published.
bool fence_load(mlprio_ctx& ctx, const std::string& params, uint64_t epoch) {
  ModelSlot::Reload r(ctx.slot);
  if (r.current()->conf_epoch == epoch) return false;  // a reconfigure hook was first
  apply_params(ctx, r, params.c_str(), epoch, "slurm.conf re-read: ");
  r.set_fence_generation(r.current()->generation);
  return true;
}

int check_reload(mlprio_ctx& ctx, int* reloaded) {
  if (reloaded) *reloaded = 0;
  ModelSlot::Reload r(ctx.slot);
  auto cur = r.current();
  if (!cur) return MLPRIO_OK;
  // The FSDP table alone changed: a copy of the state with the new table (same model).
  const bool table_changed =
      !cur->params.fsdp_table.empty() && stamp_of(cur->params.fsdp_table) != cur->fsdp_stamp;
  const bool model_changed =
      !cur->params.model.empty() && stamp_of(cur->params.model) != cur->stamp;
  if (table_changed && !model_changed) {
    log_msg(1, "FSDP table " + cur->params.fsdp_table + " changed; reloading");
    auto st = std::make_shared<State>(*cur);
    st->generation = r.next_generation();
    load_fsdp_table(*st);
    log_fsdp_table(*st, "");
    r.publish(std::move(st));
    if (reloaded) *reloaded = 1;
    return MLPRIO_OK;
  }
  if (!model_changed) return MLPRIO_OK;
  log_msg(1, "model file " + cur->params.model + " changed; reloading");
  std::string error;
  auto st = build_state(ctx, r, cur->params, cur->conf_epoch, error);
  const bool ok = st->predictor != nullptr;
  log_msg(ok ? 1 : 0, ok ? "model reloaded: " + st->describe : error + "; factor is neutral");
  for (const auto& w : ineffective_params(*st)) log_msg(0, w);
  if (table_changed) log_fsdp_table(*st, "");
  r.publish(std::move(st));
  if (reloaded) *reloaded = 1;
  return ok ? MLPRIO_OK : fail(MLPRIO_ERR_MODEL, error);
}

// The admin's exemption that covers a job about to be refused: "qos:NAME" or "account:NAME" (the
// listed, lower-case name, compared as Slurm compares them), else "".
std::string exempt_by(const Params& prm, const mlprio_job_t& job) {
  auto listed = [](const std::vector<std::string>& names, const char* v) -> std::string {
    if (!v || !*v) return {};
    std::string low(v);
    for (char& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return std::find(names.begin(), names.end(), low) != names.end() ? low : std::string();
  };
  if (auto q = listed(prm.exempt_qos, job.qos); !q.empty()) return "qos:" + q;
  if (auto a = listed(prm.exempt_accounts, job.account); !a.empty()) return "account:" + a;
  return {};
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

// Predicts a batch taken from the queue and caches the factors; returns the job ids done.
// The predictor gate is held for the predictions only; advice and cache are looked up after.
std::vector<uint32_t> score_batch(mlprio_ctx& ctx,
                                  const std::vector<std::unique_ptr<OwnedJob>>& batch) {
  std::vector<uint32_t> done;
  const auto st = ctx.snapshot();
  if (!st || !st->predictor) return done;
  std::vector<const mlprio_job_t*> views;
  views.reserve(batch.size());
  for (const auto& b : batch) views.push_back(&b->view);
  std::vector<mlprio::Job> jobs;
  std::vector<model::Prediction> preds;
  std::vector<float> rows;
  ctx.predictor.predict(*st->predictor, views, jobs, preds, rows);
  for (size_t i = 0; i < batch.size(); ++i) {
    const uint32_t id = batch[i]->view.job_id;
    const uint64_t key = llm_key_for(ctx, *st, batch[i]->view);
    AdviceEntry adv;
    const bool has = key && ctx.advice.find(key, id, &adv);
    if (has) ctx.advice.count_advised();
    ctx.cache.put(
        id, {batch[i]->fingerprint, st->generation,
             factor_from(*st, jobs[i], advised(*st, preds[i], has ? &adv : nullptr)), key, has});
    done.push_back(id);
  }
  return done;
}

void worker_loop(mlprio_ctx* ctx) {
  auto next_check = Clock::now();
  auto stats_logged = Clock::now();
  std::string stats_line;
  for (;;) {
    WorkQueue::Batch b = ctx->work.wait(next_check);
    if (b.stop) return;
    if (b.check_now) next_check = Clock::now();
    try {
      // First, so that a caller waiting in mlprio_decide is released as early as possible.
      if (b.fence && fence_load(*ctx, b.fence_params, b.fence_epoch)) ctx->work.publish_all();
      // New answers: the jobs they belong to (if the site factor has seen them) are
      // re-prioritised by the applier; their cache entries are unadvised, so they recompute.
      if (!b.arrived.empty()) ctx->work.publish_ready(ctx->advice.jobs_of(b.arrived));
      if (Clock::now() >= next_check) {
        int reloaded = 0;
        check_reload(*ctx, &reloaded);
        if (reloaded) ctx->work.publish_all();
        auto st = ctx->snapshot();
        next_check =
            Clock::now() + std::chrono::milliseconds(st ? st->params.check_period_ms : 5000);
      }
      ctx->advice.log_stats(stats_logged, stats_line);
      if (!b.jobs.empty()) ctx->work.publish_ready(score_batch(*ctx, b.jobs));
    } catch (const std::exception& e) {
      log_msg(0, std::string("worker: ") + e.what());
    } catch (...) {
      log_msg(0, "worker: unknown exception");
    }
  }
}

#define MLPRIO_GUARD_BEGIN try {
#define MLPRIO_GUARD_END                                                             \
  }                                                                                  \
  catch (const std::exception& e) {                                                  \
    return fail(MLPRIO_ERR_INTERNAL, std::string(__func__) + ": " + e.what());       \
  }                                                                                  \
  catch (...) {                                                                      \
    return fail(MLPRIO_ERR_INTERNAL, std::string(__func__) + ": unknown exception"); \
  }

}  // namespace

extern "C" {

const char* mlprio_last_error(void) {
  return g_last_error.c_str();
}

void mlprio_set_log(mlprio_log_fn fn) {
  g_log.store(fn);
}

int mlprio_ctx_create(const char* params, uint64_t conf_epoch, mlprio_ctx_t** out) {
  MLPRIO_GUARD_BEGIN
  if (!out) return fail(MLPRIO_ERR_PARAM, "mlprio_ctx_create: out is NULL");
  *out = nullptr;
  auto ctx = std::make_unique<mlprio_ctx>();
  int rc;
  {
    ModelSlot::Reload r(ctx->slot);
    rc = apply_params(*ctx, r, params, conf_epoch, "");
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
    ctx->advice.shutdown();  // joins the advisor's thread; its callback needs ctx alive
    delete ctx;
  } catch (...) {
  }
}

int mlprio_ctx_reconfigure(mlprio_ctx_t* ctx, const char* params, uint64_t conf_epoch) {
  MLPRIO_GUARD_BEGIN
  if (!ctx) return fail(MLPRIO_ERR_PARAM, "NULL context");
  int rc;
  {
    ModelSlot::Reload r(ctx->slot);
    auto cur = r.current();
    if (cur->conf_epoch == conf_epoch && cur->generation == r.fence_generation()) {
      // A submission's fence loaded this configuration's model moments ago, after slurm.conf
      // was re-read: loading it again would only bump the generation. Once only, so a second
      // reconfigure within the same second still reloads.
      r.set_fence_generation(0);
      log_msg(1, "reconfigure: model already loaded for this slurm.conf (generation " +
                     std::to_string(cur->generation) + ")");
      return cur->predictor ? MLPRIO_OK : fail(MLPRIO_ERR_MODEL, cur->describe);
    }
    rc = apply_params(*ctx, r, params, conf_epoch, "reconfigure: ");
  }
  ctx->work.publish_all();
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
  auto st = ctx->snapshot();
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
    ctx->work.request_fence(params ? params : "", conf_epoch);
    st = ctx->slot.wait_for_epoch(conf_epoch, std::chrono::milliseconds(wait_ms),
                                  ctx->worker_running);
    if (st->conf_epoch != conf_epoch)
      return fail(MLPRIO_TIMEOUT,
                  "slurm.conf was re-read and the model for it was not loaded "
                  "within reload_wait_ms=" +
                      std::to_string(wait_ms));
  }
  fill_params(st->params, &out->params);
  out->generation = st->generation;
  if (!st->predictor) return fail(MLPRIO_NO_MODEL, st->describe);
  if (!mlprio::plugin::in_scope(st->params, job->partition, job->qos, job->account))
    return fail(MLPRIO_OUT_OF_SCOPE, "outside scope_partitions/scope_qos/scope_accounts");
  model::Prediction p;
  mlprio::plugin::FailText text;
  const bool failing = [&] {
    mlprio::Job j;
    std::vector<float> row;
    ctx->predictor.predict_one(*st->predictor, *job, j, p, row);
    if (!(std::isfinite(p.fail_prob) && p.fail_prob > st->params.refuse_above)) return false;
    // Only for jobs about to be refused or warned: TreeSHAP took 30 us (51 failure trees) to
    // 160 us (400 trees) here, against ~1 us for the prediction.
    std::vector<double> contrib(model::N_FEATURES + 1);
    const bool explained = ctx->predictor.explain_fail(*st->predictor, row, contrib);
    text = mlprio::plugin::failure_text(explained ? mlprio::plugin::top_fail_reasons(contrib, row)
                                                  : std::vector<mlprio::plugin::FailContribution>{},
                                        explained, p.fail_prob, st->params.refuse_above,
                                        st->params.allow_override);
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
    const std::string by = exempt_by(prm, *job);
    if (!by.empty()) {
      out->verdict = MLPRIO_VERDICT_EXEMPT;
      message = text.message + " Not refused: " + (by[0] == 'q' ? "QOS " : "account ") +
                by.substr(by.find(':') + 1) + " is exempt.";
      log = "exempt (" + by + "): " + log;
      note = "mlprio_exempt=" + by;
    } else if (prm.allow_override && mlprio::plugin::has_override_token(job->comment)) {
      out->verdict = MLPRIO_VERDICT_OVERRIDE;
      message = text.message + " Submitted anyway: --comment=" + mlprio::plugin::OVERRIDE_TOKEN +
                " (recorded with the job and in the log).";
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

int mlprio_fsdp_advise(mlprio_ctx_t* ctx, const mlprio_job_t* job, const char* tres,
                       int64_t gpus_total, mlprio_fsdp_advice_t* out) {
  MLPRIO_GUARD_BEGIN
  if (!ctx || !job || !out) return fail(MLPRIO_ERR_PARAM, "NULL argument");
  *out = mlprio_fsdp_advice_t{};
  out->max_safe_mbs = -1;
  const std::shared_ptr<const State> st = ctx->snapshot();
  const Params& prm = st->params;
  auto why = [&](const std::string& w) {
    std::snprintf(out->why, sizeof out->why, "%s", w.c_str());
    return MLPRIO_OK;
  };
  if (prm.fsdp_table.empty()) return why("no fsdp_table=");
  const model::DirectiveParse dp = model::parse_fsdp_directives(job->script ? job->script : "");
  std::string problems;
  for (const auto& p : dp.problems) problems += (problems.empty() ? "" : "; ") + p;
  std::snprintf(out->problems, sizeof out->problems, "%s", problems.c_str());
  out->minibatch = dp.directive.minibatch;
  if (!dp.directive.any) return why("no #MLPRIO training configuration");
  if (!st->fsdp_table) return why(st->fsdp_describe);
  if (!mlprio::plugin::in_scope(prm, job->partition, job->qos, job->account))
    return why("outside scope_partitions/scope_qos/scope_accounts");
  out->gpu_memory_gib = mlprio::plugin::gpu_memory_gib(prm, tres ? tres : "");
  const model::FsdpAdvice a =
      model::advise(*st->fsdp_table, dp.directive, out->gpu_memory_gib, gpus_total);
  out->verdict = static_cast<int>(a.verdict);
  if (a.entry) out->max_safe_mbs = a.entry->max_safe_mbs;
  out->penalty = a.penalty;
  out->shadow = prm.mode == MLPRIO_MODE_SHADOW;
  out->refuse = a.verdict == model::FsdpVerdict::OOM && prm.fsdp_refuse_oom && !out->shadow;
  std::string message = a.message, note = a.note;
  if (out->refuse) {
    // The same ways through as for a predicted failure: exempt QOS/account, the user's override.
    if (const std::string by = exempt_by(prm, *job); !by.empty()) {
      out->refuse = 0;
      message += std::string(" Not refused: ") + (by[0] == 'q' ? "QOS " : "account ") +
                 by.substr(by.find(':') + 1) + " is exempt.";
      note += " mlprio_exempt=" + by;
    } else if (prm.allow_override && mlprio::plugin::has_override_token(job->comment)) {
      out->refuse = 0;
      message += std::string(" Submitted anyway: --comment=") + mlprio::plugin::OVERRIDE_TOKEN +
                 " (recorded with the job and in the log).";
      note += " mlprio_override=1";
    }
  }
  std::snprintf(out->message, sizeof out->message, "%s", message.c_str());
  std::snprintf(out->note, sizeof out->note, "%s", note.c_str());
  if (a.verdict == model::FsdpVerdict::NO_ADVICE) return why(a.why);
  return MLPRIO_OK;
  MLPRIO_GUARD_END
}

int mlprio_ctx_describe(const mlprio_ctx_t* ctx, char* buf, size_t len) {
  MLPRIO_GUARD_BEGIN
  if (!ctx || !buf || !len) return fail(MLPRIO_ERR_PARAM, "NULL argument");
  auto st = ctx->snapshot();
  std::snprintf(buf, len, "%s", st->describe.c_str());
  return st->predictor ? MLPRIO_OK : MLPRIO_NO_MODEL;
  MLPRIO_GUARD_END
}

uint64_t mlprio_ctx_generation(const mlprio_ctx_t* ctx) {
  if (!ctx) return 0;
  try {
    return ctx->snapshot()->generation;
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
  mlprio::Job j;
  thread_local std::vector<float> row;
  ctx->predictor.predict_one(*st->predictor, *job, j, p, row);
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
  const uint64_t hv = ctx->live.version(job->user);
  fp = fnv(fp, &hv, sizeof hv);
  const uint64_t key = llm_key_for(*ctx, *st, *job);
  {
    if (const auto hit = ctx->cache.find(job->job_id, fp, st->generation)) {
      *factor = hit->factor;
      // Cached without advice: still right unless an answer has arrived since.
      if (!(key && !hit->advised)) return MLPRIO_OK;
      if (!ctx->advice.find(key, job->job_id, nullptr)) return MLPRIO_OK;
    }
  }
  const int64_t budget_ns = st->params.budget_us * 1000;
  const bool over = ctx->overrun_generation.load() == st->generation && ctx->overruns.load() >= 3;
  if (budget_ns > 0 && st->per_job_ns <= static_cast<double>(budget_ns) && !over) {
    auto t0 = Clock::now();
    model::Prediction p;
    int64_t f = 0;
    AdviceEntry adv;
    const bool has = key && ctx->advice.find(key, job->job_id, &adv);
    {
      mlprio::Job j;
      thread_local std::vector<float> row;
      ctx->predictor.predict_one(*st->predictor, *job, j, p, row);
      f = factor_from(*st, j, advised(*st, p, has ? &adv : nullptr));
    }
    if (has) ctx->advice.count_advised();
    const auto took =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    if (took > budget_ns) {
      if (ctx->overrun_generation.exchange(st->generation) != st->generation) ctx->overruns = 0;
      if (++ctx->overruns == 3)
        log_msg(0, "inline model calls exceed budget_us=" + std::to_string(st->params.budget_us) +
                       "; switching this model to the worker thread");
    }
    ctx->cache.put(job->job_id, {fp, st->generation, f, key, has});
    *factor = f;
    return MLPRIO_OK;
  }
  if (key) ctx->advice.find(key, job->job_id, nullptr);  // register: a later answer finds it
  auto owned = std::make_unique<OwnedJob>(*job);
  owned->fingerprint = fp;
  ctx->work.push_job(std::move(owned));
  return MLPRIO_PENDING;
  MLPRIO_GUARD_END
}

int mlprio_first_sight(mlprio_ctx_t* ctx, uint32_t job_id) {
  if (!ctx) return 0;
  try {
    return ctx->cache.first_sight(job_id) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

void mlprio_forget(mlprio_ctx_t* ctx, uint32_t job_id) {
  if (!ctx) return;
  try {
    ctx->cache.forget(job_id);
  } catch (...) {
  }
}

int mlprio_observe_finished(mlprio_ctx_t* ctx, const mlprio_finish_t* jobs, size_t n,
                            size_t* learned) {
  MLPRIO_GUARD_BEGIN
  if (learned) *learned = 0;
  if (!ctx || (n && !jobs)) return fail(MLPRIO_ERR_PARAM, "NULL argument");
  if (ctx->snapshot()->params.history_period_ms == 0) return MLPRIO_OK;
  using Item = LiveHistory::Finish;
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
      case MLPRIO_END_COMPLETED:
        it.f.status = S::COMPLETED;
        break;
      case MLPRIO_END_FAILED:
        it.f.status = S::FAILED;
        break;
      case MLPRIO_END_TIMEOUT:
        it.f.status = S::TIMEOUT;
        break;
      case MLPRIO_END_OOM:
        it.f.status = S::OUT_OF_MEMORY;
        break;
      case MLPRIO_END_NODE_FAIL:
        it.f.status = S::NODE_FAIL;
        break;
      case MLPRIO_END_CANCELLED:
        it.f.status = S::CANCELLED;
        break;
      default:
        it.f.status = S::UNKNOWN_STATE;
        break;
    }
    items.push_back(it);
  }
  // In the order they ended, so each user's "last" and "previous" runs are in time order.
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.f.end < b.f.end; });
  const size_t k = ctx->live.learn(items);
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
  ctx->work.set_stop(false);
  ctx->worker = std::thread(worker_loop, ctx);
  ctx->worker_running = true;
  return MLPRIO_OK;
  MLPRIO_GUARD_END
}

void mlprio_worker_stop(mlprio_ctx_t* ctx) {
  if (!ctx) return;
  try {
    ctx->work.set_stop(true);
    ctx->slot.wake_waiters();
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
    if (!key || !ctx->advice.find(key, 0, &adv)) return MLPRIO_PENDING;
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
  return ctx->work.take_ready(ids, cap, n, all, timeout_ms);
  MLPRIO_GUARD_END
}

void mlprio_ctx_poke(mlprio_ctx_t* ctx) {
  if (!ctx) return;
  try {
    ctx->work.poke();
  } catch (...) {
  }
}

void mlprio_wake(mlprio_ctx_t* ctx) {
  if (!ctx) return;
  try {
    ctx->work.set_stop(true);
  } catch (...) {
  }
}

int mlprio_llm_enable(mlprio_ctx_t* ctx) {
  MLPRIO_GUARD_BEGIN
  if (!ctx) return fail(MLPRIO_ERR_PARAM, "NULL context");
  ctx->advice.enable();
  // Under the reload lock, as every other start or stop of the advisor.
  ModelSlot::Reload r(ctx->slot);
  ctx->advice.sync(r.current()->params, r);
  return MLPRIO_OK;
  MLPRIO_GUARD_END
}

int mlprio_llm_submit(mlprio_ctx_t* ctx, uint64_t key, const mlprio_job_t* job) {
  MLPRIO_GUARD_BEGIN
  if (!ctx || !job || !key) return fail(MLPRIO_ERR_PARAM, "NULL context/job or key 0");
  std::string why;
  const int rc = ctx->advice.submit(key, *job, why);
  return rc == MLPRIO_OK ? MLPRIO_OK : fail(rc, why);
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
    mlprio::plugin::extract_features(script ? script : "", comment ? comment : "", name ? name : "",
                                     problems);
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
