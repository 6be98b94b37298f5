// The names of simulator.hpp's small enums (backfill, profile, allocation, too-large rule,
// estimate correction, backfill order) and their parsers, all through one table-driven parser
// whose error reads "unknown WHAT 'x' (valid: a, b)".
#include <string>
#include <string_view>

#include "mlprio/replay/simulator.hpp"

namespace mlprio::replay {

std::string_view backfill_name(Backfill b) {
  switch (b) {
    case Backfill::NONE:
      return "none";
    case Backfill::EASY:
      return "easy";
    case Backfill::CONSERVATIVE:
      return "conservative";
    case Backfill::RLSCHEDULER:
      return "rlscheduler";
  }
  return "?";
}

std::string_view profile_name(Profile p) {
  return p == Profile::RLSCHEDULER ? "rlscheduler" : "standard";
}
std::string_view allocation_name(Allocation a) {
  return a == Allocation::CORES ? "cores" : "nodes";
}
std::string_view too_large_name(TooLarge t) {
  return t == TooLarge::SKIP ? "skip" : "error";
}
std::string_view correction_name(Correction c) {
  switch (c) {
    case Correction::NONE:
      return "none";
    case Correction::REQUEST:
      return "request";
    case Correction::TSAFRIR:
      return "tsafrir";
  }
  return "?";
}
std::string_view backfill_order_name(BackfillOrder o) {
  return o == BackfillOrder::SJBF ? "sjbf" : "fcfs";
}

namespace {
// The value of `values` whose name is s, or ConfigError "unknown WHAT 's' (valid: a, b)" listing
// the names in the order given.
template <typename E, size_t N>
E parse_enum(std::string_view s, const char* what, const E (&values)[N],
             std::string_view (*name)(E)) {
  std::string valid;
  for (E v : values) {
    if (s == name(v)) return v;
    valid += (valid.empty() ? "" : ", ") + std::string(name(v));
  }
  throw ConfigError("unknown " + std::string(what) + " '" + std::string(s) + "' (valid: " + valid +
                    ")");
}
}  // namespace

Backfill parse_backfill(std::string_view s) {
  static constexpr Backfill v[] = {Backfill::NONE, Backfill::EASY, Backfill::CONSERVATIVE,
                                   Backfill::RLSCHEDULER};
  return parse_enum(s, "backfill", v, backfill_name);
}
Profile parse_profile(std::string_view s) {
  static constexpr Profile v[] = {Profile::STANDARD, Profile::RLSCHEDULER};
  return parse_enum(s, "profile", v, profile_name);
}
Allocation parse_allocation(std::string_view s) {
  static constexpr Allocation v[] = {Allocation::NODES, Allocation::CORES};
  return parse_enum(s, "allocation", v, allocation_name);
}
TooLarge parse_too_large(std::string_view s) {
  static constexpr TooLarge v[] = {TooLarge::ERROR, TooLarge::SKIP};
  return parse_enum(s, "too-large rule", v, too_large_name);
}
Correction parse_correction(std::string_view s) {
  static constexpr Correction v[] = {Correction::NONE, Correction::REQUEST, Correction::TSAFRIR};
  return parse_enum(s, "correction", v, correction_name);
}
BackfillOrder parse_backfill_order(std::string_view s) {
  static constexpr BackfillOrder v[] = {BackfillOrder::QUEUE, BackfillOrder::SJBF};
  return parse_enum(s, "backfill order", v, backfill_order_name);
}

}  // namespace mlprio::replay
