// Slurm value formats (see slurm_format.hpp).
#include "mlprio/jobs/slurm_format.hpp"

#include <cmath>
#include <ctime>

#include "jobs/parse.hpp"

namespace mlprio {

using detail::parse_double;
using detail::parse_int;
using detail::trim;

bool is_slurm_none(std::string_view s) {
  s = trim(s);
  return s.empty() || s == "Unknown" || s == "None" || s == "UNLIMITED" || s == "INVALID" ||
         s == "Partition_Limit" || s == "N/A" || s == "None assigned";
}

std::optional<double> parse_slurm_duration(std::string_view s) {
  s = trim(s);
  if (s.empty()) return std::nullopt;
  double days = 0;
  if (auto dash = s.find('-'); dash != std::string_view::npos) {
    auto d = parse_int(s.substr(0, dash));
    if (!d || *d < 0) return std::nullopt;
    days = static_cast<double>(*d);
    s = s.substr(dash + 1);
  }
  double parts[3];
  int n = 0;
  while (true) {
    if (n == 3) return std::nullopt;
    const size_t colon = s.find(':');
    auto v = parse_double(s.substr(0, colon));
    if (!v || *v < 0) return std::nullopt;
    parts[n++] = *v;
    if (colon == std::string_view::npos) break;
    s = s.substr(colon + 1);
  }
  double secs = 0;
  if (n == 1)
    secs = days > 0 ? parts[0] * 3600 : parts[0] * 60;  // "D-HH" or minutes
  else if (n == 2)
    secs = days > 0 ? parts[0] * 3600 + parts[1] * 60 : parts[0] * 60 + parts[1];
  else
    secs = parts[0] * 3600 + parts[1] * 60 + parts[2];
  const double total = days * 86400 + secs;
  if (!std::isfinite(total)) return std::nullopt;  // "inf" and "nan" parse as doubles
  return total;
}

std::optional<double> parse_slurm_time(std::string_view s) {
  s = trim(s);
  if (s.size() != 19 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':')
    return std::nullopt;
  auto num = [&](size_t pos, size_t len) { return parse_int(s.substr(pos, len)); };
  auto y = num(0, 4), mo = num(5, 2), d = num(8, 2), h = num(11, 2), mi = num(14, 2),
       se = num(17, 2);
  if (!y || !mo || !d || !h || !mi || !se) return std::nullopt;
  if (*mo < 1 || *mo > 12 || *d < 1 || *d > 31 || *h > 23 || *mi > 59 || *se > 60)
    return std::nullopt;
  std::tm tm{};
  tm.tm_year = static_cast<int>(*y - 1900);
  tm.tm_mon = static_cast<int>(*mo - 1);
  tm.tm_mday = static_cast<int>(*d);
  tm.tm_hour = static_cast<int>(*h);
  tm.tm_min = static_cast<int>(*mi);
  tm.tm_sec = static_cast<int>(*se);
  return static_cast<double>(timegm(&tm));
}

std::optional<int64_t> parse_slurm_mem(std::string_view s, char* per) {
  s = trim(s);
  if (per) *per = 0;
  if (s.empty()) return std::nullopt;
  if (s.back() == 'c' || s.back() == 'n') {
    if (per) *per = s.back();
    s.remove_suffix(1);
  }
  int64_t mult = int64_t{1} << 20;  // bare numbers are MiB
  if (!s.empty()) {
    switch (s.back()) {
      case 'K':
        mult = int64_t{1} << 10;
        s.remove_suffix(1);
        break;
      case 'M':
        mult = int64_t{1} << 20;
        s.remove_suffix(1);
        break;
      case 'G':
        mult = int64_t{1} << 30;
        s.remove_suffix(1);
        break;
      case 'T':
        mult = int64_t{1} << 40;
        s.remove_suffix(1);
        break;
      case 'P':
        mult = int64_t{1} << 50;
        s.remove_suffix(1);
        break;
      default:
        break;
    }
  }
  auto v = parse_double(s);
  if (!v || *v < 0) return std::nullopt;
  return to_integer<int64_t>(*v * static_cast<double>(mult), 0, JOB_MAX_BYTES);
}

namespace {
// A CPU or node count: 0 to JOB_MAX_COUNT.
std::optional<int64_t> count(std::string_view s) {
  auto v = parse_int(s);
  if (!v || *v < 0 || *v > JOB_MAX_COUNT) return std::nullopt;
  return v;
}
// A GPU count: finite, 0 to JOB_MAX_COUNT (fractions allowed: shared GPUs).
std::optional<double> gpu_count(std::string_view s) {
  auto v = parse_double(s);
  if (!v || !(*v >= 0 && *v <= static_cast<double>(JOB_MAX_COUNT))) return std::nullopt;
  return v;
}
}  // namespace

std::optional<Tres> parse_tres(std::string_view s) {
  Tres t;
  s = trim(s);
  double typed_gpu = -1;
  while (!s.empty()) {
    const size_t comma = s.find(',');
    std::string_view item = s.substr(0, comma);
    s = comma == std::string_view::npos ? std::string_view{} : s.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    const std::string_view key = item.substr(0, eq), val = item.substr(eq + 1);
    if (key == "cpu") {
      auto v = count(val);
      if (!v) return std::nullopt;
      t.cpu = *v;
    } else if (key == "mem") {
      auto v = parse_slurm_mem(val);
      if (!v) return std::nullopt;
      t.mem = *v;
    } else if (key == "node") {
      auto v = count(val);
      if (!v) return std::nullopt;
      t.node = *v;
    } else if (key == "gres/gpu") {
      auto v = gpu_count(val);
      if (!v) return std::nullopt;
      t.gpu = *v;
    } else if (key.substr(0, 9) == "gres/gpu:") {
      auto v = gpu_count(val);
      if (!v) return std::nullopt;
      typed_gpu = (typed_gpu < 0 ? 0 : typed_gpu) + *v;
    }
  }
  if (t.gpu < 0 && typed_gpu >= 0) t.gpu = typed_gpu;
  return t;
}

}  // namespace mlprio
