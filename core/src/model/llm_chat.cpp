// LlmChat (llm_advisor.hpp): the advisor's transport for callers with their own prompt and
// answer schema. One synchronous request at a time through LlmClient (configuration check,
// time-outs, API key, circuit breaker, counters) and an LRU cache keyed by the whole request
// body; the content comes back as text for the caller to check against its schema.
#include <memory>
#include <string>
#include <utility>

#include "model/llm_internal.hpp"

namespace mlprio::model {

struct LlmChat::State {
  llm_detail::LlmClient client;
  llm_detail::LruCache<ChatContent> cache;
  explicit State(AdvisorConfig cfg) : client(std::move(cfg)), cache(client.cfg.cache_capacity) {}
};

LlmChat::LlmChat(AdvisorConfig cfg) : state_(std::make_unique<State>(std::move(cfg))) {}

LlmChat::~LlmChat() = default;

ChatResult LlmChat::ask(const std::string& system, const std::string& user,
                        const std::string& schema_name, const std::string& schema_json) {
  llm_detail::LlmClient& client = state_->client;
  const std::string payload = chat_request_body(system, user, schema_name, schema_json, client.cfg);
  const std::string key = llm_detail::content_hash(payload);
  ChatResult out;
  if (auto hit = state_->cache.get(key)) {
    llm_detail::bump(client.counters.cache_hits);
    out.status = AdviceStatus::OK;
    out.content = std::move(*hit);
    out.from_cache = true;
    return out;
  }
  if (!client.admit()) {
    out.status = AdviceStatus::BREAKER_OPEN;
    out.error = llm_detail::BREAKER_OPEN_ERROR;
    return out;
  }
  AdviceResult r;
  try {
    if (client.transport.post(payload, r)) {
      std::string why;
      if (auto c = parse_chat_content(client.transport.response(), client.cfg, &why)) {
        r.status = AdviceStatus::OK;
        out.content = std::move(*c);
      } else {
        r.status = AdviceStatus::INVALID_ANSWER;
        r.error = why;
      }
    }
  } catch (const AdvisorError& e) {
    r.status = AdviceStatus::TRANSPORT_ERROR;
    r.error = std::string("internal error: ") + e.what();
  }
  out.status = r.status;
  out.error = r.error;
  client.record(r.status);
  if (r.status == AdviceStatus::OK) state_->cache.put(key, out.content);
  return out;
}

AdvisorCounters LlmChat::counters() const {
  return llm_detail::snapshot(state_->client.counters);
}

}  // namespace mlprio::model
