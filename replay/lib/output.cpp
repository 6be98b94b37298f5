// Result writers for replay runs: JSON (a contract: field names and order are fixed), the stdout
// table and the HDF5 file through mlprio::h5. The HDF5 layout is documented in replay/README.md;
// change both together and bump REPLAY_LAYOUT_VERSION.
#include "mlprio/replay/output.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>
#include <span>

#include "mlprio/io/hdf5.hpp"

namespace mlprio::replay {

std::string runs_json(const std::vector<RunRecord>& runs) {
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const auto& r : runs) {
    const Summary& s = r.result.summary;
    nlohmann::ordered_json o;
    o["policy"] = r.policy;
    o["backfill"] = r.scheduler.empty() ? std::string(backfill_name(r.backfill)) : r.slurm_sched;
    if (!r.scheduler.empty()) {
      o["scheduler"] = r.scheduler;
      o["slurm_conf_sha256"] = r.slurm_conf_sha256;
    }
    o["window"] = {r.window_start, r.window_len};
    o["jobs"] = s.jobs;
    o["avg_wait"] = s.avg_wait;
    o["avg_bsld"] = s.avg_bsld;
    o["avg_turnaround"] = s.avg_turnaround;
    o["utilization"] = s.utilization;
    o["makespan"] = s.makespan;
    o["max_wait"] = s.max_wait;
    o["p95_wait"] = s.p95_wait;
    o["p99_wait"] = s.p99_wait;
    o["max_user_bsld"] = s.max_user_bsld;
    o["jain_user_bsld"] = s.jain_user_bsld;
    if (r.result.agent.used()) {  // external:CMD and llm:URL only
      const AgentStats& a = r.result.agent;
      nlohmann::ordered_json g;
      g["points"] = a.points;
      g["calls"] = a.calls;
      g["answers"] = a.answers;
      g["failures"] = a.failures;
      g["timeouts"] = a.timeouts;
      g["malformed"] = a.malformed;
      g["fallbacks"] = a.fallbacks;
      g["tokens_sent"] = a.tokens_sent;
      g["tokens_received"] = a.tokens_received;
      g["wait_seconds"] = a.wait_seconds;
      o["agent"] = std::move(g);
    }
    arr.push_back(std::move(o));
  }
  nlohmann::ordered_json root;
  root["runs"] = std::move(arr);
  return root.dump();
}

void print_runs_table(std::ostream& out, const std::vector<RunRecord>& runs) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-12s %-13s %-13s %8s %12s %12s %14s %6s %12s %12s %12s\n",
                "policy", "backfill", "window", "jobs", "avg_wait", "avg_bsld", "avg_turnaround",
                "util", "makespan", "max_wait", "p99_wait");
  out << buf;
  for (const auto& r : runs) {
    const Summary& s = r.result.summary;
    const std::string window = std::to_string(r.window_start) + ":" + std::to_string(r.window_len);
    std::snprintf(
        buf, sizeof buf,
        "%-12s %-13s %-13s %8lld %12.2f %12.2f %14.2f %6.3f %12.0f %12.0f %12.0f\n",
        r.policy.c_str(),
        (r.scheduler.empty() ? std::string(backfill_name(r.backfill)) : r.slurm_sched).c_str(),
        window.c_str(), static_cast<long long>(s.jobs), s.avg_wait, s.avg_bsld, s.avg_turnaround,
        s.utilization, s.makespan, s.max_wait, s.p99_wait);
    out << buf;
  }
}

const h5::CompoundType<JobOutcome>& job_table_type() {
  static const auto t = h5::CompoundType<JobOutcome>{}
                            .add("id", &JobOutcome::id)
                            .add("user", &JobOutcome::user)
                            .add("submit", &JobOutcome::submit)
                            .add("start", &JobOutcome::start)
                            .add("end", &JobOutcome::end)
                            .add("wait", &JobOutcome::wait)
                            .add("run", &JobOutcome::run)
                            .add("bsld", &JobOutcome::bsld)
                            .add("estimate", &JobOutcome::estimate)
                            .add("procs", &JobOutcome::procs)
                            .add("killed", &JobOutcome::killed)
                            .add("site", &JobOutcome::site)
                            .add("priority", &JobOutcome::priority);
  return t;
}

