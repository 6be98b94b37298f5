// Time-parallel exact replay (design in replay/README.md, "Time-parallel replay"): the trace's
// time span is cut into segments at job submit times; every segment is simulated from a guessed
// initial state (an idle machine), then segments whose initial state differs from their
// predecessor's final state are re-run from it, round after round, until every boundary state
// matches. The result is then exactly the sequential one. This header holds the MPI-free parts:
// the cut, state (de)serialisation, and a one-process emulation of the rounds (used by the
// non-MPI build and by tests); time_parallel_mpi.hpp runs one segment per rank.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "mlprio/replay/segment.hpp"
#include "mlprio/replay/simulator.hpp"

namespace mlprio::replay::dist {

struct Segment {
  int64_t begin = 0, end = 0;   // jobs [begin, end) of the submit-sorted list
  double t_begin = 0, t_end = 0;  // submit-time span [t_begin, t_end); the last ends at +inf
};

// `count` segments of about equal job counts; a cut never separates jobs with the same submit
// time (so some segments may be empty on tiny traces).
std::vector<Segment> split_segments(std::span<const Job> jobs, int count);

std::vector<char> serialize_state(const EngineState& s);
EngineState deserialize_state(std::span<const char> bytes);

struct TimeParallelStats {
  int segments = 0;
  int rounds = 0;                    // 1 = no repair needed
  std::vector<int> reruns;           // segments simulated in each round
  std::vector<double> round_seconds; // wall time of each round (slowest segment)
  double seconds = 0;                // whole replay, gathering included
};

struct TimeParallelResult {
  SimResult result;  // as simulate() would return (no time series)
  TimeParallelStats stats;
};

// Emulates the rounds in one process (segments run one after the other; round_seconds holds the
// slowest segment of each round, i.e. what N ranks would take).
TimeParallelResult time_parallel_serial(std::span<const Job> jobs, const SimConfig& config,
                                        int segments);

}  // namespace mlprio::replay::dist
