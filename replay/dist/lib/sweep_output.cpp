// The sweep's outputs: the HDF5 file (one /runs table, /params, and per-task job tables with
// --per-job) and the JSON summary, both written by rank 0 alone from the tasks' results in task
// order, so that one process and N ranks produce the same bytes.
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mlprio/io/hdf5.hpp"
#include "mlprio/replay/dist/sweep_run.hpp"
#include "mlprio/replay/output.hpp"
#include "mlprio/util/checked_cast.hpp"
#include "mlprio/util/errors.hpp"

namespace mlprio::replay::dist {
namespace {

struct SweepRow {
  int64_t task = 0;
  char trace[256] = {};
  char policy[32] = {};
  char backfill[16] = {};
  char scheduler[8] = {};           // "slurm" for a deployed-stack task, else empty
  char slurm_conf_sha256[65] = {};  // its file's checksum
  int64_t params = 0;
  int64_t window_start = 0, window_len = 0;
  int8_t ok = 0;
  int64_t jobs = 0, skipped = 0, killed = 0, estimates_raised = 0;
  double avg_wait = 0, avg_bsld = 0, avg_turnaround = 0, utilization = 0, makespan = 0,
         first_submit = 0, last_end = 0, max_wait = 0, p95_wait = 0, p99_wait = 0,
         max_user_bsld = 0, jain_user_bsld = 0;
  char error[256] = {};
};

struct ParamRow {
  int64_t params = 0;
  double weight_age = 0, weight_job_size = 0, weight_fairshare = 0, max_age = 0,
         decay_half_life = 0;
  int8_t favor_small = 0;
};

template <size_t N>
void copy_str(char (&dst)[N], const std::string& s) {
  std::strncpy(dst, s.c_str(), N - 1);
  dst[N - 1] = '\0';
}

// A task as `run` reports it: deployed-stack tasks name the scheduler, the file and its checksum.
RunRecord task_record(const SweepPlan& plan, const SweepTask& t, const TaskResult& r) {
  RunRecord rec;
  rec.policy = t.policy;
  rec.backfill = t.backfill;
  rec.window_start = t.window_start;
  rec.window_len = t.window_len;
  rec.result.summary = r.summary;
  if (t.slurm >= 0) {
    const auto c = static_cast<size_t>(t.slurm);
    rec.scheduler = "slurm";
    rec.slurm_conf = plan.spec.slurm_confs[c];
    rec.slurm_conf_sha256 = plan.slurm[c].sha256;
    rec.slurm_sched = plan.slurm[c].backfill ? "sched/backfill" : "sched/builtin";
  }
  return rec;
}

}  // namespace

void write_sweep_hdf5(const SweepPlan& plan, const std::vector<TaskResult>& results,
                      const SweepRunOptions& opts) {
  h5::Provenance prov;
  prov.kind = "sweep";
  prov.command_line = opts.command_line;
  prov.config = plan.fingerprint;
  prov.input_sha256 = file_sha256(plan.spec.traces.front());
  h5::WriteFile file(opts.out, prov);
  const h5::Group& root = file.root();
  root.set_attr("sweep_layout_version", static_cast<int64_t>(SWEEP_LAYOUT_VERSION));
  root.set_attr("tasks", static_cast<int64_t>(plan.tasks.size()));
  int64_t failed = 0;
  std::vector<SweepRow> rows;
  for (const auto& t : plan.tasks) {
    const TaskResult& r = results.at(static_cast<size_t>(t.id));
    SweepRow row;
    row.task = t.id;
    copy_str(row.trace, plan.spec.traces[static_cast<size_t>(t.trace)]);
    copy_str(row.policy, t.policy);
    const RunRecord rec = task_record(plan, t, r);
    copy_str(row.backfill,
             rec.slurm_sched.empty() ? std::string(backfill_name(t.backfill)) : rec.slurm_sched);
    copy_str(row.scheduler, rec.scheduler);
    copy_str(row.slurm_conf_sha256, rec.slurm_conf_sha256);
    row.params = t.params;
    row.window_start = t.window_start;
    row.window_len = t.window_len;
    row.ok = r.ok ? 1 : 0;
    failed += r.ok ? 0 : 1;
    const Summary& s = r.summary;
    row.jobs = s.jobs;
    row.skipped = s.skipped;
    row.killed = s.killed;
    row.estimates_raised = s.estimates_raised;
    row.avg_wait = s.avg_wait;
    row.avg_bsld = s.avg_bsld;
    row.avg_turnaround = s.avg_turnaround;
    row.utilization = s.utilization;
    row.makespan = s.makespan;
    row.first_submit = s.first_submit;
    row.last_end = s.last_end;
    row.max_wait = s.max_wait;
    row.p95_wait = s.p95_wait;
    row.p99_wait = s.p99_wait;
    row.max_user_bsld = s.max_user_bsld;
    row.jain_user_bsld = s.jain_user_bsld;
    copy_str(row.error, r.error);
    rows.push_back(row);
  }
  root.set_attr("failed", failed);
  static const auto row_type = h5::CompoundType<SweepRow>{}
                                   .add("task", &SweepRow::task)
                                   .add("trace", &SweepRow::trace)
                                   .add("policy", &SweepRow::policy)
                                   .add("backfill", &SweepRow::backfill)
                                   .add("scheduler", &SweepRow::scheduler)
                                   .add("slurm_conf_sha256", &SweepRow::slurm_conf_sha256)
                                   .add("params", &SweepRow::params)
                                   .add("window_start", &SweepRow::window_start)
                                   .add("window_len", &SweepRow::window_len)
                                   .add("ok", &SweepRow::ok)
                                   .add("jobs", &SweepRow::jobs)
                                   .add("skipped", &SweepRow::skipped)
                                   .add("killed", &SweepRow::killed)
                                   .add("estimates_raised", &SweepRow::estimates_raised)
                                   .add("avg_wait", &SweepRow::avg_wait)
                                   .add("avg_bsld", &SweepRow::avg_bsld)
                                   .add("avg_turnaround", &SweepRow::avg_turnaround)
                                   .add("utilization", &SweepRow::utilization)
                                   .add("makespan", &SweepRow::makespan)
                                   .add("first_submit", &SweepRow::first_submit)
                                   .add("last_end", &SweepRow::last_end)
                                   .add("max_wait", &SweepRow::max_wait)
                                   .add("p95_wait", &SweepRow::p95_wait)
                                   .add("p99_wait", &SweepRow::p99_wait)
                                   .add("max_user_bsld", &SweepRow::max_user_bsld)
                                   .add("jain_user_bsld", &SweepRow::jain_user_bsld)
                                   .add("error", &SweepRow::error);
  root.write_table("runs", row_type, std::span<const SweepRow>(rows));
  std::vector<ParamRow> prow;
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const PolicyOptions& o = plan.params[i];
    prow.push_back({static_cast<int64_t>(i), o.weight_age, o.weight_job_size, o.weight_fairshare,
                    o.max_age, o.decay_half_life, static_cast<int8_t>(o.favor_small ? 1 : 0)});
  }
  static const auto param_type = h5::CompoundType<ParamRow>{}
                                     .add("params", &ParamRow::params)
                                     .add("weight_age", &ParamRow::weight_age)
                                     .add("weight_job_size", &ParamRow::weight_job_size)
                                     .add("weight_fairshare", &ParamRow::weight_fairshare)
                                     .add("max_age", &ParamRow::max_age)
                                     .add("decay_half_life", &ParamRow::decay_half_life)
                                     .add("favor_small", &ParamRow::favor_small);
  root.write_table("params", param_type, std::span<const ParamRow>(prow));
  root.set_attr("per_job", static_cast<int64_t>(plan.spec.per_job ? 1 : 0));
  if (plan.spec.per_job) {
    // One group per task in task order, laid out as `run --out` writes /runs/run_NNNN.
    const h5::Group all = root.create_group("tasks");
    for (const auto& t : plan.tasks) {
      const TaskResult& r = results.at(static_cast<size_t>(t.id));
      RunRecord rec = task_record(plan, t, r);
      rec.result.jobs = r.jobs;
      rec.result.users = r.users;
      rec.result.series = r.series;
      rec.result.agent = r.agent;
      char name[40];
      std::snprintf(name, sizeof name, "task_%04lld", static_cast<long long>(t.id));
      const h5::Group g = all.create_group(name);
      write_run_group(g, rec);
      g.set_attr("task", t.id);
      g.set_attr("key", t.key);
      g.set_attr("trace", plan.spec.traces[static_cast<size_t>(t.trace)]);
      g.set_attr("params", static_cast<int64_t>(t.params));
      g.set_attr("ok", static_cast<int64_t>(r.ok ? 1 : 0));
      g.set_attr("error", r.error);
    }
  }
  file.commit();
}

std::string sweep_json(const SweepPlan& plan, const std::vector<TaskResult>& results) {
  std::vector<RunRecord> runs;
  std::vector<std::string> failed;
  for (const auto& t : plan.tasks) {
    const TaskResult& r = results.at(static_cast<size_t>(t.id));
    if (!r.ok) {
      failed.push_back(t.key);
      continue;
    }
    runs.push_back(task_record(plan, t, r));
  }
  auto j = nlohmann::ordered_json::parse(runs_json(runs));
  j["failed"] = failed;
  return j.dump();
}

}  // namespace mlprio::replay::dist
