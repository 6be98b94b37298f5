// The resume journal of a sweep (<out>.journal): one checksummed line per record, every number a
// C99 hex float, so a result reads back bit for bit whichever rank computed it. A killed or
// signalled sweep re-run with the same command takes its finished tasks from here.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mlprio/replay/dist/sweep_plan.hpp"
#include "mlprio/util/errors.hpp"

namespace mlprio::replay::dist {

inline constexpr const char* JOURNAL_MAGIC = "mlprio-sweep-journal 1";

// The journal could not be written (a full disk, a file-size limit): a runtime failure (exit 1),
// not bad input; what was journaled before it is kept for the resume.
class JournalWriteError : public ::mlprio::RuntimeError {
 public:
  using ::mlprio::RuntimeError::RuntimeError;
};

// One journal record, one line: "R\t<key>\tok\t<jobs>\t...\t<hex floats>\t<fnv1a>" or
// "R\t<key>\tfailed\t<message>\t<fnv1a>". Parsing checks the checksum and rejects torn lines.
std::string result_line(const SweepPlan& plan, const TaskResult& r);
// Dispatch note: "S\t<key>\t<rank>\t<fnv1a>": the task was handed to a rank.
std::string started_line(const SweepPlan& plan, int64_t task, int rank);

// The journal beside the output (<out>.journal): records appended with one write() each and
// fsync'd, so a killed run leaves every finished task recorded. Reading keeps the last record of
// each task and the tasks that were started but never finished, in time linear in its length.
class Journal {
 public:
  Journal(const std::string& path, const SweepPlan& plan);  // opens, checks the header, reads
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  void append(const std::string& line);
  // Parses a result line against the plan (nullopt when torn or not one of this plan's tasks).
  static std::optional<TaskResult> parse_result(const SweepPlan& plan, const std::string& line);
  const std::map<int64_t, TaskResult>& done() const { return done_; }
  // Tasks started in an earlier run and never finished: (task, rank).
  const std::vector<std::pair<int64_t, int>>& interrupted() const { return interrupted_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::map<int64_t, TaskResult> done_;
  std::vector<std::pair<int64_t, int>> interrupted_;
};

// True when the journal already holds an ok record of the task (then it is not appended again).
bool journaled_ok(const Journal& journal, int64_t task);
// A journaled task recomputed for its detail must reproduce the journal's summary bit for bit;
// throws SweepError naming the task otherwise (the journal is from another model file or build).
void check_recomputed(const SweepPlan& plan, const Journal& journal, const TaskResult& r);

// Reports journal state (resumed count, interrupted tasks by name) on stderr.
void report_resume(const SweepPlan& plan, const Journal& journal);

}  // namespace mlprio::replay::dist
