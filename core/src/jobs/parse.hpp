// Small, allocation-free parsing helpers shared by the trace readers: field splitting and
// locale-independent number parsing with std::from_chars (integers range-checked: see
// mlprio/util/checked_cast.hpp).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "mlprio/util/checked_cast.hpp"
#include "mlprio/util/text.hpp"

namespace mlprio::detail {

// White space and trim are core's (mlprio/util/text.hpp). Lines reach the readers without their
// '\n', so that it counts as white space there changes nothing here.
using util::is_space;
using util::trim;

// Splits on runs of spaces/tabs into out[0..max); returns the number of fields found (which
// may exceed max: the rest is counted but not stored).
template <size_t N>
size_t split_ws(std::string_view s, std::string_view (&out)[N]) {
  size_t n = 0, i = 0;
  const size_t len = s.size();
  while (i < len) {
    while (i < len && is_space(s[i])) ++i;
    if (i >= len) break;
    size_t j = i;
    while (j < len && !is_space(s[j])) ++j;
    if (n < N) out[n] = s.substr(i, j - i);
    ++n;
    i = j;
  }
  return n;
}

// Splits on every `sep` (empty fields kept, as in CSV and sacct's '|' output) into `out`,
// optionally trimming each field. The views point into `s`.
inline void split_on(std::string_view s, char sep, std::vector<std::string_view>& out,
                     bool trim_fields) {
  out.clear();
  size_t i = 0;
  for (;;) {
    const size_t at = s.find(sep, i);
    std::string_view f =
        s.substr(i, at == std::string_view::npos ? std::string_view::npos : at - i);
    out.push_back(trim_fields ? trim(f) : f);
    if (at == std::string_view::npos) break;
    i = at + 1;
  }
}

inline std::optional<double> parse_double(std::string_view s) {
  s = trim(s);
  if (s.empty()) return std::nullopt;
  if (s.front() == '+') s.remove_prefix(1);
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// An integer field: white space around it and a leading '+' allowed (util::parse_int is exact).
inline std::optional<int64_t> parse_int(std::string_view s) {
  s = trim(s);
  if (s.empty()) return std::nullopt;
  if (s.front() == '+') s.remove_prefix(1);
  if (const auto v = util::parse_int(s)) return v;
  // Integers written as "12.0" or "1e3" in some archives: accept when integral and in range.
  auto d = parse_double(s);
  if (d && std::trunc(*d) == *d) return to_integer<int64_t>(*d);
  return std::nullopt;
}

}  // namespace mlprio::detail
