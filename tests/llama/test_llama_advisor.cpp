// The LLM advisor (core/src/model/llm_*.cpp) against llama.cpp's real llama-server
// (tests/support/llama_server.hpp) serving a tiny random-weight model with Qwen2's tokenizer
// (scripts/llama-server-build). The model knows nothing: these cases check that the real server
// accepts our requests, that its grammar-constrained answers either pass the strict parser or are
// refused cleanly, and that its real error bodies, status codes and stalls become the statuses and
// log lines the fake-endpoint tests (tests/model/test_llm_advisor.cpp) promise: json_schema and
// json_object requests, the Bearer key (--api-key) accepted and a wrong one refused with the
// server's 401 message, a schema the server cannot compile and a prompt larger than the context
// read from the server's own error bodies, a generation longer than the time-out cut and the
// breaker opened, and the hostile-script corpus through the real tokenizer and chat template.
// Never the content of an answer. Every case skips (MLPRIO_SKIP) when the server is not built.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../support/fake_llm_server.hpp"
#include "../support/llama_server.hpp"
#include "../support/skip.hpp"
#include "mlprio/model/llm_advisor.hpp"

using namespace mlprio::model;
using mlprio_test::LlamaPaths;
using mlprio_test::LlamaServer;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

AdvisorConfig llama_config(const LlamaServer& s) {
  AdvisorConfig c;
  c.base_url = s.base_url();
  c.model = "tiny";
  c.timeout_ms = 60000;  // one core, shared: generous; the time-out case sets its own
  c.connect_timeout_ms = 2000;
  c.breaker_failures = 1000;
  return c;
}

AdvisorRequest llama_job(const std::string& script) {
  return AdvisorRequest{script, {{"req_time_s", "7200"}, {"gpus", "8"}, {"model", "llama-7b"}}};
}

std::optional<AdviceResult> await(LlmAdvisor& a, uint64_t key, std::chrono::seconds limit = 120s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (auto r = a.poll(key)) return r;
    std::this_thread::sleep_for(5ms);
  }
  return std::nullopt;
}

// The advice's own bounds, as parse_advice promises them.
void check_advice_bounds(const Advice& a, const AdvisorConfig& cfg) {
  CHECK(std::isfinite(a.runtime_seconds));
  CHECK(a.runtime_seconds > 0);
  CHECK(a.runtime_seconds <= cfg.max_runtime_seconds);
  CHECK((a.confidence >= 0 && a.confidence <= 1));
  CHECK(a.reason.size() <= cfg.max_reason_bytes);
  CHECK(sanitize_untrusted(a.reason, cfg.max_reason_bytes) == a.reason);
  for (const CombineBounds b : {CombineBounds{0.5, 2.0, 0.0}, CombineBounds{0.9, 1.1, 0.0}}) {
    const double out = combine(3600, a, b);
    CHECK(out >= 3600 * b.min_factor * (1 - 1e-12));
    CHECK(out <= 3600 * b.max_factor * (1 + 1e-12));
  }
}

// The reasons parse_advice gives for an answer it refuses (llm_answer.cpp).
bool known_refusal(const std::string& why) {
  for (const char* r :
       {"content is not exactly one JSON object", "content must have exactly the keys",
        "must be numbers, reason a string", "runtime_seconds must be in", "confidence must be in",
        "reason longer than max_reason_bytes"})
    if (why.find(r) != std::string::npos) return true;
  return false;
}

// Waits for the advisor's answer to `key` and checks it: accepted within the bounds, or refused
// for a reason the parser names. Returns whether it was accepted.
bool answer_accepted(LlmAdvisor& advisor, uint64_t key, const AdvisorConfig& cfg) {
  const auto r = await(advisor, key);
  REQUIRE(r.has_value());
  INFO(to_string(r->status) << ": " << r->error);
  REQUIRE((r->status == AdviceStatus::OK || r->status == AdviceStatus::INVALID_ANSWER));
  if (r->status == AdviceStatus::OK) {
    check_advice_bounds(r->advice, cfg);
    return true;
  }
  CHECK(known_refusal(r->error));
  return false;
}

// The raw answer of the server to one of our request bodies.
json raw_answer(const LlamaServer& s, const std::string& body) {
  const mlprio_test::HttpReply r =
      mlprio_test::http_request(s.port(), "POST", "/v1/chat/completions", body);
  INFO("HTTP " << r.status << ": " << r.body.substr(0, 2000));
  REQUIRE(r.status == 200);
  return json::parse(r.body);
}

}  // namespace

