// The MPI-independent half of `mlprio-replay sweep`: window draws, task expansion, one task's
// replay, the journal that makes sweeps resumable and the serial loop. The
// MPI master/worker in sweep_mpi.cpp reuses all of it, so one process and N ranks produce the
// same bytes: results travel as journal lines whose numbers are C99 hex floats (exact).
// The journal's writer and its reader stay in one file so that they change together; the output
// writers are in sweep_output.cpp.
#include "mlprio/replay/dist/sweep_run.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <type_traits>
#include <unordered_set>

#include "mlprio/io/hdf5.hpp"
#include "mlprio/replay/dist/sweep_windows.hpp"
#include "mlprio/replay/output.hpp"
#include "mlprio/util/checked_cast.hpp"
#include "mlprio/util/errors.hpp"
#include "mlprio/util/stop_signal.hpp"
#include "mlprio/util/text.hpp"
#include "sweep_internal.hpp"

namespace mlprio::replay::dist {

std::vector<int64_t> draw_window_starts(int64_t count, int64_t len, int64_t trace_jobs,
                                        uint64_t seed, const std::vector<int64_t>& taken) {
  if (count <= 0 || len <= 0)
    throw SweepError("--windows COUNTxLEN needs COUNT > 0 and LEN > 0, e.g. 100x1024");
  if (count > MAX_SWEEP_TASKS)
    throw SweepError("--windows: " + std::to_string(count) + " windows is more than the bound of " +
                     std::to_string(MAX_SWEEP_TASKS) + " tasks per sweep (MAX_SWEEP_TASKS)");
  if (len > trace_jobs)
    throw SweepError("--windows: windows of " + std::to_string(len) +
                     " jobs do not fit a trace of " + std::to_string(trace_jobs) + " jobs");
  const int64_t positions = trace_jobs - len + 1;  // starts 0 .. N - LEN
  std::unordered_set<int64_t> used;
  for (int64_t t : taken)
    if (t >= 0 && t < positions) used.insert(t);
  const auto given = static_cast<int64_t>(used.size());
  if (count > positions - given)
    throw SweepError(
        "--windows " + std::to_string(count) + "x" + std::to_string(len) + ": only " +
        std::to_string(positions) + " distinct windows of " + std::to_string(len) +
        " jobs fit a trace of " + std::to_string(trace_jobs) + " jobs (starts 0.." +
        std::to_string(positions - 1) + ")" +
        (given > 0 ? ", " + std::to_string(given) + " of them already given by --window"
                   : std::string()) +
        "; ask for at most " + std::to_string(positions - given) + " or for shorter windows");
  // Rejection of repeats: at most `positions` distinct values exist and count <= positions, so
  // the expected number of draws is at most positions x H(positions) (14 M for a million).
  SplitMix64 rng(seed);
  std::vector<int64_t> starts;
  starts.reserve(static_cast<size_t>(count));
  used.reserve(static_cast<size_t>(count + given));
  while (static_cast<int64_t>(starts.size()) < count) {
    const auto s = static_cast<int64_t>(rng.below(static_cast<uint64_t>(positions)));
    if (used.insert(s).second) starts.push_back(s);
  }
  return starts;
}

namespace {

// A whole decimal number, all of `s` (no sign, space or trailing text); the callers turn the
// exception into a message with an example.
int64_t parse_int(const std::string& s) {
  const auto v = util::parse_int(s);
  if (!v) throw ::mlprio::UsageError("not a whole number");
  return *v;
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016" PRIx64, v);
  return b;
}

std::string hexfloat(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%a", v);
  return b;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

// Appends the checksum of everything before it, so a torn or edited line is recognised.
std::string seal(const std::string& body) {
  return body + "\t" + hex64(fnv1a(body)) + "\n";
}

std::string fmt_num(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

}  // namespace

std::pair<int64_t, int64_t> parse_window_arg(const std::string& w) {
  const auto colon = w.find(':');
  try {
    if (colon == std::string::npos) throw ::mlprio::UsageError("no colon");
    const int64_t start = parse_int(w.substr(0, colon));
    const int64_t len = parse_int(w.substr(colon + 1));
    if (start < 0 || len <= 0) throw ::mlprio::UsageError("range");
    return {start, len};
  } catch (const std::exception&) {
    throw SweepError("window '" + w +
                     "': expected START:LEN with START >= 0 and LEN > 0, e.g. 1981:1024");
  }
}

std::pair<int64_t, int64_t> parse_windows_arg(const std::string& w) {
  const auto x = w.find('x');
  try {
    if (x == std::string::npos) throw ::mlprio::UsageError("no x");
    const int64_t count = parse_int(w.substr(0, x));
    const int64_t len = parse_int(w.substr(x + 1));
    if (count <= 0 || len <= 0) throw ::mlprio::UsageError("range");
    return {count, len};
  } catch (const std::exception&) {
    throw SweepError("--windows '" + w + "': expected COUNTxLEN with both > 0, e.g. 100x1024");
  }
}

namespace {

// What a sweep needs before anything is read: a trace, something to run, windows.
void check_sweep_spec(const SweepSpec& spec) {
  if (spec.traces.empty())
    throw SweepError("a sweep needs at least one trace (--trace or traces = [...])");
  if ((spec.policies.empty() || spec.backfills.empty()) && spec.slurm_confs.empty())
    throw SweepError(
        "a sweep needs at least one policy and one backfilling rule, or a --slurm-conf");
  if (spec.windows.empty() && spec.random_count <= 0)
    throw SweepError(
        "give windows: --window START:LEN (repeatable) or --windows COUNTxLEN --seed S");
}

// Checks the policies' names (UnknownPolicyError before loading) and sets `any_agent` when one is
// an agent's; returns the backfilling rules parsed.
std::vector<Backfill> check_policies_and_backfills(const SweepSpec& spec, const ReplaySetup& setup,
                                                   bool& any_agent) {
  PolicyOptions agent_opts;
  agent_opts.agent = spec.agent;
  any_agent = false;
  for (const auto& p : spec.policies) {  // UnknownPolicyError before loading
    if (p != "ml" || !setup.online()) make_policy(p, agent_opts);
    any_agent |= is_agent_policy(p);
  }
  std::vector<Backfill> backfills;
  for (const auto& b : spec.backfills) {
    backfills.push_back(parse_backfill(b));
    if (backfills.back() == Backfill::RLSCHEDULER)
      throw SweepError("sweeps use the standard profile; backfill 'rlscheduler' is run's only");
  }
  return backfills;
}

// Deployed-stack tasks: every file read (and its model loaded) before the traces.
void load_slurm_confs(SweepPlan& plan, const SweepSpec& spec) {
  if (spec.slurm_confs.empty()) return;
  plan.slurm_release = parse_slurm_release(spec.slurm_release);
  plan.slurm_models = std::make_shared<SlurmModelCache>();
  for (const auto& path : spec.slurm_confs) {
    plan.slurm.push_back(read_slurm_conf(path));
    const SlurmStack& c = plan.slurm.back();
    if (((c.multifactor && c.site.enabled) || c.job_submit_mlprio) && !c.site.model.empty())
      plan.slurm_models->get(c.site.model);
  }
}

// Every count that sizes the plan is bounded before anything is expanded: the parameter grid,
// then the tasks (traces x policies x parameter sets x backfills x windows), in double so the
// product itself cannot overflow.
void check_plan_size(const SweepSpec& spec) {
  const auto over_bound = [](const std::string& what, double n) {
    if (n > static_cast<double>(MAX_SWEEP_TASKS))
      throw SweepError("the sweep's " + what + " come to " + number_text(n) +
                       ", more than the bound of " + std::to_string(MAX_SWEEP_TASKS) +
                       " (MAX_SWEEP_TASKS); use fewer values or split the sweep");
  };
  const double grid = static_cast<double>(spec.weight_age.size()) *
                      static_cast<double>(spec.weight_job_size.size()) *
                      static_cast<double>(spec.weight_fairshare.size()) *
                      static_cast<double>(spec.max_age.size()) *
                      static_cast<double>(spec.decay_half_life.size());
  over_bound("multifactor parameter sets (the product of the weight lists' lengths)", grid);
  double per_trace = 0;
  for (const auto& p : spec.policies) per_trace += p == "multifactor" ? grid : 1.0;
  per_trace *= static_cast<double>(spec.backfills.size());
  per_trace += static_cast<double>(spec.slurm_confs.size());
  const double windows = static_cast<double>(spec.windows.size()) +
                         static_cast<double>(std::max<int64_t>(0, spec.random_count));
  over_bound(
      "tasks (traces x (policies x parameter sets x backfills + slurm.conf files) x "
      "windows)",
      static_cast<double>(spec.traces.size()) * per_trace * windows);
}

// Parameter sets: the multifactor grid (a single set for orders that take no weights).
void add_param_grid(SweepPlan& plan, const SweepSpec& spec) {
  for (double a : spec.weight_age)
    for (double j : spec.weight_job_size)
      for (double f : spec.weight_fairshare)
        for (double m : spec.max_age)
          for (double h : spec.decay_half_life) {
            PolicyOptions o;
            o.weight_age = a;
            o.weight_job_size = j;
            o.weight_fairshare = f;
            o.max_age = m;
            o.decay_half_life = h;
            o.favor_small = spec.favor_small;
            o.agent = spec.agent;
            plan.params.push_back(o);
          }
}

// What decides the tasks' results besides their keys: the replay setup, the traces and their
// machines, the agent's settings and the slurm.conf files' contents.
std::string plan_fingerprint(const SweepPlan& plan, const SweepSpec& spec, const ReplaySetup& setup,
                             bool any_agent) {
  std::ostringstream fp;
  fp << setup.describe();
  for (size_t t = 0; t < plan.traces.size(); ++t)
    fp << " trace" << t << "=" << spec.traces[t] << "(" << plan.traces[t].jobs.size() << " jobs, "
       << plan.machines[t].nodes << "x" << plan.machines[t].cores_per_node << ")";
  if (any_agent) {  // the agent's settings decide its tasks' results too
    const AgentOptions& a = spec.agent;
    fp << " external_base=" << a.base << " external_timeout=" << fmt_num(a.timeout)
       << " external_every=" << a.every << " llm_prompt=" << a.llm_prompt_file
       << " llm_top=" << a.llm_top << " llm_model=" << a.llm_model;
  }
  if (!plan.slurm.empty()) {  // a journal of other files (or another release) is refused
    fp << " slurm_release=" << spec.slurm_release;
    for (size_t i = 0; i < plan.slurm.size(); ++i)
      fp << " slurm_conf" << i << "=" << spec.slurm_confs[i] << "(" << plan.slurm[i].sha256 << ")";
  }
  return fp.str();
}

// A trace's windows: the explicit ones, then the random draws, which avoid each other and the
// explicit windows of the same length.
std::vector<std::pair<int64_t, int64_t>> trace_windows(const SweepSpec& spec, int64_t n) {
  std::vector<std::pair<int64_t, int64_t>> windows = spec.windows;
  if (spec.random_count > 0) {
    std::vector<int64_t> taken;
    for (const auto& [start, len] : spec.windows)
      if (len == spec.random_len) taken.push_back(start);
    for (int64_t s : draw_window_starts(spec.random_count, spec.random_len, n, spec.seed, taken))
      windows.emplace_back(s, spec.random_len);
  }
  return windows;
}

// Trace t's tasks of one policy: every parameter set (multifactor's) x backfill x window.
void add_policy_tasks(SweepPlan& plan, size_t t, const std::string& policy,
                      const std::vector<Backfill>& backfills,
                      const std::vector<std::pair<int64_t, int64_t>>& windows, int64_t n) {
  const SweepSpec& spec = plan.spec;
  const int nparams = policy == "multifactor" ? static_cast<int>(plan.params.size()) : 1;
  for (int p = 0; p < nparams; ++p)
    for (Backfill b : backfills)
      for (const auto& [start, len] : windows) {
        SweepTask task;
        task.id = static_cast<int64_t>(plan.tasks.size());
        task.trace = static_cast<int>(t);
        task.policy = policy;
        task.backfill = b;
        task.params = p;
        task.window_start = start;
        task.window_len = len;
        const double jobs = static_cast<double>(std::max<int64_t>(0, std::min(len, n - start)));
        // Conservative keeps a reservation profile; dynamic orders re-sort every pass.
        task.cost =
            jobs * (b == Backfill::CONSERVATIVE ? 3.0 : 1.0) *
            (policy == "ml" || is_agent_policy(policy) || make_policy(policy)->dynamic() ? 2.0
                                                                                         : 1.0);
        std::ostringstream key;
        key << "trace=" << spec.traces[t] << " policy=" << policy;
        if (policy == "multifactor") {
          const PolicyOptions& o = plan.params[static_cast<size_t>(p)];
          key << " age=" << fmt_num(o.weight_age) << " size=" << fmt_num(o.weight_job_size)
              << " fairshare=" << fmt_num(o.weight_fairshare) << " max_age=" << fmt_num(o.max_age)
              << " half_life=" << fmt_num(o.decay_half_life) << " favor_small=" << o.favor_small;
        }
        key << " backfill=" << backfill_name(b) << " window=" << start << ":" << len;
        task.key = key.str();
        plan.tasks.push_back(std::move(task));
      }
}

// Trace t's deployed-stack tasks: every slurm.conf x window.
void add_slurm_tasks(SweepPlan& plan, size_t t,
                     const std::vector<std::pair<int64_t, int64_t>>& windows, int64_t n) {
  const SweepSpec& spec = plan.spec;
  for (size_t c = 0; c < plan.slurm.size(); ++c)
    for (const auto& [start, len] : windows) {
      SweepTask task;
      task.id = static_cast<int64_t>(plan.tasks.size());
      task.trace = static_cast<int>(t);
      task.policy = std::filesystem::path(spec.slurm_confs[c]).filename().string();
      task.slurm = static_cast<int>(c);
      task.window_start = start;
      task.window_len = len;
      // slurmctld's schedulers plan every tested job and re-sort on every calculation.
      task.cost = 4.0 * static_cast<double>(std::max<int64_t>(0, std::min(len, n - start)));
      task.key = "trace=" + spec.traces[t] + " slurm_conf=" + spec.slurm_confs[c] +
                 " window=" + std::to_string(start) + ":" + std::to_string(len);
      plan.tasks.push_back(std::move(task));
    }
}

}  // namespace

SweepPlan make_sweep_plan(const SweepSpec& spec) {
  SweepPlan plan;
  plan.spec = spec;
  check_sweep_spec(spec);
  // The replay options are checked and --estimate model:FILE is loaded (once per rank) before the
  // traces, so a bad file fails fast; 'ml' needs the model (make_policy says so otherwise).
  plan.setup = std::make_shared<const ReplaySetup>(spec.replay);
  const ReplaySetup& setup = *plan.setup;
  bool any_agent = false;
  const std::vector<Backfill> backfills = check_policies_and_backfills(spec, setup, any_agent);
  load_slurm_confs(plan, spec);
  plan.base.record_jobs = spec.per_job;
  plan.base.record_series = spec.per_job;
  check_plan_size(spec);
  add_param_grid(plan, spec);

  for (const auto& path : spec.traces) {
    ReadOptions ro;
    plan.traces.push_back(load_trace(path, ro));
    plan.machines.push_back(setup.machine(plan.traces.back()));
  }
  plan.fingerprint = plan_fingerprint(plan, spec, setup, any_agent);

  for (size_t t = 0; t < plan.traces.size(); ++t) {
    const auto n = static_cast<int64_t>(plan.traces[t].jobs.size());
    const std::vector<std::pair<int64_t, int64_t>> windows = trace_windows(spec, n);
    for (const auto& policy : spec.policies)
      add_policy_tasks(plan, t, policy, backfills, windows, n);
    add_slurm_tasks(plan, t, windows, n);
  }
  // Keys name tasks in the journal; a repeated window (given twice with --window) would make two
  // tasks one. The index is built here, once, for every lookup by key.
  plan.task_ids.reserve(plan.tasks.size());
  for (const auto& t : plan.tasks)
    if (!plan.task_ids.emplace(t.key, t.id).second)
      throw SweepError("the sweep lists the same task twice: " + t.key +
                       " (a window given twice with --window or in the config's windows?)");
  return plan;
}

int64_t find_task(const SweepPlan& plan, const std::string& key) {
  const auto it = plan.task_ids.find(key);
  return it == plan.task_ids.end() ? -1 : it->second;
}

std::vector<int64_t> dispatch_order(const SweepPlan& plan) {
  std::vector<int64_t> ids;
  for (const auto& t : plan.tasks) ids.push_back(t.id);
  std::stable_sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) {
    return plan.tasks[static_cast<size_t>(a)].cost > plan.tasks[static_cast<size_t>(b)].cost;
  });
  return ids;
}

namespace {

void keep_result(TaskResult& r, SimResult res, bool per_job) {
  r.summary = res.summary;
  if (per_job) {
    r.has_detail = true;
    r.jobs = std::move(res.jobs);
    r.users = std::move(res.users);
    r.series = std::move(res.series);
    r.agent = res.agent;
  }
  r.ok = true;
}

}  // namespace

TaskResult run_task(const SweepPlan& plan, const SweepTask& task) {
  TaskResult r;
  r.task = task.id;
  try {
    const Trace& trace = plan.traces[static_cast<size_t>(task.trace)];
    if (task.slurm >= 0) {
      const auto c = static_cast<size_t>(task.slurm);
      const SlurmReplay prepared =
          prepare_slurm_replay(plan.slurm[c], plan.slurm_release, trace, *plan.setup,
                               "--slurm-conf " + plan.spec.slurm_confs[c], *plan.slurm_models,
                               plan.spec.per_job, plan.spec.per_job);
      keep_result(r, replay_slurm_window(prepared, trace, task.window_start, task.window_len),
                  plan.spec.per_job);
      return r;
    }
    SimConfig cfg = plan.setup->base(trace);
    cfg.record_jobs = plan.base.record_jobs;
    cfg.record_series = plan.base.record_series;
    cfg.policy = task.policy;
    cfg.policy_options = plan.params[static_cast<size_t>(task.params)];
    cfg.backfill = task.backfill;
    const std::span<const Job> jobs(trace.jobs);
    plan.setup->apply_window(cfg, trace, jobs, task.window_start, task.window_len);
    keep_result(r, simulate(select_window(jobs, task.window_start, task.window_len), cfg),
                plan.spec.per_job);
  } catch (const std::exception& e) {
    r.ok = false;
    r.error = e.what();
  }
  return r;
}

namespace {
// The summary's numbers in journal order (hex floats, so a resumed sweep gets the same bits).
constexpr size_t N_SUMMARY_DOUBLES = 12;
std::array<double*, N_SUMMARY_DOUBLES> summary_doubles(Summary& s) {
  return {&s.avg_wait, &s.avg_bsld,     &s.avg_turnaround, &s.utilization,
          &s.makespan, &s.first_submit, &s.last_end,       &s.max_wait,
          &s.p95_wait, &s.p99_wait,     &s.max_user_bsld,  &s.jain_user_bsld};
}
}  // namespace

std::string result_line(const SweepPlan& plan, const TaskResult& r) {
  const SweepTask& t = plan.tasks.at(static_cast<size_t>(r.task));
  std::string body = "R\t" + t.key;
  if (r.ok) {
    const Summary& s = r.summary;
    body += "\tok\t" + std::to_string(s.jobs) + "\t" + std::to_string(s.skipped) + "\t" +
            std::to_string(s.killed) + "\t" + std::to_string(s.estimates_raised);
    Summary copy = s;
    for (double* v : summary_doubles(copy)) body += "\t" + hexfloat(*v);
  } else {
    std::string msg = r.error;
    for (char& c : msg)
      if (c == '\t' || c == '\n' || c == '\r') c = ' ';
    body += "\tfailed\t" + msg;
  }
  return seal(body);
}

std::string started_line(const SweepPlan& plan, int64_t task, int rank) {
  return seal("S\t" + plan.tasks.at(static_cast<size_t>(task)).key + "\t" + std::to_string(rank));
}

namespace {

static_assert(std::is_trivially_copyable_v<JobOutcome> &&
              std::is_trivially_copyable_v<UserSummary>);

template <class T>
void put_array(std::string& out, const std::vector<T>& v) {
  const auto n = static_cast<uint64_t>(v.size());
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  if (n > 0) out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <class T>
void get_array(std::string_view& in, std::vector<T>& v) {
  uint64_t n = 0;
  if (in.size() < sizeof n) throw SweepError("per-job detail message is truncated");
  std::memcpy(&n, in.data(), sizeof n);
  in.remove_prefix(sizeof n);
  if (n > in.size() / sizeof(T)) throw SweepError("per-job detail message is truncated");
  v.resize(static_cast<size_t>(n));
  if (n > 0) std::memcpy(v.data(), in.data(), static_cast<size_t>(n) * sizeof(T));
  in.remove_prefix(static_cast<size_t>(n) * sizeof(T));
}

}  // namespace

std::string encode_detail(const TaskResult& r) {
  std::string out;
  put_array(out, r.jobs);
  put_array(out, r.users);
  put_array(out, r.series.time);
  put_array(out, r.series.queue_length);
  put_array(out, r.series.busy_cores);
  put_array(out, r.series.mean_bsld);
  put_array(out, std::vector<AgentStats>{r.agent});
  return out;
}

void decode_detail(std::string_view bytes, TaskResult& r) {
  get_array(bytes, r.jobs);
  get_array(bytes, r.users);
  get_array(bytes, r.series.time);
  get_array(bytes, r.series.queue_length);
  get_array(bytes, r.series.busy_cores);
  get_array(bytes, r.series.mean_bsld);
  std::vector<AgentStats> agent;
  get_array(bytes, agent);
  if (agent.size() != 1) throw SweepError("per-job detail message lacks the agent counts");
  r.agent = agent.front();
  if (!bytes.empty()) throw SweepError("per-job detail message has trailing bytes");
  r.has_detail = true;
}

namespace {

// Strips and checks the checksum; nullopt for a torn line.
std::optional<std::vector<std::string>> unseal(const std::string& line) {
  std::string l = line;
  if (!l.empty() && l.back() == '\n') l.pop_back();
  const auto tab = l.rfind('\t');
  if (tab == std::string::npos) return std::nullopt;
  if (l.substr(tab + 1) != hex64(fnv1a(l.substr(0, tab)))) return std::nullopt;
  return split(l.substr(0, tab), '\t');
}

// A whole decimal field of a journal line (all of it), or nullopt.
template <class Int>
std::optional<Int> whole_field(const std::string& s) {
  Int v{};
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

// A result record's fields (checksum already checked) against the plan: nullopt when it is not
// one of this plan's tasks or a field does not read back (never throws).
std::optional<TaskResult> result_from_fields(const SweepPlan& plan,
                                             const std::vector<std::string>& f) {
  if (f.size() < 4 || f[0] != "R") return std::nullopt;
  TaskResult r;
  r.task = find_task(plan, f[1]);
  if (r.task < 0) return std::nullopt;
  if (f[2] == "failed") {
    r.ok = false;
    r.error = f[3];
    return r;
  }
  if (f[2] != "ok" || f.size() != 7 + N_SUMMARY_DOUBLES) return std::nullopt;
  r.ok = true;
  Summary& s = r.summary;
  int64_t* counts[] = {&s.jobs, &s.skipped, &s.killed, &s.estimates_raised};
  for (size_t i = 0; i < 4; ++i) {
    const auto v = whole_field<int64_t>(f[3 + i]);
    if (!v) return std::nullopt;
    *counts[i] = *v;
  }
  const auto d = summary_doubles(s);
  for (size_t i = 0; i < d.size(); ++i) {
    const std::string& text = f[7 + i];
    char* end = nullptr;
    *d[i] = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size()) return std::nullopt;
  }
  return r;
}

}  // namespace

std::optional<TaskResult> Journal::parse_result(const SweepPlan& plan, const std::string& line) {
  const auto f = unseal(line);
  if (!f) return std::nullopt;
  return result_from_fields(plan, *f);
}

Journal::Journal(const std::string& path, const SweepPlan& plan) : path_(path) {
  const std::string header = seal(std::string(JOURNAL_MAGIC) + "\t" + plan.fingerprint);
  // The whole file is read once: whether it ends in a newline decides what the next append
  // needs (see below), and a header torn by a kill is told apart from another sweep's.
  std::string text;
  bool exists = false;
  {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      exists = true;
      std::ostringstream all;
      all << in.rdbuf();
      text = all.str();
    }
  }
  bool write_header = !exists || text.empty();
  bool torn_tail = false;
  if (!write_header) {
    const size_t eol = text.find('\n');
    const std::string first = text.substr(0, eol == std::string::npos ? text.size() : eol + 1);
    if (first != header) {
      // Killed while the header itself was written (one write() of a few dozen bytes, but a
      // full disk can cut it): only a strict prefix of this sweep's own header, with nothing
      // after it, counts as torn; the file is started again. Anything else is another sweep's.
      if (eol == std::string::npos && header.compare(0, first.size(), first) == 0) {
        write_header = true;
      } else {
        throw SweepError("journal " + path + " belongs to a sweep with other settings (" +
                         first.substr(0, std::min<size_t>(first.find('\n'), 200)) +
                         "); delete it or choose another --out");
      }
    } else {
      std::map<int64_t, int> started;
      size_t pos = first.size();
      while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) {
          // A last record without its newline: torn by a kill mid-write. It is ignored (that
          // task simply runs again) and ended before the next append, which would otherwise
          // be glued to it and lost with it.
          torn_tail = true;
          end = text.size();
        }
        const std::string line = text.substr(pos, end - pos);
        pos = end + 1;
        // Each line is unsealed once and its task found in the plan's index: linear in the
        // journal's length.
        const auto f = unseal(line);
        if (!f) continue;  // torn or tampered: that task simply runs again
        if ((*f)[0] == "S" && f->size() == 3) {
          const int64_t task = find_task(plan, (*f)[1]);
          const auto rank = whole_field<int>((*f)[2]);
          if (task >= 0 && rank) started[task] = *rank;
        } else if (auto r = result_from_fields(plan, *f)) {
          done_[r->task] = std::move(*r);
        }
      }
      for (const auto& [task, rank] : started)
        if (!done_.count(task)) interrupted_.emplace_back(task, rank);
    }
  }
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (write_header ? O_TRUNC : 0);
  fd_ = ::open(path.c_str(), flags, 0644);
  if (fd_ < 0) throw SweepError("cannot open journal " + path + ": " + std::strerror(errno));
  if (write_header) append(header);
  if (torn_tail) append("\n");
}

