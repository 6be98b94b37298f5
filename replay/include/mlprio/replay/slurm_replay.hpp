// One slurm.conf's deployed-stack replay made ready for one trace: the configuration with the
// trace's clock and names, the model the mlprio plugins load, and the simulator settings (the
// file's nodes unless the replay options override them). `run --slurm-conf`, `sweep
// --slurm-conf` and `tune --slurm-conf` all replay through this, so they agree bit for bit.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mlprio/jobs/trace.hpp"
#include "mlprio/model/predictor.hpp"
#include "mlprio/replay/simulator.hpp"
#include "mlprio/replay/slurm_conf.hpp"
#include "mlprio/replay/spec.hpp"

namespace mlprio::replay {

// "YY.MM" (22.05 ... 26.05) as YY * 100 + MM. Throws ConfigError naming --slurm-release.
int parse_slurm_release(const std::string& text);

// The model files the plugins of several configurations name, each loaded once (thread-safe:
// a sweep's rank 0 replays on a second thread).
class SlurmModelCache {
 public:
  std::shared_ptr<const model::Predictor> get(const std::string& path);

 private:
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const model::Predictor>> loaded_;
};

struct SlurmReplay {
  std::shared_ptr<const SlurmRun> run;
  // The model site_factor/mlprio and job_submit/mlprio load; null when neither applies it.
  std::shared_ptr<const model::Predictor> predictor;
  SimConfig cfg;  // machine, allocation, policy "slurm"; the estimator is set per window
};

// Prepares `conf` (read by read_slurm_conf) for replaying `trace`, as the Slurm release
// `release` (parse_slurm_release) schedules. `setup` gives the replay options (--nodes,
// --cores-per-node override the file's nodes; --too-large, --bsld-threshold, ...); `label` names
// the configuration in errors ("--slurm-conf FILE"). SITE's score settings are the model file's
// policy unless `site_score` is given (tune tries other policies without writing files). Throws
// ConfigError.
SlurmReplay prepare_slurm_replay(SlurmStack conf, int release, const Trace& trace,
                                 const ReplaySetup& setup, const std::string& label,
                                 SlurmModelCache& models, bool record_jobs, bool record_series,
                                 const std::optional<model::ScoreConfig>& site_score = {});

// Replays jobs [start, start + len) of `trace` (the one it was prepared for) from an empty
// cluster; the model's history holds the jobs before the window at their recorded ends.
SimResult replay_slurm_window(const SlurmReplay& s, const Trace& trace, int64_t start, int64_t len);
// The same for `window`, a copy of those jobs with other submit times (tune's load scaling): the
// model predicts as for the trace's jobs from `start` on.
SimResult replay_slurm_jobs(const SlurmReplay& s, const Trace& trace, int64_t start,
                            std::span<const Job> window);

// The warnings a configuration earns, one line each without a trailing newline: the keys it
// does not model, and the plugin parameters the plugin would ignore.
std::vector<std::string> slurm_conf_warnings(const SlurmStack& conf);

}  // namespace mlprio::replay
