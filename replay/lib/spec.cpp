// ReplaySpec -> SimConfig (see mlprio/replay/spec.hpp), and the two online estimators: Tsafrir's
// last-two predictor and the model fed by the schedule being replayed.
#include "mlprio/replay/spec.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mlprio/model/features.hpp"
#include "mlprio/replay/rlscheduler.hpp"

namespace mlprio::replay {
namespace {

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

// The recorded past of a window: jobs before it, by recorded finish time, handed over as the
// simulated clock passes them. A job never seen to finish (no run time) is left out.
class RecordedPast {
 public:
  RecordedPast(std::span<const Job> jobs, int64_t window_start) : jobs_(jobs) {
    const auto end = static_cast<size_t>(
        std::clamp<int64_t>(window_start, 0, static_cast<int64_t>(jobs.size())));
    for (size_t i = 0; i < end; ++i) {
      const double fin = model::finish_time(jobs[i]);
      if (!std::isnan(fin)) by_finish_.emplace_back(fin, i);
    }
    std::sort(by_finish_.begin(), by_finish_.end());
  }
  // Calls fn(job, run, end) for every past job that finished at or before `now`, in time order.
  template <typename F>
  void drain(double now, F&& fn) {
    while (next_ < by_finish_.size() && by_finish_[next_].first <= now) {
      const auto [fin, i] = by_finish_[next_++];
      fn(jobs_[i], jobs_[i].run, fin);
    }
  }

 private:
  std::span<const Job> jobs_;
  std::vector<std::pair<double, size_t>> by_finish_;
  size_t next_ = 0;
};

double request_or_run(const Job& job) {
  return job.req_time >= 0 ? job.req_time : std::max(job.run, 0.0);
}

class LastTwo final : public OnlineEstimator {
 public:
  LastTwo(std::span<const Job> jobs, int64_t start) : past_(jobs, start) {}
  OnlineEstimate submit(const Job& job, int64_t, double now) override {
    past_.drain(now, [this](const Job& j, double run, double end) { learn(j, run, end); });
    OnlineEstimate e;
    e.estimate = request_or_run(job);
    if (job.user >= 0) {
      auto it = users_.find(job.user);
      if (it != users_.end() && it->second.count > 0) {
        const model::UserStats& s = it->second;
        const double mean = std::isnan(s.prev_run) ? s.last_run : 0.5 * (s.last_run + s.prev_run);
        e.estimate = job.req_time > 0 ? std::min(mean, job.req_time) : mean;
      }
    }
    e.prediction.runtime = e.estimate;
    e.prediction.runtime_upper = e.estimate;
    return e;
  }
  void finish(const Job& job, double start, double end) override { learn(job, end - start, end); }

 private:
  void learn(const Job& job, double run, double end) {
    if (job.user >= 0) users_[job.user].record_run(job, run, end);
  }
  RecordedPast past_;
  std::unordered_map<int32_t, model::UserStats> users_;
};

class ModelOnline final : public OnlineEstimator {
 public:
  ModelOnline(std::shared_ptr<const model::Predictor> p, const Trace& trace,
              std::span<const Job> jobs, int64_t start, EstimateQuantile q)
      : predictor_(std::move(p)),
        // SWF submit times count from UnixStartTime; time-of-day columns need Unix seconds.
        store_(trace.names, trace.header.unix_start_time > 0
                                ? static_cast<double>(trace.header.unix_start_time)
                                : 0.0),
        past_(jobs, start),
        quantile_(q),
        row_(model::N_FEATURES) {}
  OnlineEstimate submit(const Job& job, int64_t, double now) override {
    past_.drain(
        now, [this](const Job& j, double run, double end) { store_.record_finish(j, run, end); });
    store_.encode(job, row_);
    model::Prediction p;
    predictor_->predict_rows(row_, std::span<const Job>(&job, 1),
                             std::span<model::Prediction>(&p, 1));
    OnlineEstimate e;
    e.prediction = p;
    if (quantile_ == EstimateQuantile::LAST2) {
      // The feature store's last-two column: the same finishes LastTwo learns, capped by the
      // request as EASY++ caps it; the request (else the run) when the user has none.
      const double last2 = row_[model::F_HIST_LAST2_MEAN];
      const double request = request_or_run(job);
      e.estimate = std::isfinite(last2) && last2 >= 0
                       ? (job.req_time > 0 ? std::min<double>(last2, job.req_time) : last2)
                       : request;
    } else {
      e.estimate = model_estimate(job, p, quantile_);
    }
    return e;
  }
  void finish(const Job& job, double start, double end) override {
    store_.record_finish(job, end - start, end);
  }

