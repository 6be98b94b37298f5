// The Catch2 listener behind MLPRIO_SKIP (skip.hpp): counts the test cases a run ends and the
// ones that were skipped. Included only by a test main (CATCH_CONFIG_RUNNER), where Catch2's
// listener interface is defined; registered there with CATCH_REGISTER_LISTENER(SkipListener).
#pragma once

#include <catch2/catch.hpp>

#include "skip.hpp"

namespace mlprio::test {

// Counts test cases and skips; registered once, in each test main.
struct SkipListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    TestEventListenerBase::testCaseStarting(info);
    skip_tally().current = false;
  }
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    TestEventListenerBase::testCaseEnded(stats);
    ++skip_tally().ran;
    if (skip_tally().current) ++skip_tally().skipped;
  }
};

}  // namespace mlprio::test
