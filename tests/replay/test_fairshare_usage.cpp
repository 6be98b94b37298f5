// The fair-share record the multifactor and ml orders share (replay/lib/fairshare_usage.hpp)
// keeps each user's U/S and 2^(-U/S) until usage changes, since every queued job asks for them at
// every pass. Here every answer is checked, bit for bit, against the same formula worked out from
// the record's saved state, after charges of old and new users, after a decay long enough to
// rescale the whole record, and after a load.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../../replay/lib/fairshare_usage.hpp"
#include "../support/same_bits.hpp"

using mlprio::test::same_bits;

using mlprio::replay::detail::FairShareUsage;

namespace {

// U/S from a saved state [total, scale, stamp, user, usage, ...], as the record defines it.
double share_from(const std::vector<double>& s, int32_t user) {
  const double total = s[0];
  if (total <= 0) return 0.0;
  const size_t users = (s.size() - 3) / 2;
  for (size_t i = 3; i + 1 < s.size(); i += 2)
    if (static_cast<int32_t>(s[i]) == user)
      return s[i + 1] / total * static_cast<double>(std::max<size_t>(users, 1));
  return 0.0;
}

// Every user 0..9 (some never charged), each asked twice so the second answer comes from the
// cache: both must equal the formula.
void check_all(const FairShareUsage& fs) {
  const std::vector<double> saved = fs.save();
  for (int round = 0; round < 2; ++round) {
    for (int32_t user = 0; user < 10; ++user) {
      const double share = share_from(saved, user);
      INFO("user " << user << " round " << round);
      CHECK(same_bits(fs.usage_share(user), share));
      CHECK(same_bits(fs.factor(user), std::exp2(-share)));
    }
  }
}

}  // namespace

TEST_CASE("fair share: kept factors follow every charge, rescale and load", "[replay][fairshare]") {
  FairShareUsage fs(3600);
  check_all(fs);  // no usage yet: U/S 0, factor 1 for everyone
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int32_t> user(0, 7);  // 8 and 9 are never charged
  std::uniform_real_distribution<double> work(1.0, 1e6);
  double t = 0;
  for (int i = 0; i < 300; ++i) {
    t += i % 50 == 49 ? 3600.0 * 2000 : 600.0;  // now and then 2000 half-lives: a rescale
    fs.charge(user(rng), work(rng), t);
    check_all(fs);
  }
  // A record loaded from a save answers as the original, and drops what it cached before.
  FairShareUsage other(3600);
  other.charge(9, 5e5, 10);
  check_all(other);
  other.load(fs.save(), "test");
  check_all(other);
  for (int32_t u = 0; u < 10; ++u) CHECK(same_bits(other.factor(u), fs.factor(u)));
}