TEST_CASE(
    "llama-server: the json_schema request is accepted, its answers pass the parser or are refused",
    "[llama]") {
  const LlamaPaths paths = mlprio_test::find_llama_server();
  if (!paths.why.empty()) MLPRIO_SKIP(paths.why);
  LlamaServer server(paths);
  const AdvisorConfig cfg = llama_config(server);

  // What the server itself answers to our body: HTTP 200, a chat envelope with usage, and, when
  // it stopped on its own (not cut at max_tokens), content that is exactly the schema's shape.
  const AdvisorPrompt p = build_prompt(llama_job("#!/bin/bash\ntorchrun train.py\n"), cfg);
  const json raw = raw_answer(server, request_body(p, cfg));
  REQUIRE(raw["choices"].size() == 1);
  const std::string content = raw["choices"][0]["message"]["content"].get<std::string>();
  const std::string finish = raw["choices"][0].value("finish_reason", "");
  INFO("finish_reason " << finish << ", content: " << content);
  CHECK(raw["usage"]["prompt_tokens"].get<int64_t>() > 0);
  CHECK(raw["usage"]["completion_tokens"].get<int64_t>() > 0);
  CHECK(raw["usage"]["completion_tokens"].get<int64_t>() <= cfg.max_tokens);
  // The schema's maxLength on "reason" lets the grammar close the answer within max_tokens
  // (without it this model looped inside the string until cut off); numbers of up to 50 digits
  // may still use up the 200 tokens.
  REQUIRE((finish == "stop" || finish == "length"));
  const json answer = json::parse(content, nullptr, false);
  if (finish == "length") {
    WARN("cut at max_tokens: " << content);
  } else if (!answer.is_discarded()) {  // the grammar held: exactly the schema's shape
    REQUIRE(answer.is_object());
    CHECK(answer.size() == 3);
    CHECK(answer["runtime_seconds"].is_number());
    CHECK(answer["confidence"].is_number());
    CHECK(answer["reason"].is_string());
    CHECK(answer["reason"].get<std::string>().size() <= 4 * 200);
  } else {
    // JSON's grammar allows numbers beyond a double's range (1111111111111111e1111111111111111,
    // written by this model), which no parser here represents: refused below, like any answer
    // that is not one JSON object.
    const auto first = content.find_first_not_of(" \t\r\n");
    const auto last = content.find_last_not_of(" \t\r\n");
    REQUIRE(first != std::string::npos);
    CHECK((content[first] == '{' && content[last] == '}'));  // still one object's text
    WARN("grammar-valid content beyond a double's range: " << content);
    CHECK((content.find('e') != std::string::npos || content.find('E') != std::string::npos));
  }

  // Through the advisor: every answer is either valid advice or a refusal the parser names.
  LlmAdvisor advisor(cfg);
  int ok = 0, refused = 0;
  for (uint64_t key = 1; key <= 6; ++key) {
    const std::string script = "#!/bin/bash\n#SBATCH --gres=gpu:" + std::to_string(key) +
                               "\nsrun python finetune.py --epochs " + std::to_string(key * 3) +
                               "\n";
    REQUIRE(advisor.submit(key, llama_job(script)) == SubmitStatus::QUEUED);
    ++(answer_accepted(advisor, key, cfg) ? ok : refused);
  }
  WARN("json_schema: " << ok << " answers accepted, " << refused << " refused by the parser");
  const AdvisorCounters c = advisor.counters();
  CHECK(c.requests_sent == 6);
  CHECK(c.answers_ok + c.invalid_answers == 6);
  CHECK(c.http_errors + c.transport_errors + c.timeouts == 0);
}

TEST_CASE("llama-server: the json_object request is accepted and answered", "[llama]") {
  const LlamaPaths paths = mlprio_test::find_llama_server();
  if (!paths.why.empty()) MLPRIO_SKIP(paths.why);
  LlamaServer server(paths);
  AdvisorConfig cfg = llama_config(server);
  cfg.response_format = ResponseFormat::JSON_OBJECT;
  const AdvisorPrompt p = build_prompt(llama_job("#!/bin/bash\nsrun ./a.out\n"), cfg);
  const json raw = raw_answer(server, request_body(p, cfg));
  const std::string content = raw["choices"][0]["message"]["content"].get<std::string>();
  INFO("content: " << content);
  if (raw["choices"][0].value("finish_reason", "") == "stop")
    CHECK(json::parse(content).is_object());  // the json_object grammar held

  LlmAdvisor advisor(cfg);
  for (uint64_t key = 1; key <= 3; ++key) {
    REQUIRE(advisor.submit(key, llama_job("#!/bin/bash\nsrun ./step" + std::to_string(key))) ==
            SubmitStatus::QUEUED);
    answer_accepted(advisor, key, cfg);
  }
}

