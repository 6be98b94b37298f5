// Small out-of-line pieces of the job and trace types: names of enum values, string interning,
// header look-up and error formatting.
#include "mlprio/jobs/job.hpp"

#include <stdexcept>

#include "mlprio/jobs/trace.hpp"
#include "mlprio/util/errors.hpp"

namespace mlprio {

std::string_view job_status_name(JobStatus s) {
  switch (s) {
    case JobStatus::UNKNOWN_STATE:
      return "UNKNOWN";
    case JobStatus::FAILED:
      return "FAILED";
    case JobStatus::COMPLETED:
      return "COMPLETED";
    case JobStatus::PARTIAL:
      return "PARTIAL";
    case JobStatus::CANCELLED:
      return "CANCELLED";
    case JobStatus::TIMEOUT:
      return "TIMEOUT";
    case JobStatus::OUT_OF_MEMORY:
      return "OUT_OF_MEMORY";
    case JobStatus::NODE_FAIL:
      return "NODE_FAIL";
    case JobStatus::PREEMPTED:
      return "PREEMPTED";
    case JobStatus::RUNNING:
      return "RUNNING";
    case JobStatus::PENDING:
      return "PENDING";
  }
  return "UNKNOWN";
}

std::string_view trace_format_name(TraceFormat f) {
  switch (f) {
    case TraceFormat::AUTO:
      return "auto";
    case TraceFormat::SWF:
      return "swf";
    case TraceFormat::SACCT:
      return "sacct";
    case TraceFormat::ALIBABA:
      return "alibaba";
    case TraceFormat::JOBCOMP:
      return "jobcomp";
  }
  return "auto";
}

TraceFormat parse_trace_format(std::string_view s) {
  if (s == "auto") return TraceFormat::AUTO;
  if (s == "swf") return TraceFormat::SWF;
  if (s == "sacct") return TraceFormat::SACCT;
  if (s == "alibaba") return TraceFormat::ALIBABA;
  if (s == "jobcomp") return TraceFormat::JOBCOMP;
  throw ::mlprio::UsageError("unknown trace format '" + std::string(s) +
                             "'; expected one of auto, swf, sacct, alibaba, jobcomp");
}

int32_t NameTable::intern(std::string_view s) {
  if (auto it = ids_.find(std::string(s)); it != ids_.end()) return it->second;
  const auto id = static_cast<int32_t>(names_.size());
  names_.emplace_back(s);
  ids_.emplace(names_.back(), id);
  return id;
}

const std::string& NameTable::name(int32_t id) const {
  static const std::string empty;
  if (id < 0 || static_cast<size_t>(id) >= names_.size()) return empty;
  return names_[static_cast<size_t>(id)];
}

int32_t NameTable::find(std::string_view s) const {
  auto it = ids_.find(std::string(s));
  return it == ids_.end() ? -1 : it->second;
}

std::optional<std::string> TraceHeader::get(std::string_view key) const {
  for (const auto& [k, v] : fields)
    if (k == key) return v;
  return std::nullopt;
}

std::string LineError::what() const {
  std::string s = file;
  if (line > 0) s += ":" + std::to_string(line);
  s += ": ";
  if (!field.empty()) s += field + ": ";
  return s + message;
}

InputError::InputError(LineError e) : UsageError(e.what()), detail_(std::move(e)) {}

InputError::InputError(const std::string& file, const std::string& message)
    : InputError(LineError{file, 0, "", message}) {}

}  // namespace mlprio
