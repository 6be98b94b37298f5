// Trace readers (SWF, sacct, Alibaba, jobcomp/filetxt, and the gzip layer under all of them):
// any bytes give jobs or an InputError naming the file, never a crash, hang or unbounded memory.
// MLPRIO_FUZZ_FORMAT picks the reader (0 = auto-detect); strict and lenient modes alternate. For
// SWF the reader's AVX-512 line scan and its byte loop must also agree on every job and count
// (where the CPU has AVX-512; elsewhere both runs take the byte loop).
#include <cstdint>
#include <cstring>

#include "fuzz_util.hpp"
#include "mlprio/jobs/trace.hpp"

#ifndef MLPRIO_FUZZ_FORMAT
#define MLPRIO_FUZZ_FORMAT AUTO
#endif

constexpr mlprio::TraceFormat FUZZ_FORMAT = mlprio::TraceFormat::MLPRIO_FUZZ_FORMAT;

namespace mlprio::detail {
bool set_swf_scan_mode(int mode);  // core/src/jobs/swf_scan.hpp: 1 byte loop, 2 AVX-512, 3 AVX2
}

namespace {

// The lenient SWF read with the byte loop (mode 1) or a vector scan (2: AVX-512, 3: AVX2).
mlprio::Trace read_swf(const std::string& path, int mode) {
  mlprio::detail::set_swf_scan_mode(mode);
  mlprio::ReadOptions o;
  o.format = mlprio::TraceFormat::SWF;
  mlprio::Trace t = mlprio::load_trace(path, o);
  mlprio::detail::set_swf_scan_mode(0);
  return t;
}

bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

void check_same(const mlprio::Trace& a, const mlprio::Trace& b) {
  bool same = a.jobs.size() == b.jobs.size() && a.report.skipped == b.report.skipped &&
              a.report.first_errors.size() == b.report.first_errors.size();
  for (size_t i = 0; same && i < a.report.first_errors.size(); ++i)
    same = a.report.first_errors[i].message == b.report.first_errors[i].message;
  for (size_t i = 0; same && i < a.jobs.size(); ++i) {
    const mlprio::Job &x = a.jobs[i], &y = b.jobs[i];
    same = x.id == y.id && same_bits(x.submit, y.submit) && same_bits(x.wait, y.wait) &&
           same_bits(x.run, y.run) && x.alloc_procs == y.alloc_procs &&
           x.req_procs == y.req_procs && same_bits(x.avg_cpu_time, y.avg_cpu_time) &&
           same_bits(x.req_time, y.req_time) && x.req_mem == y.req_mem &&
           x.used_mem == y.used_mem && x.status == y.status && x.user == y.user &&
           x.group == y.group && x.app == y.app && x.queue == y.queue &&
           x.partition == y.partition && x.preceding_job == y.preceding_job &&
           same_bits(x.think_time, y.think_time);
  }
  if (!same) __builtin_trap();  // the two scans disagree: a bug in one of them
}

// Each vector scan this CPU has reads the file as the byte loop does.
void check_scans_agree(const std::string& path) {
  const mlprio::Trace a = read_swf(path, 1);
  for (int mode : {2, 3}) {
    const bool usable = mlprio::detail::set_swf_scan_mode(mode);
    mlprio::detail::set_swf_scan_mode(0);
    if (usable) check_same(a, read_swf(path, mode));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mlprio::fuzz::write_input(data, size, ".trace");
  for (bool strict : {false, true}) {
    mlprio::ReadOptions o;
    o.format = FUZZ_FORMAT;
    o.strict = strict;
    try {
      const mlprio::Trace t = mlprio::load_trace(path, o);
      (void)t.jobs.size();
    } catch (const mlprio::InputError&) {
    } catch (const std::invalid_argument&) {  // cannot tell the format (auto)
    }
  }
  if (FUZZ_FORMAT == mlprio::TraceFormat::SWF) {
    try {
      check_scans_agree(path);
    } catch (const mlprio::InputError&) {  // e.g. a line over 1 MiB: both runs throw alike
    }
  }
  return 0;
}
