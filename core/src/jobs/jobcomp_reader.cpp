// Reader for slurmctld's own job-completion log (JobCompType=jobcomp/filetxt): one line per
// ended job, "JobId=12 UserId=alice(1001) GroupId=... Name=... JobState=COMPLETED Partition=debug
// TimeLimit=60 StartTime=... EndTime=... NodeList=... NodeCnt=1 ProcCnt=4 WorkDir=... Tres=...
// Account=... QOS=... ... SubmitTime=... ...", the way sites without slurmdbd can train a model.
// Keys are looked up in the order slurmctld writes them (src/plugins/jobcomp/filetxt), so the
// free-text fields (Name, WorkDir) may hold spaces; a job name that imitates later keys can only
// garble its own line. TimeLimit is in minutes (or UNLIMITED); times are read as sacct's are.
#include <array>
#include <cmath>
#include <string>

#include "jobs/parse.hpp"
#include "jobs/reader_base.hpp"
#include "mlprio/jobs/slurm_format.hpp"

namespace mlprio::detail {

namespace {

enum Key {
  JOBID,
  USERID,
  GROUPID,
  NAME,
  JOBSTATE,
  PARTITION,
  TIMELIMIT,
  STARTTIME,
  ENDTIME,
  NODELIST,
  NODECNT,
  PROCCNT,
  WORKDIR,
  RESV,
  TRES,
  ACCOUNT,
  QOS,
  NKEYS
};
constexpr const char* KEYS[NKEYS] = {
    "JobId=",     "UserId=",          "GroupId=", "Name=",     "JobState=", "Partition=",
    "TimeLimit=", "StartTime=",       "EndTime=", "NodeList=", "NodeCnt=",  "ProcCnt=",
    "WorkDir=",   "ReservationName=", "Tres=",    "Account=",  "QOS="};

class JobcompReader final : public ReaderBase {
 public:
  using ReaderBase::ReaderBase;
  TraceFormat format() const override { return TraceFormat::JOBCOMP; }

  bool next(Job& job) override {
    std::string_view line;
    while (next_content_line(line)) {
      if (parse(trim(line), job)) return true;
    }
    return false;
  }

 private:
  // Splits the line at the keys, in order; false (rejected) when one is missing.
  bool split(std::string_view line) {
    size_t from = 0;
    std::array<size_t, NKEYS> at{};
    for (int k = 0; k < NKEYS; ++k) {
      const std::string_view key = KEYS[k];
      size_t p = k == 0 ? (line.rfind(key, 0) == 0 ? 0 : std::string_view::npos)
                        : line.find(" " + std::string(key), from);
      if (p == std::string_view::npos) {
        reject(std::string(key.substr(0, key.size() - 1)),
               "missing; expected a jobcomp/filetxt line (JobId=... UserId=... Name=... "
               "JobState=... Partition=... TimeLimit=... StartTime=... EndTime=...)");
        return false;
      }
      if (k > 0) ++p;
      at[static_cast<size_t>(k)] = p + key.size();
      if (k > 0)
        val_[static_cast<size_t>(k - 1)] =
            line.substr(at[static_cast<size_t>(k - 1)], p - 1 - at[static_cast<size_t>(k - 1)]);
      from = p + key.size();
    }
    const size_t last = at[NKEYS - 1];
    const size_t sp = line.find(' ', last);
    val_[NKEYS - 1] =
        line.substr(last, sp == std::string_view::npos ? std::string_view::npos : sp - last);
    // SubmitTime comes later on the line, outside the ordered keys above.
    const size_t s = line.find(" SubmitTime=", from);
    submit_ = s == std::string_view::npos ? std::string_view{}
                                          : line.substr(s + 12, line.find(' ', s + 12) - (s + 12));
    return true;
  }

  bool parse(std::string_view line, Job& job) {
    if (!split(line)) return false;
    job = Job{};
    const auto id = parse_int(val_[JOBID]);
    if (!id || *id < 0) {
      reject("JobId", "'" + std::string(val_[JOBID]) + "' is not a job id");
      return false;
    }
    job.id = *id;
    const auto submit = parse_slurm_time(submit_);
    if (!submit) {
      reject("SubmitTime", "'" + std::string(submit_) + "' is not a time like 2026-11-22T14:18:41");
      return false;
    }
    job.submit = *submit;
    // "alice(1001)": the name before the parenthesis.
    auto who = [](std::string_view v) { return v.substr(0, v.find('(')); };
    if (!who(val_[USERID]).empty()) job.user = names_.users.intern(who(val_[USERID]));
    if (!who(val_[GROUPID]).empty()) job.group = names_.groups.intern(who(val_[GROUPID]));
    job.name = names_.job_names.intern(val_[NAME]);
    job.status = slurm_state(val_[JOBSTATE]);
    if (!val_[PARTITION].empty()) job.partition = names_.partitions.intern(val_[PARTITION]);
    if (!is_slurm_none(val_[TIMELIMIT])) {
      const auto minutes = parse_int(val_[TIMELIMIT]);
      if (!minutes || *minutes < 0 || *minutes > 1000LL * 365 * 24 * 60) {
        reject("TimeLimit", "'" + std::string(val_[TIMELIMIT]) + "' is not minutes or UNLIMITED");
        return false;
      }
      job.req_time = static_cast<double>(*minutes) * 60.0;
    }
    const auto start = parse_slurm_time(val_[STARTTIME]);
    const auto end = parse_slurm_time(val_[ENDTIME]);
    if (start && *start >= job.submit) {
      job.wait = *start - job.submit;
      if (end && *end >= *start) job.run = *end - *start;
    }
    const auto nodes = parse_int(val_[NODECNT]);
    const auto procs = parse_int(val_[PROCCNT]);
    if (!nodes || *nodes < 0 || *nodes > JOB_MAX_COUNT || !procs || *procs < 0 ||
        *procs > JOB_MAX_COUNT) {
      reject(!nodes || *nodes < 0 || *nodes > JOB_MAX_COUNT ? "NodeCnt" : "ProcCnt",
             "not a count from 0 to " + std::to_string(JOB_MAX_COUNT));
      return false;
    }
    if (*procs > 0) job.req_procs = job.alloc_procs = *procs;
    if (*nodes > 0) job.req_nodes = *nodes;
    if (!val_[TRES].empty()) {
      const auto t = parse_tres(val_[TRES]);
      if (!t) {
        reject("Tres",
               "'" + std::string(val_[TRES]) + "' is not a TRES list like cpu=4,mem=16G,node=1");
        return false;
      }
      if (t->mem >= 0) job.req_mem = t->mem;
      if (t->gpu >= 0) job.req_gpus = t->gpu;
    }
    if (!val_[ACCOUNT].empty()) job.account = names_.accounts.intern(val_[ACCOUNT]);
    if (!val_[QOS].empty()) job.qos = names_.qos.intern(val_[QOS]);
    note_submit(job.submit);
    return true;
  }

  std::array<std::string_view, NKEYS> val_{};
  std::string_view submit_;
};

}  // namespace

std::unique_ptr<JobReader> make_jobcomp_reader(const std::string& path, const ReadOptions& opts) {
  return std::make_unique<JobcompReader>(path, opts);
}

}  // namespace mlprio::detail
