// Writes jobs in the Standard Workload Format, the inverse of the SWF reader for the 18 standard
// fields (memory converted back to KB per processor). Used by the workload generator and by
// tools that export a filtered trace.
#include <cmath>
#include <ostream>

#include "mlprio/jobs/trace.hpp"

namespace mlprio {

namespace {

void put_num(std::ostream& out, double v) {
  if (v == UNKNOWN) {
    out << -1;
    return;
  }
  if (v == std::floor(v) && std::fabs(v) < 9e15)
    out << static_cast<int64_t>(v);
  else
    out << v;
}

int swf_status_code(JobStatus s) {
  switch (s) {
    case JobStatus::FAILED:
    case JobStatus::OUT_OF_MEMORY:
    case JobStatus::NODE_FAIL:
    case JobStatus::TIMEOUT:
      return 0;
    case JobStatus::COMPLETED:
      return 1;
    case JobStatus::PARTIAL:
      return 2;
    case JobStatus::CANCELLED:
    case JobStatus::PREEMPTED:
      return 5;
    default:
      return -1;
  }
}

}  // namespace

std::ostream& write_swf(std::ostream& out, const TraceHeader& header,
                        const std::vector<Job>& jobs) {
  bool wrote_nodes = false, wrote_procs = false, wrote_jobs = false, wrote_start = false;
  for (const auto& [k, v] : header.fields) {
    if (k == "MaxNodes" && header.max_nodes >= 0) {
      out << "; MaxNodes: " << header.max_nodes << "\n";
      wrote_nodes = true;
      continue;
    }
    if (k == "MaxProcs" && header.max_procs >= 0) {
      out << "; MaxProcs: " << header.max_procs << "\n";
      wrote_procs = true;
      continue;
    }
    if (k == "MaxJobs" && header.max_jobs >= 0) {
      out << "; MaxJobs: " << header.max_jobs << "\n";
      wrote_jobs = true;
      continue;
    }
    if (k == "UnixStartTime" && header.unix_start_time >= 0) {
      out << "; UnixStartTime: " << header.unix_start_time << "\n";
      wrote_start = true;
      continue;
    }
    out << "; " << k << ": " << v << "\n";
  }
  if (!wrote_jobs && header.max_jobs >= 0) out << "; MaxJobs: " << header.max_jobs << "\n";
  if (!wrote_nodes && header.max_nodes >= 0) out << "; MaxNodes: " << header.max_nodes << "\n";
  if (!wrote_procs && header.max_procs >= 0) out << "; MaxProcs: " << header.max_procs << "\n";
  if (!wrote_start && header.unix_start_time >= 0)
    out << "; UnixStartTime: " << header.unix_start_time << "\n";
  for (const Job& j : jobs) {
    const int64_t p_req = j.req_procs > 0 ? j.req_procs : j.alloc_procs;
    const int64_t p_used = j.alloc_procs > 0 ? j.alloc_procs : j.req_procs;
    const double req_kb =
        (j.req_mem >= 0 && p_req > 0)
            ? std::floor(static_cast<double>(j.req_mem) / 1024.0 / static_cast<double>(p_req))
            : UNKNOWN;
    const double used_kb =
        (j.used_mem >= 0 && p_used > 0)
            ? std::floor(static_cast<double>(j.used_mem) / 1024.0 / static_cast<double>(p_used))
            : UNKNOWN;
    out << j.id << ' ';
    put_num(out, j.submit);
    out << ' ';
    put_num(out, j.wait);
    out << ' ';
    put_num(out, j.run);
    out << ' ';
    out << j.alloc_procs << ' ';
    put_num(out, j.avg_cpu_time);
    out << ' ';
    put_num(out, used_kb);
    out << ' ';
    out << j.req_procs << ' ';
    put_num(out, j.req_time);
    out << ' ';
    put_num(out, req_kb);
    out << ' ';
    out << swf_status_code(j.status) << ' ' << j.user << ' ' << j.group << ' ' << j.app << ' '
        << j.queue << ' ' << j.partition << ' ' << j.preceding_job << ' ';
    put_num(out, j.think_time);
    out << '\n';
  }
  return out;
}

}  // namespace mlprio
