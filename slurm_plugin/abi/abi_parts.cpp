// The methods of the context's lock-owning parts (abi_parts.hpp): the model slot, the live
// feature store, the predictor gate, the factor cache, the work queue and the advice hub. Each
// method takes its own part's lock only; the one nesting allowed here is PredictorGate ->
// LiveHistory (the header states the whole order).
#include "abi_parts.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "mlprio/util/secret_file.hpp"

namespace mlprio::plugin {

FileStamp stamp_of(const std::string& path) {
  FileStamp s;
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return s;
  s.ok = true;
  s.dev = st.st_dev;
  s.ino = st.st_ino;
  s.size = st.st_size;
  s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
  s.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000LL + st.st_ctim.tv_nsec;
  s.mode = st.st_mode;
  return s;
}

OwnedJob::OwnedJob(const mlprio_job_t& j) : view(j) {
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

// ---- ModelSlot

std::shared_ptr<const State> ModelSlot::snapshot() const {
  std::lock_guard<std::mutex> g(state_mu_);
  return state_;
}

std::shared_ptr<const State> ModelSlot::wait_for_epoch(uint64_t conf_epoch,
                                                       std::chrono::milliseconds wait,
                                                       const std::atomic<bool>& running) {
  std::unique_lock<std::mutex> lk(state_mu_);
  state_cv_.wait_for(lk, wait, [&] { return state_->conf_epoch == conf_epoch || !running.load(); });
  return state_;
}

void ModelSlot::wake_waiters() {
  state_cv_.notify_all();
}

void ModelSlot::Reload::publish(std::shared_ptr<const State> s) {
  {
    std::lock_guard<std::mutex> g(slot_.state_mu_);
    slot_.state_ = std::move(s);
  }
  slot_.state_cv_.notify_all();
}

// ---- LiveHistory

namespace {
void live_apply(model::UserHistory& h, const LiveFinish& f) {
  Job j;
  j.req_time = f.req_time;
  j.req_procs = f.procs;
  j.status = f.status;
  h.by_user[f.user].record_run(j, f.run, f.end);
}
constexpr size_t LIVE_LOG_MAX = 100000;    // recent finishes re-applied after a model swap
constexpr size_t LIVE_SEEN_MAX = 1 << 20;  // job ids already learned (FIFO)
}  // namespace

void LiveHistory::reseed(const model::Predictor& p) {
  std::deque<LiveFinish> log;
  uint64_t seq0 = 0;
  {
    std::lock_guard<std::mutex> g(mu_);
    log = log_;
    seq0 = next_seq_;
  }
  model::UserHistory h;
  if (const model::UserHistory* frozen = p.frozen_history()) h = *frozen;
  double until = -INFINITY;
  for (const auto& [key, st] : h.by_user)
    if (std::isfinite(st.last_end)) until = std::max(until, st.last_end);
  for (const LiveFinish& f : log)
    if (f.end > until) live_apply(h, f);
  {
    // Finishes learned while the copy was being built are applied at the swap.
    std::lock_guard<std::mutex> g(mu_);
    for (const LiveFinish& f : log_)
      if (f.seq >= seq0 && f.end > until) live_apply(h, f);
    hist_.by_user.swap(h.by_user);
    trained_until_ = until;
  }  // the old history is freed here, outside the lock
}

void LiveHistory::encode(const model::FeatureEncoder& enc, std::span<const Job> jobs,
                         std::span<float> rows) const {
  std::lock_guard<std::mutex> g(mu_);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const uint64_t key = enc.user_of(jobs[i]);
    enc.encode(jobs[i], key ? hist_.find(key) : nullptr,
               rows.subspan(i * model::N_FEATURES, model::N_FEATURES));
  }
}

uint64_t LiveHistory::version(const char* user) const {
  if (!user || !*user) return 0;
  uint64_t key = model::stable_hash(user);
  if (key == 0) key = 1;
  std::lock_guard<std::mutex> g(mu_);
  const model::UserStats* s = hist_.find(key);
  return s ? static_cast<uint64_t>(s->count) : 0;
}

size_t LiveHistory::learn(std::vector<Finish>& items) {
  size_t k = 0;
  std::lock_guard<std::mutex> g(mu_);
  for (Finish& it : items) {
    if (!(it.f.end > trained_until_)) continue;  // the model's snapshot has it
    if (!seen_.insert(it.job_id).second) continue;
    seen_order_.push_back(it.job_id);
    if (seen_order_.size() > LIVE_SEEN_MAX) {
      seen_.erase(seen_order_.front());
      seen_order_.pop_front();
    }
    it.f.seq = next_seq_++;
    live_apply(hist_, it.f);
    log_.push_back(it.f);
    if (log_.size() > LIVE_LOG_MAX) log_.pop_front();
    ++k;
  }
  learned_ += k;
  return k;
}

// ---- PredictorGate

double PredictorGate::time_per_job(const model::Predictor& p) {
  Job probe;
  probe.req_procs = 1;
  probe.req_time = 3600;
  model::Prediction out;
  constexpr int N = 32;
  std::lock_guard<std::mutex> g(mu_);
  const auto t0 = Clock::now();
  for (int i = 0; i < N; ++i) p.predict({&probe, 1}, names_, {&out, 1});
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / N;
}

void PredictorGate::predict(const model::Predictor& p, std::span<const mlprio_job_t* const> views,
                            std::vector<Job>& jobs, std::vector<model::Prediction>& out,
                            std::vector<float>& rows) {
  jobs.clear();
  jobs.reserve(views.size());
  out.resize(views.size());
  rows.resize(views.size() * model::N_FEATURES);
  std::lock_guard<std::mutex> g(mu_);
  for (const mlprio_job_t* v : views) jobs.push_back(to_core_job(*v, names_));
  const model::FeatureEncoder enc(names_, p.epoch_offset());
  live_.encode(enc, jobs, rows);  // PredictorGate -> LiveHistory: the allowed nesting
  p.predict_rows(rows, jobs, out);
}

void PredictorGate::predict_one(const model::Predictor& p, const mlprio_job_t& view, Job& job,
                                model::Prediction& out, std::vector<float>& row) {
  row.resize(model::N_FEATURES);
  std::lock_guard<std::mutex> g(mu_);
  job = to_core_job(view, names_);
  const model::FeatureEncoder enc(names_, p.epoch_offset());
  live_.encode(enc, {&job, 1}, row);
  p.predict_rows(row, {&job, 1}, {&out, 1});
}

bool PredictorGate::explain_fail(const model::Predictor& p, std::span<const float> row,
                                 std::span<double> contrib) {
  std::lock_guard<std::mutex> g(mu_);
  return p.explain_fail_row(row, contrib);
}

// ---- FactorCache

std::optional<CacheEntry> FactorCache::find(uint32_t job_id, uint64_t fingerprint,
                                            uint64_t generation) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = cache_.find(job_id);
  if (it == cache_.end() || it->second.fingerprint != fingerprint ||
      it->second.generation != generation)
    return std::nullopt;
  return it->second;
}