namespace {

const h5::CompoundType<UserSummary>& user_type() {
  static const auto t = h5::CompoundType<UserSummary>{}
                            .add("user", &UserSummary::user)
                            .add("jobs", &UserSummary::jobs)
                            .add("mean_wait", &UserSummary::mean_wait)
                            .add("mean_bsld", &UserSummary::mean_bsld)
                            .add("core_seconds", &UserSummary::core_seconds);
  return t;
}

// The attributes of /runs/run_NNNN.
void write_run_attrs(const h5::Group& g, const RunRecord& r) {
  const Summary& s = r.result.summary;
  g.set_attr("policy", r.policy);
  if (r.scheduler.empty()) {
    g.set_attr("backfill", backfill_name(r.backfill));
  } else {
    g.set_attr("backfill", std::string_view(r.slurm_sched));
    g.set_attr("scheduler", std::string_view(r.scheduler));
    g.set_attr("slurm_conf", std::string_view(r.slurm_conf));
    g.set_attr("slurm_conf_sha256", std::string_view(r.slurm_conf_sha256));
  }
  g.set_attr("profile", profile_name(r.profile));
  g.set_attr("window_start", r.window_start);
  g.set_attr("window_len", r.window_len);
  g.set_attr("jobs", s.jobs);
  g.set_attr("skipped", s.skipped);
  g.set_attr("killed", s.killed);
  g.set_attr("estimates_raised", s.estimates_raised);
  g.set_attr("avg_wait", s.avg_wait);
  g.set_attr("avg_bsld", s.avg_bsld);
  g.set_attr("avg_turnaround", s.avg_turnaround);
  g.set_attr("utilization", s.utilization);
  g.set_attr("makespan", s.makespan);
  g.set_attr("first_submit", s.first_submit);
  g.set_attr("last_end", s.last_end);
  g.set_attr("max_wait", s.max_wait);
  g.set_attr("p95_wait", s.p95_wait);
  g.set_attr("p99_wait", s.p99_wait);
  g.set_attr("max_user_bsld", s.max_user_bsld);
  g.set_attr("jain_user_bsld", s.jain_user_bsld);
  if (r.result.agent.used()) {
    const AgentStats& a = r.result.agent;
    g.set_attr("agent_points", a.points);
    g.set_attr("agent_calls", a.calls);
    g.set_attr("agent_answers", a.answers);
    g.set_attr("agent_failures", a.failures);
    g.set_attr("agent_timeouts", a.timeouts);
    g.set_attr("agent_malformed", a.malformed);
    g.set_attr("agent_fallbacks", a.fallbacks);
    g.set_attr("agent_tokens_sent", a.tokens_sent);
    g.set_attr("agent_tokens_received", a.tokens_received);
    g.set_attr("agent_wait_seconds", a.wait_seconds);
  }
}

// The root's attributes beside the provenance, and the /runs group.
h5::Group write_root(h5::Group& root, const Machine& machine) {
  root.set_attr("replay_layout_version", static_cast<int64_t>(REPLAY_LAYOUT_VERSION));
  root.set_attr("nodes", machine.nodes);
  root.set_attr("cores_per_node", machine.cores_per_node);
  root.set_attr("gpus_per_node", machine.gpus_per_node);
  root.set_attr("allocation", machine.allocation == Allocation::NODES ? "nodes" : "cores");
  return root.create_group("runs");
}

std::string run_group_name(size_t i) {
  char name[32];
  std::snprintf(name, sizeof name, "run_%04zu", i);
  return name;
}

}  // namespace

void write_run_group(const h5::Group& g, const RunRecord& r) {
  write_run_attrs(g, r);
  g.write_table("jobs", job_table_type(), std::span<const JobOutcome>(r.result.jobs));
  g.write_table("users", user_type(), std::span<const UserSummary>(r.result.users));
  const h5::Group ts = g.create_group("series");
  ts.write_column("time", std::span<const double>(r.result.series.time));
  ts.write_column("queue_length", std::span<const int64_t>(r.result.series.queue_length));
  ts.write_column("busy_cores", std::span<const int64_t>(r.result.series.busy_cores));
  // Written only when recorded (the rlscheduler profile and series carried by the sweep have none).
  if (r.result.series.mean_bsld.size() == r.result.series.time.size() &&
      !r.result.series.time.empty())
    ts.write_column("mean_bsld", std::span<const double>(r.result.series.mean_bsld));
}

void write_runs_hdf5(const std::string& path, const std::vector<RunRecord>& runs,
                     const h5::Provenance& provenance, const Machine& machine) {
  h5::WriteFile file(path, provenance);
  const h5::Group all = write_root(file.root(), machine);
  for (size_t i = 0; i < runs.size(); ++i)
    write_run_group(all.create_group(run_group_name(i)), runs[i]);
  file.commit();
}

struct RunFileWriter::State {
  State(const std::string& path, const h5::Provenance& provenance) : file(path, provenance) {}
  h5::WriteFile file;
  h5::Group run, series;
  h5::Appender jobs, time, queue_length, busy_cores, mean_bsld;
  bool has_mean_bsld = false;  // made with the first points that carry it, as write_run_group
};

RunFileWriter::RunFileWriter(const std::string& path, const h5::Provenance& provenance,
                             const Machine& machine)
    : st_(std::make_unique<State>(path, provenance)) {
  st_->run = write_root(st_->file.root(), machine).create_group(run_group_name(0));
  st_->jobs = st_->run.append_table("jobs", job_table_type());
  st_->series = st_->run.create_group("series");
  st_->time = st_->series.append_column("time", h5::FieldType::FLOAT64);
  st_->queue_length = st_->series.append_column("queue_length", h5::FieldType::INT64);
  st_->busy_cores = st_->series.append_column("busy_cores", h5::FieldType::INT64);
}

RunFileWriter::~RunFileWriter() = default;

void RunFileWriter::jobs(std::span<const JobOutcome> rows) {
  st_->jobs.append(rows);
}

void RunFileWriter::series(const TimeSeries& s, size_t n) {
  if (n == 0) return;
  st_->time.append(std::span<const double>(s.time.data(), n));
  st_->queue_length.append(std::span<const int64_t>(s.queue_length.data(), n));
  st_->busy_cores.append(std::span<const int64_t>(s.busy_cores.data(), n));
  if (s.mean_bsld.size() >= n) {  // only where the engine records it
    if (!st_->has_mean_bsld)
      st_->mean_bsld = st_->series.append_column("mean_bsld", h5::FieldType::FLOAT64);
    st_->has_mean_bsld = true;
    st_->mean_bsld.append(std::span<const double>(s.mean_bsld.data(), n));
  }
}

void RunFileWriter::finish(const RunRecord& run) {
  write_run_attrs(st_->run, run);
  for (h5::Appender* a :
       {&st_->jobs, &st_->time, &st_->queue_length, &st_->busy_cores, &st_->mean_bsld})
    a->flush();
  st_->run.write_table("users", user_type(), std::span<const UserSummary>(run.result.users));
  st_->file.commit();
}

}  // namespace mlprio::replay
