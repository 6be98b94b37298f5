// Slurm's classic fair share as the replayer keeps it, shared by the `multifactor` order and the
// `ml` order's fair-share term: per-user core-seconds, charged when a job ends and decayed with
// PriorityDecayHalfLife; a user's U/S is their share of all usage over an equal share (every user
// seen so far holds 1/users), and the factor is 2^(-U/S). Internal to the replay library.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mlprio/util/errors.hpp"

namespace mlprio::replay::detail {

class FairShareUsage {
 public:
  explicit FairShareUsage(double half_life) : half_life_(half_life) {}

  void charge(int32_t user, double core_seconds, double end) {
    decay_to(end);
    usage_[user].usage += core_seconds / scale_;
    total_usage_ += core_seconds / scale_;
    ++generation_;
  }

  // U/S: 0 for a user without usage (or before anyone has any), 1 for exactly an equal share.
  double usage_share(int32_t user) const {
    const User* u = cached(user);
    return u == nullptr ? 0.0 : u->share;
  }
  // Slurm's classic factor 2^(-U/S), 1 before any usage.
  double factor(int32_t user) const {
    const User* u = cached(user);
    return u == nullptr ? 1.0 : u->factor;
  }

  // [total, scale, stamp, user, usage, user, usage, ...] with users ascending, so two records
  // with the same history save equal vectors whatever their hash-map order.
  std::vector<double> save() const {
    std::vector<std::pair<int32_t, double>> users;
    for (const auto& [u, v] : usage_) users.emplace_back(u, v.usage);
    std::sort(users.begin(), users.end());
    std::vector<double> s = {total_usage_, scale_, stamp_};
    for (const auto& [u, v] : users) {
      s.push_back(static_cast<double>(u));
      s.push_back(v);
    }
    return s;
  }
  // `who` names the policy in the error.
  void load(std::span<const double> s, const char* who) {
    usage_.clear();
    if (s.size() < 3 || (s.size() - 3) % 2 != 0)
      throw ::mlprio::UsageError(std::string(who) +
                                 ": a saved policy state needs 3 + 2k numbers, got " +
                                 std::to_string(s.size()));
    total_usage_ = s[0];
    scale_ = s[1];
    stamp_ = s[2];
    for (size_t i = 3; i + 1 < s.size(); i += 2)
      usage_[static_cast<int32_t>(s[i])].usage = s[i + 1];
  }

 private:
  // Usage is stored as of `stamp_`; decaying everything by the same factor keeps ratios, so only
  // the common scale moves and the map need not be walked.
  void decay_to(double t) {
    if (half_life_ <= 0 || t <= stamp_) {
      stamp_ = std::max(stamp_, t);
      return;
    }
    scale_ *= std::exp2(-(t - stamp_) / half_life_);
    stamp_ = t;
    // Renormalise before the common scale underflows.
    if (scale_ < 1e-200) {
      for (auto& [u, v] : usage_) v.usage *= scale_;
      total_usage_ *= scale_;
      scale_ = 1.0;
    }
  }

  // A user's usage, and U/S and 2^(-U/S) as of `gen`: every queued job's score asks for them at
  // every pass of a dynamic order, and they change only when usage is charged (generation_
  // counts the charges; a rescale happens only within one, and a load makes new records, whose
  // gen 0 is never current), so each is worked out once per user in between, the same way.
  struct User {
    double usage = 0;  // core-seconds / scale_
    mutable double share = 0, factor = 1;
    mutable uint64_t gen = 0;
  };
  // The user's record with its U/S and factor up to date; nullptr when U/S is 0 (no usage yet
  // anywhere, or none by this user), where the factor is 1.
  const User* cached(int32_t user) const {
    if (total_usage_ <= 0) return nullptr;
    const auto it = usage_.find(user);
    if (it == usage_.end()) return nullptr;
    const User& u = it->second;
    if (u.gen != generation_) {
      u.share = u.usage / total_usage_ * static_cast<double>(std::max<size_t>(usage_.size(), 1));
      u.factor = std::exp2(-u.share);
      u.gen = generation_;
    }
    return &u;
  }

  double half_life_;
  std::unordered_map<int32_t, User> usage_;
  uint64_t generation_ = 1;  // User::gen 0 is never current
  double total_usage_ = 0;
  double scale_ = 1.0;
  double stamp_ = 0;
};

}  // namespace mlprio::replay::detail