void FactorCache::put(uint32_t job_id, const CacheEntry& e) {
  std::lock_guard<std::mutex> g(mu_);
  if (cache_.size() >= CACHE_MAX) cache_.clear();
  cache_[job_id] = e;
}

void FactorCache::forget(uint32_t job_id) {
  std::lock_guard<std::mutex> g(mu_);
  cache_.erase(job_id);
}

bool FactorCache::first_sight(uint32_t job_id) {
  std::lock_guard<std::mutex> g(mu_);
  if (noted_.size() >= NOTED_MAX) noted_.clear();
  return noted_.insert(job_id).second;
}

// ---- WorkQueue

WorkQueue::Batch WorkQueue::wait(Clock::time_point deadline) {
  Batch b;
  std::unique_lock<std::mutex> lk(mu_);
  work_cv_.wait_until(lk, deadline, [&] {
    return stop_ || !queue_.empty() || !arrived_.empty() || check_now_ || fence_requested_;
  });
  if (stop_) {
    b.stop = true;
    return b;
  }
  if (fence_requested_) {
    b.fence = true;
    b.fence_params.swap(fence_params_);
    b.fence_epoch = fence_epoch_;
    fence_requested_ = false;
  }
  b.check_now = check_now_;
  check_now_ = false;
  while (!queue_.empty() && b.jobs.size() < BATCH_MAX) {
    b.jobs.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  b.arrived.swap(arrived_);
  return b;
}

void WorkQueue::push_job(std::unique_ptr<OwnedJob> job) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (queue_.size() < QUEUE_MAX) queue_.push_back(std::move(job));
  }
  work_cv_.notify_one();
}