TEST_CASE("llama-server: --api-key accepts the Bearer key and refuses a wrong or missing one",
          "[llama]") {
  const LlamaPaths paths = mlprio_test::find_llama_server();
  if (!paths.why.empty()) MLPRIO_SKIP(paths.why);
  const std::string key = "k3y0fth3t3stsAAAAAAAAAAAAAAAA";
  LlamaServer server(paths, {"--api-key", key});
  for (const std::string& sent : {key, std::string("wrongwrongwrongwrong"), std::string()}) {
    INFO("key sent: '" << sent << "'");
    AdvisorConfig cfg = llama_config(server);
    cfg.api_key = sent;
    LlmAdvisor advisor(cfg);
    REQUIRE(advisor.submit(1, llama_job("#!/bin/bash\necho key\n")) == SubmitStatus::QUEUED);
    const auto r = await(advisor, 1);
    REQUIRE(r.has_value());
    INFO(to_string(r->status) << ": " << r->error);
    if (sent == key) {
      CHECK((r->status == AdviceStatus::OK || r->status == AdviceStatus::INVALID_ANSWER));
    } else {
      CHECK(r->status == AdviceStatus::HTTP_ERROR);
      CHECK_THAT(r->error, Catch::StartsWith("HTTP 401: server says: "));
      CHECK_THAT(r->error, Catch::Contains("Invalid API Key", Catch::CaseSensitive::No));
      CHECK(r->error.find(key) == std::string::npos);  // the key never reaches a log line
    }
  }
}