 private:
  std::shared_ptr<const model::Predictor> predictor_;
  model::OnlineHistory store_;
  RecordedPast past_;
  EstimateQuantile quantile_;
  std::vector<float> row_;
};

}  // namespace

OnlineEstimatorFactory last2_estimator(std::span<const Job> jobs, int64_t window_start) {
  return [jobs, window_start] { return std::make_unique<LastTwo>(jobs, window_start); };
}

OnlineEstimatorFactory model_estimator(std::shared_ptr<const model::Predictor> predictor,
                                       const Trace& trace, std::span<const Job> jobs,
                                       int64_t window_start, EstimateQuantile quantile) {
  if (!predictor) throw ConfigError("model_estimator: no model");
  const Trace* t = &trace;
  return [predictor = std::move(predictor), t, jobs, window_start, quantile] {
    return std::make_unique<ModelOnline>(predictor, *t, jobs, window_start, quantile);
  };
}

ReplaySetup::ReplaySetup(ReplaySpec spec) : spec_(std::move(spec)) {
  if (spec_.estimate == "last2") {
    last2_ = true;
    choice_.mode = EstimateMode::CUSTOM;
  } else {
    choice_ = parse_estimate_choice(spec_.estimate);
  }
  if (!choice_.model_path.empty()) {
    predictor_ = load_replay_model(choice_.model_path);
    model_sha256_ = file_sha256(choice_.model_path);
    policy_ = predictor_->policy();
  } else {
    // Without a model the EASY++ parts are off unless asked for.
    policy_.correction = "none";
    policy_.backfill_order = "fcfs";
  }
  if (spec_.estimate_quantile) policy_.backfill_estimate = *spec_.estimate_quantile;
  if (spec_.correction) policy_.correction = *spec_.correction;
  if (spec_.backfill_order) policy_.backfill_order = *spec_.backfill_order;
  if (spec_.ml_age_weight) policy_.score.age_weight = *spec_.ml_age_weight;
  if (spec_.ml_starvation_limit) policy_.score.starvation_limit = *spec_.ml_starvation_limit;
  if (spec_.ml_size_weight) policy_.score.size_weight = *spec_.ml_size_weight;
  if (spec_.ml_fail_weight) policy_.score.fail_weight = *spec_.ml_fail_weight;
  if (spec_.ml_request_weight) policy_.score.request_weight = *spec_.ml_request_weight;
  if (spec_.ml_fairshare_weight) policy_.score.fairshare_weight = *spec_.ml_fairshare_weight;
  resolve();
}

ReplaySetup ReplaySetup::with_policy(const model::PolicyParams& policy) const {
  ReplaySetup s = *this;
  s.policy_ = policy;
  s.resolve();
  return s;
}

void ReplaySetup::resolve() {
  quantile_ = parse_estimate_quantile(policy_.backfill_estimate);
  correction_ = parse_correction(policy_.correction);
  order_ = parse_backfill_order(policy_.backfill_order);
  allocation_ = parse_allocation(spec_.allocation);
  too_large_ = parse_too_large(spec_.too_large);
  const auto& s = policy_.score;
  if (!(s.age_weight >= 0 && s.age_weight <= 64) || !(s.starvation_limit > 0) ||
      !std::isfinite(s.starvation_limit) || !(std::abs(s.size_weight) <= 64) ||
      !(s.fail_weight >= 0 && s.fail_weight <= 64) ||
      !(s.request_weight >= 0 && s.request_weight <= 1) ||
      !(s.fairshare_weight >= 0 && s.fairshare_weight <= 64))
    throw ConfigError(
        "ml score: age, fail and fair-share weights must lie in [0, 64], size weight in "
        "[-64, 64], request weight in [0, 1] and the starvation limit be a positive number of "
        "seconds");
  if (spec_.nodes < 0 || spec_.cores_per_node < 0 || spec_.gpus_per_node < 0)
    throw ConfigError("--nodes, --cores-per-node and --gpus-per-node must not be negative");
  if (!(spec_.bsld_threshold > 0) || !std::isfinite(spec_.bsld_threshold))
    throw ConfigError("--bsld-threshold must be a positive number of seconds");
}

Machine ReplaySetup::machine(const Trace& trace, Profile profile) const {
  Machine m;
  if (spec_.nodes > 0) {
    m.nodes = spec_.nodes;
    m.cores_per_node = spec_.cores_per_node > 0 ? spec_.cores_per_node : 1;
  } else if (profile == Profile::RLSCHEDULER) {
    m = rlscheduler_machine(trace.header);
  } else {
    m = machine_from_header(trace.header);
  }
  m.gpus_per_node = spec_.gpus_per_node;
  m.allocation = allocation_;
  check_machine_bounds(m, spec_.nodes > 0 ? "--nodes/--cores-per-node/--gpus-per-node"
                                          : "the machine from " + trace.path +
                                                "'s header (MaxNodes, MaxProcs) and "
                                                "--gpus-per-node");
  return m;
}

SimConfig ReplaySetup::base(const Trace& trace, Profile profile) const {
  SimConfig cfg;
  cfg.profile = profile;
  cfg.machine = machine(trace, profile);
  cfg.estimate =
      choice_.mode == EstimateMode::ACTUAL ? EstimateMode::ACTUAL : EstimateMode::REQUEST;
  cfg.kill_at_limit = spec_.kill_at_limit;
  cfg.too_large = too_large_;
  cfg.bsld_threshold = spec_.bsld_threshold;
  cfg.correction = correction_;
  cfg.backfill_order = order_;
  return cfg;
}

void ReplaySetup::apply_window(SimConfig& cfg, const Trace& trace, std::span<const Job> jobs,
                               int64_t start, int64_t len) const {
  (void)len;
  if (!online()) return;
  if (cfg.profile == Profile::RLSCHEDULER || cfg.backfill == Backfill::RLSCHEDULER)
    throw ConfigError("--estimate " + spec_.estimate +
                      " replays in the standard profile with none, easy or conservative "
                      "backfilling (the rlscheduler profile copies RLScheduler)");
  cfg.estimate = EstimateMode::CUSTOM;
  cfg.online = last2_ ? last2_estimator(jobs, start)
                      : model_estimator(predictor_, trace, jobs, start, quantile_);
  cfg.policy_options.ml = std::make_shared<const MlPredictions>(
      std::span<const Job>{}, std::span<const model::Prediction>{}, policy_.score);
}

std::string ReplaySetup::describe() const {
  std::ostringstream s;
  s << "estimate=" << spec_.estimate;
  if (predictor_) {
    s << " model_sha256=" << model_sha256_ << " estimate_quantile=" << policy_.backfill_estimate
      << " ml_age_weight=" << num(policy_.score.age_weight)
      << " ml_starvation_limit=" << num(policy_.score.starvation_limit)
      << " ml_size_weight=" << num(policy_.score.size_weight)
      << " ml_fail_weight=" << num(policy_.score.fail_weight);
    // Only when set, so that the description of every run before the option stays the same.
    if (policy_.score.request_weight != 0)
      s << " ml_request_weight=" << num(policy_.score.request_weight);
    if (policy_.score.fairshare_weight != 0)
      s << " ml_fairshare_weight=" << num(policy_.score.fairshare_weight);
  }
  s << " correction=" << policy_.correction << " backfill_order=" << policy_.backfill_order
    << " allocation=" << spec_.allocation << " kill_at_limit=" << (spec_.kill_at_limit ? 1 : 0)
    << " too_large=" << spec_.too_large << " bsld_threshold=" << num(spec_.bsld_threshold);
  return s.str();
}

}  // namespace mlprio::replay