void WorkQueue::push_arrived(uint64_t key) {
  {
    std::lock_guard<std::mutex> g(mu_);
    arrived_.push_back(key);
  }
  work_cv_.notify_one();
}

void WorkQueue::request_fence(std::string params, uint64_t epoch) {
  {
    std::lock_guard<std::mutex> g(mu_);
    fence_requested_ = true;
    fence_params_ = std::move(params);
    fence_epoch_ = epoch;
  }
  work_cv_.notify_all();
}

void WorkQueue::poke() {
  {
    std::lock_guard<std::mutex> g(mu_);
    check_now_ = true;
  }
  work_cv_.notify_all();
}

void WorkQueue::set_stop(bool stop) {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = stop;
  }
  if (stop) {
    work_cv_.notify_all();
    ready_cv_.notify_all();
  }
}

void WorkQueue::publish_ready(const std::vector<uint32_t>& ids) {
  if (ids.empty()) return;
  {
    std::lock_guard<std::mutex> g(mu_);
    ready_.insert(ready_.end(), ids.begin(), ids.end());
  }
  ready_cv_.notify_all();
}

void WorkQueue::publish_all() {
  {
    std::lock_guard<std::mutex> g(mu_);
    ready_all_ = true;
  }
  ready_cv_.notify_all();
}

int WorkQueue::take_ready(uint32_t* ids, size_t cap, size_t* n, int* all, int timeout_ms) {
  std::unique_lock<std::mutex> lk(mu_);
  ready_cv_.wait_for(lk, std::chrono::milliseconds(std::max(timeout_ms, 0)),
                     [&] { return stop_ || ready_all_ || !ready_.empty(); });
  if (ready_all_) {
    ready_all_ = false;
    ready_.clear();
    *all = 1;
    return MLPRIO_OK;
  }
  const size_t k = std::min(cap, ready_.size());
  if (ids) std::copy(ready_.begin(), ready_.begin() + static_cast<std::ptrdiff_t>(k), ids);
  ready_.erase(ready_.begin(), ready_.begin() + static_cast<std::ptrdiff_t>(k));
  *n = k;
  return k ? MLPRIO_OK : MLPRIO_TIMEOUT;
}

// ---- AdviceHub

namespace {
// "http://h:p/v1/" -> "http://h:p" (the advisor appends /v1/chat/completions).
std::string advisor_base(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (url.size() >= 3 && url.compare(url.size() - 3, 3, "/v1") == 0) url.resize(url.size() - 3);
  return url;
}
}  // namespace

bool AdviceHub::find(uint64_t key, uint32_t job_id, AdviceEntry* out) {
  std::lock_guard<std::mutex> g(mu_);
  if (job_id) {
    if (jobs_.size() >= LLM_JOBS_MAX) jobs_.clear();
    jobs_[key] = job_id;
  }
  auto it = advice_.find(key);
  if (it == advice_.end()) return false;
  if (out) *out = it->second;
  return true;
}

std::vector<uint32_t> AdviceHub::jobs_of(const std::vector<uint64_t>& keys) const {
  std::vector<uint32_t> ids;
  std::lock_guard<std::mutex> g(mu_);
  for (uint64_t k : keys)
    if (auto it = jobs_.find(k); it != jobs_.end()) ids.push_back(it->second);
  return ids;
}

