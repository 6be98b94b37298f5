// slurm.conf for the deployed-stack replay: see slurm_conf.hpp. The syntax follows Slurm's
// parser (src/common/parse_config.c): KEY=VALUE pairs, keys in any case, '#' starts a comment,
// a trailing '\' continues the line, "Include FILE" reads another file, NodeName= and
// PartitionName= lines carry more pairs after the first.
#include "mlprio/replay/slurm_conf.hpp"

#include "mlprio/plugin/params.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

#include "mlprio/jobs/trace.hpp"
#include "mlprio/replay/simulator.hpp"

namespace mlprio::replay {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

bool parse_int(std::string_view s, int64_t& out) {
  if (s.empty()) return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool parse_double(std::string_view s, double& out) {
  if (s.empty()) return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && std::isfinite(out);
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = s.find(sep, b);
    out.push_back(s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) break;
    b = e + 1;
  }
  return out;
}

// Keys that change nothing the replay models: where daemons run, log, listen and authenticate.
constexpr std::string_view NO_EFFECT_KEYS[] = {"ClusterName",
                                               "SlurmctldHost",
                                               "ControlMachine",
                                               "ControlAddr",
                                               "BackupController",
                                               "SlurmctldPort",
                                               "SlurmdPort",
                                               "SlurmUser",
                                               "SlurmdUser",
                                               "AuthType",
                                               "AuthInfo",
                                               "AuthAltTypes",
                                               "AuthAltParameters",
                                               "CredType",
                                               "StateSaveLocation",
                                               "SlurmdSpoolDir",
                                               "SlurmctldPidFile",
                                               "SlurmdPidFile",
                                               "SlurmctldLogFile",
                                               "SlurmdLogFile",
                                               "SlurmctldDebug",
                                               "SlurmdDebug",
                                               "SlurmSchedLogFile",
                                               "SlurmSchedLogLevel",
                                               "PluginDir",
                                               "ProctrackType",
                                               "MpiDefault",
                                               "SwitchType",
                                               "TaskPlugin",
                                               "ReturnToService",
                                               "JobCompType",
                                               "JobCompLoc",
                                               "JobCompHost",
                                               "JobCompPort",
                                               "JobCompUser",
                                               "JobCompPass",
                                               "AccountingStorageHost",
                                               "AccountingStoragePort",
                                               "AccountingStoragePass",
                                               "AccountingStorageUser",
                                               "AccountingStorageTRES",
                                               "JobAcctGatherType",
                                               "JobAcctGatherFrequency",
                                               "SlurmctldTimeout",
                                               "SlurmdTimeout",
                                               "MessageTimeout",
                                               "TCPTimeout",
                                               "DebugFlags",
                                               "MailProg",
                                               "TmpFS",
                                               "GresTypes",
                                               "CommunicationParameters",
                                               "SlurmctldParameters",
                                               "LaunchParameters",
                                               "Epilog",
                                               "Prolog",
                                               "PrologFlags",
                                               "MinJobAge",
                                               "MaxJobCount",
                                               "FirstJobId",
                                               "MaxStepCount",
                                               "KeepAliveTime",
                                               "TreeWidth",
                                               "CacheGroups",
                                               "PropagateResourceLimits",
                                               "PropagateResourceLimitsExcept",
                                               "SlurmdParameters",
                                               "HealthCheckProgram",
                                               "HealthCheckInterval",
                                               "TaskProlog",
                                               "TaskEpilog",
                                               "SrunPortRange",
                                               "UnkillableStepTimeout",
                                               "CgroupPlugin",
                                               "JobContainerType",
                                               "EnforcePartLimits"};

// SchedulerParameters entries that change nothing in a replay: how a real slurmctld shares its
// locks and threads with RPCs while it schedules (the replay's cycles are never interrupted).
constexpr std::string_view NO_EFFECT_SCHED[] = {
    "bf_continue",    "bf_yield_interval",  "bf_yield_sleep",      "max_rpc_cnt",     "bf_max_time",
    "max_sched_time", "sched_min_interval", "build_queue_timeout", "bf_yield_rpc_cnt"};

bool listed(std::span<const std::string_view> keys, std::string_view k) {
  return std::any_of(keys.begin(), keys.end(), [&](std::string_view x) { return iequals(x, k); });
}

class Reader {
 public:
  explicit Reader(SlurmStack& st) : st_(st) {}

