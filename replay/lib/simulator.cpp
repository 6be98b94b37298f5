// The simulator's entry points (simulator.hpp): the machine a trace header describes, job
// windows, and simulate()/simulate_stream(), which hand a run to the STANDARD engine
// (standard_engine.hpp), the rlscheduler profile's engine or the deployed-stack replay.
#include "mlprio/replay/simulator.hpp"

#include <algorithm>
#include <string>

#include "engine_common.hpp"
#include "mlprio/jobs/trace.hpp"
#include "standard_engine.hpp"

namespace mlprio::replay {

Machine machine_from_header(const TraceHeader& h) {
  Machine m;
  if (h.max_nodes > 0) {
    m.nodes = h.max_nodes;
    const int64_t procs = h.max_procs > 0 ? h.max_procs : h.max_nodes;
    if (procs % h.max_nodes != 0)
      throw ConfigError("trace header MaxProcs " + std::to_string(procs) +
                        " is not a multiple of MaxNodes " + std::to_string(h.max_nodes) +
                        "; give --nodes N --cores-per-node C");
    m.cores_per_node = procs / h.max_nodes;
  } else if (h.max_procs > 0) {
    m.nodes = h.max_procs;
    m.cores_per_node = 1;
  } else {
    throw ConfigError(
        "the trace header has neither MaxNodes nor MaxProcs; give --nodes N --cores-per-node C");
  }
  return m;
}

std::span<const Job> select_window(std::span<const Job> jobs, int64_t start, int64_t len) {
  if (start < 0 || len < 0) throw ConfigError("a window needs START >= 0 and LEN >= 0");
  const auto n = static_cast<int64_t>(jobs.size());
  if (start >= n) return {};
  return jobs.subspan(static_cast<size_t>(start), static_cast<size_t>(std::min(len, n - start)));
}

SimResult simulate_stream(const JobSource& next, const SimConfig& config) {
  if (config.profile == Profile::RLSCHEDULER || config.backfill == Backfill::RLSCHEDULER)
    throw ConfigError("the rlscheduler event loop replays a job list; call simulate()");
  if (config.slurm)
    throw ConfigError("the deployed-stack replay reads a job list; call simulate()");
  auto policy = make_policy(config.policy, config.policy_options);
  standard::StandardEngine engine(config, *policy);
  SimResult r = engine.run(next);
  r.agent = policy->agent_stats();
  r.agent_error = policy->agent_last_error();
  return r;
}

SimResult simulate(std::span<const Job> jobs, const SimConfig& config) {
  if (config.slurm) {
    if (config.profile != Profile::STANDARD)
      throw ConfigError("--slurm-conf replays what slurmctld does, not the rlscheduler profile");
    return detail::simulate_slurm(jobs, config);
  }
  if (config.profile == Profile::RLSCHEDULER || config.backfill == Backfill::RLSCHEDULER) {
    if (is_agent_policy(config.policy))
      throw ConfigError("policy '" + config.policy +
                        "' reorders the queue, which the rlscheduler profile and backfill "
                        "(a copy of RLScheduler's score sort) do not; use the standard profile "
                        "with none, easy or conservative backfilling");
    if (config.sink != nullptr)
      throw ConfigError("the rlscheduler profile keeps its rows: replay it without a result sink");
    return detail::simulate_rlscheduler(jobs, config);
  }
  size_t i = 0;
  return simulate_stream(
      [&](Job& out) {
        if (i >= jobs.size()) return false;
        out = jobs[i++];
        return true;
      },
      config);
}

}  // namespace mlprio::replay
