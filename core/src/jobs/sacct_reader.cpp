// Reader for `sacct --parsable2` (and `--parsable`, with its trailing `|`) dumps. Columns are
// found by the header line's names, so any `--format` selection works as long as it has JobID
// and Submit. Job steps (`123.batch`, `123.0`) are not jobs: they are counted as ignored, and
// their MaxRSS is folded into the parent job's used memory, which is why one job is held back
// until the next non-step line.
#include <algorithm>
#include <array>
#include <string>
#include <unordered_map>

#include "jobs/parse.hpp"
#include "jobs/reader_base.hpp"
#include "mlprio/jobs/slurm_format.hpp"

namespace mlprio::detail {

JobStatus slurm_state(std::string_view s) {
  s = s.substr(0, s.find(' '));  // "CANCELLED by 1234"
  if (s == "COMPLETED") return JobStatus::COMPLETED;
  if (s == "FAILED" || s == "BOOT_FAIL") return JobStatus::FAILED;
  if (s == "CANCELLED") return JobStatus::CANCELLED;
  if (s == "TIMEOUT" || s == "DEADLINE") return JobStatus::TIMEOUT;
  if (s == "OUT_OF_MEMORY") return JobStatus::OUT_OF_MEMORY;
  if (s == "NODE_FAIL") return JobStatus::NODE_FAIL;
  if (s == "PREEMPTED") return JobStatus::PREEMPTED;
  if (s == "RUNNING" || s == "SUSPENDED" || s == "COMPLETING") return JobStatus::RUNNING;
  if (s == "PENDING" || s == "REQUEUED") return JobStatus::PENDING;
  return JobStatus::UNKNOWN_STATE;
}

namespace {

enum Col {
  JOBID,
  JOBIDRAW,
  JOBNAME,
  USER,
  GROUP,
  ACCOUNT,
  PARTITION,
  QOS,
  SUBMIT,
  START,
  END,
  ELAPSED,
  ELAPSEDRAW,
  TIMELIMIT,
  TIMELIMITRAW,
  STATE,
  EXITCODE,
  ALLOCCPUS,
  REQCPUS,
  NNODES,
  ALLOCNODES,
  REQNODES,
  REQMEM,
  REQTRES,
  ALLOCTRES,
  MAXRSS,
  NCOLS
};
constexpr const char* COL_NAMES[NCOLS] = {
    "JobID",        "JobIDRaw", "JobName",  "User",      "Group",   "Account",    "Partition",
    "QOS",          "Submit",   "Start",    "End",       "Elapsed", "ElapsedRaw", "Timelimit",
    "TimelimitRaw", "State",    "ExitCode", "AllocCPUS", "ReqCPUS", "NNodes",     "AllocNodes",
    "ReqNodes",     "ReqMem",   "ReqTRES",  "AllocTRES", "MaxRSS"};

// Extra '|' per line that repair_pipes() tries to give back to free-text columns.
constexpr size_t MAX_STRAY_PIPES = 8;

class SacctReader final : public ReaderBase {
 public:
  SacctReader(const std::string& path, const ReadOptions& opts) : ReaderBase(path, opts) {
    col_.fill(-1);
    header_.unix_start_time = 0;  // times are absolute Unix seconds
  }
  TraceFormat format() const override { return TraceFormat::SACCT; }

  bool next(Job& job) override {
    std::string_view line;
    while (next_content_line(line)) {
      if (!have_header_) {
        read_header(line);
        continue;
      }
      split(line);
      if (fields_.size() == ncols_ + 1 && fields_.back().empty()) fields_.pop_back();  // --parsable
      if (fields_.size() > ncols_) repair_pipes();
      if (fields_.size() != ncols_) {
        reject("line", "expected " + std::to_string(ncols_) +
                           " '|'-separated fields as in the "
                           "header, found " +
                           std::to_string(fields_.size()));
        continue;
      }
      const std::string_view id = get(JOBID);
      if (id.find('.') != std::string_view::npos) {  // a job step
        ++report_.ignored;
        if (held_ && col_[MAXRSS] >= 0) {
          char per = 0;
          if (auto rss = parse_slurm_mem(get(MAXRSS), &per); rss && *rss > held_job_.used_mem)
            held_job_.used_mem = *rss;
        }
        continue;
      }
      Job parsed;
      if (!parse_job(parsed)) continue;
      if (held_) {
        job = std::move(held_job_);
        held_job_ = std::move(parsed);
        note_submit(job.submit);
        return true;
      }
      held_job_ = std::move(parsed);
      held_ = true;
    }
    if (!have_header_ && report_.lines > 0 && opts_.strict)
      throw InputError(lines_.path(),
                       "no sacct header line (expected a first line naming JobID|...)");
    if (held_) {
      held_ = false;
      job = std::move(held_job_);
      note_submit(job.submit);
      return true;
    }
    return false;
  }

