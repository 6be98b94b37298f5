// The trace windows a sweep (or `run --window`, `tune --windows`) replays: the START:LEN and
// COUNTxLEN arguments, and the reproducible draw of COUNT random window starts.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mlprio/replay/dist/sweep_spec.hpp"
#include "mlprio/util/splitmix64.hpp"

namespace mlprio::replay::dist {

// The window draw's generator: core's SplitMix64 (mlprio/util/splitmix64.hpp).
using SplitMix64 = ::mlprio::util::SplitMix64;

// COUNT distinct window starts for windows of LEN jobs in a trace of N jobs: uniform in
// [0, N - LEN], drawn from SplitMix64(seed) with `below`, without replacement (a start already
// drawn, or listed in `taken`, is drawn again), in draw order. A draw with no repeat gives the
// same starts as the plain draw of earlier versions, so their journals stay valid. Throws
// SweepError when LEN > N, when COUNT is more than MAX_SWEEP_TASKS, or when COUNT is more than
// the distinct starts there are (N - LEN + 1, less those in `taken`).
std::vector<int64_t> draw_window_starts(int64_t count, int64_t len, int64_t trace_jobs,
                                        uint64_t seed, const std::vector<int64_t>& taken = {});

// Parses "START:LEN" and "COUNTxLEN"; throw SweepError with an example of a valid value.
std::pair<int64_t, int64_t> parse_window_arg(const std::string& text);
std::pair<int64_t, int64_t> parse_windows_arg(const std::string& text);

}  // namespace mlprio::replay::dist
