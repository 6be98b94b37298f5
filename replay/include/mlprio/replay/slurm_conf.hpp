// What a slurmctld configured by one slurm.conf does when it orders and starts jobs, read from
// that file for the deployed-stack replay (`mlprio-replay run --slurm-conf FILE`, simulated by
// slurm_engine.cpp): priority/basic or priority/multifactor with its weights, the SITE term of
// site_factor/mlprio with the parameters and model file the file names, job_submit/mlprio's
// filled time limits, sched/builtin or sched/backfill with the SchedulerParameters that change
// outcomes, and the nodes and partitions. Defaults are Slurm's own (src/common/read_config.c,
// the backfill plugin's _load_config) for releases 23.11-26.05; 22.05 differs in one default
// (PriorityType=priority/basic), so a file meant for it should name PriorityType. Keys that do
// not change what the replay models (daemons, logs, ports, authentication) are accepted as
// such; every other key, and every SchedulerParameters entry the replay does not model, is
// listed in SlurmStack::unmodeled for one warning.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mlprio/model/predictor.hpp"

namespace mlprio::replay {

// Slurm's INFINITE time limit (an unlimited partition MaxTime): the scheduler plans such a job
// for a year (YEAR_MINUTES in Slurm's backfill).
inline constexpr int64_t SLURM_YEAR_SECONDS = 365LL * 24 * 3600;

struct SlurmPartition {
  std::string name;
  int64_t max_time = -1;      // seconds; -1 = INFINITE
  int64_t default_time = -1;  // seconds; -1 = none (MaxTime applies)
  double job_factor = 1;      // PriorityJobFactor
  bool is_default = false;
};

// PrioritySiteFactorPlugin=site_factor/mlprio with PrioritySiteFactorParameters: the keys that
// change SITE or a filled time limit, read with the syntax and defaults of the plugin's own
// parser (slurm_plugin/abi: parse_params). The replay does not link the plugin library, so this
// is a second reading of those keys; no test compares the two yet.
struct SlurmSiteFactor {
  bool enabled = false;  // the plugin is loaded
  std::string params;    // PrioritySiteFactorParameters as written
  std::string model;     // model=PATH
  double weight = 10000.0;
  int64_t max_boost = 100000;
  bool shadow = false;  // mode=shadow: computed and logged, nothing applied
  double limit_margin = 0.25;
  bool override_default_time = false;
  int64_t history_period_ms = 30000;  // how often the live history learns ended jobs; 0 = never
  std::vector<std::string> scope_partitions, scope_qos, scope_accounts;  // lower case
  std::vector<std::string> warnings;  // keys or values the plugin would warn about and ignore
};

struct SlurmStack {
  std::string path;    // the file read ("" for text)
  std::string sha256;  // of the file's bytes (with its Include files in order)

  // PriorityType and priority/multifactor's parameters (seconds for times).
  bool multifactor = true;      // false: priority/basic (first come, first served)
  bool accounting_dbd = false;  // AccountingStorageType=accounting_storage/slurmdbd
  double weight_age = 0, weight_fairshare = 0, weight_job_size = 0, weight_partition = 0,
         weight_qos = 0, weight_assoc = 0;
  int64_t max_age = 7 * 86400;
  int64_t decay_half_life = 7 * 86400;
  int64_t calc_period = 300;
  bool favor_small = false;
  bool fair_tree = true;  // PriorityFlags: FAIR_TREE unless NO_FAIR_TREE or DEPTH_OBLIVIOUS
  bool small_relative_to_time = false;
  SlurmSiteFactor site;
  bool job_submit_mlprio = false;  // JobSubmitPlugins lists mlprio

  // SchedulerType and SchedulerParameters (seconds for times; a negative interval disables).
  bool backfill = true;  // sched/backfill (the default); false: sched/builtin
  int64_t sched_interval = 60;
  int64_t batch_sched_delay = 3;
  int64_t default_queue_depth = 100;
  int64_t bf_interval = 30;
  int64_t bf_window = 1440 * 60;
  int64_t bf_resolution = 60;
  int64_t bf_max_job_test = 500;
  int64_t bf_max_job_start = 0;    // 0 = no limit
  int64_t bf_min_age_reserve = 0;  // seconds a job waits before backfill reserves for it
  int64_t bf_min_prio_reserve = 0;
  int64_t over_time_limit = 0;  // OverTimeLimit, seconds past the limit before the kill
  int64_t kill_wait = 30;       // KillWait

  // Nodes (NodeName lines; 0 when the file has none: the trace's machine) and partitions.
  int64_t nodes = 0;
  int64_t cpus_per_node = 0;
  int64_t gpus_per_node = 0;
  bool whole_nodes = false;  // SelectType=select/linear: jobs get whole nodes
  std::vector<SlurmPartition> partitions;

  // Keys (and "SchedulerParameters=NAME" entries) read but not modelled, in file order.
  std::vector<std::string> unmodeled;

  // The default partition (the one marked Default=YES, else the first); null without any.
  const SlurmPartition* default_partition() const;
  const SlurmPartition* partition(std::string_view name) const;  // case-sensitive, as Slurm
  // "scheduler=slurm priority=... sched=... bf_interval=..." for provenance and run names.
  std::string describe() const;
};

// One deployed-stack replay's input beside the jobs (SimConfig::slurm): the configuration, the
// policy of the model file PrioritySiteFactorParameters names (its score settings), and the
// trace's names by interned id (Job::partition, ::qos, ::account) for partitions and scope.
struct SlurmRun {
  SlurmStack conf;
  // The Unix time of the trace's time 0 (its header's UnixStartTime; 0 when it has none):
  // backfill's reservations begin and end on bf_resolution slots of slurmctld's clock.
  double epoch = 0;
  // A reservation's end rounded up to its slot (24.11 on, _set_slot_time) or down (up to 24.05).
  bool reservation_end_up = true;
  model::ScoreConfig site_score;
  std::vector<std::string> partition_names, qos_names, account_names;
};

// Reads FILE (and the files its Include lines name, relative to FILE's folder). Throws
// ConfigError "FILE:LINE: KEY: why" for a value Slurm would refuse, or a file it cannot read.
SlurmStack read_slurm_conf(const std::string& path);
// The same from text; `name` stands for the file in messages and Include lines are refused.
SlurmStack parse_slurm_conf(std::string_view text, const std::string& name);

// A Slurm time value (PriorityMaxAge, MaxTime, ...) in seconds: "MIN", "MIN:SEC", "H:MIN:SEC",
// "D-H", "D-H:MIN", "D-H:MIN:SEC"; INFINITE/UNLIMITED give -1. Returns -2 when malformed.
int64_t slurm_time_seconds(std::string_view text);
// How many names a Slurm host list holds ("n[1-4,7],gpu01" -> 6); -1 when malformed.
int64_t slurm_hostlist_count(std::string_view text);

}  // namespace mlprio::replay