 private:
  void split(std::string_view line) { split_on(line, '|', fields_, false); }

  // Free-text columns (a job name, a constraint "a|b") may hold '|' themselves; sacct does not
  // escape it. Of all ways of giving the extra pieces to the free-text columns present, take the
  // first (in lexicographic order of the pieces each free column takes, the first free column
  // taking fewest) whose typed columns (ids, times, counts, state) all parse; otherwise leave the
  // line as it is, to be rejected with its field count.
  //
  // A typed column's check depends only on its own piece, i.e. on how many extra pieces the free
  // columns before it took. So instead of enumerating the C(extra + F - 1, F - 1) ways (which a
  // header with many free-text columns made hang on one 442-byte line), a table says, for each
  // column and each number of extra pieces used so far, whether the rest of the line can still
  // be completed; the first way is then read off greedily. O(columns x extra^2).
  void repair_pipes() {
    const size_t extra = fields_.size() - ncols_;
    if (free_cols_.empty() || extra > MAX_STRAY_PIPES) return;
    const std::vector<std::string_view> raw = fields_;
    std::vector<uint8_t> is_free(ncols_, 0);
    for (size_t c : free_cols_) is_free[c] = 1;
    std::vector<int> checked(ncols_, -1);  // header position -> the typed column checked there
    for (int c = 0; c < NCOLS; ++c)
      if (col_[static_cast<size_t>(c)] >= 0)
        checked[static_cast<size_t>(col_[static_cast<size_t>(c)])] = c;
    // can[c * w + used]: columns c.. can take the rest, `used` extra pieces having gone before c.
    const size_t w = extra + 1;
    std::vector<uint8_t> can((ncols_ + 1) * w, 0);
    can[ncols_ * w + extra] = 1;
    for (size_t c = ncols_; c-- > 0;) {
      for (size_t used = 0; used <= extra; ++used) {
        bool ok = false;
        if (is_free[c]) {
          for (size_t k = 0; used + k <= extra && !ok; ++k) ok = can[(c + 1) * w + used + k] != 0;
        } else {
          ok = can[(c + 1) * w + used] != 0 &&
               (checked[c] < 0 || column_ok(static_cast<Col>(checked[c]), trim(raw[c + used])));
        }
        can[c * w + used] = ok ? 1 : 0;
      }
    }
    if (!can[0]) return;
    std::vector<std::string_view> merged(ncols_);
    size_t used = 0;
    for (size_t c = 0; c < ncols_; ++c) {
      size_t take = 1;
      if (is_free[c]) {
        size_t k = 0;
        while (!can[(c + 1) * w + used + k]) ++k;
        take += k;
      }
      const size_t src = c + used;
      const char* b = raw[src].data();
      const char* e = raw[src + take - 1].data() + raw[src + take - 1].size();
      merged[c] = std::string_view(b, static_cast<size_t>(e - b));
      used += take - 1;
    }
    fields_ = std::move(merged);
  }

  // Whether a typed column's value can be read (the checks parse_job() makes, without the
  // messages); columns without a check always can.
  static bool column_ok(Col c, std::string_view v) {
    switch (c) {
      case SUBMIT:
        return parse_slurm_time(v).has_value();
      case START:
      case END:
        return is_slurm_none(v) || parse_slurm_time(v).has_value();
      case JOBIDRAW:
      case ELAPSEDRAW:
      case ALLOCCPUS:
      case REQCPUS:
      case NNODES:
        return v.empty() || parse_int(v).has_value();
      case ELAPSED:
      case TIMELIMIT:
        return is_slurm_none(v) || parse_slurm_duration(v).has_value();
      case STATE:
        return v.empty() || slurm_state(v) != JobStatus::UNKNOWN_STATE;
      default:
        return true;
    }
  }

  std::string_view get(Col c) const {
    return col_[c] >= 0 ? trim(fields_[static_cast<size_t>(col_[c])]) : std::string_view{};
  }

  void read_header(std::string_view line) {
    split(line);
    if (!fields_.empty() && fields_.back().empty()) fields_.pop_back();
    ncols_ = fields_.size();
    for (size_t i = 0; i < fields_.size(); ++i)
      for (int c = 0; c < NCOLS; ++c)
        if (trim(fields_[i]) == COL_NAMES[c]) col_[static_cast<size_t>(c)] = static_cast<int>(i);
    static constexpr std::string_view FREE_TEXT[] = {"JobName",      "Constraints",   "Comment",
                                                     "AdminComment", "SystemComment", "WorkDir",
                                                     "Reason",       "WCKey"};
    for (size_t i = 0; i < fields_.size(); ++i)
      for (auto name : FREE_TEXT)
        if (trim(fields_[i]) == name) free_cols_.push_back(i);
    if (col_[JOBID] < 0 || col_[SUBMIT] < 0)
      throw InputError(
          LineError{lines_.path(), lines_.line_number(), "header",
                    "not a sacct --parsable2 header: it must name at least JobID and "
                    "Submit (e.g. sacct --parsable2 --format=JobID,Submit,Start,End,...)"});
    have_header_ = true;
    ++report_.comment_lines;
  }

