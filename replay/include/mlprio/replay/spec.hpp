// The replay options `run`, `sweep` and `tune` share, and the one place they become a SimConfig.
// A ReplaySpec is what the user asked for (names as typed, unset overrides left empty); a
// ReplaySetup checks it, loads the model once and then configures each replayed window: machine,
// estimate (request, actual, Tsafrir's last-two, or the model with history from the schedule
// being replayed), correction, backfill order and the `ml` score. An option added here reaches
// all three commands.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "mlprio/jobs/trace.hpp"
#include "mlprio/model/predictor.hpp"
#include "mlprio/replay/ml.hpp"
#include "mlprio/replay/simulator.hpp"

namespace mlprio::replay {

struct ReplaySpec {
  std::string estimate = "request";  // request | actual | last2 | model:FILE
  // Unset: the model file's policy with --estimate model:FILE, else upper / none / fcfs.
  std::optional<std::string> estimate_quantile;  // point | upper (model estimates)
  std::optional<std::string> correction;         // none | request | tsafrir
  std::optional<std::string> backfill_order;     // fcfs | sjbf
  // The `ml` score; unset: the model file's policy.
  std::optional<double> ml_age_weight, ml_starvation_limit, ml_size_weight, ml_fail_weight,
      ml_request_weight, ml_fairshare_weight;
  int64_t nodes = 0, cores_per_node = 0, gpus_per_node = 0;  // 0: from the trace header
  std::string allocation = "nodes";
  bool kill_at_limit = false;
  std::string too_large = "error";
  double bsld_threshold = 10.0;
};

class ReplaySetup {
 public:
  // Checks every name and number, loads the model of --estimate model:FILE. Throws ConfigError.
  explicit ReplaySetup(ReplaySpec spec);

  const ReplaySpec& spec() const { return spec_; }
  EstimateMode mode() const { return choice_.mode; }
  bool last2() const { return last2_; }
  const std::shared_ptr<const model::Predictor>& predictor() const { return predictor_; }
  // The policy in effect: the model file's (or the defaults), with the spec's overrides.
  const model::PolicyParams& policy() const { return policy_; }
  EstimateQuantile quantile() const { return quantile_; }
  // Online estimates (last2, model) depend on the schedule: no time-parallel replay.
  bool online() const { return last2_ || predictor_ != nullptr; }

  // The machine: --nodes/--cores-per-node, else the trace header (the rlscheduler profile's
  // machine under that profile).
  Machine machine(const Trace& trace, Profile profile = Profile::STANDARD) const;
  // Everything but the queue order, its options, the backfilling rule and the window.
  SimConfig base(const Trace& trace, Profile profile = Profile::STANDARD) const;
  // Sets the estimate for replaying jobs[start, start + len) of `trace` (jobs = trace.jobs or
  // its prepared list): an online estimator warmed with what had finished before the window (the
  // recorded finishes of the jobs before it), and the `ml` order's score. `trace` and `jobs` must
  // outlive the simulation.
  void apply_window(SimConfig& cfg, const Trace& trace, std::span<const Job> jobs, int64_t start,
                    int64_t len) const;
  // "key=value ..." of every setting, for provenance and sweep fingerprints.
  std::string describe() const;
  // The same setup with another policy (the model stays loaded once): what `tune` tries.
  ReplaySetup with_policy(const model::PolicyParams& policy) const;

 private:
  ReplaySetup() = default;
  void resolve();  // policy_ (and the spec) -> the parsed enums, checked
  ReplaySpec spec_;
  EstimateChoice choice_;
  bool last2_ = false;
  std::shared_ptr<const model::Predictor> predictor_;
  std::string model_sha256_;
  model::PolicyParams policy_;
  EstimateQuantile quantile_ = EstimateQuantile::UPPER;
  Correction correction_ = Correction::NONE;
  BackfillOrder order_ = BackfillOrder::QUEUE;
  Allocation allocation_ = Allocation::NODES;
  TooLarge too_large_ = TooLarge::ERROR;
};

// Tsafrir, Etsion and Feitelson's predictor as an online estimator: the mean run time of the
// user's two most recently finished jobs (one: that one; none: the request), capped by the
// request. Jobs of jobs[0, window_start) finish at their recorded times; jobs of the window as
// the simulation runs them.
OnlineEstimatorFactory last2_estimator(std::span<const Job> jobs, int64_t window_start);

// The model as an online estimator: each job's feature row from model::OnlineHistory (the store
// the Slurm plugin feeds live), fed as above, predicted at submission.
OnlineEstimatorFactory model_estimator(std::shared_ptr<const model::Predictor> predictor,
                                       const Trace& trace, std::span<const Job> jobs,
                                       int64_t window_start, EstimateQuantile quantile);

}  // namespace mlprio::replay
