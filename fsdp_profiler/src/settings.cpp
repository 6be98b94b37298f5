// Parsing of PYTORCH_CUDA_ALLOC_CONF and of byte sizes (see settings.hpp). Each accepted key is
// listed once in KNOWN_KEYS with what a valid value looks like, so an error can always teach.
#include "mlprio/fsdp/settings.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "mlprio/util/checked_cast.hpp"
#include "mlprio/util/text.hpp"

namespace mlprio::fsdp {

namespace {

struct KnownKey {
  const char* name;
  const char* example;
};
constexpr KnownKey KNOWN_KEYS[] = {
    {"max_split_size_mb", "max_split_size_mb:128 (an integer > 20, in MiB)"},
    {"max_non_split_rounding_mb", "max_non_split_rounding_mb:64 (an integer >= 0, in MiB)"},
    {"roundup_power2_divisions", "roundup_power2_divisions:4 or [256:1,512:2,1024:4,>:8]"},
    {"garbage_collection_threshold", "garbage_collection_threshold:0.6 (between 0 and 1)"},
    {"expandable_segments", "expandable_segments:True or False"},
    {"backend", "backend:native (cudaMallocAsync is not modelled)"},
    {"release_lock_on_cudamalloc", "release_lock_on_cudamalloc:True (no effect on the model)"},
    {"pinned_use_cuda_host_register", "pinned_use_cuda_host_register:True (host memory; ignored)"},
    {"pinned_num_register_threads", "pinned_num_register_threads:8 (host memory; ignored)"},
};

std::string trim(std::string_view s) {
  return std::string(util::trim(s));
}

[[noreturn]] void bad_value(const std::string& key, const std::string& value, const char* why) {
  const char* example = "";
  for (const auto& k : KNOWN_KEYS)
    if (key == k.name) example = k.example;
  throw SettingsError("PYTORCH_CUDA_ALLOC_CONF: bad value '" + value + "' for key '" + key +
                      "': " + why + "; valid example: " + example);
}

uint64_t parse_uint(const std::string& key, const std::string& value) {
  uint64_t v = 0;
  const char* end = value.data() + value.size();
  auto [p, ec] = std::from_chars(value.data(), end, v);
  if (ec != std::errc() || p != end || value.empty())
    bad_value(key, value, "expected a non-negative integer");
  return v;
}

// A size in MiB whose bytes stay within MAX_SIZE_BYTES (mb * MiB must not wrap).
uint64_t parse_mib(const std::string& key, const std::string& value) {
  const uint64_t mb = parse_uint(key, value);
  if (mb > MAX_SIZE_BYTES / MiB)
    bad_value(key, value, ("at most " + std::to_string(MAX_SIZE_BYTES / MiB) + " (1 PiB)").c_str());
  return mb;
}

bool parse_bool(const std::string& key, const std::string& value) {
  if (value == "True" || value == "true" || value == "1") return true;
  if (value == "False" || value == "false" || value == "0") return false;
  bad_value(key, value, "expected True or False");
}

void parse_divisions(const std::string& value, AllocatorSettings& s) {
  const std::string key = "roundup_power2_divisions";
  auto check_div = [&](uint64_t d, const std::string& text) {
    if (d != 0 && !std::has_single_bit(d))
      bad_value(key, text, "divisions must be a power of 2 (or 0 to disable)");
  };
  if (value.empty()) bad_value(key, value, "empty value");
  if (value.front() != '[') {
    const uint64_t d = parse_uint(key, value);
    check_div(d, value);
    s.roundup_power2_divisions.fill(d);
    return;
  }
  if (value.back() != ']') bad_value(key, value, "a list must end with ']'");
  if (s.version == TorchVersion::TORCH_1_13)
    bad_value(key, value, "PyTorch 1.13 accepts a single value only");
  const std::string body = value.substr(1, value.size() - 2);
  std::stringstream ss(body);
  std::string item;
  bool first = true;
  size_t last_index = 0;
  while (std::getline(ss, item, ',')) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) bad_value(key, value, "list items are SIZE_MB:DIVISIONS");
    const std::string left = trim(item.substr(0, colon));
    const std::string right = trim(item.substr(colon + 1));
    const uint64_t d = parse_uint(key, right);
    check_div(d, right);
    if (left == ">") {
      std::fill(s.roundup_power2_divisions.begin() + static_cast<std::ptrdiff_t>(last_index),
                s.roundup_power2_divisions.end(), d);
      continue;
    }
    const uint64_t mb = parse_uint(key, left);
    if (!std::has_single_bit(mb)) bad_value(key, left, "interval sizes must be powers of 2 (MiB)");
    const size_t index =
        std::min<size_t>(static_cast<size_t>(std::countr_zero(mb)), ROUNDUP_INTERVALS - 1);
    if (first) {
      std::fill(s.roundup_power2_divisions.begin(),
                s.roundup_power2_divisions.begin() + static_cast<std::ptrdiff_t>(index), d);
      first = false;
    }
    s.roundup_power2_divisions[index] = d;
    last_index = index;
  }
}

}  // namespace