Journal::~Journal() {
  if (fd_ >= 0) ::close(fd_);
}

void Journal::append(const std::string& line) {
  // One write() per record on an O_APPEND file: a kill leaves whole records or a torn last one,
  // which the reader's checksum rejects.
  // A short write (the disk filled up mid-record) is continued; the next write() then says why
  // it cannot go on (ENOSPC, EFBIG), and the torn record it leaves is rejected on resume.
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw JournalWriteError(
          "cannot append to journal " + path_ + ": " +
          (n < 0 ? std::string(std::strerror(errno)) : "nothing written") +
          " (the results journaled so far are kept: free space and run the same "
          "command again to resume)");
    off += static_cast<size_t>(n);
  }
  if (::fdatasync(fd_) != 0 && errno != EINVAL && errno != EROFS)
    throw JournalWriteError("cannot flush journal " + path_ + ": " + std::strerror(errno) +
                            " (free space and run the same command again to resume)");
}

bool journaled_ok(const Journal& journal, int64_t task) {
  const auto it = journal.done().find(task);
  return it != journal.done().end() && it->second.ok;
}

std::vector<int64_t> resume_tasks(const SweepPlan& plan, const Journal& journal,
                                  SweepOutcome& out) {
  out.results.resize(plan.tasks.size());
  for (const auto& [task, r] : journal.done())
    if (r.ok) {
      out.results[static_cast<size_t>(task)] = r;
      ++out.resumed;
    }
  std::vector<int64_t> to_run;
  for (int64_t id : dispatch_order(plan))
    if (plan.spec.per_job || !journaled_ok(journal, id)) to_run.push_back(id);
  return to_run;
}

