// MPI-free parts of the time-parallel exact replay: cutting the trace into segments, turning an
// EngineState into bytes and back (for MPI messages), and the one-process emulation of the
// repair rounds. The convergence rule is the same as in time_parallel_mpi.cpp: a segment is
// re-run when its predecessor's final state differs from the state it started from; when no
// segment needs a re-run, every boundary matches and the concatenated outcomes are the
// sequential schedule. A re-run is a repair of the segment's previous result: it stops where its
// state rejoins that result's recorded path (resimulate_segment), so it costs only the stretch
// where the corrected start state still makes a difference.
#include "mlprio/replay/dist/time_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <type_traits>

namespace mlprio::replay::dist {

std::vector<Segment> split_segments(std::span<const Job> jobs, int count) {
  if (count < 1) throw ConfigError("time-parallel replay needs at least one segment");
  if (count > MAX_TIME_SEGMENTS)
    throw ConfigError("time-parallel replay: " + std::to_string(count) +
                      " segments is more than the bound of " + std::to_string(MAX_TIME_SEGMENTS) +
                      " (MAX_TIME_SEGMENTS)");
  const auto n = static_cast<int64_t>(jobs.size());
  std::vector<int64_t> cut(static_cast<size_t>(count) + 1, n);
  cut[0] = 0;
  for (int k = 1; k < count; ++k) {
    int64_t i = n * k / count;
    // Keep jobs of one submit instant together: the engine handles an instant as a whole.
    while (i > 0 && i < n &&
           jobs[static_cast<size_t>(i - 1)].submit == jobs[static_cast<size_t>(i)].submit)
      --i;
    cut[static_cast<size_t>(k)] = std::max(i, cut[static_cast<size_t>(k) - 1]);
  }
  std::vector<Segment> segs(static_cast<size_t>(count));
  const double inf = std::numeric_limits<double>::infinity();
  for (int k = 0; k < count; ++k) {
    Segment& s = segs[static_cast<size_t>(k)];
    s.begin = cut[static_cast<size_t>(k)];
    s.end = cut[static_cast<size_t>(k) + 1];
    s.t_begin = s.begin < n ? jobs[static_cast<size_t>(s.begin)].submit : inf;
  }
  for (int k = 0; k < count; ++k)
    segs[static_cast<size_t>(k)].t_end =
        k + 1 < count ? segs[static_cast<size_t>(k) + 1].t_begin : inf;
  return segs;
}

namespace {

template <class T>
void put(std::vector<char>& out, const std::vector<T>& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  // resize + memcpy rather than insert: GCC 12 flags insert of a pointer range falsely here.
  const uint64_t n = v.size();
  const size_t at = out.size();
  out.resize(at + sizeof n + n * sizeof(T));
  std::memcpy(out.data() + at, &n, sizeof n);
  if (n) std::memcpy(out.data() + at + sizeof n, v.data(), n * sizeof(T));
}

template <class T>
void get(std::span<const char> in, size_t& pos, std::vector<T>& v) {
  uint64_t n = 0;
  if (pos + sizeof n > in.size()) throw InvariantError("truncated engine state message");
  std::memcpy(&n, in.data() + pos, sizeof n);
  pos += sizeof n;
  if (pos + n * sizeof(T) > in.size()) throw InvariantError("truncated engine state message");
  v.resize(n);
  if (n) std::memcpy(v.data(), in.data() + pos, n * sizeof(T));
  pos += n * sizeof(T);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<char> serialize_state(const EngineState& s) {
  std::vector<char> out;
  put(out, s.running);
  put(out, s.queue);
  put(out, s.profile);
  put(out, s.policy);
  put(out, std::vector<double>{s.wakeup});
  return out;
}

EngineState deserialize_state(std::span<const char> bytes) {
  EngineState s;
  size_t pos = 0;
  get(bytes, pos, s.running);
  get(bytes, pos, s.queue);
  get(bytes, pos, s.profile);
  get(bytes, pos, s.policy);
  std::vector<double> w;
  get(bytes, pos, w);
  if (w.size() != 1 || pos != bytes.size()) throw InvariantError("malformed engine state message");
  s.wakeup = w[0];
  return s;
}

double TimeParallelStats::repair_fraction() const {
  int64_t repair = 0;
  for (size_t r = 1; r < round_events.size(); ++r) repair += round_events[r];
  return events > 0 ? static_cast<double>(repair) / static_cast<double>(events) : 0.0;
}

std::string describe(const TimeParallelStats& st) {
  std::ostringstream o;
  auto list = [&o](const auto& v) {
    o << "[";
    for (size_t i = 0; i < v.size(); ++i) o << (i ? " " : "") << v[i];
    o << "]";
  };
  o << st.segments << " segments, " << st.rounds << " rounds (" << st.rounds - 1
    << " repair), re-run segments per round ";
  list(st.reruns);
  o << ", of which stopped early ";
  list(st.early_stops);
  o << ", events simulated per round ";
  list(st.round_events);
  o << " of " << st.events << " (repair work " << st.repair_fraction() << " of a replay)";
  o << ", slowest segment per round ";
  list(st.round_seconds);
  o << " s, total " << st.seconds << " s";
  return o.str();
}

int64_t checkpoint_interval(const Segment& seg) {
  // A job makes at most two event instants (its submission and its end).
  return std::max<int64_t>(32, 2 * (seg.end - seg.begin) / CHECKPOINTS_PER_SEGMENT);
}

SegmentResult run_or_repair(std::span<const Job> jobs, const Segment& seg, const EngineState& init,
                            const SimConfig& config, const SegmentResult* previous, bool record) {
  if (previous != nullptr)
    return resimulate_segment(jobs, seg.begin, seg.end, seg.t_begin, seg.t_end, init, config,
                              *previous);
  return simulate_segment(jobs, seg.begin, seg.end, seg.t_begin, seg.t_end, init, config,
                          record ? checkpoint_interval(seg) : 0);
}

TimeParallelResult time_parallel_serial(std::span<const Job> jobs, const SimConfig& config,
                                        int segments) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto segs = split_segments(jobs, segments);
  const auto n = segs.size();
  std::vector<EngineState> init(n, idle_state(config));
  std::vector<SegmentResult> res(n);
  std::vector<bool> need(n, true);
  TimeParallelResult out;
  out.stats.segments = segments;
  for (;;) {
    ++out.stats.rounds;
    int ran = 0, early = 0;
    int64_t events = 0;
    double slowest = 0;
    for (size_t k = 0; k < n; ++k) {
      if (!need[k]) continue;
      const auto ts = std::chrono::steady_clock::now();
      // Segment 0 starts from the true state, so it never re-runs and needs no checkpoints.
      res[k] = run_or_repair(jobs, segs[k], init[k], config,
                             out.stats.rounds > 1 ? &res[k] : nullptr, k > 0);
      slowest = std::max(slowest, seconds_since(ts));
      ++ran;
      early += std::isnan(res[k].rejoined_at) ? 0 : 1;
      events += res[k].events_simulated;
    }
    out.stats.reruns.push_back(ran);
    out.stats.early_stops.push_back(early);
    out.stats.round_events.push_back(events);
    out.stats.round_seconds.push_back(slowest);
    // Decide the next round from this round's finals only (as the ranks do after exchanging).
    bool any = false;
    for (size_t k = 1; k < n; ++k) {
      need[k] = !(res[k - 1].final_state == init[k]);
      if (need[k]) init[k] = res[k - 1].final_state;
      any = any || need[k];
    }
    need[0] = false;
    if (!any) break;
    if (out.stats.rounds > static_cast<int>(n))
      throw InvariantError("time-parallel replay did not converge in N rounds");
  }
  std::vector<JobOutcome> all;
  int64_t skipped = 0, raised = 0;
  for (auto& r : res) {
    all.insert(all.end(), r.jobs.begin(), r.jobs.end());
    skipped += r.skipped;
    raised += r.estimates_raised;
    out.stats.events += r.events;
  }
  out.result = summarize_outcomes(std::move(all), skipped, raised, config);
  out.stats.seconds = seconds_since(t0);
  return out;
}

}  // namespace mlprio::replay::dist
