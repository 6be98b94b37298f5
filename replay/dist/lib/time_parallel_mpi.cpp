// Time-parallel exact replay over MPI: rank k owns segment k. Each round, ranks whose initial
// state changed re-simulate their segment, every rank sends its final state to its right
// neighbour, and a rank whose received state differs from the one it started from adopts it and
// runs again next round, as a repair of its previous result that stops where it rejoins that
// result's path (resimulate_segment). An all-reduce of "anyone re-running" ends the loop; outcomes
// are then gathered to rank 0 in segment order, which is start order, and summarised exactly as the
// sequential engine would.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "mlprio/replay/dist/mpi_support.hpp"

namespace mlprio::replay::dist {

TimeParallelResult time_parallel_mpi(std::span<const Job> jobs, const SimConfig& config,
                                     MPI_Comm comm) {
  const auto t0 = std::chrono::steady_clock::now();
  int rank = 0, size = 1;
  MLPRIO_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MLPRIO_MPI_CHECK(MPI_Comm_size(comm, &size));
  const auto segs = split_segments(jobs, size);
  const Segment& seg = segs[static_cast<size_t>(rank)];
  EngineState init = idle_state(config);
  SegmentResult res;
  bool need = true;
  TimeParallelResult out;
  out.stats.segments = size;
  constexpr int TAG_STATE = 21;
  for (;;) {
    ++out.stats.rounds;
    const auto ts = std::chrono::steady_clock::now();
    // Rank 0 starts from the true state, so it never re-runs and records no checkpoints.
    if (need)
      res = run_or_repair(jobs, seg, init, config, out.stats.rounds > 1 ? &res : nullptr, rank > 0);
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count();
    double slowest = 0;
    int counts[2] = {need ? 1 : 0, need && !std::isnan(res.rejoined_at) ? 1 : 0}, sums[2] = {0, 0};
    int64_t events = need ? res.events_simulated : 0, all_events = 0;
    MLPRIO_MPI_CHECK(MPI_Reduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, comm));
    MLPRIO_MPI_CHECK(MPI_Reduce(counts, sums, 2, MPI_INT, MPI_SUM, 0, comm));
    MLPRIO_MPI_CHECK(MPI_Reduce(&events, &all_events, 1, MPI_INT64_T, MPI_SUM, 0, comm));
    out.stats.round_seconds.push_back(slowest);
    out.stats.reruns.push_back(sums[0]);
    out.stats.early_stops.push_back(sums[1]);
    out.stats.round_events.push_back(all_events);

    const std::vector<char> bytes = serialize_state(res.final_state);
    MPI_Request req = MPI_REQUEST_NULL;
    if (rank + 1 < size)
      MLPRIO_MPI_CHECK(MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, rank + 1,
                                 TAG_STATE, comm, &req));
    need = false;
    if (rank > 0) {
      MPI_Status st;
      MLPRIO_MPI_CHECK(MPI_Probe(rank - 1, TAG_STATE, comm, &st));
      int count = 0;
      MLPRIO_MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &count));
      std::vector<char> in(static_cast<size_t>(count));
      MLPRIO_MPI_CHECK(
          MPI_Recv(in.data(), count, MPI_BYTE, rank - 1, TAG_STATE, comm, MPI_STATUS_IGNORE));
      EngineState left = deserialize_state(in);
      if (!(left == init)) {
        init = std::move(left);
        need = true;
      }
    }
    MLPRIO_MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    int mine = need ? 1 : 0, any = 0;
    MLPRIO_MPI_CHECK(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_LOR, comm));
    if (!any) break;
    if (out.stats.rounds > size)
      throw InvariantError("time-parallel replay did not converge in N rounds");
  }

  // Gather the outcomes to rank 0 in segment (= start) order.
  const int nbytes = static_cast<int>(res.jobs.size() * sizeof(JobOutcome));
  std::vector<int> counts(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  MLPRIO_MPI_CHECK(MPI_Gather(&nbytes, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm));
  int64_t local[3] = {res.skipped, res.estimates_raised, res.events}, total[3] = {0, 0, 0};
  MLPRIO_MPI_CHECK(MPI_Reduce(local, total, 3, MPI_INT64_T, MPI_SUM, 0, comm));
  out.stats.events = total[2];
  std::vector<JobOutcome> all;
  if (rank == 0) {
    int64_t sum = 0;
    for (int k = 0; k < size; ++k) {
      displs[static_cast<size_t>(k)] = static_cast<int>(sum);
      sum += counts[static_cast<size_t>(k)];
    }
    if (sum > INT32_MAX) throw util::MpiError("time-parallel gather exceeds 2 GiB of job outcomes");
    all.resize(static_cast<size_t>(sum) / sizeof(JobOutcome));
  }
  MLPRIO_MPI_CHECK(MPI_Gatherv(res.jobs.data(), nbytes, MPI_BYTE, all.data(), counts.data(),
                               displs.data(), MPI_BYTE, 0, comm));
  if (rank == 0) out.result = summarize_outcomes(std::move(all), total[0], total[1], config);
  out.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace mlprio::replay::dist