  bool parse_job(Job& job) {
    job = Job{};
    if (!parse_id_and_times(job) || !parse_run_and_limit(job)) return false;
    if (col_[STATE] >= 0) job.status = slurm_state(get(STATE));
    if (col_[EXITCODE] >= 0)
      job.exit_code = static_cast<int32_t>(
          parse_int(get(EXITCODE).substr(0, get(EXITCODE).find(':'))).value_or(-1));
    if (!parse_counts(job) || !parse_req_mem(job) || !parse_tres_columns(job)) return false;
    if (col_[MAXRSS] >= 0 && !is_slurm_none(get(MAXRSS)))
      job.used_mem = parse_slurm_mem(get(MAXRSS)).value_or(-1);
    intern_names(job);
    return true;
  }

  // JobIDRaw (else JobID's number), Submit, and the wait from Start.
  bool parse_id_and_times(Job& job) {
    const std::string_view raw = get(JOBIDRAW), id = get(JOBID);
    std::optional<int64_t> jid = raw.empty() ? std::nullopt : parse_int(raw);
    if (!jid) jid = parse_int(id.substr(0, id.find_first_of("_[+")));
    if (!jid) {
      reject("JobID", "'" + std::string(id) + "' is not a Slurm job id (e.g. 1234, 1234_5)");
      return false;
    }
    job.id = *jid;
    auto submit = parse_slurm_time(get(SUBMIT));
    if (!submit) {
      reject("Submit", "'" + std::string(get(SUBMIT)) + "' is not a time like 2024-01-31T12:00:00");
      return false;
    }
    job.submit = *submit;
    if (col_[START] >= 0 && !is_slurm_none(get(START))) {
      auto start = parse_slurm_time(get(START));
      if (!start) {
        reject("Start", "'" + std::string(get(START)) +
                            "' is not a time like 2024-01-31T12:00:00 or Unknown");
        return false;
      }
      job.wait = std::max(0.0, *start - job.submit);
    }
    return true;
  }

  // The run time (ElapsedRaw, else Elapsed; unknown for a job that never started) and the
  // requested time (TimelimitRaw, else Timelimit).
  bool parse_run_and_limit(Job& job) {
    if (col_[ELAPSEDRAW] >= 0 && !get(ELAPSEDRAW).empty()) {
      auto e = parse_int(get(ELAPSEDRAW));
      if (!e) {
        reject("ElapsedRaw", "'" + std::string(get(ELAPSEDRAW)) + "' is not a number of seconds");
        return false;
      }
      job.run = static_cast<double>(*e);
    } else if (col_[ELAPSED] >= 0 && !is_slurm_none(get(ELAPSED))) {
      auto e = parse_slurm_duration(get(ELAPSED));
      if (!e) {
        reject("Elapsed",
               "'" + std::string(get(ELAPSED)) + "' is not a duration like [D-]HH:MM:SS");
        return false;
      }
      job.run = *e;
    }
    if (job.wait < 0) job.run = UNKNOWN;  // never started: elapsed 0 is not a run time
    if (col_[TIMELIMITRAW] >= 0 && !is_slurm_none(get(TIMELIMITRAW))) {
      auto m = parse_int(get(TIMELIMITRAW));
      if (!m) {
        reject("TimelimitRaw",
               "'" + std::string(get(TIMELIMITRAW)) + "' is not a number of minutes");
        return false;
      }
      job.req_time = static_cast<double>(*m) * 60.0;
    } else if (col_[TIMELIMIT] >= 0 && !is_slurm_none(get(TIMELIMIT))) {
      auto t = parse_slurm_duration(get(TIMELIMIT));
      if (!t) {
        reject("Timelimit",
               "'" + std::string(get(TIMELIMIT)) +
                   "' is not a duration like [D-]HH:MM:SS, UNLIMITED or Partition_Limit");
        return false;
      }
      job.req_time = *t;
    }
    return true;
  }

  // A count column (absent or none: `out` kept); false after rejecting the line.
  bool read_count(Col c, int64_t& out) {
    const std::string_view s = get(c);
    if (col_[c] < 0 || is_slurm_none(s)) return true;
    auto v = parse_int(s.substr(0, s.find('-')));  // ReqNodes may be a range "2-4"
    if (!v || *v < 0 || *v > JOB_MAX_COUNT) {
      reject(COL_NAMES[c],
             "'" + std::string(s) + "' is not a count in " + range_text(int64_t{0}, JOB_MAX_COUNT));
      return false;
    }
    out = *v;
    return true;
  }