void AdviceHub::sync(const Params& p, const ModelSlot::Reload& /*proof*/) {
  if (!enabled_.load()) return;
  // The API key is read, owner and mode checked, at every parameter change, so a fixed or
  // rotated key file takes effect at the next reconfigure. The key is never logged.
  std::string api_key, key_error;
  if (!p.llm_url.empty() && !p.llm_api_key_file.empty()) {
    try {
      api_key = read_secret_file(p.llm_api_key_file, ::geteuid());
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
    std::lock_guard<std::mutex> g(mu_);
    if (sig == sig_) return;
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
      fresh = std::make_shared<model::LlmAdvisor>(
          c, [this](uint64_t key, const model::AdviceResult& r) { on_advice(key, r); });
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
    std::lock_guard<std::mutex> g(mu_);
    old = std::move(advisor_);
    // After a failed start the next reconfigure tries again (a key file fixed in between).
    sig_ = fresh || sig.empty() ? sig : std::string();
    advisor_ = std::move(fresh);
  }
  if (old) {
    old->stop();  // joins its thread, whose callback takes mu_: never under it
    if (sig.empty()) log_msg(1, "LLM advisor stopped (no llm_url)");
  }
#else
  {
    std::lock_guard<std::mutex> g(mu_);
    sig_ = sig;
  }
  if (!sig.empty())
    log_msg(0, "llm_url is set but this build has no libcurl; the LLM advisor is off");
#endif
}

void AdviceHub::shutdown() {
#ifdef MLPRIO_HAVE_CURL
  std::shared_ptr<model::LlmAdvisor> a;
  {
    std::lock_guard<std::mutex> g(mu_);
    a = std::move(advisor_);
  }
  if (a) a->stop();  // joins its thread; the callback it may still run needs the hub alive
#endif
}

#ifdef MLPRIO_HAVE_CURL
std::shared_ptr<model::LlmAdvisor> AdviceHub::advisor() const {
  std::lock_guard<std::mutex> g(mu_);
  return advisor_;
}

// On the advisor's thread for every finished request: stores a valid answer, then (lock
// released) wakes the worker. Never calls back into the advisor.
void AdviceHub::on_advice(uint64_t key, const model::AdviceResult& r) {
  if (r.status != model::AdviceStatus::OK) {
    // The first failure, then at most one per 10 s: r.error carries the server's own message for
    // an HTTP error, already sanitised and cut (it is untrusted). A skipped request (breaker
    // open) is no news.
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    int64_t last = error_logged_ms_.load();
    if (r.status != model::AdviceStatus::BREAKER_OPEN && now - last >= 10000 &&
        error_logged_ms_.compare_exchange_strong(last, now))
      log_msg(1, std::string("LLM advisor: request failed: ") + model::to_string(r.status) + ": " +
                     r.error);
    return;
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    if (advice_.emplace(key, AdviceEntry{r.advice.runtime_seconds, r.advice.confidence}).second) {
      advice_order_.push_back(key);
      while (advice_order_.size() > ADVICE_MAX) {
        advice_.erase(advice_order_.front());
        advice_order_.pop_front();
      }
    }
  }
  work_.push_arrived(key);
}
#endif

void AdviceHub::log_stats(Clock::time_point& last, std::string& last_line) {
#ifdef MLPRIO_HAVE_CURL
  if (Clock::now() - last < std::chrono::seconds(10)) return;
  const std::shared_ptr<model::LlmAdvisor> a = advisor();
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
                (unsigned long long)c.dropped_queue_full, (unsigned long long)advised_jobs_.load());
  if (last_line == buf) return;
  last_line = buf;
  last = Clock::now();
  log_msg(1, buf);
#else
  (void)last;
  (void)last_line;
#endif
}

int AdviceHub::submit(uint64_t key, const mlprio_job_t& job, std::string& why) {
#ifdef MLPRIO_HAVE_CURL
  const std::shared_ptr<model::LlmAdvisor> a = advisor();
  if (!a) {
    why = "no LLM advisor running";
    return MLPRIO_NO_MODEL;
  }
  model::AdvisorRequest req;
  if (job.script) req.script.assign(job.script, ::strnlen(job.script, LLM_SCRIPT_MAX));
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
  num("requested_time_limit_s", job.time_limit_s);
  num("requested_cpus", static_cast<double>(job.req_cpus));
  num("requested_nodes", static_cast<double>(job.req_nodes));
  num("requested_gpus", job.req_gpus);
  num("requested_memory_bytes", static_cast<double>(job.req_mem_bytes));
  str("partition", job.partition);
  str("job_name", job.name);
  if (job.admin_comment)
    for (const auto& [k, v] : extract_features("", job.admin_comment, "")) num(k.c_str(), v);
  const auto rc = a->submit(key, std::move(req));
  if (rc != model::SubmitStatus::QUEUED) {
    why = rc == model::SubmitStatus::DROPPED_QUEUE_FULL ? "LLM advisor queue full; request dropped"
                                                        : "LLM advisor stopped";
    return MLPRIO_PENDING;
  }
  return MLPRIO_OK;
#else
  (void)key;
  (void)job;
  why = "built without libcurl: no LLM advisor";
  return MLPRIO_NO_MODEL;
#endif
}

}  // namespace mlprio::plugin
