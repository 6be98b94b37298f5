// The optional LLM advisor: an asynchronous client for an OpenAI-compatible
// chat endpoint (llama.cpp's server, vLLM, Ollama) that reads a job's script and features and
// answers a run-time estimate with a confidence, in a fixed JSON schema. It is built only when
// libcurl is found (MLPRIO_HAVE_CURL); this header itself needs no curl. submit() never waits on
// the network: one worker thread does the HTTP calls under strict time-outs, behind a circuit
// breaker and an LRU cache, and answers arrive through poll() or a callback. The job script is
// untrusted data: it is sanitised, truncated and fenced with a random boundary, and the answer
// parser accepts only the schema. combine() lets an answer move the model's estimate only within
// configured bounds, so no answer can raise a job's priority above a cap (README, "LLM advisor").
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mlprio/util/errors.hpp"

namespace mlprio::model {

// A configuration the advisor cannot run with, or a failure to set up curl. what() says which.
class AdvisorError : public ::mlprio::UsageError {
 public:
  using ::mlprio::UsageError::UsageError;
};

// How the request asks for the answer's shape ("response_format" of the chat request). JSON_SCHEMA
// sends the answer's JSON schema ({"type": "json_schema", "json_schema": {"name", "strict",
// "schema"}}), which vLLM and llama.cpp's server turn into a grammar; JSON_OBJECT sends the older
// {"type": "json_object"} for a server that refuses json_schema. Either way the answer parser
// accepts only the schema.
enum class ResponseFormat { JSON_SCHEMA, JSON_OBJECT };
inline const char* to_string(ResponseFormat f) {
  return f == ResponseFormat::JSON_OBJECT ? "json_object" : "json_schema";
}
// "json_schema" or "json_object" (exactly); nullopt for anything else.
inline std::optional<ResponseFormat> parse_response_format(std::string_view s) {
  if (s == "json_schema") return ResponseFormat::JSON_SCHEMA;
  if (s == "json_object") return ResponseFormat::JSON_OBJECT;
  return std::nullopt;
}

struct AdvisorConfig {
  std::string base_url = "http://127.0.0.1:8080";  // POST {base_url}/v1/chat/completions
  std::string model = "default";                   // the "model" field of the request
  // Sent as "Authorization: Bearer <api_key>" when not empty; printable ASCII only (validated,
  // so it cannot forge headers). Never logged, never in an error message.
  std::string api_key;
  // https: the server's certificate is always verified (peer and host name); ca_file, when not
  // empty, is the CA bundle (PEM) to verify it with instead of the system's.
  std::string ca_file;
  int64_t timeout_ms = 2000;  // whole request, connect included
  int64_t connect_timeout_ms = 500;
  int max_tokens = 200;  // answer length the server may generate
  ResponseFormat response_format = ResponseFormat::JSON_SCHEMA;
  std::size_t queue_capacity = 256;            // pending submits; beyond this submit() drops
  std::size_t results_capacity = 4096;         // finished answers kept for poll(); oldest go first
  std::size_t max_script_bytes = 16 * 1024;    // script bytes put into the prompt
  std::size_t max_response_bytes = 64 * 1024;  // HTTP body bytes read; more is refused
  std::size_t max_reason_bytes = 1024;         // longer "reason" strings are refused
  std::size_t cache_capacity = 1024;           // LRU entries (successful answers only)
  int breaker_failures = 3;                    // K consecutive failures open the breaker
  int64_t breaker_cooldown_ms = 30000;         // open this long, then one half-open probe
  double max_runtime_seconds = 366.0 * 86400.0;  // answers above this are absurd: refused
};

// One job as the advisor sees it. Everything here may come from the user (the job name, the
// script), so all of it is treated as data, never as instructions.
struct AdvisorRequest {
  std::string script;
  std::vector<std::pair<std::string, std::string>> features;  // name, value (e.g. "req_time_s")
};

// An answer that passed the schema: 0 < runtime_seconds <= max_runtime_seconds, confidence in
// [0, 1], reason a short string with control characters removed.
struct Advice {
  double runtime_seconds = 0.0;
  double confidence = 0.0;
  std::string reason;
};

enum class AdviceStatus {
  OK,               // advice is valid (from the server or the cache)
  TIMEOUT,          // connect or whole-request time-out
  HTTP_ERROR,       // a status other than 200 (error says the server's message, sanitised)
  TRANSPORT_ERROR,  // refused, reset, closed without an answer, or an internal error
  INVALID_ANSWER,   // not the chat envelope, or content not exactly the schema
  TOO_LARGE,        // the body exceeded max_response_bytes
  BREAKER_OPEN,     // not sent: the circuit breaker is open
};
const char* to_string(AdviceStatus s);

struct AdviceResult {
  AdviceStatus status = AdviceStatus::TRANSPORT_ERROR;
  Advice advice;  // meaningful only when status == OK
  bool from_cache = false;
  std::string error;  // one line for logs when status != OK
};

enum class SubmitStatus { QUEUED, DROPPED_QUEUE_FULL, STOPPED };

// Monotone counters since construction (a snapshot; each field read atomically).
struct AdvisorCounters {
  uint64_t submitted = 0;  // submit() calls
  uint64_t dropped_queue_full = 0;
  uint64_t requests_sent = 0;  // HTTP requests started
  uint64_t answers_ok = 0;     // valid answers from the server
  uint64_t cache_hits = 0;
  uint64_t timeouts = 0;
  uint64_t http_errors = 0;
  uint64_t transport_errors = 0;
  uint64_t invalid_answers = 0;
  uint64_t too_large = 0;
  uint64_t skipped_breaker_open = 0;
  uint64_t breaker_opened = 0;   // times the breaker went (re)open
  uint64_t results_evicted = 0;  // finished answers dropped unread (results_capacity)
  uint64_t callback_errors = 0;  // exceptions thrown by the user's callback (swallowed)
};

// Bounds on what an answer may do to the model's estimate.
struct CombineBounds {
  double min_factor = 0.5;      // the estimate never goes below model * min_factor ...
  double max_factor = 2.0;      // ... nor above model * max_factor
  double min_confidence = 0.0;  // answers below this confidence are ignored
};

// The model's run-time estimate moved towards the advice by a factor clamp(advice/model,
// min_factor, max_factor) raised to the confidence (geometric weighting: confidence 0 leaves
// the estimate, 1 applies the clamped ratio). A non-finite or non-positive model estimate, an
// advice that is not valid (NaN, inf, <= 0, confidence outside [0, 1]) or bounds that are not
// 0 < min_factor <= 1 <= max_factor return model_runtime unchanged. Because score() decreases
// with run time, the score with advice never exceeds the score at model * min_factor.
double combine(double model_runtime, const Advice& advice, const CombineBounds& bounds);

// What is sent to the server for one request, and the cache key of its content.
struct AdvisorPrompt {
  std::string system;     // fixed instructions (ADVISOR_SYSTEM_PROMPT with the schema)
  std::string user;       // the job, fenced between BEGIN/END lines carrying `boundary`
  std::string boundary;   // random token, guaranteed not to occur in the job's text
  std::string cache_key;  // hash of model, system prompt and sanitised job (not the boundary)
};

// Removes control characters (all C0 but \n and \t, DEL, C1, Unicode bidi overrides), replaces
// invalid UTF-8 with '?', and truncates to at most max_bytes without splitting a character.
std::string sanitize_untrusted(std::string_view text, std::size_t max_bytes);

// Breaks up every tag in text that a tokenizer may read as one special token, by putting a space
// after its opening character: "<|im_start|>" becomes "< |im_start|>", "[/INST]" "[ /INST]".
// A tag is '<', up to 64 bytes without whitespace or '<', then '>'; or '[', an upper-case letter
// or '/', up to 32 upper-case letters, digits, '_' or '/', then ']'. Servers tokenize the
// templated chat prompt with special tokens parsed (llama.cpp's llama-server does), so a job
// script that wrote a chat template's turn markers would otherwise open a turn of its own. The
// result is cut to max_bytes without splitting a character.
std::string break_special_markers(std::string_view text, std::size_t max_bytes);

// The JSON schema of the answer, as sent in response_format (JSON_SCHEMA): an object with exactly
// runtime_seconds (number), confidence (number) and reason (string of at most 200 characters:
// "maxLength", so that a grammar closes it within max_tokens), all required, nothing else. The
// numbers' ranges are not in it (grammar backends differ in what they enforce); parse_advice()
// checks them.
std::string advice_json_schema();

// The request body for one prompt: model, messages (system, user), temperature 0, max_tokens,
// stream false and response_format as cfg says (slurm_plugin/README.md lists the fields).
std::string request_body(const AdvisorPrompt& p, const AdvisorConfig& cfg);

// The message of an error body, in either shape the servers use: OpenAI's and llama.cpp's
// {"error": {"message", "type", "code"}} (also {"error": "text"}) and older vLLM's
// {"object": "error", "message", "type", "code"}. Returned as "type/code: message", sanitised
// (control characters, bidi overrides and newlines removed, invalid UTF-8 replaced) and cut to
// max_bytes, since the body is as untrusted as an answer; empty when the body is neither shape.
std::string server_error_message(std::string_view body, std::size_t max_bytes = 300);

// Builds the prompt: the features and the script sanitised (sanitize_untrusted) and their
// special-token tags broken up (break_special_markers). `next_token` supplies boundary
// candidates (random by default); a candidate that occurs in the job text is rejected and the
// next one drawn.
AdvisorPrompt build_prompt(const AdvisorRequest& req, const AdvisorConfig& cfg,
                           const std::function<std::string()>& next_token = {});

// Parses an HTTP body (the chat-completions envelope) and its choices[0].message.content, which
// must be exactly one JSON object with exactly the keys runtime_seconds (number), confidence
// (number) and reason (string), nothing before or after it. Returns the advice, or nullopt with
// a reason in *error (which says so when the server stopped the answer at max_tokens).
std::optional<Advice> parse_advice(std::string_view http_body, const AdvisorConfig& cfg,
                                   std::string* error = nullptr);

// The content of a chat-completions answer (choices[0].message.content, as text) and the
// server's token counts (usage.prompt_tokens and usage.completion_tokens; 0 when absent).
struct ChatContent {
  std::string text;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // choices[0].finish_reason was "length": the server stopped at max_tokens, so the content is
  // most likely cut short (a refusal then says so, instead of only "not one JSON object").
  bool cut_at_max_tokens = false;
};
// The envelope half of parse_advice(): the body must be a JSON object with a string
// choices[0].message.content, at most max_response_bytes. Returns nullopt with a reason in *error.
std::optional<ChatContent> parse_chat_content(std::string_view http_body, const AdvisorConfig& cfg,
                                              std::string* error = nullptr);

// request_body() for any prompt and answer schema (response_format named schema_name).
std::string chat_request_body(const std::string& system, const std::string& user,
                              const std::string& schema_name, const std::string& schema_json,
                              const AdvisorConfig& cfg);

class LlmAdvisor {
 public:
  // Called on the worker thread for every finished submit (also cache hits and breaker skips).
  // Must be quick; exceptions it throws are caught and counted.
  using Callback = std::function<void(uint64_t job_key, const AdviceResult&)>;