  void text(std::string_view body, const std::string& name, const std::string& dir,
            bool allow_include, int depth) {
    int64_t lineno = 0;
    std::string logical;
    int64_t first_line = 0;
    size_t pos = 0;
    while (pos <= body.size()) {
      size_t e = body.find('\n', pos);
      if (e == std::string_view::npos) e = body.size();
      std::string_view raw = body.substr(pos, e - pos);
      pos = e + 1;
      ++lineno;
      if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
      // A '#' outside quotes starts a comment ("\#" is a literal '#', as Slurm reads it).
      std::string line;
      for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] == '\\' && i + 1 < raw.size() && raw[i + 1] == '#') {
          line += '#';
          ++i;
        } else if (raw[i] == '#') {
          break;
        } else {
          line += raw[i];
        }
      }
      if (logical.empty()) first_line = lineno;
      const bool more = !line.empty() && line.back() == '\\';
      if (more) line.pop_back();
      logical += line;
      if (more && pos <= body.size()) continue;
      std::string whole = std::move(logical);
      logical.clear();
      statement(whole, name, first_line, dir, allow_include, depth);
      if (e == body.size()) break;
    }
  }

 private:
  [[noreturn]] void fail(const std::string& name, int64_t line, std::string_view key,
                         const std::string& why) const {
    throw ConfigError(name + ":" + std::to_string(line) + ": " + std::string(key) + ": " + why);
  }

  static std::vector<std::pair<std::string, std::string>> pairs(std::string_view s) {
    std::vector<std::pair<std::string, std::string>> out;
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size()) break;
      std::string key, value;
      while (i < s.size() && s[i] != '=' && !std::isspace(static_cast<unsigned char>(s[i])))
        key += s[i++];
      if (i < s.size() && s[i] == '=') {
        ++i;
        if (i < s.size() && s[i] == '"') {
          ++i;
          while (i < s.size() && s[i] != '"') value += s[i++];
          if (i < s.size()) ++i;
        } else {
          while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) value += s[i++];
        }
      }
      out.emplace_back(std::move(key), std::move(value));
    }
    return out;
  }

  void unmodeled(std::string what) {
    if (std::find(st_.unmodeled.begin(), st_.unmodeled.end(), what) == st_.unmodeled.end())
      st_.unmodeled.push_back(std::move(what));
  }

  int64_t seconds(const std::string& name, int64_t line, std::string_view key, std::string_view v,
                  bool minutes_only, bool allow_infinite) {
    int64_t s = slurm_time_seconds(v);
    if (s == -2 || (s == -1 && !allow_infinite))
      fail(name, line, key,
           "'" + std::string(v) + "' is not a Slurm time (MIN, MIN:SEC, " +
               "H:MIN:SEC, D-H, D-H:MIN or D-H:MIN:SEC)");
    // Slurm keeps these in minutes (time_str2mins rounds seconds up).
    if (minutes_only && s > 0) s = (s + 59) / 60 * 60;
    return s;
  }

  double number(const std::string& name, int64_t line, std::string_view key, std::string_view v) {
    double d = 0;
    if (!parse_double(v, d) || d < 0)
      fail(name, line, key, "'" + std::string(v) + "' is not a non-negative number");
    return d;
  }

  int64_t integer(const std::string& name, int64_t line, std::string_view key, std::string_view v,
                  int64_t lo) {
    int64_t n = 0;
    if (!parse_int(v, n) || n < lo)
      fail(name, line, key, "'" + std::string(v) + "' is not an integer >= " + std::to_string(lo));
    return n;
  }

  void statement(const std::string& s, const std::string& name, int64_t line,
                 const std::string& dir, bool allow_include, int depth) {
    auto kv = pairs(s);
    if (kv.empty()) return;
    const std::string& k0 = kv.front().first;
    if (iequals(k0, "Include") && kv.size() >= 2 && kv[0].second.empty()) {
      if (!allow_include) fail(name, line, "Include", "not read from text");
      if (depth > 8) fail(name, line, "Include", "nested more than 8 deep");
      std::string path = kv[1].first;
      if (!path.empty() && path[0] != '/') path = dir + "/" + path;
      include(path, name, line, depth + 1);
      return;
    }
    if (iequals(k0, "NodeName")) return node_line(kv, name, line);
    if (iequals(k0, "PartitionName")) return partition_line(kv, name, line);
    if (iequals(k0, "NodeSet") || iequals(k0, "FrontendName") || iequals(k0, "DownNodes") ||
        iequals(k0, "SuspendExcNodes")) {
      unmodeled(k0);
      return;
    }
    for (const auto& [k, v] : kv) key(k, v, name, line);
  }

  void include(const std::string& path, const std::string& from, int64_t line, int depth) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(from, line, "Include", "cannot read " + path);
    std::ostringstream ss;
    ss << in.rdbuf();
    bytes_ += ss.str();
    const size_t slash = path.rfind('/');
    text(ss.str(), path, slash == std::string::npos ? "." : path.substr(0, slash), true, depth);
  }

  void key(const std::string& k, const std::string& v, const std::string& name, int64_t line) {
    if (k.empty()) return;
    if (iequals(k, "PriorityType")) {
      if (iequals(v, "priority/multifactor"))
        st_.multifactor = true;
      else if (iequals(v, "priority/basic"))
        st_.multifactor = false;
      else
        fail(name, line, k,
             "'" + v + "': the replay models priority/basic and priority/multifactor");
    } else if (iequals(k, "PriorityWeightAge")) {
      st_.weight_age = number(name, line, k, v);
    } else if (iequals(k, "PriorityWeightFairshare")) {
      st_.weight_fairshare = number(name, line, k, v);
    } else if (iequals(k, "PriorityWeightJobSize")) {
      st_.weight_job_size = number(name, line, k, v);
    } else if (iequals(k, "PriorityWeightPartition")) {
      st_.weight_partition = number(name, line, k, v);
    } else if (iequals(k, "PriorityWeightQOS")) {
      st_.weight_qos = number(name, line, k, v);
    } else if (iequals(k, "PriorityWeightAssoc")) {
      st_.weight_assoc = number(name, line, k, v);
    } else if (iequals(k, "PriorityMaxAge")) {
      st_.max_age = seconds(name, line, k, v, true, false);
    } else if (iequals(k, "PriorityDecayHalfLife")) {
      st_.decay_half_life = seconds(name, line, k, v, true, false);
    } else if (iequals(k, "PriorityCalcPeriod")) {
      st_.calc_period = seconds(name, line, k, v, true, false);
      if (st_.calc_period <= 0) fail(name, line, k, "must be at least a minute");
    } else if (iequals(k, "PriorityFavorSmall")) {
      st_.favor_small = iequals(v, "yes") || iequals(v, "true") || v == "1";
    } else if (iequals(k, "PriorityFlags")) {
      for (auto f : split(v, ',')) {
        if (iequals(f, "NO_FAIR_TREE") || iequals(f, "DEPTH_OBLIVIOUS"))
          st_.fair_tree = false;
        else if (iequals(f, "FAIR_TREE"))
          st_.fair_tree = true;
        else if (iequals(f, "SMALL_RELATIVE_TO_TIME"))
          st_.small_relative_to_time = true;
        else if (!f.empty())
          unmodeled("PriorityFlags=" + std::string(f));
      }
    } else if (iequals(k, "PrioritySiteFactorPlugin")) {
      if (iequals(v, "site_factor/mlprio"))
        st_.site.enabled = true;
      else if (!v.empty() && !iequals(v, "none"))
        unmodeled(k + "=" + v);
    } else if (iequals(k, "PrioritySiteFactorParameters")) {
      st_.site.params = v;
    } else if (iequals(k, "JobSubmitPlugins")) {
      for (auto p : split(v, ',')) {
        if (iequals(p, "mlprio") || iequals(p, "job_submit/mlprio"))
          st_.job_submit_mlprio = true;
        else if (!p.empty())
          unmodeled("JobSubmitPlugins=" + std::string(p));
      }
    } else if (iequals(k, "AccountingStorageType")) {
      st_.accounting_dbd = iequals(v, "accounting_storage/slurmdbd");
    } else if (iequals(k, "SchedulerType")) {
      if (iequals(v, "sched/backfill"))
        st_.backfill = true;
      else if (iequals(v, "sched/builtin"))
        st_.backfill = false;
      else
        fail(name, line, k, "'" + v + "': the replay models sched/backfill and sched/builtin");
    } else if (iequals(k, "SchedulerParameters")) {
      sched_params(v, name, line);
    } else if (iequals(k, "OverTimeLimit")) {
      st_.over_time_limit = iequals(v, "UNLIMITED") ? -1 : integer(name, line, k, v, 0) * 60;
    } else if (iequals(k, "KillWait")) {
      st_.kill_wait = integer(name, line, k, v, 0);
    } else if (iequals(k, "SelectType")) {
      st_.whole_nodes = iequals(v, "select/linear");
      if (!iequals(v, "select/linear") && !iequals(v, "select/cons_tres") &&
          !iequals(v, "select/cons_res"))
        unmodeled(k + "=" + v);
    } else if (iequals(k, "SelectTypeParameters")) {
      // Cores, CPUs or sockets are all counted as cores here; memory is not modelled.
      for (auto p : split(v, ','))
        if (!iequals(p, "CR_Core") && !iequals(p, "CR_CPU") && !iequals(p, "CR_Core_Memory") &&
            !iequals(p, "CR_CPU_Memory") && !p.empty())
          unmodeled("SelectTypeParameters=" + std::string(p));
    } else if (listed(NO_EFFECT_KEYS, k)) {
      // where daemons run, log and listen: no effect on what is scheduled when
    } else {
      unmodeled(k);
    }
  }

  void sched_params(const std::string& v, const std::string& name, int64_t line) {
    for (auto item : split(v, ',')) {
      if (item.empty()) continue;
      const size_t eq = item.find('=');
      const std::string k = lower(item.substr(0, eq));
      const std::string_view val = eq == std::string_view::npos ? "" : item.substr(eq + 1);
      const std::string key = "SchedulerParameters=" + k;
      if (k == "sched_interval") {
        st_.sched_interval = integer(name, line, key, val, -1);
      } else if (k == "batch_sched_delay") {
        st_.batch_sched_delay = integer(name, line, key, val, 0);
      } else if (k == "default_queue_depth") {
        st_.default_queue_depth = integer(name, line, key, val, 0);
      } else if (k == "bf_interval") {
        st_.bf_interval = integer(name, line, key, val, -1);
        if (st_.bf_interval == 0) fail(name, line, key, "must not be 0 (-1 disables backfill)");
      } else if (k == "bf_window") {
        st_.bf_window = integer(name, line, key, val, 1) * 60;
      } else if (k == "bf_resolution") {
        st_.bf_resolution = integer(name, line, key, val, 1);
      } else if (k == "bf_max_job_test") {
        st_.bf_max_job_test = integer(name, line, key, val, 1);
      } else if (k == "bf_max_job_start") {
        st_.bf_max_job_start = integer(name, line, key, val, 0);
      } else if (k == "bf_min_age_reserve") {
        st_.bf_min_age_reserve = integer(name, line, key, val, 0);
      } else if (k == "bf_min_prio_reserve") {
        st_.bf_min_prio_reserve = integer(name, line, key, val, 0);
      } else if (listed(NO_EFFECT_SCHED, k)) {
        // a real controller's lock sharing: no effect on a replay's outcome
      } else {
        unmodeled("SchedulerParameters=" + k);
      }
    }
  }

  // NodeName=LIST CPUs=N (or Sockets x CoresPerSocket x ThreadsPerCore) Gres=gpu:N ...
  void node_line(const std::vector<std::pair<std::string, std::string>>& kv,
                 const std::string& name, int64_t line) {
    const bool is_default = iequals(kv.front().second, "DEFAULT");
    NodeDefaults d = node_defaults_;
    for (size_t i = 1; i < kv.size(); ++i) {
      const auto& [k, v] = kv[i];
      if (iequals(k, "CPUs") || iequals(k, "Procs")) {
        d.cpus = integer(name, line, k, v, 1);
      } else if (iequals(k, "Sockets")) {
        d.sockets = integer(name, line, k, v, 1);
      } else if (iequals(k, "CoresPerSocket")) {
        d.cores = integer(name, line, k, v, 1);
      } else if (iequals(k, "ThreadsPerCore")) {
        d.threads = integer(name, line, k, v, 1);
      } else if (iequals(k, "Boards")) {
        d.boards = integer(name, line, k, v, 1);
      } else if (iequals(k, "Gres")) {
        d.gpus = 0;
        for (auto g : split(v, ',')) {
          auto parts = split(g, ':');
          if (parts.size() >= 2 && iequals(parts[0], "gpu")) {
            int64_t n = 0;
            const std::string_view cnt = parts.back();
            if (parse_int(cnt.substr(0, cnt.find('(')), n)) d.gpus += n;
          }
        }
      } else if (iequals(k, "NodeAddr") || iequals(k, "NodeHostname") || iequals(k, "Port") ||
                 iequals(k, "State") || iequals(k, "RealMemory") || iequals(k, "TmpDisk") ||
                 iequals(k, "CpuSpecList") || iequals(k, "MemSpecLimit") ||
                 iequals(k, "CoreSpecCount") || iequals(k, "Reason")) {
        // node addresses, memory (not modelled: jobs are placed by cores) and state
      } else {
        unmodeled("NodeName:" + k);
      }
    }
    if (is_default) {
      node_defaults_ = d;
      return;
    }
    const int64_t n = slurm_hostlist_count(kv.front().second);
    if (n < 1) fail(name, line, "NodeName", "'" + kv.front().second + "' is not a host list");
    int64_t cpus = d.cpus > 0 ? d.cpus : d.boards * d.sockets * d.cores * d.threads;
    if (st_.nodes > 0 && (cpus != st_.cpus_per_node || d.gpus != st_.gpus_per_node))
      fail(name, line, "NodeName",
           "nodes with different CPU or GPU counts (" + std::to_string(cpus) + " CPUs here, " +
               std::to_string(st_.cpus_per_node) +
               " before): the replay models one kind of node; pass --nodes and "
               "--cores-per-node for an equivalent machine");
    st_.nodes += n;
    st_.cpus_per_node = cpus;
    st_.gpus_per_node = d.gpus;
  }

  void partition_line(const std::vector<std::pair<std::string, std::string>>& kv,
                      const std::string& name, int64_t line) {
    const bool is_default = iequals(kv.front().second, "DEFAULT");
    SlurmPartition p = partition_defaults_;
    p.name = kv.front().second;
    for (size_t i = 1; i < kv.size(); ++i) {
      const auto& [k, v] = kv[i];
      if (iequals(k, "MaxTime")) {
        p.max_time = seconds(name, line, k, v, true, true);
      } else if (iequals(k, "DefaultTime")) {
        p.default_time = seconds(name, line, k, v, true, true);
      } else if (iequals(k, "PriorityJobFactor")) {
        p.job_factor = number(name, line, k, v);
      } else if (iequals(k, "Default")) {
        p.is_default = iequals(v, "YES");
      } else if (iequals(k, "Nodes") || iequals(k, "State")) {
        // every partition is placed on the whole machine (see the README's limits)
      } else {
        unmodeled("PartitionName:" + k);
      }
    }
    if (is_default) {
      partition_defaults_ = p;
      partition_defaults_.name.clear();
      return;
    }
    st_.partitions.push_back(std::move(p));
  }

  struct NodeDefaults {
    int64_t cpus = 0, boards = 1, sockets = 1, cores = 1, threads = 1, gpus = 0;
  };
  SlurmStack& st_;
  NodeDefaults node_defaults_;
  SlurmPartition partition_defaults_;

 public:
  std::string bytes_;
};

