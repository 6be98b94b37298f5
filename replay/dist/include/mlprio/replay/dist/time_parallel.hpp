// Time-parallel exact replay (design in replay/README.md, "Time-parallel replay"): the trace's
// time span is cut into segments at job submit times; every segment is simulated from a guessed
// initial state (an idle machine), then segments whose initial state differs from their
// predecessor's final state are re-run from it, round after round, until every boundary state
// matches. A re-run stops as soon as its state equals its previous run's at one of that run's
// checkpoints and keeps that run's outcomes from there on. The result is then exactly the
// sequential one. This header holds the MPI-free parts: the cut, state (de)serialisation, and a
// one-process emulation of the rounds (used by the non-MPI build and by tests);
// time_parallel_mpi.hpp runs one segment per rank.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mlprio/replay/segment.hpp"
#include "mlprio/replay/simulator.hpp"

namespace mlprio::replay::dist {

struct Segment {
  int64_t begin = 0, end = 0;     // jobs [begin, end) of the submit-sorted list
  double t_begin = 0, t_end = 0;  // submit-time span [t_begin, t_end); the last ends at +inf
};

// The most segments a time-parallel replay may use (each holds a simulator state and is re-run
// in repair rounds).
inline constexpr int MAX_TIME_SEGMENTS = 4096;

// `count` segments of about equal job counts; a cut never separates jobs with the same submit
// time (so some segments may be empty on tiny traces). Throws ConfigError unless
// 1 <= count <= MAX_TIME_SEGMENTS.
std::vector<Segment> split_segments(std::span<const Job> jobs, int count);

std::vector<char> serialize_state(const EngineState& s);
EngineState deserialize_state(std::span<const char> bytes);

struct TimeParallelStats {
  int segments = 0;
  int rounds = 0;                     // 1 = no repair needed
  std::vector<int> reruns;            // segments simulated in each round
  std::vector<int> early_stops;       // of those, re-runs that rejoined their recorded path
  std::vector<int64_t> round_events;  // event instants simulated in each round, all segments
  std::vector<double> round_seconds;  // wall time of each round (slowest segment)
  int64_t events = 0;                 // event instants of the final schedule (the sequential work)
  double seconds = 0;                 // whole replay, gathering included

  // Event instants simulated in repair rounds (round 2 on) per instant of the schedule: the
  // machine-independent cost of the repair (0 = none, 1 = a second full replay).
  double repair_fraction() const;
};

// One line for the user: rounds, re-runs and early stops per round, work and times.
std::string describe(const TimeParallelStats& stats);

// Checkpoint spacing (event instants) for a segment's recording run: about
// CHECKPOINTS_PER_SEGMENT checkpoints, so memory is that many engine states per segment and an
// early-stopped repair overshoots its rejoin instant by about 1/CHECKPOINTS_PER_SEGMENT of the
// segment.
inline constexpr int64_t CHECKPOINTS_PER_SEGMENT = 64;
int64_t checkpoint_interval(const Segment& seg);

// A segment's run in some round: the first (previous = null; recording checkpoints when
// `record`, i.e. when a repair may follow), or a repair of `previous` from a corrected state.
SegmentResult run_or_repair(std::span<const Job> jobs, const Segment& seg, const EngineState& init,
                            const SimConfig& config, const SegmentResult* previous, bool record);

struct TimeParallelResult {
  SimResult result;  // as simulate() would return (no time series)
  TimeParallelStats stats;
};

// Emulates the rounds in one process (segments run one after the other; round_seconds holds the
// slowest segment of each round, i.e. what N ranks would take).
TimeParallelResult time_parallel_serial(std::span<const Job> jobs, const SimConfig& config,
                                        int segments);

}  // namespace mlprio::replay::dist
