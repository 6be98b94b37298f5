// Running the STANDARD engine over one time segment of a trace, from a given state to a time
// boundary, and handing back the engine's complete state there. This is what the time-parallel
// exact replay (replay/dist/, `mlprio-replay run --time-parallel`) is built on: segment k starts
// from a state (a guess, or its predecessor's final state), runs the jobs submitted in
// [t_begin, t_end) and stops before the first event at or after t_end. Two EngineStates that
// compare equal give the same future, which is what makes "boundary states match" a proof that a
// segment's result is the sequential one. Running jobs are renumbered 0..m-1 in start order
// (only their relative order matters), and the free-resource profile is cut at the boundary, so
// the comparison does not depend on how the state was reached.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "mlprio/replay/simulator.hpp"

namespace mlprio::replay {

// One queued or running job in an EngineState. `index` is the job's position in the full job
// list; the trace record itself is looked up there, so a state is small and position-independent.
struct StateJob {
  int64_t index = 0;
  int64_t units = 0, gpus = 0;  // resources it holds or needs
  double estimate = 0, duration = 0, score = 0;
  double start = -1, est_end = 0, end = 0;  // running jobs; end = start + duration
  double res_start = -1;                    // conservative reservation start (-1: none)
  int64_t seq = 0;                          // start order among running jobs (renumbered 0..m-1)
  int8_t killed = 0;
  bool operator==(const StateJob&) const = default;
};

struct ProfileStep {
  double t = 0;
  int64_t units = 0, gpus = 0;
  bool operator==(const ProfileStep&) const = default;
};

// Everything the engine carries across an instant: running jobs (with end times), the queue in
// order, the conservative reservation profile and wake-up time, and the policy's history
// (multifactor's fair-share usage). The empty state is an idle machine with no history.
struct EngineState {
  std::vector<StateJob> running;                             // in start order
  std::vector<StateJob> queue;                               // in queue order
  std::vector<ProfileStep> profile;                          // conservative only; empty = all free
  std::vector<double> policy;                                // QueuePolicy::save_state()
  double wakeup = -std::numeric_limits<double>::infinity();  // conservative: next reservation
  bool operator==(const EngineState&) const = default;
};

// An idle machine with no history under `config` (the policy's fresh state): the true state
// before the first job, and the guess the time-parallel replay starts every segment from.
EngineState idle_state(const SimConfig& config);

// The engine state just before the events at instant `t` of a run (after every event before t),
// with how far the run had got by then. A repair re-run that reaches t in this same state has
// rejoined the recorded run's path: every later outcome of the recorded run is then its own.
struct Checkpoint {
  double t = 0;
  int64_t jobs_before = 0;  // outcomes recorded before t (jobs started before t)
  int64_t skipped_before = 0, raised_before = 0;
  int64_t events_before = 0;  // event instants processed before t
  EngineState state;
};

struct SegmentResult {
  std::vector<JobOutcome> jobs;  // jobs started in [t_begin, t_end), in start order
  int64_t skipped = 0;           // jobs of the segment that could not be replayed
  int64_t estimates_raised = 0;
  EngineState final_state;  // the state at t_end (before any event at t_end)
  // Checkpoints along the segment's path, in time order (empty unless asked for). After an
  // early-stopped repair they describe the spliced path: the repair's own states before the
  // rejoin instant, the recorded run's from there on.
  std::vector<Checkpoint> checkpoints;
  int64_t events = 0;            // event instants of the whole segment path (spliced included)
  int64_t events_simulated = 0;  // event instants this call actually simulated
  double rejoined_at = std::numeric_limits<double>::quiet_NaN();  // repair: the rejoin instant
};

// Runs jobs[begin, end) (all submitted in [t_begin, t_end), `jobs` sorted by submit time) from
// `initial` at t_begin and stops before the first event at or after t_end (t_end = +inf: to the
// end). Job outcomes are always recorded; the time series is not. With checkpoint_every > 0 the
// state is also recorded every that many event instants (for resimulate_segment). Throws like
// simulate().
SegmentResult simulate_segment(std::span<const Job> jobs, int64_t begin, int64_t end,
                               double t_begin, double t_end, const EngineState& initial,
                               const SimConfig& config, int64_t checkpoint_every = 0);

// Re-runs the same segment from a corrected `initial` state, comparing its state with each of
// `recorded`'s checkpoints at the checkpoint's instant, and stops at the first one that is equal:
// from there on the engine's future is `recorded`'s (equal states, same remaining jobs), so the
// result splices this run's outcomes before that instant to `recorded`'s from it on, and takes
// `recorded`'s final state. Without a match it runs to t_end. The returned checkpoints sit at the
// same instants as `recorded`'s, so the result can serve as `recorded` for a later repair.
SegmentResult resimulate_segment(std::span<const Job> jobs, int64_t begin, int64_t end,
                                 double t_begin, double t_end, const EngineState& initial,
                                 const SimConfig& config, const SegmentResult& recorded);

// The summary, per-user table and job list that simulate() would return for these outcomes
// (given in start order): the metric sums are accumulated in the same order, so the figures are
// bit-identical to a sequential run's.
SimResult summarize_outcomes(std::vector<JobOutcome> jobs, int64_t skipped,
                             int64_t estimates_raised, const SimConfig& config);

}  // namespace mlprio::replay
