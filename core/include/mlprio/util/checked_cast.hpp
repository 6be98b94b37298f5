// Range-checked conversion of untrusted doubles to integers, and the bounds that keep sizes from
// overflowing in products. Casting a double outside the target type's range is undefined
// behaviour: in practice INT64_MIN or 0, so an Alibaba pod asking for 1e300 GPUs ran as if it
// needed none, and a capacity of 1.5e19 bytes wrapped to a small number that slipped past later
// range checks. Every parser converts numbers from files, options and environment variables
// through to_integer() (readers, which skip or reject a line themselves) or checked_cast()
// (everything else, which throws RangeError naming the field and the accepted range).
#pragma once

#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "mlprio/util/errors.hpp"

namespace mlprio {

// Processors, nodes or GPUs one job may ask for (2^44: larger than any machine we accept, see
// replay's MACHINE_MAX_*, and small enough that sums and products of a few stay in 64 bits).
inline constexpr int64_t JOB_MAX_COUNT = int64_t{1} << 44;
// Memory of one job, bytes (4 EiB).
inline constexpr int64_t JOB_MAX_BYTES = int64_t{1} << 62;

// A value out of the range its field accepts. An input error (UsageError, util/errors.hpp), so
// the programs exit 2 for it.
class RangeError : public UsageError {
 public:
  using UsageError::UsageError;
};

// v truncated toward zero, when v is finite and lo <= v <= hi; std::nullopt otherwise.
template <class Int>
constexpr std::optional<Int> to_integer(double v, Int lo = std::numeric_limits<Int>::min(),
                                        Int hi = std::numeric_limits<Int>::max()) {
  static_assert(std::is_integral_v<Int> && !std::is_same_v<Int, bool>);
  // 2^digits is exactly representable and is the first value the type cannot hold; comparing
  // with it (not with max(), which rounds up as a double) keeps the cast below defined.
  constexpr double LIMIT =
      2.0 * static_cast<double>(Int{1} << (std::numeric_limits<Int>::digits - 1));
  if (!(v >= static_cast<double>(lo)) || !(v < LIMIT)) return std::nullopt;  // NaN fails both
  const Int x = static_cast<Int>(v);
  if (x < lo || x > hi) return std::nullopt;
  return x;
}

// "[lo, hi]" for error messages.
template <class Int>
std::string range_text(Int lo, Int hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

// A double as an error message shows it (%.15g).
inline std::string number_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

// to_integer() or a RangeError "<what>: <v> is out of range; expected a number in [lo, hi]".
template <class Int>
Int checked_cast(double v, std::string_view what, Int lo = std::numeric_limits<Int>::min(),
                 Int hi = std::numeric_limits<Int>::max()) {
  if (const auto x = to_integer<Int>(v, lo, hi)) return *x;
  throw RangeError(std::string(what) + ": " + number_text(v) +
                   " is out of range; expected a number in " + range_text(lo, hi));
}

// a * b, or std::nullopt when the product does not fit in int64_t.
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

}  // namespace mlprio