void check_recomputed(const SweepPlan& plan, const Journal& journal, const TaskResult& r) {
  if (!journaled_ok(journal, r.task)) return;
  if (result_line(plan, r) != result_line(plan, journal.done().at(r.task)))
    throw SweepError("task '" + plan.tasks[static_cast<size_t>(r.task)].key +
                     "': recomputed for its per-job detail, it differs from the summary in " +
                     journal.path() + "; delete the journal to recompute the sweep");
}

void report_resume(const SweepPlan& plan, const Journal& journal) {
  if (!journal.done().empty())
    std::cerr << "mlprio-replay sweep: resuming from " << journal.path() << ": "
              << journal.done().size() << " of " << plan.tasks.size()
              << " tasks already recorded\n";
  for (const auto& [task, rank] : journal.interrupted())
    std::cerr << "mlprio-replay sweep: task '" << plan.tasks[static_cast<size_t>(task)].key
              << "' was running on rank " << rank
              << " when the previous run stopped; running it again\n";
}

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

namespace detail {

Progress::Progress(int64_t total, int64_t already, bool enabled)
    : total_(total),
      already_(already),
      enabled_(enabled && ::isatty(STDERR_FILENO)),
      t0_(now_seconds()) {}

void Progress::update(int64_t done) {
  if (!enabled_) return;
  const double t = now_seconds();
  if (last_ >= 0 && t - last_ < 0.5 && done < total_) return;
  last_ = t;
  const double rate = static_cast<double>(done - already_) / std::max(t - t0_, 1e-9);
  const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : 0;
  std::fprintf(stderr, "\r%lld/%lld tasks, %.2f tasks/s, ETA %.0f s   ",
               static_cast<long long>(done), static_cast<long long>(total_), rate, eta);
  std::fflush(stderr);
}

void Progress::finish() {
  if (enabled_) std::fputc('\n', stderr);
}

int64_t test_kill_after(int rank) {
  const char* r = std::getenv("MLPRIO_SWEEP_TEST_KILL_RANK");
  const char* k = std::getenv("MLPRIO_SWEEP_TEST_KILL_AFTER");
  if (!r || !k || std::atoi(r) != rank) return -1;
  return std::atoll(k);
}

}  // namespace detail

