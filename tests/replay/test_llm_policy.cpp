// The llm:URL order (replay/README.md, "External and LLM policies") against the local
// fake chat endpoint (tests/support/fake_llm_server.hpp): a fake that answers SJF's order gives
// --policy sjf's schedule job by job; token counts come from the answers' usage; an unusable
// answer, an endpoint that is down and a late answer fall back to the base order and are counted;
// the prompt template's checks. Needs libcurl (skipped without it).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/process.hpp"
#include "../support/skip.hpp"
#include "agent_support.hpp"
#include "mlprio/replay/simulator.hpp"

#ifdef MLPRIO_HAVE_CURL
#include "../support/fake_llm_server.hpp"
#endif

using namespace mlprio;
using namespace mlprio::replay;

#ifdef MLPRIO_HAVE_CURL
namespace {

using mlprio_test::FakeLlmServer;
using mlprio_test::json;
using mlprio_test::Reply;
using mlprio_test::require_same_schedule;

SimConfig llm_policy_config(const std::string& policy, Backfill b) {
  SimConfig cfg = mlprio_test::agent_config(policy, b);
  cfg.policy_options.agent.timeout = 10;
  cfg.policy_options.agent.llm_top = 100000;  // the whole queue: SJF needs to see every job
  return cfg;
}

// The state JSON inside the user message: the line that starts with {"time".
json state_of(const std::string& body) {
  const std::string user = mlprio_test::user_message(body);
  const size_t at = user.find("{\"time\"");
  if (at == std::string::npos) return json();
  const size_t end = user.find('\n', at);
  return json::parse(user.substr(at, end == std::string::npos ? std::string::npos : end - at),
                     nullptr, false);
}

// A chat answer with a usage block, as OpenAI-compatible servers send.
std::string chat_with_usage(const std::string& content) {
  json body = json::parse(mlprio_test::chat(content));
  body["usage"] = {{"prompt_tokens", 100}, {"completion_tokens", 7}, {"total_tokens", 107}};
  return body.dump();
}

// Answers SJF's order: the shown queue (base order fcfs) stably sorted by estimate.
Reply sjf_reply(const std::string& body) {
  const json state = state_of(body);
  if (!state.is_object()) return Reply{400, R"({"error":{"message":"no state"}})"};
  std::vector<json> q(state["queue"].begin(), state["queue"].end());
  std::stable_sort(q.begin(), q.end(), [](const json& a, const json& b) {
    return a["estimate"].get<double>() < b["estimate"].get<double>();
  });
  json order = json::array();
  for (const auto& j : q) order.push_back(j["id"]);
  return Reply{200, chat_with_usage(json{{"order", order}}.dump())};
}

}  // namespace
#endif

TEST_CASE("an LLM endpoint answering SJF's order gives --policy sjf's schedule job by job",
          "[replay][llm]") {
#ifndef MLPRIO_HAVE_CURL
  MLPRIO_SKIP("built without libcurl: no llm:URL");
#else
  FakeLlmServer server(sjf_reply);
  const std::vector<Job> jobs = mlprio_test::agent_workload(500, 21);
  for (Backfill b : {Backfill::EASY, Backfill::CONSERVATIVE}) {
    INFO("backfill " << backfill_name(b));
    const SimResult ref = simulate(jobs, llm_policy_config("sjf", b));
    const SimResult llm = simulate(jobs, llm_policy_config("llm:" + server.base_url(), b));
    require_same_schedule(ref, llm);
    CHECK(llm.agent.calls == llm.agent.points);
    CHECK(llm.agent.answers == llm.agent.calls);
    CHECK(llm.agent.failures == 0);
    CHECK(llm.agent.fallbacks == 0);
    CHECK(llm.agent.tokens_sent > 0);
    CHECK(llm.agent.tokens_sent % 100 == 0);
    CHECK(llm.agent.tokens_received == llm.agent.tokens_sent / 100 * 7);
    CHECK(llm.agent.wait_seconds > 0);
  }
  // The request asked for the order schema and carried the default prompt.
  const json req = json::parse(server.last_body());
  CHECK(req["response_format"]["json_schema"]["name"] == "queue_order");
  CHECK_THAT(mlprio_test::user_message(server.last_body()), Catch::Contains("jobs are queued"));
#endif
}

TEST_CASE(
    "llm: only the first --llm-top queued and running jobs are shown, the rest keep their base "
    "order",
    "[replay][llm]") {
#ifndef MLPRIO_HAVE_CURL
  MLPRIO_SKIP("built without libcurl: no llm:URL");
#else
  int64_t most_shown = 0, most_running_shown = 0, running_cut = 0;
  FakeLlmServer server([&](const std::string& body) {
    const json state = state_of(body);
    most_shown = std::max<int64_t>(most_shown, static_cast<int64_t>(state["queue"].size()));
    CHECK(state["queued"].get<int64_t>() >= static_cast<int64_t>(state["queue"].size()));
    // The running list is cut at --llm-top too, and then says how long it is.
    const auto running = static_cast<int64_t>(state["running"].size());
    most_running_shown = std::max(most_running_shown, running);
    if (state.contains("running_total")) {
      ++running_cut;
      CHECK(running == 3);
      CHECK(state["running_total"].get<int64_t>() > 3);
    }
    return sjf_reply(body);
  });
  const std::vector<Job> jobs = mlprio_test::agent_workload(400, 4);
  SimConfig c = llm_policy_config("llm:" + server.base_url(), Backfill::EASY);
  c.policy_options.agent.llm_top = 3;
  const SimResult r = simulate(jobs, c);
  CHECK(r.summary.jobs == static_cast<int64_t>(jobs.size()));
  CHECK(most_shown == 3);
  CHECK(most_running_shown == 3);
  CHECK(running_cut > 0);
  CHECK(r.agent.answers == r.agent.calls);
#endif
}

