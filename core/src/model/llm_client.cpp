// LlmClient (llm_internal.hpp), the state LlmAdvisor's worker and LlmChat share: the check of an
// AdvisorConfig (AdvisorError naming the field), the gate of the circuit breaker before a request
// and the counting of its outcome after, and the snapshot of the counters.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "model/llm_internal.hpp"

namespace mlprio::model::llm_detail {

namespace {

void validate(const AdvisorConfig& c) {
  auto need = [](bool ok, const char* field, const char* valid) {
    if (!ok)
      throw AdvisorError(std::string("AdvisorConfig.") + field + " is invalid: expected " + valid);
  };
  need(c.base_url.rfind("http://", 0) == 0 || c.base_url.rfind("https://", 0) == 0, "base_url",
       "http://host:port or https://host:port");
  need(!c.model.empty(), "model", "a model name");
  need(std::all_of(c.api_key.begin(), c.api_key.end(),
                   [](char ch) { return ch > 0x20 && ch < 0x7f; }),
       "api_key", "printable ASCII without spaces (the key itself is not shown)");
  if (!c.ca_file.empty()) {
    struct stat st {};
    std::string why;
    if (::stat(c.ca_file.c_str(), &st) != 0 || ::access(c.ca_file.c_str(), R_OK) != 0)
      why = std::strerror(errno);
    else if (!S_ISREG(st.st_mode))
      why = "not a regular file";
    if (!why.empty())
      throw AdvisorError("AdvisorConfig.ca_file is invalid: expected a readable PEM file, '" +
                         c.ca_file + "': " + why);
  }
  need(c.timeout_ms > 0 && c.timeout_ms <= 600000, "timeout_ms", "1..600000");
  need(c.connect_timeout_ms > 0 && c.connect_timeout_ms <= c.timeout_ms, "connect_timeout_ms",
       "1..timeout_ms");
  need(c.max_tokens > 0 && c.max_tokens <= 100000, "max_tokens", "1..100000");
  need(c.queue_capacity > 0, "queue_capacity", ">= 1");
  need(c.results_capacity > 0, "results_capacity", ">= 1");
  need(c.max_script_bytes > 0, "max_script_bytes", ">= 1");
  need(c.max_response_bytes >= 256, "max_response_bytes", ">= 256");
  need(c.breaker_failures > 0, "breaker_failures", ">= 1");
  need(c.breaker_cooldown_ms > 0, "breaker_cooldown_ms", ">= 1");
  need(std::isfinite(c.max_runtime_seconds) && c.max_runtime_seconds > 0, "max_runtime_seconds",
       "a positive number of seconds");
}

AdvisorConfig validated(AdvisorConfig c) {
  validate(c);
  return c;
}

}  // namespace

LlmClient::LlmClient(AdvisorConfig config)
    : cfg(validated(std::move(config))),
      transport(cfg),
      breaker(cfg.breaker_failures, cfg.breaker_cooldown_ms) {}

bool LlmClient::admit() {
  if (!breaker.allow(Clock::now())) {
    bump(counters.skipped_breaker_open);
    return false;
  }
  bump(counters.requests_sent);
  return true;
}

void LlmClient::record(AdviceStatus status) {
  switch (status) {
    case AdviceStatus::OK:
      bump(counters.answers_ok);
      break;
    case AdviceStatus::TIMEOUT:
      bump(counters.timeouts);
      break;
    case AdviceStatus::HTTP_ERROR:
      bump(counters.http_errors);
      break;
    case AdviceStatus::TRANSPORT_ERROR:
      bump(counters.transport_errors);
      break;
    case AdviceStatus::INVALID_ANSWER:
      bump(counters.invalid_answers);
      break;
    case AdviceStatus::TOO_LARGE:
      bump(counters.too_large);
      break;
    case AdviceStatus::BREAKER_OPEN:  // never sent, so never recorded
      break;
  }
  if (status == AdviceStatus::OK)
    breaker.on_success();
  else if (breaker.on_failure(Clock::now()))
    bump(counters.breaker_opened);
}

AdvisorCounters snapshot(const Counters& c) {
  AdvisorCounters s;
  s.submitted = c.submitted.load();
  s.dropped_queue_full = c.dropped_queue_full.load();
  s.requests_sent = c.requests_sent.load();
  s.answers_ok = c.answers_ok.load();
  s.cache_hits = c.cache_hits.load();
  s.timeouts = c.timeouts.load();
  s.http_errors = c.http_errors.load();
  s.transport_errors = c.transport_errors.load();
  s.invalid_answers = c.invalid_answers.load();
  s.too_large = c.too_large.load();
  s.skipped_breaker_open = c.skipped_breaker_open.load();
  s.breaker_opened = c.breaker_opened.load();
  s.results_evicted = c.results_evicted.load();
  s.callback_errors = c.callback_errors.load();
  return s;
}

}  // namespace mlprio::model::llm_detail