TEST_CASE("llama-server: its error bodies (bad schema, prompt over the context) reach the log line",
          "[llama]") {
  const LlamaPaths paths = mlprio_test::find_llama_server();
  if (!paths.why.empty()) MLPRIO_SKIP(paths.why);
  LlamaServer server(paths, {}, 512);
  AdvisorConfig cfg = llama_config(server);
  {
    // A schema the server cannot turn into a grammar: a $ref to nothing.
    LlmChat chat(cfg);
    const ChatResult r = chat.ask("system", "user", "broken",
                                  R"({"type":"object","properties":{"x":{"$ref":"#/nowhere"}}})");
    INFO(to_string(r.status) << ": " << r.error);
    CHECK(r.status == AdviceStatus::HTTP_ERROR);
    CHECK_THAT(r.error, Catch::Matches("HTTP (400|500): server says: .{10,}"));
    CHECK(r.error.size() <= 400);
  }
  {
    // 16 KiB of script against a 512-token context.
    std::string script = "#!/bin/bash\n";
    for (int i = 0; script.size() < 16000; ++i)
      script += "srun ./stage_" + std::to_string(i) + " --fast\n";
    LlmAdvisor advisor(cfg);
    REQUIRE(advisor.submit(1, llama_job(script)) == SubmitStatus::QUEUED);
    const auto r = await(advisor, 1);
    REQUIRE(r.has_value());
    INFO(to_string(r->status) << ": " << r->error);
    CHECK(r->status == AdviceStatus::HTTP_ERROR);
    CHECK_THAT(r->error, Catch::Matches("HTTP 400: server says: .*context.*"));
    CHECK(advisor.counters().http_errors == 1);
  }
  CHECK(server.running());
}

TEST_CASE(
    "llama-server: a generation longer than the time-out is cut, the breaker opens, "
    "the server recovers",
    "[llama]") {
  const LlamaPaths paths = mlprio_test::find_llama_server();
  if (!paths.why.empty()) MLPRIO_SKIP(paths.why);
  LlamaServer server(paths);
  AdvisorConfig cfg = llama_config(server);
  // Slow on both counts: 16 KiB of script is about 6,000 prompt tokens (200-500 ms to evaluate
  // on one thread), and json_object lets the model write for as long as max_tokens allows.
  // 100 ms is far too short for either, whatever this model writes first.
  cfg.response_format = ResponseFormat::JSON_OBJECT;
  cfg.max_tokens = 100000;
  cfg.timeout_ms = 100;
  cfg.connect_timeout_ms = 100;
  cfg.breaker_failures = 2;
  cfg.breaker_cooldown_ms = 60000;
  LlmAdvisor advisor(cfg);
  std::vector<AdviceStatus> seen;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t key = 1; key <= 4; ++key) {
    std::string script = "#!/bin/bash\n# part " + std::to_string(key) + "\n";
    for (int i = 0; script.size() < 16000; ++i)
      script += "srun python train.py --config run_" + std::to_string(i) + ".yaml --epochs 3\n";
    REQUIRE(advisor.submit(key, llama_job(script)) == SubmitStatus::QUEUED);
    const auto r = await(advisor, key);
    REQUIRE(r.has_value());
    INFO(to_string(r->status) << ": " << r->error);
    seen.push_back(r->status);
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(seen[0] == AdviceStatus::TIMEOUT);
  CHECK(seen[1] == AdviceStatus::TIMEOUT);
  CHECK(seen[2] == AdviceStatus::BREAKER_OPEN);
  CHECK(seen[3] == AdviceStatus::BREAKER_OPEN);
  CHECK(took < 10);  // two 100 ms time-outs, loosely
  const AdvisorCounters c = advisor.counters();
  CHECK(c.timeouts == 2);
  CHECK(c.breaker_opened == 1);
  CHECK(c.skipped_breaker_open == 2);

  // The server noticed the client hang up and is free again: a normal request is answered.
  AdvisorConfig normal = llama_config(server);
  LlmAdvisor again(normal);
  REQUIRE(again.submit(9, llama_job("#!/bin/bash\necho after\n")) == SubmitStatus::QUEUED);
  const auto r = await(again, 9);
  REQUIRE(r.has_value());
  INFO(to_string(r->status) << ": " << r->error);
  CHECK((r->status == AdviceStatus::OK || r->status == AdviceStatus::INVALID_ANSWER));
  CHECK(server.running());
}

TEST_CASE("llama-server: the hostile corpus through the real tokenizer stays fenced and bounded",
          "[llama][hostile]") {
  const LlamaPaths paths = mlprio_test::find_llama_server();
  if (!paths.why.empty()) MLPRIO_SKIP(paths.why);
  // 16384 tokens: 16 KiB of random hex (the 20000 guessed delimiters) is about 11,800 tokens of
  // Qwen2's vocabulary, more than the 8192 the other cases use.
  LlamaServer server(paths, {}, 16384);
  const AdvisorConfig cfg = llama_config(server);
  // The chat template's turn markers are special tokens of this vocabulary; the server parses
  // special tokens in the templated prompt, so job text must never become one.
  const auto special_ids = [&](const std::string& text) {
    const json body = {{"content", text}, {"add_special", false}, {"parse_special", true}};
    const auto r = mlprio_test::http_request(server.port(), "POST", "/tokenize", body.dump());
    REQUIRE(r.status == 200);
    const json doc = json::parse(r.body);  // kept: a range-for over a temporary's member dangles
    std::vector<int64_t> ids;
    for (const auto& t : doc["tokens"]) ids.push_back(t.get<int64_t>());
    return ids;
  };
  const std::vector<int64_t> marker_ids = special_ids("<|im_start|><|im_end|><|endoftext|>");
  REQUIRE(marker_ids.size() == 3);  // each is one special token here

  LlmAdvisor advisor(cfg);
  int ok = 0, refused = 0;
  size_t most_tokens = 0;
  uint64_t key = 1;
  for (const auto& [name, script] : mlprio_test::hostile_corpus()) {
    INFO(name);
    const AdvisorPrompt p = build_prompt(llama_job(script), cfg);
    const std::vector<int64_t> ids = special_ids(p.user);
    for (int64_t m : marker_ids)
      CHECK(std::count(ids.begin(), ids.end(), m) == 0);  // no turn marker forged by the job
    CHECK(ids.size() < 16000);  // the prompt is bounded in tokens, not only in bytes
    most_tokens = std::max(most_tokens, ids.size());

    REQUIRE(advisor.submit(key, llama_job(script)) == SubmitStatus::QUEUED);
    ++(answer_accepted(advisor, key++, cfg) ? ok : refused);
  }
  WARN("hostile corpus: " << ok << " answers accepted, " << refused
                          << " refused by the parser; longest user message " << most_tokens
                          << " tokens");
  CHECK(server.running());
}