TEST_CASE("llm: unusable answers, a late answer and a dead endpoint fall back and are counted",
          "[replay][llm]") {
#ifndef MLPRIO_HAVE_CURL
  MLPRIO_SKIP("built without libcurl: no llm:URL");
#else
  const std::vector<Job> jobs = mlprio_test::agent_workload(300, 8);
  const SimResult fcfs = simulate(jobs, llm_policy_config("fcfs", Backfill::EASY));
  {
    // Prose instead of the schema: the base order, every pass counted.
    FakeLlmServer server(mlprio_test::answer(200, mlprio_test::chat("Run the small ones first.")));
    const SimResult r =
        simulate(jobs, llm_policy_config("llm:" + server.base_url(), Backfill::EASY));
    require_same_schedule(fcfs, r);
    CHECK(r.agent.answers == 0);
    CHECK(r.agent.malformed > 0);
    CHECK(r.agent.fallbacks == r.agent.calls);
  }
  {
    // An order naming a job that is not queued.
    FakeLlmServer server(mlprio_test::answer(200, mlprio_test::chat(R"({"order": [-99]})")));
    const SimResult r =
        simulate(jobs, llm_policy_config("llm:" + server.base_url(), Backfill::EASY));
    require_same_schedule(fcfs, r);
    CHECK(r.agent.malformed == r.agent.calls);
  }
  {
    // Late (0.4 s against a 0.1 s time-out): the breaker then opens and the rest are skipped.
    FakeLlmServer server([](const std::string& body) {
      Reply r = sjf_reply(body);
      r.delay_ms = 400;
      return r;
    });
    SimConfig c = llm_policy_config("llm:" + server.base_url(), Backfill::EASY);
    c.policy_options.agent.timeout = 0.1;
    const SimResult r = simulate(jobs, c);
    require_same_schedule(fcfs, r);
    CHECK(r.agent.timeouts >= 1);
    CHECK(r.agent.fallbacks == r.agent.calls);
  }
  {
    // Nothing listening: the run still ends, on the base order.
    std::string url;
    { url = FakeLlmServer(sjf_reply).base_url(); }  // a port that was just closed
    const SimResult r = simulate(jobs, llm_policy_config("llm:" + url, Backfill::EASY));
    require_same_schedule(fcfs, r);
    CHECK(r.agent.failures == r.agent.calls);
    CHECK(r.agent.answers == 0);
  }
#endif
}

TEST_CASE("llm: the prompt template and the settings are checked", "[replay][llm]") {
#ifndef MLPRIO_HAVE_CURL
  MLPRIO_SKIP("built without libcurl: no llm:URL");
#else
  namespace fs = std::filesystem;
  const fs::path dir = mlprio::test::scratch("mlprio_llm_policy_", "prompt");
  FakeLlmServer server(sjf_reply);
  const std::vector<Job> jobs = mlprio_test::agent_workload(200, 3);
  {
    std::ofstream(dir / "p.txt") << "SCHEDULE THIS\n{{state}}\nThanks.";
    SimConfig c = llm_policy_config("llm:" + server.base_url(), Backfill::EASY);
    c.policy_options.agent.llm_prompt_file = (dir / "p.txt").string();
    const SimResult r = simulate(jobs, c);
    CHECK(r.agent.answers == r.agent.calls);
    CHECK(mlprio_test::user_message(server.last_body()).rfind("SCHEDULE THIS\n{\"time\"", 0) == 0);
  }
  auto message = [&](SimConfig c) -> std::string {
    try {
      simulate(jobs, c);
    } catch (const mlprio::UsageError& e) {
      return e.what();
    }
    return "(no error)";
  };
  std::ofstream(dir / "bad.txt") << "no placeholder here";
  SimConfig c = llm_policy_config("llm:" + server.base_url(), Backfill::EASY);
  c.policy_options.agent.llm_prompt_file = (dir / "bad.txt").string();
  CHECK_THAT(message(c), Catch::Contains("{{state}}") && Catch::Contains("bad.txt"));
  c.policy_options.agent.llm_prompt_file = (dir / "missing.txt").string();
  CHECK_THAT(message(c), Catch::Contains("--llm-prompt") && Catch::Contains("missing.txt"));
  c = llm_policy_config("llm:" + server.base_url(), Backfill::EASY);
  c.policy_options.agent.llm_top = 0;
  CHECK_THAT(message(c), Catch::Contains("--llm-top"));
  c = llm_policy_config("llm:ftp://example", Backfill::EASY);
  CHECK_THAT(message(c), Catch::Contains("base_url"));
  c = llm_policy_config("llm:" + server.base_url(), Backfill::EASY);
  c.policy_options.agent.llm_api_key_env = "MLPRIO_TEST_SURELY_UNSET_KEY";
  CHECK_THAT(message(c), Catch::Contains("MLPRIO_TEST_SURELY_UNSET_KEY"));
#endif
}
