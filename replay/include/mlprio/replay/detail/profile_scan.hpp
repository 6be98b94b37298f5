// The free-profile scan switch (replay/lib/free_profile.cpp), for the tests, fuzzers and
// benchmarks that run conservative backfilling under each scan. Not part of the replay's API.
#pragma once

namespace mlprio::replay::detail {

// Which free-profile scan conservative backfilling uses from the next engine on: 0 = automatic
// (AVX-512 where the CPU has it, else AVX2's run scan where it has that), 1 = the step loop, 2 =
// AVX-512 where usable, 3 = AVX2's run scan where usable. Returns whether the chosen mode scans
// with vectors on this CPU.
bool set_profile_scan_mode(int mode);

}  // namespace mlprio::replay::detail
