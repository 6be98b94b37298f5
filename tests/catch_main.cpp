// The one Catch2 main shared by the unit-test binaries (MPI tests have their own). It exits with
// 77 (support/skip.hpp) when every test case it ran called MLPRIO_SKIP, so that ctest, which
// runs one test case per process, reports such a case as skipped rather than passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "support/skip_listener.hpp"

using mlprio::test::SkipListener;
CATCH_REGISTER_LISTENER(SkipListener)

int main(int argc, char** argv) {
  const int failed = Catch::Session().run(argc, argv);
  if (failed == 0 && mlprio::test::all_skipped()) return mlprio::test::kSkipExitCode;
  return failed == mlprio::test::kSkipExitCode ? 1 : failed;  // 77 failures must not read as a skip
}
