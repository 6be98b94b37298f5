// The STANDARD engine's resource amounts (Res: allocation units and GPUs, what a job needs or what
// is free) and its infinite time, shared by the free profile, the probe proofs, the running-jobs
// order and the engine itself. Internal to replay/lib.
#pragma once

#include <cstdint>
#include <limits>

namespace mlprio::replay::standard {

inline constexpr double INF = std::numeric_limits<double>::infinity();

struct Res {
  int64_t units = 0;  // nodes (Allocation::NODES) or cores (Allocation::CORES)
  int64_t gpus = 0;
  bool fits_in(const Res& avail) const { return units <= avail.units && gpus <= avail.gpus; }
  Res& operator+=(const Res& o) {
    units += o.units;
    gpus += o.gpus;
    return *this;
  }
  Res& operator-=(const Res& o) {
    units -= o.units;
    gpus -= o.gpus;
    return *this;
  }
};

}  // namespace mlprio::replay::standard
