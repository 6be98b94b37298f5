// Queue order 'llm:URL': an OpenAI-compatible chat-completions endpoint decides, through the
// LLM advisor's transport (mlprio::model::LlmChat: its config checks, time-outs, API key,
// circuit breaker and cache). Each ask sends the request of external:CMD cut to the first
// --llm-top jobs in base order, inside a prompt template (--llm-prompt FILE, or the default
// below), and asks for the answer schema {"order": [integer, ...]}. Unlike an external agent, a
// server that cannot be reached does not stop the run: every failure falls back to the base
// order and is counted (replay/README.md, "External and LLM policies").
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "mlprio/replay/simulator.hpp"
#include "policy_agent.hpp"
#ifdef MLPRIO_HAVE_CURL
#include "mlprio/model/llm_advisor.hpp"
#endif

namespace mlprio::replay::detail {

#ifdef MLPRIO_HAVE_CURL
namespace {

constexpr std::string_view LLM_SYSTEM_PROMPT =
    "You are the queue scheduler of an HPC cluster. You are given the cluster's state as JSON: "
    "the time, free and total processors, the queued jobs (id, user, submit time, processors, "
    "requested time, wait so far, run-time estimate; in first-come-first-served order unless "
    "told otherwise) and the running jobs. Decide the order in which the queued jobs should "
    "start, most urgent first, to keep the mean bounded slowdown low. Answer with exactly one "
    "JSON object and nothing else: {\"order\": [<job id>, ...]}, using only ids of queued jobs, "
    "each at most once.";

// The default user message; {{state}}, {{queued}} and {{shown}} are replaced.
constexpr std::string_view DEFAULT_TEMPLATE =
    "{{queued}} jobs are queued; the first {{shown}} are shown. Cluster state:\n"
    "{{state}}\n"
    "Answer {\"order\": [...]} with the shown jobs' ids, most urgent first.";

constexpr size_t MAX_TEMPLATE_BYTES = 1 << 20;
constexpr int64_t MAX_TOP = 100000;

std::string order_schema() {
  return R"({"type":"object","properties":{"order":{"type":"array","items":{"type":"integer"}}},)"
         R"("required":["order"],"additionalProperties":false})";
}

// Room for every shown id (a few tokens each) and an envelope with that many ids.
int answer_max_tokens(int64_t top) {
  return static_cast<int>(std::min<int64_t>(100000, 64 + 8 * top));
}

std::string read_template(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("--llm-prompt: cannot read '" + path + "'");
  std::ostringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  if (text.size() > MAX_TEMPLATE_BYTES)
    throw ConfigError("--llm-prompt: '" + path + "' is larger than " +
                      std::to_string(MAX_TEMPLATE_BYTES) + " bytes");
  if (text.find("{{state}}") == std::string::npos)
    throw ConfigError("--llm-prompt: '" + path +
                      "' has no {{state}} placeholder, where the cluster state goes");
  return text;
}

void replace_all(std::string& s, std::string_view what, const std::string& with) {
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + with.size()))
    s.replace(at, what.size(), with);
}

class LlmPolicy final : public AgentPolicy {
 public:
  LlmPolicy(std::string name, std::string url, const PolicyOptions& opts)
      : AgentPolicy(std::move(name), opts) {
    const AgentOptions& a = options();
    if (a.llm_top < 1 || a.llm_top > MAX_TOP)
      throw ConfigError("--llm-top must lie in 1 to " + std::to_string(MAX_TOP) + " (got " +
                        std::to_string(a.llm_top) + ")");
    template_ = a.llm_prompt_file.empty() ? std::string(DEFAULT_TEMPLATE)
                                          : read_template(a.llm_prompt_file);
    model::AdvisorConfig cfg;
    cfg.base_url = std::move(url);
    cfg.model = a.llm_model;
    if (!a.llm_api_key_env.empty()) {
      const char* key = std::getenv(a.llm_api_key_env.c_str());
      if (key == nullptr || *key == '\0')
        throw ConfigError("--llm-api-key-env: the environment variable " + a.llm_api_key_env +
                          " is not set");
      cfg.api_key = key;
    }
    if (a.timeout > 600)
      throw ConfigError("--external-timeout: llm:URL waits at most 600 s per answer");
    cfg.timeout_ms = std::max<int64_t>(1, static_cast<int64_t>(a.timeout * 1000));
    cfg.connect_timeout_ms = std::min<int64_t>(cfg.timeout_ms, 2000);
    cfg.max_tokens = answer_max_tokens(a.llm_top);
    cfg.max_response_bytes = std::max<size_t>(64 * 1024, static_cast<size_t>(a.llm_top) * 64);
    try {
      chat_ = std::make_unique<model::LlmChat>(std::move(cfg));
    } catch (const model::AdvisorError& e) {
      throw ConfigError("policy '" + std::string(this->name()) + "': " + e.what());
    }
  }

 protected:
  AgentAnswer ask(const QueueSnapshot& snap) override {
    const int64_t top = options().llm_top;
    std::string user = template_;
    replace_all(user, "{{queued}}", std::to_string(snap.queue.size()));
    replace_all(user, "{{shown}}",
                std::to_string(std::min<int64_t>(top, static_cast<int64_t>(snap.queue.size()))));
    // Both lists cut at --llm-top: a machine with thousands of running jobs would otherwise
    // outgrow any context (about 40 tokens a running job with Qwen2's tokenizer).
    replace_all(user, "{{state}}", agent_request_json(snap, top, top));
    const model::ChatResult r =
        chat_->ask(std::string(LLM_SYSTEM_PROMPT), user, "queue_order", order_schema());
    AgentAnswer a;
    if (!r.from_cache) {
      a.tokens_sent = r.content.prompt_tokens;
      a.tokens_received = r.content.completion_tokens;
    }
    switch (r.status) {
      case model::AdviceStatus::OK:
        a.status = parse_agent_answer(r.content.text, a.ids, &a.error) ? AgentReply::OK
                                                                       : AgentReply::MALFORMED;
        if (a.status == AgentReply::MALFORMED && r.content.cut_at_max_tokens)
          a.error += " (the server cut the answer at max_tokens, " +
                     std::to_string(answer_max_tokens(top)) + " tokens here)";
        break;
      case model::AdviceStatus::TIMEOUT:
        a.status = AgentReply::LATE;
        break;
      case model::AdviceStatus::INVALID_ANSWER:
      case model::AdviceStatus::TOO_LARGE:
        a.status = AgentReply::MALFORMED;
        break;
      default:
        a.status = AgentReply::FAILED;
        break;
    }
    if (a.status != AgentReply::OK && a.error.empty()) a.error = r.error;
    return a;
  }

 private:
  std::string template_;
  std::unique_ptr<model::LlmChat> chat_;
};

}  // namespace

std::unique_ptr<QueuePolicy> make_llm_policy(std::string_view name, const PolicyOptions& opts) {
  std::string url(name.substr(name.find(':') + 1));
  if (url.empty())
    throw ConfigError(
        "policy 'llm:' needs the endpoint's base URL, e.g. llm:http://127.0.0.1:8080");
  return std::make_unique<LlmPolicy>(std::string(name), std::move(url), opts);
}

#else

std::unique_ptr<QueuePolicy> make_llm_policy(std::string_view name, const PolicyOptions&) {
  throw ConfigError("policy '" + std::string(name) +
                    "': this build has no libcurl, which llm:URL needs (external:CMD works)");
}

#endif

}  // namespace mlprio::replay::detail
