// LlmAdvisor (llm_advisor.hpp): a bounded queue drained by one worker thread, which builds the
// prompt, answers from the LRU cache or asks the server through LlmClient (transport, circuit
// breaker, counters) and publishes the result for poll() and the callback. The worker owns the
// cache, the transport and the breaker, so they need no lock; the queue, the result store and the
// counters are the only state shared with callers. stop() aborts a transfer in flight at once. No
// exception leaves the worker thread: a failure becomes a result with a status.
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "model/llm_internal.hpp"

namespace mlprio::model {

const char* to_string(AdviceStatus s) {
  switch (s) {
    case AdviceStatus::OK:
      return "ok";
    case AdviceStatus::TIMEOUT:
      return "timeout";
    case AdviceStatus::HTTP_ERROR:
      return "http_error";
    case AdviceStatus::TRANSPORT_ERROR:
      return "transport_error";
    case AdviceStatus::INVALID_ANSWER:
      return "invalid_answer";
    case AdviceStatus::TOO_LARGE:
      return "too_large";
    case AdviceStatus::BREAKER_OPEN:
      return "breaker_open";
  }
  return "unknown";
}

struct LlmAdvisor::Impl {
  llm_detail::LlmClient client;  // the worker's, but for the counters and abort()
  Callback callback;

  std::mutex mu;  // guards queue, results, result_order, stopping
  std::condition_variable cv;
  std::deque<std::pair<uint64_t, AdvisorRequest>> queue;
  std::unordered_map<uint64_t, std::pair<uint64_t, AdviceResult>> results;  // key -> (seq, r)
  std::deque<std::pair<uint64_t, uint64_t>> result_order;                   // (key, seq)
  uint64_t next_seq = 0;
  bool stopping = false;
  std::mutex stop_mu;  // serialises stop() callers around join()

  llm_detail::LruCache<Advice> cache;  // worker-only
  std::thread worker;

  Impl(AdvisorConfig c, Callback cb)
      : client(std::move(c)), callback(std::move(cb)), cache(client.cfg.cache_capacity) {}

  // Stores the result for poll(), then tells the callback (which may poll it at once).
  void publish(uint64_t key, const AdviceResult& r) {
    {
      std::lock_guard lock(mu);
      const uint64_t seq = next_seq++;
      results[key] = {seq, r};
      result_order.emplace_back(key, seq);
      // result_order also holds entries already polled or replaced; bounding it bounds results.
      while (result_order.size() > client.cfg.results_capacity) {
        const auto [old_key, old_seq] = result_order.front();
        result_order.pop_front();
        auto it = results.find(old_key);
        if (it != results.end() && it->second.first == old_seq) {
          results.erase(it);
          llm_detail::bump(client.counters.results_evicted);
        }
      }
    }
    if (callback) {
      try {
        callback(key, r);
      } catch (...) {
        llm_detail::bump(client.counters.callback_errors);
      }
    }
  }

  AdviceResult http_call(const AdvisorPrompt& p) {
    AdviceResult r;
    if (!client.transport.post(request_body(p, client.cfg), r)) return r;
    std::string why;
    if (auto a = parse_advice(client.transport.response(), client.cfg, &why)) {
      r.status = AdviceStatus::OK;
      r.advice = std::move(*a);
    } else {
      r.status = AdviceStatus::INVALID_ANSWER;
      r.error = why;
    }
    return r;
  }

  AdviceResult process(const AdvisorRequest& req) {
    const AdvisorPrompt p = build_prompt(req, client.cfg);
    AdviceResult r;
    if (auto hit = cache.get(p.cache_key)) {
      llm_detail::bump(client.counters.cache_hits);
      r.status = AdviceStatus::OK;
      r.advice = std::move(*hit);
      r.from_cache = true;
      return r;
    }
    if (!client.admit()) {
      r.status = AdviceStatus::BREAKER_OPEN;
      r.error = llm_detail::BREAKER_OPEN_ERROR;
      return r;
    }
    r = http_call(p);
    if (client.transport.aborted()) return r;  // stopping: says nothing about the server
    client.record(r.status);
    if (r.status == AdviceStatus::OK) cache.put(p.cache_key, r.advice);
    return r;
  }

  void run() {
    while (true) {
      try {
        std::pair<uint64_t, AdvisorRequest> item;
        {
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return stopping || !queue.empty(); });
          if (stopping) return;
          item = std::move(queue.front());
          queue.pop_front();
        }
        AdviceResult r;
        try {
          r = process(item.second);
        } catch (const std::exception& e) {
          llm_detail::bump(client.counters.transport_errors);
          r.status = AdviceStatus::TRANSPORT_ERROR;
          r.error = std::string("internal error: ") + e.what();
        }
        publish(item.first, r);
      } catch (...) {
        // Out of memory while publishing: drop this answer, keep serving.
        llm_detail::bump(client.counters.transport_errors);
      }
    }
  }
};

LlmAdvisor::LlmAdvisor(AdvisorConfig cfg, Callback callback)
    : impl_(std::make_unique<Impl>(std::move(cfg), std::move(callback))) {
  impl_->worker = std::thread([impl = impl_.get()] { impl->run(); });
}

LlmAdvisor::~LlmAdvisor() {
  stop();
}

SubmitStatus LlmAdvisor::submit(uint64_t job_key, AdvisorRequest request) {
  llm_detail::bump(impl_->client.counters.submitted);
  // Bound the work and memory of a queued item before taking the lock; build_prompt() does the
  // character-level sanitising on the worker.
  if (request.script.size() > impl_->client.cfg.max_script_bytes)
    request.script = std::string(request.script.data(), impl_->client.cfg.max_script_bytes);
  if (request.features.size() > llm_detail::MAX_FEATURES)
    request.features.resize(llm_detail::MAX_FEATURES);
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopping) return SubmitStatus::STOPPED;
    if (impl_->queue.size() >= impl_->client.cfg.queue_capacity) {
      llm_detail::bump(impl_->client.counters.dropped_queue_full);
      return SubmitStatus::DROPPED_QUEUE_FULL;
    }
    impl_->queue.emplace_back(job_key, std::move(request));
  }
  impl_->cv.notify_one();
  return SubmitStatus::QUEUED;
}

std::optional<AdviceResult> LlmAdvisor::poll(uint64_t job_key) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->results.find(job_key);
  if (it == impl_->results.end()) return std::nullopt;
  AdviceResult r = std::move(it->second.second);
  impl_->results.erase(it);
  return r;
}

void LlmAdvisor::stop() {
  if (!impl_) return;
  std::lock_guard stop_lock(impl_->stop_mu);
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
    impl_->queue.clear();
  }
  impl_->client.transport.abort();  // wakes the worker in a transfer
  impl_->cv.notify_all();           // and one waiting for work
  if (impl_->worker.joinable()) impl_->worker.join();
}

AdvisorCounters LlmAdvisor::counters() const {
  return llm_detail::snapshot(impl_->client.counters);
}

}  // namespace mlprio::model
