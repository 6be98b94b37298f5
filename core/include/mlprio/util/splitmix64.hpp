// SplitMix64 (Steele, Lea, Flood 2014): 64-bit state, next = mix(state += 0x9e3779b97f4a7c15).
// Integer-only, so the same seed gives the same numbers on every machine and compiler. The sweep
// draws its random windows with it; the Lublin generator seeds xoshiro256** from it.
#pragma once

#include <cstdint>

namespace mlprio::util {

// One step: advances `state` and returns the mixed value.
constexpr uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit constexpr SplitMix64(uint64_t seed) : state_(seed) {}
  constexpr uint64_t next() { return splitmix64(state_); }
  // Uniform in [0, bound) by rejection (no modulo bias); bound > 0.
  constexpr uint64_t below(uint64_t bound) {
    // Accept only values under the largest multiple of bound, so every residue is equally likely.
    const uint64_t limit = UINT64_MAX - (UINT64_MAX % bound);
    uint64_t x = next();
    while (x >= limit) x = next();
    return x % bound;
  }

 private:
  uint64_t state_;
};

}  // namespace mlprio::util
