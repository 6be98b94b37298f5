// The replayer's llm:URL queue order (replay/lib/policy_llm.cpp) against llama.cpp's real
// llama-server with the tiny random-weight model (tests/support/llama_server.hpp). The model's
// orders are noise; what is checked is that every pass is accounted for (an answer used, or a
// failure by cause and a fall-back to the base order), that an unusable answer gives exactly the
// base order's schedule, that the schedule keeps its invariants whatever the order, that the
// server's usage counts reach tokens_sent/received, and that `mlprio-replay run --policy llm:URL
// --llm-top 32 --json` ends with exit 0 and a bounded agent object. Skipped when the server is
// not built.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../replay/agent_support.hpp"
#include "../support/llama_server.hpp"
#include "../support/process.hpp"
#include "../support/skip.hpp"
#include "mlprio/replay/simulator.hpp"

using namespace mlprio;
using namespace mlprio::replay;
using mlprio_test::LlamaPaths;
using mlprio_test::LlamaServer;

namespace {

SimConfig llama_policy_config(const std::string& policy, int64_t top) {
  SimConfig cfg = mlprio_test::agent_config(policy, Backfill::EASY);
  cfg.policy_options.agent.timeout = 120;  // one shared core: a long prompt may take seconds
  cfg.policy_options.agent.llm_top = top;
  return cfg;
}

void check_accounted(const AgentStats& a) {
  INFO("points " << a.points << " calls " << a.calls << " answers " << a.answers << " failures "
                 << a.failures << " timeouts " << a.timeouts << " malformed " << a.malformed
                 << " fallbacks " << a.fallbacks << " tokens " << a.tokens_sent << "/"
                 << a.tokens_received);
  CHECK(a.calls == a.points);
  CHECK(a.answers + a.failures == a.calls);
  CHECK(a.timeouts + a.malformed <= a.failures);
  CHECK(a.fallbacks == a.failures);
  CHECK(a.timeouts == 0);  // 120 s is far beyond any answer here
}

}  // namespace

TEST_CASE("llama-server: llm:URL replays a small trace, every pass accounted, invariants kept",
          "[llama][replay]") {
  const LlamaPaths paths = mlprio_test::find_llama_server();
  if (!paths.why.empty()) MLPRIO_SKIP(paths.why);
  LlamaServer server(paths);
  const std::vector<Job> jobs = mlprio_test::agent_workload(30, 11);
  const SimResult base = simulate(jobs, llama_policy_config("fcfs", 32));
  const SimResult r = simulate(jobs, llama_policy_config("llm:" + server.base_url(), 32));
  CHECK(r.summary.jobs == static_cast<int64_t>(jobs.size()));  // invariants checked every event
  check_accounted(r.agent);
  CHECK(r.agent.points > 0);
  CHECK(r.agent.tokens_sent > 0);  // the server's usage counts were read
  CHECK(r.agent.tokens_received > 0);
  WARN("llm:URL on " << jobs.size() << " jobs: " << r.agent.calls << " calls, " << r.agent.answers
                     << " answers used, " << r.agent.malformed << " malformed, "
                     << r.agent.tokens_sent << " prompt tokens, " << r.agent.tokens_received
                     << " completion tokens, " << r.agent.wait_seconds << " s waiting");
  // Fall-back order: with no usable answer the schedule is the base order's, job by job.
  if (r.agent.answers == 0) mlprio_test::require_same_schedule(base, r);
}

TEST_CASE("llama-server: when every ask fails, llm:URL is exactly its base order",
          "[llama][replay]") {
  const LlamaPaths paths = mlprio_test::find_llama_server();
  if (!paths.why.empty()) MLPRIO_SKIP(paths.why);
  // A 128-token context: every request is longer, and the server answers each with its HTTP 400
  // (the request exceeds the available context size).
  LlamaServer server(paths, {}, 128);
  const std::vector<Job> jobs = mlprio_test::agent_workload(30, 12);
  for (const char* base_order : {"fcfs", "sjf"}) {
    INFO("base " << base_order);
    SimConfig base_cfg = llama_policy_config(base_order, 8);
    SimConfig llm_cfg = llama_policy_config("llm:" + server.base_url(), 8);
    llm_cfg.policy_options.agent.base = base_order;
    llm_cfg.policy_options.agent.timeout = 30;
    const SimResult base = simulate(jobs, base_cfg);
    const SimResult r = simulate(jobs, llm_cfg);
    // The breaker (3 failures) skips most asks: each is a failure, none an answer.
    CHECK(r.agent.calls == r.agent.points);
    CHECK(r.agent.answers == 0);
    CHECK(r.agent.failures == r.agent.calls);
    CHECK(r.agent.fallbacks == r.agent.calls);
    CHECK(r.agent.malformed == 0);
    CHECK(r.agent.timeouts == 0);
    mlprio_test::require_same_schedule(base, r);
  }
}

TEST_CASE("llama-server: mlprio-replay run --policy llm:URL --llm-top 32 --json",
          "[llama][replay][cli]") {
  namespace fs = std::filesystem;
  const LlamaPaths paths = mlprio_test::find_llama_server();
  if (!paths.why.empty()) MLPRIO_SKIP(paths.why);
  const fs::path exe = fs::path(MLPRIO_BIN_DIR) / "mlprio-replay";
  if (!fs::exists(exe)) MLPRIO_SKIP(exe << " is not built");
  LlamaServer server(paths);
  const fs::path dir = mlprio::test::scratch("mlprio_llama_", "cli");
  using mlprio::test::run_in;
  using mlprio::test::slurp;
  REQUIRE(run_in(exe, dir, "true", "generate --jobs 40 --seed 5 -q -o t.swf") == 0);
  const int rc = run_in(exe, dir, "true",
                        "run --trace t.swf --policy llm:" + server.base_url() +
                            " --llm-top 32 --external-timeout 120 --json",
                        "out.json");
  const std::string out = slurp(dir / "out.json");
  INFO(out << "\n" << slurp(dir / "err.txt"));
  REQUIRE(rc == 0);
  const nlohmann::json doc = nlohmann::json::parse(out);
  const nlohmann::json* run = nullptr;
  for (const auto& r : doc["runs"])
    if (r.contains("agent")) run = &r;
  REQUIRE(run != nullptr);
  const nlohmann::json& a = (*run)["agent"];
  CHECK(a["calls"].get<int64_t>() > 0);
  CHECK(a["answers"].get<int64_t>() + a["failures"].get<int64_t>() == a["calls"].get<int64_t>());
  CHECK(a["tokens_sent"].get<int64_t>() > 0);
  CHECK((*run)["jobs"].get<int64_t>() == 40);
  CHECK(out.size() < 64 * 1024);
  fs::remove_all(dir);
}
