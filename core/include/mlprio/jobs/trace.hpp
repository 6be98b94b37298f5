// A whole trace in memory and the streaming readers that produce it.
//
// Formats: the Standard Workload Format (18 fields, and the 19- and 21-column layouts found in
// real archives), `sacct --parsable2` dumps, and the Alibaba GPU pod CSV. Every reader takes
// plain or gzip input (detected from the bytes, not the name), streams line by line, and on a
// malformed line either skips and counts it (the default; the first few are kept with file,
// line and field) or throws InputError naming file, line and field (strict mode).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mlprio/jobs/job.hpp"
#include "mlprio/util/errors.hpp"

namespace mlprio {

enum class TraceFormat { AUTO, SWF, SACCT, ALIBABA, JOBCOMP };

std::string_view trace_format_name(TraceFormat f);
// Parses "swf", "sacct", "alibaba", "jobcomp" (slurmctld's jobcomp/filetxt log) or "auto";
// throws std::invalid_argument otherwise.
TraceFormat parse_trace_format(std::string_view s);
// Guesses the format from the first non-empty lines of a file (plain or gzip).
TraceFormat detect_trace_format(const std::string& path);

// String interning for one category of names (users, partitions, ...).
class NameTable {
 public:
  int32_t intern(std::string_view s);
  // Returns the name for an id, or "" for -1 / out of range.
  const std::string& name(int32_t id) const;
  int32_t find(std::string_view s) const;  // -1 when absent
  size_t size() const { return names_.size(); }

 private:
  std::vector<std::string> names_;
  std::unordered_map<std::string, int32_t> ids_;
};

struct TraceNames {
  NameTable users, groups, accounts, partitions, queues, qos, job_names, features;
};

// Header facts. SWF header comments (`; Key: value`) are kept verbatim in `fields`; the numeric
// ones the replayer needs are parsed. -1 when absent.
struct TraceHeader {
  int64_t max_nodes = -1;
  int64_t max_procs = -1;
  int64_t max_jobs = -1;
  int64_t unix_start_time = -1;
  std::vector<std::pair<std::string, std::string>> fields;
  std::optional<std::string> get(std::string_view key) const;
};

// One rejected line, kept for the report.
struct LineError {
  std::string file;
  int64_t line = 0;
  std::string field;
  std::string message;
  std::string what() const;  // "file:line: field 'x': message"
};

struct ReadReport {
  int64_t lines = 0;          // physical lines read
  int64_t comment_lines = 0;  // header/comment lines
  int64_t blank_lines = 0;
  int64_t jobs = 0;     // job records produced
  int64_t skipped = 0;  // malformed records skipped
  int64_t ignored = 0;  // well-formed records that are not jobs (e.g. sacct job steps)
  std::vector<LineError> first_errors;  // at most ReadOptions::max_reported
  bool was_sorted = true;               // false when the trace had to be sorted by submit time
  int64_t out_of_order = 0;             // records whose submit time was earlier than the one before
};

struct ReadOptions {
  TraceFormat format = TraceFormat::AUTO;
  bool strict = false;   // first malformed line throws InputError
  int max_reported = 5;  // malformed lines kept in ReadReport::first_errors
};

// Thrown for unusable input: a missing file, or a malformed line in strict mode.
class InputError : public UsageError {
 public:
  explicit InputError(LineError e);
  InputError(const std::string& file, const std::string& message);
  const LineError& detail() const { return detail_; }

 private:
  LineError detail_;
};

// A streaming reader: next() yields jobs in file order. Header facts are complete after the
// first job (SWF headers precede the records) and final at end of input.
class JobReader {
 public:
  virtual ~JobReader() = default;
  virtual bool next(Job& job) = 0;
  virtual const TraceHeader& header() const = 0;
  virtual const ReadReport& report() const = 0;
  virtual TraceNames& names() = 0;
  virtual TraceFormat format() const = 0;
};

// Opens a reader for `path`; throws InputError when the file cannot be opened or its format
// cannot be told.
std::unique_ptr<JobReader> open_job_reader(const std::string& path, const ReadOptions& opts = {});

struct Trace {
  std::string path;
  TraceFormat format = TraceFormat::AUTO;
  TraceHeader header;
  TraceNames names;
  ReadReport report;
  std::vector<Job> jobs;  // sorted by submit time (stable: file order among equal times)
};

// Reads a whole trace and sorts it by submit time (stable), recording in the report whether it
// had to. Throws InputError as open_job_reader and strict mode do.
Trace load_trace(const std::string& path, const ReadOptions& opts = {});

// Writes jobs as SWF: header comments from `header.fields` (MaxNodes/MaxProcs etc. are written
// from the typed fields when set), then one 18-field line per job. Memory is written in KB per
// processor as the format defines. Returns the stream.
std::ostream& write_swf(std::ostream& out, const TraceHeader& header, const std::vector<Job>& jobs);

// SHA-256 of a file's bytes as stored (hex), for HDF5 provenance attributes.
std::string file_sha256(const std::string& path);
// SHA-256 of bytes in memory (hex).
std::string bytes_sha256(std::string_view bytes);

}  // namespace mlprio
