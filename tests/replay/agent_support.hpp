// Shared by the agent-order tests (test_external_policy.cpp, test_llm_policy.cpp): the small
// Lublin workload they replay, the base SimConfig, and the job-by-job schedule comparison that
// pins an agent's order to a built-in one.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mlprio/jobs/lublin.hpp"
#include "mlprio/replay/simulator.hpp"

namespace mlprio_test {

// n Lublin jobs for a 64-node machine at 1.5x load, requested times from the factor model, five
// users in turn.
inline std::vector<mlprio::Job> agent_workload(int n, uint64_t seed) {
  mlprio::LublinOptions o;
  o.nodes = 64;
  o.seed = seed;
  o.load_scale = 1.5;
  o.req_time = mlprio::LublinReqTime::FACTOR;
  std::vector<mlprio::Job> jobs = mlprio::generate_lublin(o, n);
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].user = static_cast<int32_t>(i % 5);
  return jobs;
}

// 64 whole nodes, invariants checked after every event.
inline mlprio::replay::SimConfig agent_config(const std::string& policy,
                                              mlprio::replay::Backfill b) {
  mlprio::replay::SimConfig cfg;
  cfg.machine = {64, 1, 0, mlprio::replay::Allocation::NODES};
  cfg.policy = policy;
  cfg.backfill = b;
  cfg.check_invariants = true;
  return cfg;
}

// The same jobs start and end at the same times, outcome by outcome.
inline void require_same_schedule(const mlprio::replay::SimResult& a,
                                  const mlprio::replay::SimResult& b) {
  REQUIRE(a.jobs.size() == b.jobs.size());
  for (size_t k = 0; k < a.jobs.size(); ++k) {
    INFO("outcome " << k << " job " << a.jobs[k].id);
    REQUIRE(a.jobs[k].id == b.jobs[k].id);
    REQUIRE(a.jobs[k].start == b.jobs[k].start);
    REQUIRE(a.jobs[k].end == b.jobs[k].end);
  }
}

}  // namespace mlprio_test