// The plugin's parameters that shape SITE and a filled limit (the plugin's own syntax:
// "key=value,key=value", unknown keys and bad values warned about and ignored).
// The parameters as the plugins read them (the same table, mlprio/plugin/params.hpp): a value
// the plugin refuses keeps its default here too, and its warning is the replay's.
void read_site_params(SlurmSiteFactor& s) {
  const plugin::ParseResult r = plugin::parse_params(s.params);
  const plugin::Params& p = r.params;
  s.model = p.model;
  s.weight = p.weight;
  s.max_boost = p.max_boost;
  s.shadow = p.mode == MLPRIO_MODE_SHADOW;
  s.limit_margin = p.limit_margin;
  s.override_default_time = p.override_default_time;
  s.history_period_ms = p.history_period_ms;
  s.scope_partitions = p.scope_partitions;
  s.scope_qos = p.scope_qos;
  s.scope_accounts = p.scope_accounts;
  // The other keys (refusals, the LLM advisor, FSDP advice, budgets, reload timing) change no
  // start time in the replay: a refused job is one the trace says ran.
  for (const auto& w : r.warnings) s.warnings.push_back(w);
}

void finish(SlurmStack& st) {
  if (st.site.enabled || st.job_submit_mlprio) read_site_params(st.site);
  if (!st.multifactor) {
    st.site.enabled = false;  // priority/basic calls no site factor plugin
  }
  if (!st.accounting_dbd) {
    // priority/multifactor's init: without slurmdbd, age and fair share are forced off.
    st.weight_age = 0;
    st.weight_fairshare = 0;
  }
  if (st.bf_resolution > 3600) st.bf_resolution = 3600;
  if (st.bf_window > 43200 * 60) st.bf_window = 43200 * 60;
}

}  // namespace

