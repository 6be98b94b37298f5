// What the LLM advisor's source files share (internal to core; the API is
// mlprio/model/llm_advisor.hpp): the content hash of the cache keys, the LRU cache, the circuit
// breaker, the counters, the curl transport and LlmClient, the state LlmAdvisor's worker and
// LlmChat both build on. Compiled only when libcurl is found (MLPRIO_HAVE_CURL).
//   llm_prompt.cpp     sanitising untrusted text, the prompt, the answer schema, request bodies
//   llm_answer.cpp     parsing answers and error bodies; combine()
//   llm_transport.cpp  CurlTransport: one POST through curl's multi interface
//   llm_client.cpp     LlmClient: configuration check, counters, breaker bookkeeping
//   llm_advisor.cpp    LlmAdvisor: the queue, the worker thread, the result store
//   llm_chat.cpp       LlmChat: synchronous requests with the caller's own schema
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "mlprio/model/llm_advisor.hpp"
#include "model/curl_api.hpp"

namespace mlprio::model::llm_detail {

using Clock = std::chrono::steady_clock;

// Features of a request put into the prompt; submit() drops the rest before queueing.
inline constexpr std::size_t MAX_FEATURES = 64;

// A 128-bit hex key of `text` with a per-process seed (llm_prompt.cpp), so that content cannot be
// crafted offline to collide with another job's. Not cryptographic: a collision could at worst
// hand one job another's advice, which combine() bounds anyway.
std::string content_hash(std::string_view text);

// A small LRU of successful answers by content key: Advice for the advisor, ChatContent for
// LlmChat.
template <typename V>
class LruCache {
 public:
  explicit LruCache(std::size_t capacity) : capacity_(capacity) {}
  std::optional<V> get(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    entries_.splice(entries_.begin(), entries_, it->second);
    return it->second->second;
  }
  void put(const std::string& key, const V& a) {
    if (capacity_ == 0) return;
    if (auto it = index_.find(key); it != index_.end()) {
      it->second->second = a;
      entries_.splice(entries_.begin(), entries_, it->second);
      return;
    }
    entries_.emplace_front(key, a);
    index_[key] = entries_.begin();
    if (entries_.size() > capacity_) {
      index_.erase(entries_.back().first);
      entries_.pop_back();
    }
  }

 private:
  std::size_t capacity_;
  std::list<std::pair<std::string, V>> entries_;
  std::unordered_map<std::string, typename std::list<std::pair<std::string, V>>::iterator> index_;
};

// Closed -> (K consecutive failures) -> open for the cool-down -> half-open: the next request is
// the single probe; its success closes the breaker, its failure opens it for another cool-down.
class CircuitBreaker {
 public:
  CircuitBreaker(int failures, int64_t cooldown_ms) : k_(failures), cooldown_(cooldown_ms) {}
  bool allow(Clock::time_point now) const { return !open_ || now >= open_until_; }
  void on_success() {
    consecutive_ = 0;
    open_ = false;
  }
  // Returns true when this failure (re)opened the breaker.
  bool on_failure(Clock::time_point now) {
    ++consecutive_;
    if (open_ || consecutive_ >= k_) {
      open_ = true;
      open_until_ = now + cooldown_;
      return true;
    }
    return false;
  }

 private:
  int k_;
  std::chrono::milliseconds cooldown_;
  int consecutive_ = 0;
  bool open_ = false;
  Clock::time_point open_until_{};
};

// AdvisorCounters, each field atomic: the worker and LlmChat count, counters() reads.
struct Counters {
  std::atomic<uint64_t> submitted{0}, dropped_queue_full{0}, requests_sent{0}, answers_ok{0},
      cache_hits{0}, timeouts{0}, http_errors{0}, transport_errors{0}, invalid_answers{0},
      too_large{0}, skipped_breaker_open{0}, breaker_opened{0}, results_evicted{0},
      callback_errors{0};
};

inline void bump(std::atomic<uint64_t>& c) {
  c.fetch_add(1, std::memory_order_relaxed);
}

AdvisorCounters snapshot(const Counters& c);

// One HTTP POST at a time to {base_url}/v1/chat/completions through a curl easy handle driven by
// a multi handle, so that abort() from another thread wakes the poll (curl_multi_wakeup) and ends
// the transfer at once instead of waiting for a time-out. Every curl call is checked; a failing
// one throws AdvisorError naming the call, its file:line and curl's message.
class CurlTransport {
 public:
  // `cfg` (validated) must outlive the transport. Opens libcurl (curl_api.hpp: AdvisorError
  // naming what is missing), initialises it once per process and creates the handles.
  explicit CurlTransport(const AdvisorConfig& cfg);
  ~CurlTransport();
  CurlTransport(const CurlTransport&) = delete;
  CurlTransport& operator=(const CurlTransport&) = delete;

  // POSTs `payload`. True with the body in response() on HTTP 200; otherwise false with r.status
  // and r.error set (aborted, time-out, transport, too large, HTTP error with the server's
  // message).
  bool post(const std::string& payload, AdviceResult& r);
  const std::string& response() const { return response_; }

  // From any thread: ends the transfer in flight, and every later one, as aborted.
  void abort();
  bool aborted() const { return abort_.load(); }

 private:
  static size_t on_write(char* data, size_t size, size_t nmemb, void* user);
  static int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t);
  void configure(const std::string& payload, curl_slist* headers, char* errbuf);
  CURLcode perform(bool& aborted);
  bool classify(CURLcode rc, bool aborted, const char* errbuf, AdviceResult& r);

  const AdvisorConfig& cfg_;
  std::string url_;
  CURL* easy_ = nullptr;
  CURLM* multi_ = nullptr;
  std::string response_;
  bool response_too_large_ = false;
  std::atomic<bool> abort_{false};
};

// What LlmAdvisor's worker and LlmChat share: the configuration, the transport, the circuit
// breaker and the counters. Used by one thread at a time (the counters excepted).
struct LlmClient {
  // Validates `config` (AdvisorError naming the field), then opens the transport.
  explicit LlmClient(AdvisorConfig config);

  // Before a request: false (counted as skipped) while the breaker is open, else true (counted as
  // sent).
  bool admit();
  // After a request that was sent: counts its status and moves the breaker (OK closes it, any
  // failure counts towards opening it).
  void record(AdviceStatus status);

  const AdvisorConfig cfg;
  CurlTransport transport;
  CircuitBreaker breaker;
  Counters counters;
};

// The error line of a request not sent because the breaker is open.
inline constexpr const char* BREAKER_OPEN_ERROR = "circuit breaker open after repeated failures";

}  // namespace mlprio::model::llm_detail
