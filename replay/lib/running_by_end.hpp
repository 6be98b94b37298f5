// RunningByEnd: the running jobs in (estimated end, start order), a sorted flat vector that EASY
// walks for the blocked job's shadow time and the segment export reads in start order. Internal to
// replay/lib.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <vector>

#include "engine_common.hpp"
#include "resources.hpp"

namespace mlprio::replay::standard {

// estimated end to find the blocked job's shadow time. A sorted flat vector instead of a node
// set: no allocation per start, and the walk reads consecutive memory. An erase at the front (the
// earliest estimated end, where jobs tend to end) only advances `begin_`; an erase elsewhere
// leaves a dead entry (slot -1, key kept, so the order holds) that walks skip. An insert moves the
// shorter side: the entries before it into the space freed at the front, or those after it.
class RunningByEnd {
 public:
  struct Entry {
    double est_end;
    int64_t seq;
    int32_t slot;  // -1: erased
    Res need;      // the job's, so that a walk reads one array
    bool operator<(const Entry& o) const {
      return std::tie(est_end, seq) < std::tie(o.est_end, o.seq);
    }
  };

  size_t size() const { return live_; }

  void insert(double est_end, int64_t seq, int32_t slot, const Res& need) {
    const Entry e{est_end, seq, slot, need};
    ++live_;
    if (v_.empty() || v_.back() < e) {
      v_.push_back(e);
      return;
    }
    const auto first = v_.begin() + static_cast<std::ptrdiff_t>(begin_);
    const auto at = std::lower_bound(first, v_.end(), e);
    if (begin_ > 0 && at - first <= v_.end() - at) {
      std::move(first, at, first - 1);
      *(at - 1) = e;
      --begin_;
    } else {
      v_.insert(at, e);
    }
  }

  void erase(double est_end, int64_t seq) {
    const Entry key{est_end, seq, 0, {}};
    const auto first = v_.begin() + static_cast<std::ptrdiff_t>(begin_);
    const auto at = first != v_.end() && first->seq == seq ? first  // the usual case
                                                           : std::lower_bound(first, v_.end(), key);
    MLPRIO_REPLAY_CHECK(at != v_.end() && at->seq == seq && at->est_end == est_end && at->slot >= 0,
                        "a running job is missing from the estimated-end order");
    at->slot = -1;
    --live_;
    ++dead_;
    while (begin_ < v_.size() && v_[begin_].slot < 0) {
      ++begin_;
      --dead_;
    }
    // Compact once the erased entries (front and dead) outnumber the live ones, past a small
    // floor that leaves room at the front for inserts: walks then read at most about twice the
    // live entries, memory follows the running jobs, and the cost spreads over the erases.
    if (begin_ + dead_ > std::max<size_t>(live_, 32)) {
      v_.erase(v_.begin(), v_.begin() + static_cast<std::ptrdiff_t>(begin_));
      v_.erase(std::remove_if(v_.begin(), v_.end(), [](const Entry& x) { return x.slot < 0; }),
               v_.end());
      begin_ = dead_ = 0;
    }
  }

  // Calls f(entry) for the running jobs in order until f returns true.
  template <typename F>
  void walk(F&& f) const {
    for (size_t k = begin_; k < v_.size(); ++k)
      if (v_[k].slot >= 0 && f(v_[k])) return;
  }

 private:
  std::vector<Entry> v_;
  size_t begin_ = 0;            // entries before it are erased
  size_t live_ = 0, dead_ = 0;  // dead_: erased entries at or after begin_
};

}  // namespace mlprio::replay::standard
