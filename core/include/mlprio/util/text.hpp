// Small text helpers every component shares (header-only, no locale): trimming white space and
// reading a whole string as a decimal integer.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>
#include <system_error>

namespace mlprio::util {

// The C locale's white space (what std::isspace accepts there), independent of the locale the
// process runs in (slurmctld may set one).
constexpr bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// `s` without leading and trailing white space; a view into `s`.
constexpr std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// All of `s` as a decimal int64 (std::from_chars: an optional '-', digits, nothing else: no
// white space, '+' or trailing text); std::nullopt when it is not one or does not fit.
inline std::optional<int64_t> parse_int(std::string_view s) {
  int64_t v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace mlprio::util
