// Test support: two doubles equal bit for bit (-0.0 and 0.0 differ, a NaN equals itself), for
// results that must be reproduced exactly, not within a tolerance. Header-only.
#pragma once

#include <cstring>

namespace mlprio::test {

inline bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace mlprio::test
