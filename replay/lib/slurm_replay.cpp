// Preparing a deployed-stack replay for one trace: see slurm_replay.hpp.
#include "mlprio/replay/slurm_replay.hpp"

#include <algorithm>
#include <span>
#include <sstream>

#include "mlprio/replay/ml.hpp"
#include "mlprio/util/errors.hpp"

namespace mlprio::replay {

int parse_slurm_release(const std::string& text) {
  // YY.MM, or YY.MM.P as Slurm prints its version (the patch level changes no scheduling here).
  int yy = 0, mm = 0, patch = 0;
  char dot = 0, dot2 = 0;
  std::istringstream in(text);
  const bool ok = static_cast<bool>(in >> yy >> dot >> mm) && dot == '.' && yy >= 20 && yy <= 99 &&
                  mm >= 1 && mm <= 12 &&
                  (in.peek() == std::char_traits<char>::eof() ||
                   (in >> dot2 >> patch && dot2 == '.' && patch >= 0 &&
                    in.peek() == std::char_traits<char>::eof()));
  if (!ok)
    throw ConfigError("--slurm-release '" + text +
                      "': a Slurm release is YY.MM (22.05, 23.11, ... 26.05) or YY.MM.P");
  return yy * 100 + mm;
}

std::shared_ptr<const model::Predictor> SlurmModelCache::get(const std::string& path) {
  const std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = loaded_[path];
  if (!slot) slot = load_replay_model(path);
  return slot;
}

SlurmReplay prepare_slurm_replay(SlurmStack conf, int release, const Trace& trace,
                                 const ReplaySetup& setup, const std::string& label,
                                 SlurmModelCache& models, bool record_jobs, bool record_series,
                                 const std::optional<model::ScoreConfig>& site_score) {
  auto run = std::make_shared<SlurmRun>();
  run->conf = std::move(conf);
  // Backfill reservations end on a slot rounded up from 24.11 on (_set_slot_time), down before.
  run->reservation_end_up = release >= 2411;
  const SlurmStack& c = run->conf;
  SlurmReplay out;
  // The model the plugins load, when they are loaded and applied.
  if ((c.multifactor && c.site.enabled) || c.job_submit_mlprio) {
    if (c.site.model.empty()) {
      std::string why;
      for (const auto& w : c.site.warnings) why += "; " + w;
      throw ConfigError(label +
                        ": the mlprio plugins are loaded but PrioritySiteFactorParameters names "
                        "no model=FILE" +
                        why);
    }
    out.predictor = models.get(c.site.model);
    run->site_score = site_score ? *site_score : out.predictor->policy().score;
  }
  if (trace.header.unix_start_time > 0)
    run->epoch = static_cast<double>(trace.header.unix_start_time);
  for (size_t i = 0; i < trace.names.partitions.size(); ++i)
    run->partition_names.push_back(trace.names.partitions.name(static_cast<int32_t>(i)));
  for (size_t i = 0; i < trace.names.qos.size(); ++i)
    run->qos_names.push_back(trace.names.qos.name(static_cast<int32_t>(i)));
  for (size_t i = 0; i < trace.names.accounts.size(); ++i)
    run->account_names.push_back(trace.names.accounts.name(static_cast<int32_t>(i)));

  SimConfig cfg = setup.base(trace, Profile::STANDARD);
  const ReplaySpec& spec = setup.spec();
  if (c.nodes > 0 && spec.nodes == 0) {  // the file's nodes unless --nodes overrides
    cfg.machine.nodes = c.nodes;
    cfg.machine.cores_per_node = c.cpus_per_node;
    cfg.machine.gpus_per_node = c.gpus_per_node;
  }
  if (spec.cores_per_node > 0) cfg.machine.cores_per_node = spec.cores_per_node;
  // select/linear gives whole nodes; select/cons_tres (the default) cores.
  cfg.machine.allocation = c.whole_nodes ? Allocation::NODES : Allocation::CORES;
  check_machine_bounds(cfg.machine, label);
  cfg.record_series = record_series;
  cfg.record_jobs = record_jobs;
  cfg.slurm = run;
  cfg.policy = "slurm";
  out.run = std::move(run);
  out.cfg = std::move(cfg);
  return out;
}

SimResult replay_slurm_jobs(const SlurmReplay& s, const Trace& trace, int64_t start,
                            std::span<const Job> window) {
  const std::span<const Job> jobs(trace.jobs);
  SimConfig cfg = s.cfg;
  if (s.predictor)
    cfg.online = model_estimator(s.predictor, trace, jobs,
                                 std::clamp<int64_t>(start, 0, static_cast<int64_t>(jobs.size())),
                                 EstimateQuantile::POINT);
  return simulate(window, cfg);
}

SimResult replay_slurm_window(const SlurmReplay& s, const Trace& trace, int64_t start,
                              int64_t len) {
  return replay_slurm_jobs(s, trace, start,
                           select_window(std::span<const Job>(trace.jobs), start, len));
}

std::vector<std::string> slurm_conf_warnings(const SlurmStack& conf) {
  std::vector<std::string> out;
  if (!conf.unmodeled.empty()) {
    std::string line = "not modelled, ignored:";
    for (const auto& k : conf.unmodeled) line += " " + k;
    out.push_back(std::move(line));
  }
  // The plugin's own warnings, word for word: what slurmctld's log would say at load.
  for (const auto& w : conf.site.warnings) out.push_back("PrioritySiteFactorParameters: " + w);
  return out;
}

}  // namespace mlprio::replay