  // The CPU and node counts.
  bool parse_counts(Job& job) {
    if (!read_count(ALLOCCPUS, job.alloc_procs) || !read_count(REQCPUS, job.req_procs) ||
        !read_count(NNODES, job.alloc_nodes) || !read_count(REQNODES, job.req_nodes))
      return false;
    if (job.alloc_nodes < 0 && !read_count(ALLOCNODES, job.alloc_nodes)) return false;
    if (job.alloc_procs == 0) job.alloc_procs = UNKNOWN_INT;  // never allocated
    return true;
  }

  bool parse_req_mem(Job& job) {
    // Memory: ReqTRES mem= is the job total; old ReqMem suffixes say per CPU (c) / per node (n).
    if (col_[REQMEM] >= 0 && !is_slurm_none(get(REQMEM))) {
      char per = 0;
      auto m = parse_slurm_mem(get(REQMEM), &per);
      if (!m) {
        reject("ReqMem", "'" + std::string(get(REQMEM)) +
                             "' is not a memory size like 4000M, 2800Mc or 4Gn (at most 4 EiB)");
        return false;
      }
      int64_t mult = 1;
      if (per == 'c')
        mult = std::max<int64_t>(1, job.req_procs > 0 ? job.req_procs : job.alloc_procs);
      if (per == 'n')
        mult = std::max<int64_t>(1, job.req_nodes > 0 ? job.req_nodes : job.alloc_nodes);
      const auto total = checked_mul(*m, mult);
      if (!total || *total > JOB_MAX_BYTES) {
        reject("ReqMem", "'" + std::string(get(REQMEM)) + "' x " + std::to_string(mult) +
                             (per == 'c' ? " CPUs" : " nodes") +
                             " is more than 4 EiB (2^62 bytes)");
        return false;
      }
      job.req_mem = *total;
    }
    return true;
  }

  // ReqTRES and AllocTRES: memory, GPUs, and the CPU and node counts the other columns lacked.
  bool parse_tres_columns(Job& job) {
    for (Col c : {REQTRES, ALLOCTRES}) {
      if (col_[c] < 0 || is_slurm_none(get(c))) continue;
      auto t = parse_tres(get(c));
      if (!t) {
        reject(COL_NAMES[c], "'" + std::string(get(c)) +
                                 "' is not a TRES list like cpu=4,mem=16G,node=1,gres/gpu=2");
        return false;
      }
      if (c == REQTRES) {
        if (t->mem >= 0) job.req_mem = t->mem;
        if (t->gpu >= 0) job.req_gpus = t->gpu;
        if (job.req_procs < 0 && t->cpu >= 0) job.req_procs = t->cpu;
        if (job.req_nodes < 0 && t->node >= 0) job.req_nodes = t->node;
      } else {
        if (t->gpu >= 0) job.alloc_gpus = t->gpu;
        if (job.alloc_procs < 0 && t->cpu >= 0) job.alloc_procs = t->cpu;
      }
    }
    if (job.req_gpus < 0 && col_[REQTRES] >= 0 && !is_slurm_none(get(REQTRES))) job.req_gpus = 0;
    return true;
  }

  // The names, interned.
  void intern_names(Job& job) {
    if (col_[USER] >= 0 && !get(USER).empty()) job.user = names_.users.intern(get(USER));
    if (col_[GROUP] >= 0 && !get(GROUP).empty()) job.group = names_.groups.intern(get(GROUP));
    if (col_[ACCOUNT] >= 0 && !get(ACCOUNT).empty())
      job.account = names_.accounts.intern(get(ACCOUNT));
    if (col_[PARTITION] >= 0 && !get(PARTITION).empty())
      job.partition = names_.partitions.intern(get(PARTITION));
    if (col_[QOS] >= 0 && !get(QOS).empty()) job.qos = names_.qos.intern(get(QOS));
    if (col_[JOBNAME] >= 0 && !get(JOBNAME).empty())
      job.name = names_.job_names.intern(get(JOBNAME));
  }

  std::array<int, NCOLS> col_{};
  size_t ncols_ = 0;
  bool have_header_ = false;
  std::vector<std::string_view> fields_;
  std::vector<size_t> free_cols_;  // header positions of free-text columns, ascending
  Job held_job_;
  bool held_ = false;
};

}  // namespace

std::unique_ptr<JobReader> make_sacct_reader(const std::string& path, const ReadOptions& opts) {
  return std::make_unique<SacctReader>(path, opts);
}

}  // namespace mlprio::detail
