// Format detection, the reader factory and whole-trace loading with a stable sort by submit time.
#include <algorithm>
#include <numeric>

#include "jobs/line_reader.hpp"
#include "jobs/parse.hpp"
#include "jobs/reader_base.hpp"

namespace mlprio {

TraceFormat detect_trace_format(const std::string& path) {
  detail::LineReader lines(path);
  std::string_view line;
  int looked = 0;
  while (lines.next(line) && looked < 50) {
    const std::string_view t = detail::trim(line);
    if (t.empty()) continue;
    ++looked;
    if (t.front() == ';') return TraceFormat::SWF;
    if (t.find('|') != std::string_view::npos && t.find("JobID") != std::string_view::npos)
      return TraceFormat::SACCT;
    if (t.find("cpu_milli") != std::string_view::npos && t.find(',') != std::string_view::npos)
      return TraceFormat::ALIBABA;
    if (t.rfind("JobId=", 0) == 0 && t.find(" UserId=") != std::string_view::npos)
      return TraceFormat::JOBCOMP;
    std::string_view f[21];
    const size_t n = detail::split_ws(t, f);
    if ((n == 18 || n == 19 || n == 21) && detail::parse_double(f[0]) && detail::parse_double(f[1]))
      return TraceFormat::SWF;
    break;
  }
  throw InputError(path,
                   "cannot tell the trace format from its first lines; pass --format "
                   "swf|sacct|alibaba|jobcomp (SWF: 18 numeric fields per line; sacct: a "
                   "'JobID|...' header from sacct --parsable2; Alibaba: a CSV header with "
                   "cpu_milli; jobcomp: slurmctld's jobcomp/filetxt log, JobId=... UserId=...)");
}

std::unique_ptr<JobReader> open_job_reader(const std::string& path, const ReadOptions& opts) {
  TraceFormat f = opts.format;
  if (f == TraceFormat::AUTO) f = detect_trace_format(path);
  switch (f) {
    case TraceFormat::SWF:
      return detail::make_swf_reader(path, opts);
    case TraceFormat::SACCT:
      return detail::make_sacct_reader(path, opts);
    case TraceFormat::ALIBABA:
      return detail::make_alibaba_reader(path, opts);
    case TraceFormat::JOBCOMP:
      return detail::make_jobcomp_reader(path, opts);
    case TraceFormat::AUTO:
      break;
  }
  throw InputError(path, "no reader for this format");
}

Trace load_trace(const std::string& path, const ReadOptions& opts) {
  auto reader = open_job_reader(path, opts);
  Trace t;
  t.path = path;
  t.format = reader->format();
  Job job;
  while (reader->next(job)) t.jobs.push_back(std::move(job));
  t.header = reader->header();
  t.report = reader->report();
  t.names = std::move(reader->names());
  if (!t.report.was_sorted)
    std::stable_sort(t.jobs.begin(), t.jobs.end(),
                     [](const Job& a, const Job& b) { return a.submit < b.submit; });
  return t;
}

}  // namespace mlprio
