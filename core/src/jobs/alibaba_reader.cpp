// Reader for the Alibaba GPU-sharing cluster pod trace (2023, "openb" CSV): one pod per line,
// columns found by the header's names. A pod becomes a Job: submit = creation_time,
// wait = scheduled_time - creation_time, run = deletion_time - scheduled_time, processors =
// ceil(cpu_milli / 1000), GPUs = num_gpu, or gpu_milli / 1000 of one GPU for a sharing pod,
// memory = memory_mib MiB. The gpu_spec constraint (e.g. "V100M16|V100M32") is kept as the
// job's partition name; pods still Running or Pending at the end of the trace keep that status.
#include <array>
#include <cmath>
#include <string>

#include "jobs/parse.hpp"
#include "jobs/reader_base.hpp"

namespace mlprio::detail {
namespace {

enum Col {
  NAME,
  CPU_MILLI,
  MEMORY_MIB,
  NUM_GPU,
  GPU_MILLI,
  GPU_SPEC,
  QOS,
  POD_PHASE,
  CREATION,
  DELETION,
  SCHEDULED,
  NCOLS
};
constexpr const char* COL_NAMES[NCOLS] = {
    "name", "cpu_milli", "memory_mib",    "num_gpu",       "gpu_milli",     "gpu_spec",
    "qos",  "pod_phase", "creation_time", "deletion_time", "scheduled_time"};

class AlibabaReader final : public ReaderBase {
 public:
  AlibabaReader(const std::string& path, const ReadOptions& opts) : ReaderBase(path, opts) {
    col_.fill(-1);
  }
  TraceFormat format() const override { return TraceFormat::ALIBABA; }

  bool next(Job& job) override {
    std::string_view line;
    while (next_content_line(line)) {
      split(line);
      if (!have_header_) {
        for (size_t i = 0; i < f_.size(); ++i)
          for (int c = 0; c < NCOLS; ++c)
            if (trim(f_[i]) == COL_NAMES[c]) col_[static_cast<size_t>(c)] = static_cast<int>(i);
        for (Col c : {NAME, CPU_MILLI, MEMORY_MIB, NUM_GPU, GPU_MILLI, CREATION})
          if (col_[c] < 0)
            throw InputError(LineError{lines_.path(), lines_.line_number(), "header",
                                       std::string("missing column '") + COL_NAMES[c] +
                                           "' (expected the Alibaba openb pod CSV header: "
                                           "name,cpu_milli,memory_mib,num_gpu,gpu_milli,...)"});
        ncols_ = f_.size();
        have_header_ = true;
        ++report_.comment_lines;
        continue;
      }
      if (f_.size() != ncols_) {
        reject("line", "expected " + std::to_string(ncols_) + " comma-separated fields, found " +
                           std::to_string(f_.size()));
        continue;
      }
      if (parse(job)) return true;
    }
    return false;
  }

 private:
  void split(std::string_view line) { split_on(line, ',', f_, true); }
  std::string_view get(Col c) const {
    return col_[c] >= 0 ? f_[static_cast<size_t>(col_[c])] : std::string_view{};
  }

  // Empty and "nan" cells are unknown; anything else must be a non-negative number.
  bool num(Col c, double& out) {
    const std::string_view s = get(c);
    if (s.empty() || s == "nan" || s == "NaN") {
      out = UNKNOWN;
      return true;
    }
    auto v = parse_double(s);
    if (!v || *v < 0 || !std::isfinite(*v)) {
      reject(COL_NAMES[c], "'" + std::string(s) + "' is not a non-negative number");
      return false;
    }
    out = *v;
    return true;
  }

  bool out_of_range(Col c, const char* unit, int64_t max) {
    reject(COL_NAMES[c], "'" + std::string(get(c)) + "' is out of range; expected 0 to " +
                             std::to_string(max) + " " + unit);
    return false;
  }

  bool parse(Job& job) {
    double cpu, mem, ngpu, gmilli, created, deleted, sched;
    if (!num(CPU_MILLI, cpu) || !num(MEMORY_MIB, mem) || !num(NUM_GPU, ngpu) ||
        !num(GPU_MILLI, gmilli) || !num(CREATION, created) || !num(DELETION, deleted) ||
        !num(SCHEDULED, sched))
      return false;
    if (created < 0) {
      reject("creation_time", "missing; every pod needs a creation time");
      return false;
    }
    job = Job{};
    const std::string_view name = get(NAME);
    job.name = names_.job_names.intern(name);
    const size_t digits = name.find_last_not_of("0123456789");
    job.id = parse_int(name.substr(digits == std::string_view::npos ? 0 : digits + 1))
                 .value_or(report_.jobs + 1);
    job.submit = created;
    const std::string_view phase = get(POD_PHASE);
    if (phase == "Succeeded")
      job.status = JobStatus::COMPLETED;
    else if (phase == "Failed")
      job.status = JobStatus::FAILED;
    else if (phase == "Running")
      job.status = JobStatus::RUNNING;
    else if (phase == "Pending")
      job.status = JobStatus::PENDING;
    const bool started = sched >= 0 && job.status != JobStatus::PENDING;
    if (started) {
      job.wait = std::max(0.0, sched - created);
      if (deleted >= sched) job.run = deleted - sched;
    }
    // Sizes are range-checked before any integer conversion (see checked_cast.hpp): a pod
    // asking for 1e300 GPUs is a malformed line, not one that needs none.
    if (cpu >= 0) {
      const auto procs = to_integer<int64_t>(std::ceil(cpu / 1000.0), 0, JOB_MAX_COUNT);
      if (!procs) return out_of_range(CPU_MILLI, "processors x 1000", JOB_MAX_COUNT * 1000);
      job.req_procs = job.alloc_procs = *procs;
    }
    if (mem >= 0) {
      const auto bytes = to_integer<int64_t>(mem * 1048576.0, 0, JOB_MAX_BYTES);
      if (!bytes) return out_of_range(MEMORY_MIB, "MiB", JOB_MAX_BYTES >> 20);
      job.req_mem = *bytes;
    }
    if (ngpu >= 0) {
      if (ngpu > static_cast<double>(JOB_MAX_COUNT))
        return out_of_range(NUM_GPU, "GPUs", JOB_MAX_COUNT);
      job.req_gpus = ngpu;
      if (ngpu == 1 && gmilli >= 0) {
        if (gmilli > 1000.0) return out_of_range(GPU_MILLI, "thousandths of one GPU", 1000);
        job.req_gpus = gmilli / 1000.0;
      }
      if (started) job.alloc_gpus = job.req_gpus;
    }
    if (!get(QOS).empty()) job.qos = names_.qos.intern(get(QOS));
    if (const auto spec = get(GPU_SPEC); !spec.empty() && spec != "nan")
      job.partition = names_.partitions.intern(spec);
    note_submit(job.submit);
    return true;
  }

  std::array<int, NCOLS> col_{};
  size_t ncols_ = 0;
  bool have_header_ = false;
  std::vector<std::string_view> f_;
};

}  // namespace

std::unique_ptr<JobReader> make_alibaba_reader(const std::string& path, const ReadOptions& opts) {
  return std::make_unique<AlibabaReader>(path, opts);
}

}  // namespace mlprio::detail
