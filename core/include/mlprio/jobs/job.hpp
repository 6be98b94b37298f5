// The one job record every trace source, the replayer, the model and the plugin share.
//
// A Job is plain data: times are seconds (double, so fractional traces such as Batsim's survive),
// sizes are bytes, counts are integers, GPUs are fractional (GPU-sharing traces ask for 0.46 of a
// GPU). Every numeric field uses UNKNOWN (-1) for "not in the source"; readers never invent a
// value. Strings (user, partition, ...) are interned per trace into small integer ids so a
// million-job trace stays compact; the names live in Trace::names (see trace.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mlprio {

inline constexpr double UNKNOWN = -1.0;
inline constexpr int64_t UNKNOWN_INT = -1;

// Final state of a job. SWF's status codes and Slurm's job states map onto these.
enum class JobStatus : int8_t {
  UNKNOWN_STATE = -1,
  FAILED = 0,
  COMPLETED = 1,
  PARTIAL = 2,  // SWF 2/3/4: a checkpointed/partial execution record
  CANCELLED = 5,
  TIMEOUT = 6,
  OUT_OF_MEMORY = 7,
  NODE_FAIL = 8,
  PREEMPTED = 9,
  RUNNING = 10,  // still running when the trace was taken
  PENDING = 11,  // never started when the trace was taken
};

std::string_view job_status_name(JobStatus s);

struct Job {
  int64_t id = UNKNOWN_INT;  // job number as the source gives it
  double submit = UNKNOWN;   // submit time, seconds (SWF: relative to UnixStartTime)
  double wait = UNKNOWN;     // seconds from submit to start
  double run = UNKNOWN;      // actual run time, seconds
  int64_t alloc_procs = UNKNOWN_INT;
  int64_t req_procs = UNKNOWN_INT;
  int64_t alloc_nodes = UNKNOWN_INT;
  int64_t req_nodes = UNKNOWN_INT;
  double alloc_gpus = UNKNOWN;
  double req_gpus = UNKNOWN;
  double req_time = UNKNOWN;       // requested wall time (time limit), seconds
  double avg_cpu_time = UNKNOWN;   // seconds, per processor (SWF field 6)
  int64_t req_mem = UNKNOWN_INT;   // requested memory for the whole job, bytes
  int64_t used_mem = UNKNOWN_INT;  // used memory for the whole job, bytes
  JobStatus status = JobStatus::UNKNOWN_STATE;
  int32_t exit_code = -1;
  int32_t user = -1;  // interned ids (Trace::names), or the SWF number as given
  int32_t group = -1;
  int32_t account = -1;
  int32_t app = -1;  // SWF executable number
  int32_t queue = -1;
  int32_t partition = -1;
  int32_t qos = -1;
  int32_t name = -1;  // job name, interned
  int64_t preceding_job = UNKNOWN_INT;
  double think_time = UNKNOWN;
  // Free-form numeric features (e.g. model size, LoRA rank parsed from a job script). Keys are
  // interned in Trace::names.features. Empty for most traces, so costs one empty vector.
  std::vector<std::pair<int32_t, double>> features;

  // Processors the job occupies: allocated if known, else requested.
  int64_t procs() const { return alloc_procs > 0 ? alloc_procs : req_procs; }
  double start() const { return (submit >= 0 && wait >= 0) ? submit + wait : UNKNOWN; }
};

}  // namespace mlprio
