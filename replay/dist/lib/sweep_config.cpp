// The sweep config file: a small TOML subset (key = value, one-line arrays, [table] headers,
// # comments) read by hand, because the sweep needs a dozen keys and no Debian TOML library is
// a dependency of the project yet. Every error names file:line, the key, and a valid example;
// an unknown key is an error, so a typo never silently falls back to a default.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "mlprio/replay/dist/sweep_spec.hpp"
#include "mlprio/replay/dist/sweep_windows.hpp"
#include "mlprio/replay/simulator.hpp"
#include "mlprio/util/checked_cast.hpp"
#include "mlprio/util/text.hpp"

namespace mlprio::replay::dist {
namespace {

using Scalar = std::variant<std::string, double, bool>;

struct Reader {
  std::string file;
  int line = 0;
  [[noreturn]] void fail(const std::string& what) const {
    throw SweepError(file + ":" + std::to_string(line) + ": " + what);
  }
};

std::string trim(const std::string& s) {
  return std::string(util::trim(s));
}

// Drops a # comment that is not inside a string.
std::string strip_comment(const std::string& s) {
  bool in_str = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '"' && (i == 0 || s[i - 1] != '\\')) in_str = !in_str;
    if (s[i] == '#' && !in_str) return s.substr(0, i);
  }
  return s;
}

Scalar parse_scalar(const Reader& r, const std::string& text) {
  const std::string t = trim(text);
  if (t.size() >= 2 && t.front() == '"' && t.back() == '"') return t.substr(1, t.size() - 2);
  if (t == "true") return true;
  if (t == "false") return false;
  std::string digits;
  for (char c : t)
    if (c != '_') digits += c;  // TOML allows 1_000
  // A finite decimal number, all of it: strtod would also take "nan", "inf" and hex floats, and
  // 1e999 overflows to infinity; none of these is a sweep setting.
  const bool decimal =
      !digits.empty() && digits.find_first_not_of("0123456789+-.eE") == std::string::npos;
  if (decimal) {
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(digits.c_str(), &end);
    if (end == digits.c_str() + digits.size() && std::isfinite(v) && errno != ERANGE) return v;
    if (end == digits.c_str() + digits.size())
      r.fail("number '" + t + "' is out of range; expected a finite number");
  }
  r.fail("cannot read value '" + t +
         "' (strings in \"double quotes\", finite decimal numbers, true/false)");
}