int64_t slurm_time_seconds(std::string_view t) {
  if (iequals(t, "INFINITE") || iequals(t, "UNLIMITED") || t == "-1") return -1;
  if (t.empty()) return -2;
  int64_t days = 0;
  std::string_view rest = t;
  const size_t dash = t.find('-');
  const bool has_days = dash != std::string_view::npos;
  if (has_days) {
    if (!parse_int(t.substr(0, dash), days) || days < 0) return -2;
    rest = t.substr(dash + 1);
  }
  auto parts = split(rest, ':');
  if (parts.size() > 3) return -2;
  int64_t v[3] = {0, 0, 0};
  for (size_t i = 0; i < parts.size(); ++i)
    if (!parse_int(parts[i], v[i]) || v[i] < 0) return -2;
  if (has_days) {  // D-H, D-H:M, D-H:M:S
    return days * 86400 + v[0] * 3600 + v[1] * 60 + v[2];
  }
  switch (parts.size()) {
    case 1:
      return v[0] * 60;  // MIN
    case 2:
      return v[0] * 60 + v[1];  // MIN:SEC
    default:
      return v[0] * 3600 + v[1] * 60 + v[2];  // H:MIN:SEC
  }
}

int64_t slurm_hostlist_count(std::string_view s) {
  int64_t total = 0;
  size_t i = 0;
  while (i < s.size()) {
    // One name: text with at most one [...] range list at a time (several are multiplied).
    int64_t count = 1;
    bool any = false;
    while (i < s.size() && s[i] != ',') {
      if (s[i] == '[') {
        const size_t close = s.find(']', i);
        if (close == std::string_view::npos) return -1;
        int64_t n = 0;
        for (auto r : split(s.substr(i + 1, close - i - 1), ',')) {
          const size_t dash = r.find('-');
          int64_t a = 0, b = 0;
          if (dash == std::string_view::npos) {
            if (!parse_int(r, a)) return -1;
            n += 1;
          } else {
            if (!parse_int(r.substr(0, dash), a) || !parse_int(r.substr(dash + 1), b) || b < a)
              return -1;
            n += b - a + 1;
          }
        }
        count *= n;
        i = close + 1;
      } else {
        ++i;
      }
      any = true;
    }
    if (!any) return -1;
    total += count;
    if (i < s.size()) ++i;  // the ','
  }
  return total;
}