int64_t count_journaled(const std::vector<TaskResult>& results) {
  int64_t n = 0;
  for (const auto& r : results) n += r.ok ? 1 : 0;
  return n;
}

SweepOutcome run_sweep_serial(const SweepPlan& plan, const SweepRunOptions& opts) {
  const double t0 = now_seconds();
  // Alive until the output is committed: a signal during the write only marks the flag, so the
  // write is never cut (it is complete, and the run reports success).
  const util::StopOnSignal stop_on_signal;
  Journal journal(opts.out + ".journal", plan);
  report_resume(plan, journal);
  SweepOutcome out;
  const std::vector<int64_t> to_run = resume_tasks(plan, journal, out);
  const int64_t kill_after = detail::test_kill_after(0);
  int64_t computed = 0;
  int64_t done = static_cast<int64_t>(plan.tasks.size() - to_run.size());
  detail::Progress progress(static_cast<int64_t>(plan.tasks.size()), done, opts.progress);
  for (int64_t id : to_run) {
    if (util::stop_signal() != 0) break;  // checked between tasks: the last one is journaled
    journal.append(started_line(plan, id, 0));
    TaskResult r = run_task(plan, plan.tasks[static_cast<size_t>(id)]);
    if (kill_after >= 0 && ++computed >= kill_after) std::raise(SIGKILL);
    check_recomputed(plan, journal, r);
    if (!journaled_ok(journal, id)) journal.append(result_line(plan, r));
    out.results[static_cast<size_t>(id)] = std::move(r);
    progress.update(++done);
  }
  progress.finish();
  out.seconds = now_seconds() - t0;
  if (done < static_cast<int64_t>(plan.tasks.size())) {  // stopped by the signal
    out.interrupted = util::stop_signal();
    out.journaled = count_journaled(out.results);
    return out;
  }
  for (const auto& r : out.results) out.failed += r.ok ? 0 : 1;
  write_sweep_hdf5(plan, out.results, opts);
  out.seconds = now_seconds() - t0;
  return out;
}

}  // namespace mlprio::replay::dist