std::vector<Scalar> parse_value(const Reader& r, const std::string& text) {
  const std::string t = trim(text);
  if (t.empty()) r.fail("missing value after '='");
  if (t.front() != '[') return {parse_scalar(r, t)};
  if (t.back() != ']') r.fail("arrays must close on the same line: [\"a\", \"b\"]");
  std::vector<Scalar> out;
  std::string cur;
  bool in_str = false;
  for (size_t i = 1; i + 1 < t.size(); ++i) {
    const char c = t[i];
    if (c == '"') in_str = !in_str;
    if (c == ',' && !in_str) {
      if (!trim(cur).empty()) out.push_back(parse_scalar(r, cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!trim(cur).empty()) out.push_back(parse_scalar(r, cur));
  return out;
}

std::vector<std::string> strings(const Reader& r, const std::string& key,
                                 const std::vector<Scalar>& v) {
  std::vector<std::string> out;
  for (const auto& s : v) {
    if (!std::holds_alternative<std::string>(s))
      r.fail(key + " takes strings, e.g. " + key + " = [\"fcfs\", \"sjf\"]");
    out.push_back(std::get<std::string>(s));
  }
  return out;
}

std::vector<double> numbers(const Reader& r, const std::string& key, const std::vector<Scalar>& v) {
  std::vector<double> out;
  for (const auto& s : v) {
    if (!std::holds_alternative<double>(s))
      r.fail(key + " takes numbers, e.g. " + key + " = [1000, 5000]");
    out.push_back(std::get<double>(s));
  }
  if (out.empty()) r.fail(key + " needs at least one number");
  return out;
}

std::string one_string(const Reader& r, const std::string& key, const std::vector<Scalar>& v) {
  const auto s = strings(r, key, v);
  if (s.size() != 1) r.fail(key + " takes one string, e.g. " + key + " = \"...\"");
  return s[0];
}

// The largest whole number below which a TOML value read as a double is exact (2^53 - 1): from
// 2^53 on, neighbours share a double ("seed = 9007199254740993" would silently be ...992).
constexpr int64_t EXACT_INT_MAX = (int64_t{1} << 53) - 1;

// One whole number in [0, hi] (range-checked before any conversion: 1e300 is not a count), and
// never above EXACT_INT_MAX.
int64_t one_int(const Reader& r, const std::string& key, const std::vector<Scalar>& v,
                int64_t hi = EXACT_INT_MAX) {
  hi = std::min(hi, EXACT_INT_MAX);
  const auto n = numbers(r, key, v);
  const auto x =
      n.size() == 1 && std::trunc(n[0]) == n[0] ? to_integer<int64_t>(n[0], 0, hi) : std::nullopt;
  if (!x)
    r.fail(key + " takes one whole number in " + range_text(int64_t{0}, hi) + ", e.g. " + key +
           " = 64");
  return *x;
}

bool one_bool(const Reader& r, const std::string& key, const std::vector<Scalar>& v) {
  if (v.size() != 1 || !std::holds_alternative<bool>(v[0])) r.fail(key + " takes true or false");
  return std::get<bool>(v[0]);
}

// A key = value at the top level (before any [table]).
void apply_top_level_key(const Reader& r, const std::string& key, const std::vector<Scalar>& v,
                         SweepSpec& spec) {
  if (key == "traces")
    spec.traces = strings(r, key, v);
  else if (key == "policies")
    spec.policies = strings(r, key, v);
  else if (key == "backfill")
    spec.backfills = strings(r, key, v);
  else if (key == "windows") {
    spec.windows.clear();
    for (const auto& w : strings(r, key, v)) {
      try {
        spec.windows.push_back(parse_window_arg(w));
      } catch (const SweepError& e) {
        r.fail(e.what());
      }
    }
  } else if (key == "estimate")
    spec.replay.estimate = one_string(r, key, v);
  else if (key == "allocation")
    spec.replay.allocation = one_string(r, key, v);
  else if (key == "too_large")
    spec.replay.too_large = one_string(r, key, v);
  else if (key == "estimate_quantile")
    spec.replay.estimate_quantile = one_string(r, key, v);
  else if (key == "correction")
    spec.replay.correction = one_string(r, key, v);
  else if (key == "backfill_order")
    spec.replay.backfill_order = one_string(r, key, v);
  else if (key == "kill_at_limit")
    spec.replay.kill_at_limit = one_bool(r, key, v);
  else if (key == "per_job")
    spec.per_job = one_bool(r, key, v);
  else if (key == "slurm_confs")
    spec.slurm_confs = strings(r, key, v);
  else if (key == "slurm_release")
    spec.slurm_release = one_string(r, key, v);
  else
    r.fail("unknown key '" + key +
           "' (top level: traces, policies, backfill, windows, estimate, estimate_quantile, "
           "correction, backfill_order, allocation, too_large, kill_at_limit, per_job, "
           "slurm_confs, slurm_release)");
}

void apply_random_windows_key(const Reader& r, const std::string& key, const std::vector<Scalar>& v,
                              SweepSpec& spec) {
  if (key == "count")
    spec.random_count = one_int(r, key, v, MAX_SWEEP_TASKS);
  else if (key == "len")
    spec.random_len = one_int(r, key, v);
  else if (key == "seed")
    spec.seed = static_cast<uint64_t>(one_int(r, key, v));
  else
    r.fail("unknown key '" + key + "' in [random_windows] (valid: count, len, seed)");
}

void apply_machine_key(const Reader& r, const std::string& key, const std::vector<Scalar>& v,
                       SweepSpec& spec) {
  if (key == "nodes")
    spec.replay.nodes = one_int(r, key, v, MACHINE_MAX_NODES);
  else if (key == "cores_per_node")
    spec.replay.cores_per_node = one_int(r, key, v, MACHINE_MAX_CORES_PER_NODE);
  else
    r.fail("unknown key '" + key + "' in [machine] (valid: nodes, cores_per_node)");
}

void apply_ml_key(const Reader& r, const std::string& key, const std::vector<Scalar>& v,
                  SweepSpec& spec) {
  const auto one_number = [&]() {
    const auto n = numbers(r, key, v);
    if (n.size() != 1) r.fail(key + " takes one number, e.g. " + key + " = 1.0");
    return n[0];
  };
  if (key == "age_weight")
    spec.replay.ml_age_weight = one_number();
  else if (key == "starvation_limit")
    spec.replay.ml_starvation_limit = one_number();
  else if (key == "size_weight")
    spec.replay.ml_size_weight = one_number();
  else if (key == "fail_weight")
    spec.replay.ml_fail_weight = one_number();
  else if (key == "request_weight")
    spec.replay.ml_request_weight = one_number();
  else if (key == "fairshare_weight")
    spec.replay.ml_fairshare_weight = one_number();
  else
    r.fail("unknown key '" + key +
           "' in [ml] (valid: age_weight, starvation_limit, size_weight, fail_weight, "
           "request_weight, fairshare_weight)");
}

void apply_multifactor_key(const Reader& r, const std::string& key, const std::vector<Scalar>& v,
                           SweepSpec& spec) {
  if (key == "weight_age")
    spec.weight_age = numbers(r, key, v);
  else if (key == "weight_job_size")
    spec.weight_job_size = numbers(r, key, v);
  else if (key == "weight_fairshare")
    spec.weight_fairshare = numbers(r, key, v);
  else if (key == "max_age")
    spec.max_age = numbers(r, key, v);
  else if (key == "decay_half_life")
    spec.decay_half_life = numbers(r, key, v);
  else if (key == "favor_small")
    spec.favor_small = one_bool(r, key, v);
  else
    r.fail("unknown key '" + key +
           "' in [multifactor] (valid: weight_age, weight_job_size, weight_fairshare, "
           "max_age, decay_half_life, favor_small)");
}

}  // namespace

void apply_sweep_config(const std::string& path, SweepSpec& spec) {
  std::ifstream in(path);
  if (!in) throw SweepError("cannot open sweep config " + path + ": " + std::strerror(errno));
  Reader r{path, 0};
  std::string table, raw;
  while (std::getline(in, raw)) {
    ++r.line;
    const std::string l = trim(strip_comment(raw));
    if (l.empty()) continue;
    if (l.front() == '[') {
      if (l.back() != ']') r.fail("a table header looks like [multifactor]");
      table = trim(l.substr(1, l.size() - 2));
      if (table != "machine" && table != "multifactor" && table != "random_windows" &&
          table != "ml")
        r.fail("unknown table [" + table +
               "] (valid: [machine], [multifactor], [random_windows], [ml])");
      continue;
    }
    const auto eq = l.find('=');
    if (eq == std::string::npos) r.fail("expected key = value");
    const std::string key = trim(l.substr(0, eq));
    const auto v = parse_value(r, l.substr(eq + 1));
    if (table.empty())
      apply_top_level_key(r, key, v, spec);
    else if (table == "random_windows")
      apply_random_windows_key(r, key, v, spec);
    else if (table == "machine")
      apply_machine_key(r, key, v, spec);
    else if (table == "ml")
      apply_ml_key(r, key, v, spec);
    else  // multifactor
      apply_multifactor_key(r, key, v, spec);
  }
}

}  // namespace mlprio::replay::dist