const SlurmPartition* SlurmStack::default_partition() const {
  for (const auto& p : partitions)
    if (p.is_default) return &p;
  return partitions.empty() ? nullptr : &partitions.front();
}

const SlurmPartition* SlurmStack::partition(std::string_view name) const {
  for (const auto& p : partitions)
    if (p.name == name) return &p;
  return nullptr;
}

std::string SlurmStack::describe() const {
  std::ostringstream o;
  o << "scheduler=slurm priority=" << (multifactor ? "multifactor" : "basic");
  if (multifactor)
    o << " weight_age=" << weight_age << " weight_fairshare=" << weight_fairshare
      << " weight_job_size=" << weight_job_size << " weight_partition=" << weight_partition
      << " max_age=" << max_age << " calc_period=" << calc_period
      << " favor_small=" << (favor_small ? 1 : 0) << " fair_tree=" << (fair_tree ? 1 : 0)
      << " site=" << (site.enabled ? (site.shadow ? "mlprio-shadow" : "mlprio") : "none");
  if (site.enabled) o << " site_weight=" << site.weight << " site_model=" << site.model;
  o << " job_submit=" << (job_submit_mlprio ? "mlprio" : "none")
    << " sched=" << (backfill ? "backfill" : "builtin") << " sched_interval=" << sched_interval
    << " batch_sched_delay=" << batch_sched_delay;
  if (backfill)
    o << " bf_interval=" << bf_interval << " bf_window=" << bf_window
      << " bf_resolution=" << bf_resolution << " bf_max_job_test=" << bf_max_job_test;
  if (!sha256.empty()) o << " slurm_conf_sha256=" << sha256;
  return o.str();
}

SlurmStack parse_slurm_conf(std::string_view text, const std::string& name) {
  SlurmStack st;
  Reader r(st);
  r.text(text, name, ".", false, 0);
  finish(st);
  return st;
}

SlurmStack read_slurm_conf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("--slurm-conf " + path + ": cannot read the file");
  std::ostringstream ss;
  ss << in.rdbuf();
  SlurmStack st;
  st.path = path;
  Reader r(st);
  r.bytes_ = ss.str();
  const size_t slash = path.rfind('/');
  r.text(ss.str(), path, slash == std::string::npos ? "." : path.substr(0, slash), true, 0);
  finish(st);
  st.sha256 = bytes_sha256(r.bytes_);
  return st;
}

}  // namespace mlprio::replay
