// Measurement, not a test (hidden tag [.llama_bench], so ctest does not run it; bench/
// llama_server_latency.sh does): request latency and tokens/s of llama.cpp's llama-server on one
// thread with the tiny test model, for the advisor's request and for llm:URL's queue-order
// request as the queue shown grows. The llm:URL bodies are the replayer's own: a fake endpoint
// (fake_llm_server.hpp) records the largest request of a replay at each --llm-top, and that body
// is then sent to the real server. Figures come from the server's own "timings" (prompt and
// generation separately) and from the wall clock around each request; one line per measurement
// on stdout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../replay/agent_support.hpp"
#include "../support/fake_llm_server.hpp"
#include "../support/llama_server.hpp"
#include "../support/skip.hpp"
#include "mlprio/model/llm_advisor.hpp"
#include "mlprio/replay/simulator.hpp"

using json = nlohmann::json;

namespace {

struct Timed {
  double wall_ms = 0;
  int64_t prompt_n = 0, predicted_n = 0;
  double prompt_ms = 0, predicted_ms = 0;
  std::string finish;
};

Timed post_timed(const mlprio_test::LlamaServer& s, const std::string& body) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto r =
      mlprio_test::http_request(s.port(), "POST", "/v1/chat/completions", body, {}, 600000);
  Timed t;
  t.wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.body.substr(0, 1000));
  REQUIRE(r.status == 200);
  const json a = json::parse(r.body);
  const json& tm = a["timings"];
  t.prompt_n = tm.value("prompt_n", int64_t{0});
  t.prompt_ms = tm.value("prompt_ms", 0.0);
  t.predicted_n = tm.value("predicted_n", int64_t{0});
  t.predicted_ms = tm.value("predicted_ms", 0.0);
  t.finish = a["choices"][0].value("finish_reason", "");
  return t;
}

void print(const char* what, size_t bytes, const Timed& t) {
  std::printf(
      "%-28s body %7zu B  prompt %5lld tok %8.1f ms (%7.1f tok/s)  gen %4lld tok %8.1f ms "
      "(%6.1f tok/s)  wall %8.1f ms  finish %s\n",
      what, bytes, static_cast<long long>(t.prompt_n), t.prompt_ms,
      t.prompt_ms > 0 ? 1000.0 * t.prompt_n / t.prompt_ms : 0.0,
      static_cast<long long>(t.predicted_n), t.predicted_ms,
      t.predicted_ms > 0 ? 1000.0 * t.predicted_n / t.predicted_ms : 0.0, t.wall_ms,
      t.finish.c_str());
}

}  // namespace

TEST_CASE("llama-server latency: the advisor's request and llm:URL's by queue shown",
          "[.llama_bench]") {
  const mlprio_test::LlamaPaths paths = mlprio_test::find_llama_server();
  if (!paths.why.empty()) MLPRIO_SKIP(paths.why);
  // No prompt cache between requests: each measures a whole prompt.
  mlprio_test::LlamaServer server(paths, {"--no-cache-prompt"}, 16384);

  mlprio::model::AdvisorConfig cfg;
  cfg.base_url = server.base_url();
  const std::string script =
      "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --gres=gpu:4\n#SBATCH -t 04:00:00\n"
      "#MLPRIO model_size=7b seq_len=4096 batch_size=8 lora_rank=16 epochs=3\n"
      "srun torchrun --nproc_per_node 4 finetune.py --model llama-7b --epochs 3\n";
  for (int i = 0; i < 5; ++i) {
    const mlprio::model::AdvisorPrompt p = mlprio::model::build_prompt(
        {script + "# run " + std::to_string(i) + "\n", {{"req_time_s", "14400"}, {"gpus", "8"}}},
        cfg);
    const std::string body = mlprio::model::request_body(p, cfg);
    print("advisor (json_schema)", body.size(), post_timed(server, body));
  }

  // llm:URL: the largest request of a replay at each --llm-top, as the replayer builds it.
  // 3000 jobs at 1.5x load: the queue grows past 128 jobs, so each --llm-top is filled.
  const std::vector<mlprio::Job> jobs = mlprio_test::agent_workload(3000, 9);
  for (int64_t top : {8, 16, 32, 64, 128}) {
    std::string largest;
    mlprio_test::FakeLlmServer fake([&](const std::string& body) {
      if (body.size() > largest.size()) largest = body;
      return mlprio_test::Reply{200, mlprio_test::chat(R"({"order": []})")};
    });
    mlprio::replay::SimConfig c =
        mlprio_test::agent_config("llm:" + fake.base_url(), mlprio::replay::Backfill::EASY);
    c.policy_options.agent.llm_top = top;
    c.policy_options.agent.timeout = 10;
    mlprio::replay::simulate(jobs, c);
    REQUIRE(!largest.empty());
    // Queued jobs shown in that request: each has a "wait" field, running jobs have none.
    size_t shown = 0;
    for (size_t at = largest.find("\\\"wait\\\""); at != std::string::npos;
         at = largest.find("\\\"wait\\\"", at + 1))
      ++shown;
    const std::string name =
        "llm:URL top " + std::to_string(top) + " (" + std::to_string(shown) + " shown)";
    for (int i = 0; i < 3; ++i) print(name.c_str(), largest.size(), post_timed(server, largest));
  }
}
