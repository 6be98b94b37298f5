// The answer side of the LLM advisor (llm_advisor.hpp): a chat-completions body is as untrusted
// as the job script, so it goes through the depth-bounded JSON parser and only exactly the schema
// is accepted (parse_chat_content, parse_advice); an error body yields the server's message,
// sanitised (server_error_message); combine() bounds what an accepted answer may do to the
// model's estimate.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "mlprio/io/json_input.hpp"
#include "mlprio/model/llm_advisor.hpp"

namespace mlprio::model {

namespace {

using json = nlohmann::json;

std::string fail(std::string* error, std::string what) {
  if (error) *error = what;
  return what;
}

// An answer is untrusted: parsed through the depth-bounded parser; anything it refuses is
// "discarded", like a syntax error.
json parse_or_discard(std::string_view text) {
  try {
    return io::parse_untrusted_json(text);
  } catch (const io::JsonInputError&) {
    return json(json::value_t::discarded);
  }
}

}  // namespace

double combine(double model_runtime, const Advice& advice, const CombineBounds& bounds) {
  if (!std::isfinite(model_runtime) || !(model_runtime > 0)) return model_runtime;
  const bool bounds_ok = std::isfinite(bounds.min_factor) && std::isfinite(bounds.max_factor) &&
                         bounds.min_factor > 0 && bounds.min_factor <= 1.0 &&
                         bounds.max_factor >= 1.0;
  const bool advice_ok = std::isfinite(advice.runtime_seconds) && advice.runtime_seconds > 0 &&
                         std::isfinite(advice.confidence) && advice.confidence >= 0 &&
                         advice.confidence <= 1.0;
  if (!bounds_ok || !advice_ok) return model_runtime;
  if (std::isfinite(bounds.min_confidence) && advice.confidence < bounds.min_confidence)
    return model_runtime;
  const double ratio =
      std::clamp(advice.runtime_seconds / model_runtime, bounds.min_factor, bounds.max_factor);
  // ratio^confidence lies between 1 and ratio, so inside [min_factor, max_factor]; the final
  // clamp only guards against rounding at the edges.
  const double factor = std::pow(ratio, advice.confidence);
  return std::clamp(model_runtime * factor, model_runtime * bounds.min_factor,
                    model_runtime * bounds.max_factor);
}

std::string server_error_message(std::string_view body, std::size_t max_bytes) {
  const json doc = parse_or_discard(body);
  if (doc.is_discarded() || !doc.is_object()) return {};
  // The object that carries message/type/code: doc["error"] (OpenAI, llama.cpp, newer vLLM) or
  // doc itself when it says "object": "error" (older vLLM).
  const json* err = nullptr;
  std::string text;
  if (auto e = doc.find("error"); e != doc.end()) {
    if (e->is_object())
      err = &*e;
    else if (e->is_string())
      text = e->get<std::string>();
  } else if (auto o = doc.find("object"); o != doc.end() && *o == "error") {
    err = &doc;
  }
  if (err) {
    auto field = [&](const char* k) -> std::string {
      auto it = err->find(k);
      if (it == err->end() || it->is_null()) return {};
      if (it->is_string()) return it->get<std::string>();
      if (it->is_number_integer()) return std::to_string(it->get<int64_t>());
      return {};
    };
    std::string kind = field("type");
    const std::string code = field("code");
    if (!code.empty()) kind += (kind.empty() ? "" : "/") + code;
    text = field("message");
    if (!kind.empty()) text = kind + ": " + text;
  }
  std::string out = sanitize_untrusted(text, max_bytes);
  std::replace(out.begin(), out.end(), '\n', ' ');
  std::replace(out.begin(), out.end(), '\t', ' ');
  return out;
}

std::optional<ChatContent> parse_chat_content(std::string_view http_body, const AdvisorConfig& cfg,
                                              std::string* error) {
  if (http_body.size() > cfg.max_response_bytes) {
    fail(error,
         "body of " + std::to_string(http_body.size()) + " bytes exceeds max_response_bytes");
    return std::nullopt;
  }
  const json env = parse_or_discard(http_body);
  if (env.is_discarded() || !env.is_object()) {
    fail(error, "body is not a JSON object");
    return std::nullopt;
  }
  const auto choices = env.find("choices");
  if (choices == env.end() || !choices->is_array() || choices->empty() ||
      !(*choices)[0].is_object()) {
    fail(error, "no choices[0] in the chat-completions answer");
    return std::nullopt;
  }
  const json& choice = (*choices)[0];
  const auto message = choice.find("message");
  if (message == choice.end() || !message->is_object()) {
    fail(error, "no choices[0].message");
    return std::nullopt;
  }
  const auto content = message->find("content");
  if (content == message->end() || !content->is_string()) {
    fail(error, "choices[0].message.content is not a string");
    return std::nullopt;
  }
  ChatContent c;
  c.text = content->get<std::string>();
  if (const auto finish = choice.find("finish_reason"); finish != choice.end())
    c.cut_at_max_tokens = *finish == "length";
  if (const auto usage = env.find("usage"); usage != env.end() && usage->is_object()) {
    const auto count = [&](const char* key) -> int64_t {
      const auto v = usage->find(key);
      if (v == usage->end() || !v->is_number_integer()) return 0;
      return std::clamp<int64_t>(v->get<int64_t>(), 0, int64_t{1} << 40);
    };
    c.prompt_tokens = count("prompt_tokens");
    c.completion_tokens = count("completion_tokens");
  }
  return c;
}

std::optional<Advice> parse_advice(std::string_view http_body, const AdvisorConfig& cfg,
                                   std::string* error) {
  const std::optional<ChatContent> content = parse_chat_content(http_body, cfg, error);
  if (!content) return std::nullopt;
  // Strict: the whole content is one JSON value (whitespace around it only), no fences, no prose.
  const std::string& text = content->text;
  const json answer = parse_or_discard(text);
  if (answer.is_discarded() || !answer.is_object()) {
    fail(error, content->cut_at_max_tokens
                    ? "content is not exactly one JSON object: the server cut it at max_tokens "
                      "(finish_reason \"length\")"
                    : "content is not exactly one JSON object");
    return std::nullopt;
  }
  if (answer.size() != 3 || !answer.contains("runtime_seconds") || !answer.contains("confidence") ||
      !answer.contains("reason")) {
    fail(error, "content must have exactly the keys runtime_seconds, confidence, reason");
    return std::nullopt;
  }
  const json& rt = answer["runtime_seconds"];
  const json& conf = answer["confidence"];
  const json& reason = answer["reason"];
  if (!rt.is_number() || !conf.is_number() || !reason.is_string()) {
    fail(error, "runtime_seconds and confidence must be numbers, reason a string");
    return std::nullopt;
  }
  Advice a;
  a.runtime_seconds = rt.get<double>();
  a.confidence = conf.get<double>();
  if (!std::isfinite(a.runtime_seconds) || !(a.runtime_seconds > 0) ||
      a.runtime_seconds > cfg.max_runtime_seconds) {
    fail(error, "runtime_seconds must be in (0, max_runtime_seconds]");
    return std::nullopt;
  }
  if (!std::isfinite(a.confidence) || a.confidence < 0 || a.confidence > 1) {
    fail(error, "confidence must be in [0, 1]");
    return std::nullopt;
  }
  const std::string& r = reason.get_ref<const std::string&>();
  if (r.size() > cfg.max_reason_bytes) {
    fail(error, "reason longer than max_reason_bytes");
    return std::nullopt;
  }
  a.reason = sanitize_untrusted(r, cfg.max_reason_bytes);
  std::replace(a.reason.begin(), a.reason.end(), '\n', ' ');
  return a;
}

}  // namespace mlprio::model