AllocatorSettings parse_alloc_conf(std::string_view conf, AllocatorSettings s) {
  // Items are comma-separated, but a divisions list contains commas inside brackets.
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (char c : conf) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      items.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  items.push_back(cur);
  for (const std::string& raw : items) {
    const std::string item = trim(raw);
    if (item.empty()) continue;
    const auto colon = item.find(':');
    if (colon == std::string::npos)
      throw SettingsError("PYTORCH_CUDA_ALLOC_CONF: item '" + item +
                          "' is not KEY:VALUE (e.g. expandable_segments:True)");
    const std::string key = trim(item.substr(0, colon));
    const std::string value = trim(item.substr(colon + 1));
    if (key == "max_split_size_mb") {
      const uint64_t mb = parse_mib(key, value);
      if (mb <= LARGE_BUFFER / MiB) bad_value(key, value, "must be > 20");
      s.max_split_size = mb * MiB;
    } else if (key == "max_non_split_rounding_mb") {
      if (s.version == TorchVersion::TORCH_1_13)
        bad_value(key, value, "this key does not exist in PyTorch 1.13");
      s.max_non_split_rounding_size = parse_mib(key, value) * MiB;
    } else if (key == "roundup_power2_divisions") {
      parse_divisions(value, s);
    } else if (key == "garbage_collection_threshold") {
      double v = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (ec != std::errc() || p != value.data() + value.size())
        bad_value(key, value, "expected a number");
      if (!(v > 0.0 && v < 1.0)) bad_value(key, value, "must be > 0 and < 1");
      s.garbage_collection_threshold = v;
    } else if (key == "expandable_segments") {
      s.expandable_segments = parse_bool(key, value);
      if (s.expandable_segments && s.version == TorchVersion::TORCH_1_13)
        bad_value(key, value, "expandable segments need PyTorch 2.1 or later");
    } else if (key == "backend") {
      if (value != "native") bad_value(key, value, "only the native caching allocator is modelled");
    } else if (key == "release_lock_on_cudamalloc" || key == "pinned_use_cuda_host_register") {
      parse_bool(key, value);
    } else if (key == "pinned_num_register_threads") {
      parse_uint(key, value);
    } else {
      std::string known;
      for (const auto& k : KNOWN_KEYS) known += std::string(known.empty() ? "" : ", ") + k.name;
      throw SettingsError("PYTORCH_CUDA_ALLOC_CONF: unknown key '" + key +
                          "'; known keys: " + known);
    }
  }
  return s;
}

std::string AllocatorSettings::to_alloc_conf() const {
  std::ostringstream os;
  os << "expandable_segments:" << (expandable_segments ? "True" : "False");
  if (max_split_size != UNLIMITED) os << ",max_split_size_mb:" << max_split_size / MiB;
  if (max_non_split_rounding_size != LARGE_BUFFER)
    os << ",max_non_split_rounding_mb:" << max_non_split_rounding_size / MiB;
  if (garbage_collection_threshold > 0.0)
    os << ",garbage_collection_threshold:" << garbage_collection_threshold;
  const bool any_div = std::any_of(roundup_power2_divisions.begin(), roundup_power2_divisions.end(),
                                   [](uint64_t d) { return d; });
  if (any_div) {
    os << ",roundup_power2_divisions:[";
    for (size_t i = 0; i < ROUNDUP_INTERVALS; ++i)
      os << (i ? "," : "") << (uint64_t{1} << i) << ":" << roundup_power2_divisions[i];
    os << "]";
  }
  return os.str();
}

uint64_t parse_bytes(std::string_view text) {
  const std::string t = trim(text);
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  const std::string num = t.substr(0, i);
  std::string unit = trim(t.substr(i));
  double v = 0;
  auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
  const char* hint = "expected a size such as 80GiB, 40GB, 512MiB or 4096 (bytes)";
  if (num.empty() || ec != std::errc() || p != num.data() + num.size())
    throw SettingsError("bad size '" + t + "': " + hint);
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  double mult = 0;
  if (unit.empty() || unit == "b")
    mult = 1;
  else if (unit == "kib" || unit == "ki")
    mult = 1024.0;
  else if (unit == "mib" || unit == "mi")
    mult = 1024.0 * 1024;
  else if (unit == "gib" || unit == "gi")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "tib" || unit == "ti")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb" || unit == "k")
    mult = 1e3;
  else if (unit == "mb" || unit == "m")
    mult = 1e6;
  else if (unit == "gb" || unit == "g")
    mult = 1e9;
  else if (unit == "tb" || unit == "t")
    mult = 1e12;
  else
    throw SettingsError("bad size unit '" + unit + "' in '" + t + "': " + hint);
  const auto bytes = to_integer<uint64_t>(std::round(v * mult), 1, MAX_SIZE_BYTES);
  if (!bytes)
    throw SettingsError("size '" + t + "' is out of range; expected 1 B to 1 PiB (" +
                        std::to_string(MAX_SIZE_BYTES) + " bytes)");
  return *bytes;
}

std::string format_bytes(uint64_t bytes) {
  char buf[64];
  const auto b = static_cast<double>(bytes);
  if (bytes >= GiB)
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / static_cast<double>(GiB));
  else if (bytes >= MiB)
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / static_cast<double>(MiB));
  else
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

}  // namespace mlprio::fsdp
