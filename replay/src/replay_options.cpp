// The option group of the replay commands (run, sweep, tune), declared once so that they cannot
// drift apart (see replay_options.hpp). mlprio-replay's own: the library has no command line.
#include "replay_options.hpp"

#include <utility>

namespace mlprio::cli {

void add_replay_spec_options(CLI::App& cmd, replay::ReplaySpec& spec) {
  cmd.add_option("--estimate", spec.estimate,
                 "Runtime estimate for backfilling and policies: request (requested time, or run "
                 "time when absent), actual, last2 (mean of the user's last two finished run "
                 "times in this schedule, capped by the request: Tsafrir's predictor), or "
                 "model:FILE (a mlprio-model file, history from this schedule)")
      ->capture_default_str();
  cmd.add_option("--estimate-quantile", spec.estimate_quantile,
                 "With --estimate model:FILE, backfill with the model's upper quantile "
                 "(runtime_upper), its point run time, the requested time or the user's last "
                 "two finished runs (last2; the model then only orders the queue) (default: the "
                 "model file's policy)")
      ->check(CLI::IsMember({"point", "upper", "request", "last2"}));
  cmd.add_option("--correction", spec.correction,
                 "EASY: when a running job outlives its estimate: none (it counts as ending now), "
                 "request (raise to the request), tsafrir (then add 1 min .. 100 h steps) "
                 "(default: the model file's policy, else none)")
      ->check(CLI::IsMember({"none", "request", "tsafrir"}));
  cmd.add_option("--backfill-order", spec.backfill_order,
                 "EASY: try backfill candidates in queue order (fcfs) or shortest estimate first "
                 "(sjbf) (default: the model file's policy, else fcfs)")
      ->check(CLI::IsMember({"fcfs", "sjbf"}));
  cmd.add_option("--ml-age-weight", spec.ml_age_weight,
                 "ml: how much waiting raises the score, 0..64 (default: the model file's policy)");
  cmd.add_option("--ml-starvation-limit", spec.ml_starvation_limit,
                 "ml: wait in seconds after which a job outranks any fresh job");
  cmd.add_option("--ml-size-weight", spec.ml_size_weight,
                 "ml: favour (>0) or penalise (<0) wide jobs, per doubling of processors");
  cmd.add_option("--ml-fail-weight", spec.ml_fail_weight,
                 "ml: how much a predicted failure lowers the score, 0..64");
  cmd.add_option("--ml-request-weight", spec.ml_request_weight,
                 "ml: rank by the predicted run time (0), the requested time (1) or between");
  cmd.add_option("--ml-fairshare-weight", spec.ml_fairshare_weight,
                 "ml: how much the user's fair-share usage (U/S, as multifactor's, decayed "
                 "with --priority-decay-half-life) lowers the score, 0..64 (0: no term)");
  cmd.add_option("--nodes", spec.nodes, "Nodes (default: trace header MaxNodes)");
  cmd.add_option("--cores-per-node", spec.cores_per_node,
                 "Cores per node (default: MaxProcs / MaxNodes, or 1 with --nodes)");
  cmd.add_option("--gpus-per-node", spec.gpus_per_node, "GPUs per node")->capture_default_str();
  cmd.add_option("--allocation", spec.allocation, "Jobs take whole nodes or single cores")
      ->check(CLI::IsMember({"nodes", "cores"}))
      ->capture_default_str();
  cmd.add_flag("--kill-at-limit", spec.kill_at_limit,
               "End jobs at their requested time, as Slurm does");
  cmd.add_option("--too-large", spec.too_large,
                 "Jobs larger than the machine: error (stop) or skip (count them)")
      ->check(CLI::IsMember({"error", "skip"}))
      ->capture_default_str();
  cmd.add_option("--bsld-threshold", spec.bsld_threshold,
                 "Bounded-slowdown run-time floor, seconds")
      ->capture_default_str();
}

void add_agent_options(CLI::App& cmd, replay::AgentOptions& agent) {
  cmd.add_option("--external-base", agent.base,
                 "external:/llm: the built-in order of the jobs an answer leaves out, and of "
                 "every pass whose answer is late or malformed")
      ->capture_default_str();
  cmd.add_option("--external-timeout", agent.timeout,
                 "external:/llm: seconds to wait for one answer; a late one falls back to the "
                 "base order (and is counted)")
      ->capture_default_str();
  cmd.add_option("--external-every", agent.every,
                 "external:/llm: ask at every K-th scheduling pass only; between asks the last "
                 "answer's order holds for the jobs it listed")
      ->capture_default_str();
  cmd.add_option("--llm-prompt", agent.llm_prompt_file,
                 "llm: prompt template file ({{state}}, {{top}}, {{queued}} are replaced; "
                 "default: the built-in one in replay/README.md)");
  cmd.add_option("--llm-top", agent.llm_top,
                 "llm: queued jobs shown to the model (the first N in base order)")
      ->capture_default_str();
  cmd.add_option("--llm-model", agent.llm_model, "llm: the request's \"model\" field")
      ->capture_default_str();
  cmd.add_option("--llm-api-key-env", agent.llm_api_key_env,
                 "llm: name of the environment variable holding the API key (sent as a Bearer "
                 "token; never printed)");
}

void merge_given(const CLI::App& cmd, const replay::ReplaySpec& given, replay::ReplaySpec& dst) {
  auto has = [&](const char* name) { return cmd.count(name) > 0; };
  if (has("--estimate")) dst.estimate = given.estimate;
  for (auto [from, to] : {std::pair{&given.estimate_quantile, &dst.estimate_quantile},
                          std::pair{&given.correction, &dst.correction},
                          std::pair{&given.backfill_order, &dst.backfill_order}})
    if (*from) *to = *from;
  for (auto [from, to] : {std::pair{&given.ml_age_weight, &dst.ml_age_weight},
                          std::pair{&given.ml_starvation_limit, &dst.ml_starvation_limit},
                          std::pair{&given.ml_size_weight, &dst.ml_size_weight},
                          std::pair{&given.ml_fail_weight, &dst.ml_fail_weight},
                          std::pair{&given.ml_request_weight, &dst.ml_request_weight},
                          std::pair{&given.ml_fairshare_weight, &dst.ml_fairshare_weight}})
    if (*from) *to = *from;
  if (has("--nodes")) dst.nodes = given.nodes;
  if (has("--cores-per-node")) dst.cores_per_node = given.cores_per_node;
  if (has("--gpus-per-node")) dst.gpus_per_node = given.gpus_per_node;
  if (has("--allocation")) dst.allocation = given.allocation;
  if (has("--kill-at-limit")) dst.kill_at_limit = given.kill_at_limit;
  if (has("--too-large")) dst.too_large = given.too_large;
  if (has("--bsld-threshold")) dst.bsld_threshold = given.bsld_threshold;
}

}  // namespace mlprio::cli
