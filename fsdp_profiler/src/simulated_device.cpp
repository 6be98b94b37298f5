// The simulated device ("sim"): counts bytes against a capacity and hands out non-overlapping
// addresses, and the by-name device registry. A CUDA device belongs in its own file
// (cuda_device.cpp) registered in make_device() under "cuda".
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "mlprio/fsdp/device.hpp"
#include "mlprio/fsdp/settings.hpp"

namespace mlprio::fsdp {

SimulatedDevice::SimulatedDevice(uint64_t capacity, LatencyModel latency)
    : capacity_(capacity), latency_(latency) {
  if (capacity == 0) throw DeviceError("simulated device: capacity must be > 0");
}

uint64_t SimulatedDevice::take_addresses(uint64_t bytes) {
  // 2 MiB alignment, like the driver's large-page allocations.
  const uint64_t align = 2ULL << 20;
  const uint64_t addr = next_addr_;
  next_addr_ += (bytes + align - 1) / align * align;
  if (next_addr_ < addr) throw DeviceError("simulated device: address space exhausted");
  return addr;
}

std::optional<uint64_t> SimulatedDevice::malloc_segment(uint64_t bytes) {
  if (bytes > capacity_ - used_) return std::nullopt;
  used_ += bytes;
  return take_addresses(bytes);
}

void SimulatedDevice::free_segment(uint64_t /*addr*/, uint64_t bytes) {
  if (bytes > used_) throw DeviceError("simulated device: freeing more than is held");
  used_ -= bytes;
}

uint64_t SimulatedDevice::reserve_address_range(uint64_t bytes) {
  return take_addresses(bytes);
}

bool SimulatedDevice::map_pages(uint64_t /*addr*/, uint64_t bytes) {
  if (bytes > capacity_ - used_) return false;
  used_ += bytes;
  return true;
}

void SimulatedDevice::unmap_pages(uint64_t /*addr*/, uint64_t bytes) {
  if (bytes > used_) throw DeviceError("simulated device: unmapping more than is mapped");
  used_ -= bytes;
}

std::unique_ptr<Device> make_device(std::string_view kind, uint64_t capacity) {
  if (kind == "sim") return std::make_unique<SimulatedDevice>(capacity);
  throw DeviceError("unknown device kind '" + std::string(kind) +
                    "'; known: sim (a CUDA device is not built into this version)");
}

namespace {

// LatencyModel's fields by name, in declaration order (parse_latency, latency_text).
struct LatencyField {
  const char* name;
  double LatencyModel::*field;
};
constexpr LatencyField kLatencyFields[] = {
    {"malloc_us", &LatencyModel::malloc_us},
    {"malloc_us_per_gib", &LatencyModel::malloc_us_per_gib},
    {"free_us", &LatencyModel::free_us},
    {"map_page_us", &LatencyModel::map_page_us},
    {"unmap_page_us", &LatencyModel::unmap_page_us},
    {"sync_all_streams_us", &LatencyModel::sync_all_streams_us},
};

}  // namespace

LatencyModel parse_latency(const std::string& text, LatencyModel base) {
  if (text.empty()) return base;
  std::string names;  // for the error message
  for (const auto& f : kLatencyFields) names += std::string(names.empty() ? "" : ", ") + f.name;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t end = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, end - pos);
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const LatencyField* f = nullptr;
    for (const auto& c : kLatencyFields)
      if (key == c.name) f = &c;
    if (eq == std::string::npos || f == nullptr)
      throw SettingsError("--latency: '" + item + "' is not NAME=MICROSECONDS with NAME one of " +
                          names);
    const std::string num = item.substr(eq + 1);
    double v = 0;
    const auto r = std::from_chars(num.data(), num.data() + num.size(), v);
    if (num.empty() || r.ec != std::errc() || r.ptr != num.data() + num.size() ||
        !std::isfinite(v) || v < 0 || v > 1e9)
      throw SettingsError("--latency: " + key + "='" + num +
                          "' is not a number of microseconds in [0, 1e9]");
    base.*(f->field) = v;
    pos = end + 1;
  }
  return base;
}

std::string latency_text(const LatencyModel& m) {
  std::string out;
  for (const auto& f : kLatencyFields) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s=%.6g", out.empty() ? "" : ",", f.name, m.*(f.field));
    out += buf;
  }
  return out;
}

DeviceCallTimes& DeviceCallTimes::operator+=(const DeviceCallTimes& o) {
  malloc_us += o.malloc_us;
  free_us += o.free_us;
  map_us += o.map_us;
  unmap_us += o.unmap_us;
  sync_us += o.sync_us;
  failed_us += o.failed_us;
  mallocs += o.mallocs;
  frees += o.frees;
  maps += o.maps;
  unmaps += o.unmaps;
  failed += o.failed;
  syncs += o.syncs;
  malloc_gib += o.malloc_gib;
  malloc_gib2 += o.malloc_gib2;
  malloc_gib_us += o.malloc_gib_us;
  return *this;
}

LatencyModel fit_latency(const DeviceCallTimes& t, const LatencyModel& base) {
  LatencyModel m = base;
  if (t.mallocs > 0) {
    const auto n = static_cast<double>(t.mallocs);
    const double mx = t.malloc_gib / n, my = t.malloc_us / n;
    const double var = t.malloc_gib2 / n - mx * mx;
    const double cov = t.malloc_gib_us / n - mx * my;
    // Relative test: sizes that differ only by rounding are "one size".
    const double slope = var > 1e-12 * std::max(1.0, mx * mx) ? cov / var : 0.0;
    if (slope <= 0) {
      m.malloc_us_per_gib = 0;
      m.malloc_us = my;
    } else if (my - slope * mx >= 0) {
      m.malloc_us_per_gib = slope;
      m.malloc_us = my - slope * mx;
    } else {  // the line would give small segments a negative cost: fit one through the origin
      m.malloc_us_per_gib = t.malloc_gib_us / t.malloc_gib2;
      m.malloc_us = 0;
    }
  }
  if (t.frees > 0) m.free_us = t.free_us / static_cast<double>(t.frees);
  if (t.maps > 0) m.map_page_us = t.map_us / static_cast<double>(t.maps);
  if (t.unmaps > 0) m.unmap_page_us = t.unmap_us / static_cast<double>(t.unmaps);
  if (t.syncs > 0) m.sync_all_streams_us = t.sync_us / static_cast<double>(t.syncs);
  return m;
}

}  // namespace mlprio::fsdp
