// Reader for the Standard Workload Format (Parallel Workloads Archive): `;` header comments,
// then one job per line of 18 whitespace-separated fields (-1 = unknown). Also accepts the
// extended layouts met in real archives: 19 columns (ALCF Mira/Theta: an extra trailing column,
// ignored) and 21 columns (MetaCentrum as converted for the Alea simulator: a `{node list}`, the
// queue name and the PBS resource string; there the memory fields are bytes per job, not KB per
// processor).
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "jobs/parse.hpp"
#include "jobs/reader_base.hpp"
#include "jobs/swf_scan.hpp"

namespace mlprio::detail {
namespace {

bool cpu_has_avx512_scan() {
#if defined(__x86_64__)
  static const bool has = swf_scan_avx512_built() && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vbmi") &&
                          __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("bmi") &&
                          __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx2_scan() {
#if defined(__x86_64__)
  static const bool has = swf_scan_avx2_built() && __builtin_cpu_supports("avx2") &&
                          __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
                          __builtin_cpu_supports("popcnt");
  return has;
#else
  return false;
#endif
}

int initial_scan_mode() {
  const char* e = std::getenv("MLPRIO_SWF_SCAN");
  if (e != nullptr && std::strcmp(e, "scalar") == 0) return 1;
  if (e != nullptr && std::strcmp(e, "avx512") == 0) return 2;
  if (e != nullptr && std::strcmp(e, "avx2") == 0) return 3;
  return 0;
}

SwfScanFn scan_for_mode(int mode) {
  const bool avx512 = cpu_has_avx512_scan(), avx2 = cpu_has_avx2_scan();
  switch (mode) {
    case 0:
      return avx512 ? swf_scan_avx512_next : avx2 ? swf_scan_avx2_next : nullptr;
    case 2:
      return avx512 ? swf_scan_avx512_next : nullptr;
    case 3:
      return avx2 ? swf_scan_avx2_next : nullptr;
    default:
      return nullptr;
  }
}

std::atomic<int>& scan_mode() {
  static std::atomic<int> mode{initial_scan_mode()};
  return mode;
}

constexpr const char* SWF_FIELD_NAMES[18] = {
    "job_number",       "submit_time",   "wait_time",       "run_time",       "allocated_procs",
    "average_cpu_time", "used_memory",   "requested_procs", "requested_time", "requested_memory",
    "status",           "user_id",       "group_id",        "executable",     "queue",
    "partition",        "preceding_job", "think_time"};

std::string field_label(int i) {
  return std::to_string(i + 1) + " (" + SWF_FIELD_NAMES[i] + ")";
}

JobStatus swf_status(int64_t s) {
  switch (s) {
    case 0:
      return JobStatus::FAILED;
    case 1:
      return JobStatus::COMPLETED;
    case 2:
    case 3:
    case 4:
      return JobStatus::PARTIAL;
    case 5:
      return JobStatus::CANCELLED;
    default:
      return JobStatus::UNKNOWN_STATE;
  }
}

// Sets what the SWF fields give a job and Job{}'s defaults for the rest (cheaper than
// constructing a Job and moving it in, once per line), from the integer fields x (0, 4, 7,
// 10..16, already range-checked) and the doubles v (1, 2, 3, 5, 8, 17); memory is left unknown.
inline __attribute__((always_inline)) void set_job(Job& job, const int64_t* x, const double* v) {
  // A new Job member changes its size: reset it here too, then update the size.
  static_assert(sizeof(void*) != 8 || sizeof(Job) == 192, "a new Job field: reset it here");
  const auto unk = [](double d) { return d == -1.0 ? UNKNOWN : d; };
  job.alloc_nodes = job.req_nodes = UNKNOWN_INT;
  job.alloc_gpus = job.req_gpus = UNKNOWN;
  job.req_mem = job.used_mem = UNKNOWN_INT;
  job.exit_code = job.account = job.qos = job.name = -1;
  job.features.clear();
  job.id = x[0];
  job.submit = v[1];
  job.wait = unk(v[2]);
  job.run = unk(v[3]);
  job.alloc_procs = x[4];
  job.avg_cpu_time = unk(v[5]);
  job.req_procs = x[7];
  job.req_time = unk(v[8]);
  job.status = swf_status(x[10]);
  job.user = static_cast<int32_t>(x[11]);
  job.group = static_cast<int32_t>(x[12]);
  job.app = static_cast<int32_t>(x[13]);
  job.queue = static_cast<int32_t>(x[14]);
  job.partition = static_cast<int32_t>(x[15]);
  job.preceding_job = x[16];
  job.think_time = unk(v[17]);
}

// The 18/19-column layout's memory: KB per processor requested (field 9) and used (field 6)
// times the job's processors, as bytes per job. Returns -1 when both fit in JOB_MAX_BYTES (or
// are unknown: -1 KB or no processors), else the field that does not, with its processors in
// `procs`.
inline __attribute__((always_inline)) int set_swf_memory(Job& job, int64_t kb_req, int64_t kb_used,
                                                         int64_t& procs) {
  const int64_t p_req = job.req_procs > 0 ? job.req_procs : job.alloc_procs;
  const int64_t p_used = job.alloc_procs > 0 ? job.alloc_procs : job.req_procs;
  const auto bytes = [](int64_t kb, int64_t p, int64_t& out) {
    if (kb < 0 || p <= 0) return true;
    const auto b = checked_mul(kb * 1024, p);
    if (!b || *b > JOB_MAX_BYTES) return false;
    out = *b;
    return true;
  };
  procs = p_req;
  if (!bytes(kb_req, p_req, job.req_mem)) return 9;
  procs = p_used;
  if (!bytes(kb_used, p_used, job.used_mem)) return 6;
  return -1;
}

// parse_job's range checks as bounds per field, for the vector scan: the 18/19-column layout,
// then the 21-column one (its field 9 is bytes per job; field 6 is not read). Keep in step with
// the integer() calls and the submit time check in parse_job.
constexpr SwfBounds make_bound(bool alea) {
  constexpr int64_t I32_MIN = std::numeric_limits<int32_t>::min();
  constexpr int64_t I32_MAX = std::numeric_limits<int32_t>::max();
  constexpr int64_t KB_MAX = JOB_MAX_BYTES / 1024;
  SwfBounds b{};
  for (int k = 0; k < 24; ++k) {
    b.lo[k] = std::numeric_limits<int64_t>::min();
    b.hi[k] = std::numeric_limits<int64_t>::max();
  }
  b.lo[1] = 0;  // submit time
  for (int k : {4, 7}) {
    b.lo[k] = -1;
    b.hi[k] = JOB_MAX_COUNT;
  }
  for (int k = 11; k <= 15; ++k) {
    b.lo[k] = I32_MIN;
    b.hi[k] = I32_MAX;
  }
  b.lo[9] = -1;
  b.hi[9] = alea ? JOB_MAX_BYTES : KB_MAX;
  if (!alea) {
    b.lo[6] = -1;
    b.hi[6] = KB_MAX;
  }
  return b;
}
constexpr SwfBounds SWF_BOUNDS[2] = {make_bound(false), make_bound(true)};

class SwfReader final : public ReaderBase {
 public:
  using ReaderBase::ReaderBase;
  TraceFormat format() const override { return TraceFormat::SWF; }

  bool next(Job& job) override {
    std::string_view line;
    for (;;) {
      if (vector_scan_ != nullptr) {  // the common line: found and scanned at once
        const std::string_view u = lines_.unread();
        if (const size_t used = vector_scan_(u.data(), u.size(), SWF_BOUNDS, vscan_)) {
          lines_.take_line(used);
          ++report_.lines;
          if (take_plain_job(u.substr(0, used - 1), job)) return true;
          if (parse_job(u.substr(0, used - 1), job, true)) return true;
          continue;
        }
      }
      if (!next_line(line)) break;
      const std::string_view t = trim(line);
      if (t.empty()) {
        ++report_.blank_lines;
        continue;
      }
      if (t.front() == ';') {
        ++report_.comment_lines;
        parse_header(t.substr(1));
        continue;
      }
      if (parse_job(t, job, false)) return true;
    }
    return false;
  }

 private:
  // The byte loop's fields and values (parse_job's, kept as members; see there).
  std::string_view fields_[21];
  double v_[18];
  int64_t iv_[18];
  bool plain_[18];
  // The vector line scan (swf_scan.hpp), chosen once per reader; nullptr: the byte loop.
  const SwfScanFn vector_scan_ = swf_scan_vector();
  SwfLineScan vscan_;

  // The common line, which the vector scan read whole in the 18/19-column layout with every
  // field within range: the job set, its submit time noted, and true. False where parse_job must
  // read the line: other layouts, a field out of range, memory past JOB_MAX_BYTES (reported
  // there).
  bool take_plain_job(std::string_view line, Job& job) {
    if (!vscan_.in_range || (vscan_.fields != 18 && vscan_.fields != 19)) return false;
    set_vector_doubles(line);
    set_job(job, vscan_.iv, v_);
    int64_t procs;
    if (set_swf_memory(job, vscan_.iv[9], vscan_.iv[6], procs) >= 0) return false;
    note_submit(job.submit);
    return true;
  }

  // The doubles parse_job reads of a vector-scanned line, into v_, from its integers: exact
  // (|iv| < 10^15 < 2^53), and -0.0 where the field is "-0", as the byte loop reads it.
  void set_vector_doubles(std::string_view line) {
    for (const int i : {1, 2, 3, 5, 8, 17}) {
      v_[i] = static_cast<double>(vscan_.iv[i]);
      if (vscan_.iv[i] == 0 && line[vscan_.start[i]] == '-') v_[i] = -0.0;
    }
  }

  void parse_header(std::string_view s) {
    s = trim(s);
    const size_t colon = s.find(':');
    if (colon == std::string_view::npos || colon == 0) return;
    const std::string_view key = trim(s.substr(0, colon));
    if (key.find_first_of(" \t") != std::string_view::npos) return;  // prose, not a key
    const std::string_view value = trim(s.substr(colon + 1));
    header_.fields.emplace_back(std::string(key), std::string(value));
    const auto as_int = [&]() { return parse_int(value).value_or(-1); };
    if (key == "MaxNodes")
      header_.max_nodes = as_int();
    else if (key == "MaxProcs")
      header_.max_procs = as_int();
    else if (key == "MaxJobs")
      header_.max_jobs = as_int();
    else if (key == "UnixStartTime")
      header_.unix_start_time = as_int();
  }

  // Splits the line into fields and reads the 18 numeric ones in the same pass. A field of at
  // most 15 digits with an optional '-' (nearly every field of every trace) is read here,
  // exactly (below 2^53) and as std::from_chars reads it, -0 included; any other goes to
  // parse_double(). Returns the number of fields (f holds the first 21).
  size_t scan_fields(std::string_view s, std::string_view (&f)[21], double (&v)[18],
                     int64_t (&iv)[18], bool (&plain)[18]) {
    // util::is_space as a table: one load per character.
    static constexpr auto SPACE = [] {
      std::array<bool, 256> t{};
      for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = is_space(static_cast<char>(c));
      return t;
    }();
    const auto space = [](char c) { return SPACE[static_cast<unsigned char>(c)]; };
    size_t n = 0;
    const char* p = s.data();
    const char* const end = p + s.size();
    for (;;) {
      while (p != end && space(*p)) ++p;
      if (p == end) break;
      const char* const start = p;
      bool is_plain = false;
      uint64_t x = 0;
      bool neg = false;
      if (n < 18) {
        neg = *p == '-';
        if (neg) ++p;
        const char* const digits_from = p;
        unsigned d = 0;
        while (p != end && (d = static_cast<unsigned char>(*p) - static_cast<unsigned>('0')) <= 9) {
          x = x * 10 + d;
          ++p;
        }
        const auto digits = static_cast<size_t>(p - digits_from);
        is_plain = digits >= 1 && digits <= 15 && (p == end || space(*p));
      }
      if (!is_plain)
        while (p != end && !space(*p)) ++p;
      if (n < 21) f[n] = std::string_view(start, static_cast<size_t>(p - start));
      if (n < 18) {
        plain[n] = is_plain;
        if (is_plain) {
          iv[n] = neg ? -static_cast<int64_t>(x) : static_cast<int64_t>(x);
          v[n] = neg ? -static_cast<double>(x) : static_cast<double>(x);
        }
      }
      ++n;
    }
    return n;
  }

  // Out of line, so that the checks above it stay small enough to inline.
  [[gnu::noinline]] void reject_range(int i, std::string_view field, int64_t lo, int64_t hi,
                                      const char* expected) {
    reject("field " + field_label(i), "'" + std::string(field) + "' is out of range; expected " +
                                          expected + " in " + range_text(lo, hi));
  }

  // `scanned`: the vector scan of `line` is in vscan_ already (swf_scan_avx512_next took it).
  bool parse_job(std::string_view line, Job& job, bool scanned) {
    // The fields and values: from the vector scan when it takes the line (then every one of the
    // first 18 fields is plain, and a field's text is only cut out where it is used), else from
    // the byte loop into the members (zeroing 21 views for every line costs 4 %).
    size_t n;
    double* v;
    int64_t* iv;
    const bool* plain;  // read only where !vector_line
    // A line the vector scan declined in next() is not offered to it again: the byte loop reads
    // it, with the same result.
    const bool vector_line = scanned;
    // Every field's range already checked (the bounds below are integer()'s).
    const bool checked = vector_line && vscan_.in_range;
    if (vector_line) {
      n = static_cast<size_t>(vscan_.fields);
      iv = vscan_.iv;
      set_vector_doubles(line);
      v = v_;
      plain = nullptr;
    } else {
      n = scan_fields(line, fields_, v_, iv_, plain_);
      v = v_;
      iv = iv_;
      plain = plain_;
    }
    const auto f = [&](int i) -> std::string_view {
      if (!vector_line) return fields_[i];
      return line.substr(vscan_.start[i], static_cast<size_t>(vscan_.end[i] - vscan_.start[i]));
    };
    if (n != 18 && n != 19 && n != 21) {
      reject("line",
             "expected 18 whitespace-separated SWF fields (or the 19/21-column extended "
             "layouts), found " +
                 std::to_string(n));
      return false;
    }
    for (int i = 0; i < 18 && !vector_line; ++i) {  // the vector scan takes plain lines only
      if (plain[i]) continue;
      auto d = parse_double(f(i));
      if (!d || !std::isfinite(*d)) {
        reject("field " + field_label(i),
               "'" + std::string(f(i)) + "' is not a number; expected a number, or -1 for unknown");
        return false;
      }
      v[i] = *d;
    }
    if (!checked && v[1] < 0) {
      reject("field " + field_label(1),
             "submit time is " + std::string(f(1)) + "; every job needs a submit time >= 0");
      return false;
    }
    const bool alea = (n == 21);
    // Integer fields, range-checked (a double out of an integer's range is undefined behaviour
    // to cast): -1 is "unknown" wherever the format allows it.
    bool ok = true;
    const auto integer = [&](int i, int64_t lo, int64_t hi, const char* expected)
                             __attribute__((always_inline))
                                 ->int64_t {
      if (checked) return iv[i];
      if (!ok) return 0;
      if (vector_line || plain[i]) {  // to_integer() of the same value, without the double
        if (iv[i] >= lo && iv[i] <= hi) return iv[i];
      } else if (const auto x = to_integer<int64_t>(v[i], lo, hi)) {
        return *x;
      }
      ok = false;
      reject_range(i, f(i), lo, hi, expected);
      return 0;
    };
    constexpr int64_t I32_MIN = std::numeric_limits<int32_t>::min();
    constexpr int64_t I32_MAX = std::numeric_limits<int32_t>::max();
    constexpr int64_t I64_MIN = std::numeric_limits<int64_t>::min();
    constexpr int64_t I64_MAX = std::numeric_limits<int64_t>::max();
    // Per-processor KB: the whole job's bytes must stay within JOB_MAX_BYTES.
    constexpr int64_t KB_MAX = JOB_MAX_BYTES / 1024;
    const char* count = "-1 (unknown) or a count";
    const char* id_text = "an integer";

    // The integer fields, range-checked in the order their errors are reported.
    int64_t x[18] = {};
    x[0] = integer(0, I64_MIN, I64_MAX, id_text);
    x[4] = integer(4, -1, JOB_MAX_COUNT, count);
    x[7] = integer(7, -1, JOB_MAX_COUNT, count);
    x[10] = integer(10, I64_MIN, I64_MAX, id_text);
    for (int i = 11; i <= 15; ++i) x[i] = integer(i, I32_MIN, I32_MAX, id_text);
    x[16] = integer(16, I64_MIN, I64_MAX, id_text);
    set_job(job, x, v);
    if (alea) {
      job.req_mem = integer(9, -1, JOB_MAX_BYTES, "-1 (unknown) or bytes");  // per job here
      job.queue = names_.queues.intern(f(19));
    } else {
      const int64_t kb_per_proc_req = integer(9, -1, KB_MAX, "-1 (unknown) or KB per processor");
      const int64_t kb_per_proc_used = integer(6, -1, KB_MAX, "-1 (unknown) or KB per processor");
      int64_t procs = 0;
      const int too_big = ok ? set_swf_memory(job, kb_per_proc_req, kb_per_proc_used, procs) : -1;
      if (too_big >= 0) {
        reject("field " + field_label(too_big),
               "'" + std::string(f(too_big)) + "' KB per processor x " + std::to_string(procs) +
                   " processors is more than 2^62 bytes");
        ok = false;
      }
    }
    if (!ok) return false;
    note_submit(job.submit);
    return true;
  }
};

}  // namespace

bool set_swf_scan_mode(int mode) {
  scan_mode().store(mode);
  return scan_for_mode(mode) != nullptr;
}

SwfScanFn swf_scan_vector() {
  return scan_for_mode(scan_mode().load());
}

std::unique_ptr<JobReader> make_swf_reader(const std::string& path, const ReadOptions& opts) {
  return std::make_unique<SwfReader>(path, opts);
}

}  // namespace mlprio::detail
