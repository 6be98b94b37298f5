// Shared machinery of the trace readers: the line source, the header/report/names every reader
// returns, and the one place that decides between "skip and count" and "throw" for a bad line.
#pragma once

#include <string>

#include "jobs/line_reader.hpp"
#include "jobs/parse.hpp"
#include "mlprio/jobs/trace.hpp"

namespace mlprio::detail {

class ReaderBase : public JobReader {
 public:
  ReaderBase(const std::string& path, const ReadOptions& opts) : lines_(path), opts_(opts) {}
  const TraceHeader& header() const override { return header_; }
  const ReadReport& report() const override { return report_; }
  TraceNames& names() override { return names_; }

 protected:
  // Records a malformed line. Throws InputError in strict mode; otherwise counts it and keeps
  // the first few for the report. Callers then skip the line.
  void reject(const std::string& field, const std::string& message) {
    LineError e{lines_.path(), lines_.line_number(), field, message};
    if (opts_.strict) throw InputError(std::move(e));
    ++report_.skipped;
    if (static_cast<int>(report_.first_errors.size()) < opts_.max_reported)
      report_.first_errors.push_back(std::move(e));
  }
  // Tracks submit order for the "not sorted" notice.
  void note_submit(double submit) {
    if (report_.jobs > 0 && submit < last_submit_) {
      ++report_.out_of_order;
      report_.was_sorted = false;
    }
    last_submit_ = submit;
    ++report_.jobs;
  }
  bool next_line(std::string_view& line) {
    if (!lines_.next(line)) return false;
    ++report_.lines;
    return true;
  }
  // The next line with something on it; blank ones are counted in the report.
  bool next_content_line(std::string_view& line) {
    while (next_line(line)) {
      if (!trim(line).empty()) return true;
      ++report_.blank_lines;
    }
    return false;
  }

  LineReader lines_;
  ReadOptions opts_;
  TraceHeader header_;
  ReadReport report_;
  TraceNames names_;

 private:
  double last_submit_ = 0;
};

std::unique_ptr<JobReader> make_swf_reader(const std::string& path, const ReadOptions& opts);
std::unique_ptr<JobReader> make_sacct_reader(const std::string& path, const ReadOptions& opts);
std::unique_ptr<JobReader> make_alibaba_reader(const std::string& path, const ReadOptions& opts);
std::unique_ptr<JobReader> make_jobcomp_reader(const std::string& path, const ReadOptions& opts);
// A Slurm job state as sacct and jobcomp/filetxt print it ("CANCELLED by 0" included).
JobStatus slurm_state(std::string_view s);

}  // namespace mlprio::detail