  // Validates cfg (throws AdvisorError naming the field) and starts the worker thread.
  explicit LlmAdvisor(AdvisorConfig cfg, Callback callback = {});
  ~LlmAdvisor();  // stop()
  LlmAdvisor(const LlmAdvisor&) = delete;
  LlmAdvisor& operator=(const LlmAdvisor&) = delete;

  // Queues the job and returns at once: it never touches the network, takes a lock only for
  // O(1) queue work and copies at most max_script_bytes of the script. A full queue drops the
  // request (counted). A later submit with the same key replaces the earlier answer.
  SubmitStatus submit(uint64_t job_key, AdvisorRequest request);

  // The finished result for job_key, removed from the store; nullopt while pending or unknown.
  std::optional<AdviceResult> poll(uint64_t job_key);

  // Aborts an in-flight request, drops the queue and joins the worker. Idempotent.
  void stop();

  AdvisorCounters counters() const;

 private:
  struct Impl;  // llm_advisor.cpp
  std::unique_ptr<Impl> impl_;
};

struct ChatResult {
  AdviceStatus status = AdviceStatus::TRANSPORT_ERROR;
  ChatContent content;  // meaningful only when status == OK
  bool from_cache = false;
  std::string error;  // one line for logs when status != OK
};

// The advisor's transport for callers with their own prompt and answer schema (the replayer's
// llm:URL queue order): one synchronous chat request at a time, under the same config checks,
// time-outs, API key, circuit breaker and LRU cache (keyed by the whole request body) as
// LlmAdvisor, and the same counters. The content comes back as text: the caller checks it
// against its schema. Not thread-safe: one caller.
class LlmChat {
 public:
  explicit LlmChat(AdvisorConfig cfg);  // validates cfg (AdvisorError naming the field)
  ~LlmChat();
  LlmChat(const LlmChat&) = delete;
  LlmChat& operator=(const LlmChat&) = delete;
  ChatResult ask(const std::string& system, const std::string& user, const std::string& schema_name,
                 const std::string& schema_json);
  AdvisorCounters counters() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mlprio::model
