// Honest skips for Catch2 2.x, which has no SKIP of its own: a test that cannot run here (no
// ../shared/data, no GPU, a program not built) calls MLPRIO_SKIP("why"), which WARNs the reason,
// marks the running test case skipped and returns from it. The test main (tests/catch_main.cpp,
// tests/mpi/mpi_main.cpp) then exits with kSkipExitCode when every test case it ran was skipped
// and none failed (skip_listener.hpp counts them), and ctest, told SKIP_RETURN_CODE 77, reports the
// test as "Skipped", never as "Passed". Use it only in the TEST_CASE body itself (it returns from
// the enclosing function).
#pragma once

#include <catch2/catch.hpp>

namespace mlprio::test {

inline constexpr int kSkipExitCode = 77;

struct SkipTally {
  int ran = 0;      // test cases ended
  int skipped = 0;  // of those, the ones that called MLPRIO_SKIP
  bool current = false;
};

inline SkipTally& skip_tally() {
  static SkipTally t;
  return t;
}

// True when at least one test case ran and every one of them was skipped.
inline bool all_skipped() {
  const SkipTally& t = skip_tally();
  return t.ran > 0 && t.skipped == t.ran;
}

}  // namespace mlprio::test

#define MLPRIO_SKIP(why)                         \
  do {                                           \
    WARN("SKIPPED: " << why);                    \
    ::mlprio::test::skip_tally().current = true; \
    return;                                      \
  } while (0)
