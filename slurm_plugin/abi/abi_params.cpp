// PrioritySiteFactorParameters (and JobSubmitPlugins' share of them) from one table: a row per key
// with how it is read, a valid example for the warning when it is not, and how the value in
// force is written back. parse_params(), the "known keys" list of the unknown-key warning and
// format_params() (the plugins' effective-parameters log line, mlprio-why's "parameters") all walk
// the same rows, and a test checks the rows against slurm_plugin/README.md's parameter table.
// Adding a key: a member (with its default) in Params, a row here, a row in the README table.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>

#include "abi_detail.hpp"
#include "mlprio/util/text.hpp"

namespace mlprio::plugin {
namespace {

using util::trim;

// "a:b:c" -> {a, b, c}: Slurm QOS/account names (letters, digits, '_', '-', '.'), at most 64.
bool parse_name_list(std::string_view s, std::vector<std::string>& out) {
  out.clear();
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t colon = s.find(':', pos);
    if (colon == std::string_view::npos) colon = s.size();
    const std::string_view name = trim(s.substr(pos, colon - pos));
    pos = colon + 1;
    if (name.empty() || name.size() > 64 || out.size() >= 64) return false;
    for (char c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
        return false;
    out.emplace_back(lower(name));  // Slurm compares account and QOS names case-insensitively
  }
  return !out.empty();
}

// Whether an http(s) URL's host is the loopback interface (127.x, localhost, [::1]).
bool loopback_url(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return false;
  std::string_view host = url.substr(scheme + 3);
  host = host.substr(0, host.find('/'));
  if (host.rfind("[::1]", 0) == 0) return true;
  host = host.substr(0, host.find(':'));
  return host == "localhost" || host.rfind("127.", 0) == 0;
}

// A path made of printable ASCII (no control characters that could forge log lines).
bool printable_path(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// "1"/"yes"/"true" or "0"/"no"/"false" (any case); false, out untouched, otherwise.
bool parse_bool(std::string_view s, bool& out) {
  const std::string v = lower(trim(s));
  if (v == "1" || v == "yes" || v == "true") return out = true, true;
  if (v == "0" || v == "no" || v == "false") return out = false, true;
  return false;
}

bool parse_int(std::string_view s, int64_t& out) {
  const auto v = util::parse_int(trim(s));
  if (v) out = *v;
  return v.has_value();
}

// Readers and writers the rows share. Each reader leaves the member unchanged when it refuses.
bool set_number(double& dst, std::string_view v, double lo, double hi) {
  double d = 0;
  if (!parse_number(v, d) || d < lo || d > hi) return false;
  dst = d;
  return true;
}

bool set_int(int64_t& dst, std::string_view v, int64_t lo, int64_t hi) {
  int64_t n = 0;
  if (!parse_int(v, n) || n < lo || n > hi) return false;
  dst = n;
  return true;
}

// An absolute path; an empty value unsets it (what format_params() writes for an unset one).
bool set_abs_path(std::string& dst, std::string_view v) {
  if (!v.empty() && v.front() != '/') return false;
  dst = std::string(v);
  return true;
}

// An absolute printable path of at most 4096 bytes, or empty.
bool set_file_path(std::string& dst, std::string_view v) {
  if (!v.empty() && !(v.front() == '/' && v.size() <= 4096 && printable_path(v))) return false;
  dst = std::string(v);
  return true;
}

bool set_names(std::vector<std::string>& dst, std::string_view v) {
  std::vector<std::string> names;
  if (!v.empty() && !parse_name_list(v, names)) return false;
  dst = std::move(names);
  return true;
}

std::string num(double v) {
  return format_number(v);
}
std::string names(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& n : v) out += (out.empty() ? "" : ":") + n;
  return out;
}
std::string flag(bool b) {
  return b ? "1" : "0";
}

constexpr double HUGE_NUMBER = std::numeric_limits<double>::max();

// In the order format_params() writes them.
const ParamRow ROWS[] = {
    {"model", "model=/etc/slurm/mlprio/model.json, an absolute path",
     [](Params& p, std::string_view v) { return set_abs_path(p.model, v); },
     [](const Params& p) { return p.model; }},
    {"weight", "weight=1000",
     [](Params& p, std::string_view v) { return set_number(p.weight, v, 0, HUGE_NUMBER); },
     [](const Params& p) { return num(p.weight); }},
    {"max_boost", "max_boost=100000",
     [](Params& p, std::string_view v) {
       if (!set_int(p.max_boost, v, 0, 0x7ffffff0LL - 1)) return false;
       p.max_boost_given = true;
       return true;
     },
     [](const Params& p) { return std::to_string(p.max_boost); }},
    {"limit_margin", "limit_margin=0.25",
     [](Params& p, std::string_view v) { return set_number(p.limit_margin, v, 0, 10); },
     [](const Params& p) { return num(p.limit_margin); }},
    {"refuse_above", "refuse_above=0.9",
     [](Params& p, std::string_view v) { return set_number(p.refuse_above, v, 0, 1); },
     [](const Params& p) { return num(p.refuse_above); }},
    {"refuse_mode", "refuse_mode=refuse or refuse_mode=warn",
     [](Params& p, std::string_view v) {
       const std::string s = lower(v);
       if (s != "refuse" && s != "warn") return false;
       p.refuse_mode = s == "refuse" ? MLPRIO_REFUSE : MLPRIO_WARN;
       return true;
     },
     [](const Params& p) {
       return std::string(p.refuse_mode == MLPRIO_REFUSE ? "refuse" : "warn");
     }},
    {"llm_url", "llm_url=http://127.0.0.1:8080/v1",
     [](Params& p, std::string_view v) {
       if (!v.empty() && v.rfind("http://", 0) != 0 && v.rfind("https://", 0) != 0) return false;
       p.llm_url = std::string(v);
       return true;
     },
     [](const Params& p) { return p.llm_url; }},
    // The path only: the key itself is never logged.
    {"llm_api_key_file", "llm_api_key_file=/etc/slurm/mlprio/llm.key, an absolute path",
     [](Params& p, std::string_view v) { return set_file_path(p.llm_api_key_file, v); },
     [](const Params& p) { return p.llm_api_key_file; }},
    {"llm_ca_file", "llm_ca_file=/etc/slurm/mlprio/llm-ca.pem, an absolute path",
     [](Params& p, std::string_view v) { return set_file_path(p.llm_ca_file, v); },
     [](const Params& p) { return p.llm_ca_file; }},
    {"llm_timeout_ms", "llm_timeout_ms=2000",
     [](Params& p, std::string_view v) { return set_int(p.llm_timeout_ms, v, 1, 600000); },
     [](const Params& p) { return std::to_string(p.llm_timeout_ms); }},
    {"llm_model", "llm_model=qwen2.5-7b",
     [](Params& p, std::string_view v) {
       if (v.empty() || v.size() > 200) return false;
       p.llm_model = std::string(v);
       return true;
     },
     [](const Params& p) { return p.llm_model; }},
    {"llm_response_format", "llm_response_format=json_schema or llm_response_format=json_object",
     [](Params& p, std::string_view v) {
       const auto f = mlprio::model::parse_response_format(lower(v));
       if (!f) return false;
       p.llm_response_format = *f;
       return true;
     },
     [](const Params& p) { return std::string(mlprio::model::to_string(p.llm_response_format)); }},
    {"llm_min_factor", "llm_min_factor=0.5 (0 < F <= 1)",
     [](Params& p, std::string_view v) {
       double d = 0;
       if (!parse_number(v, d) || !(d > 0) || d > 1) return false;
       p.llm_min_factor = d;
       return true;
     },
     [](const Params& p) { return num(p.llm_min_factor); }},
    {"llm_max_factor", "llm_max_factor=2 (1 <= F <= 100)",
     [](Params& p, std::string_view v) { return set_number(p.llm_max_factor, v, 1, 100); },
     [](const Params& p) { return num(p.llm_max_factor); }},
    {"llm_min_confidence", "llm_min_confidence=0.5",
     [](Params& p, std::string_view v) { return set_number(p.llm_min_confidence, v, 0, 1); },
     [](const Params& p) { return num(p.llm_min_confidence); }},
    {"budget_us", "budget_us=200",
     [](Params& p, std::string_view v) { return set_int(p.budget_us, v, 0, 50000); },
     [](const Params& p) { return std::to_string(p.budget_us); }},
    {"check_period_ms", "check_period_ms=5000",
     [](Params& p, std::string_view v) { return set_int(p.check_period_ms, v, 100, 3600000); },
     [](const Params& p) { return std::to_string(p.check_period_ms); }},
    {"exempt_qos", "exempt_qos=urgent:debug, names joined by ':'",
     [](Params& p, std::string_view v) { return set_names(p.exempt_qos, v); },
     [](const Params& p) { return names(p.exempt_qos); }},
    {"exempt_accounts", "exempt_accounts=ops:admins, names joined by ':'",
     [](Params& p, std::string_view v) { return set_names(p.exempt_accounts, v); },
     [](const Params& p) { return names(p.exempt_accounts); }},
    {"allow_override", "allow_override=1 or allow_override=0",
     [](Params& p, std::string_view v) { return parse_bool(v, p.allow_override); },
     [](const Params& p) { return flag(p.allow_override); }},
    {"history_period_ms", "history_period_ms=30000 (1000..3600000, or 0 = off)",
     [](Params& p, std::string_view v) {
       int64_t n = 0;
       if (!parse_int(v, n) || !(n == 0 || (n >= 1000 && n <= 3600000))) return false;
       p.history_period_ms = n;
       return true;
     },
     [](const Params& p) { return std::to_string(p.history_period_ms); }},
    {"mode", "mode=enforce or mode=shadow",
     [](Params& p, std::string_view v) {
       const std::string s = lower(v);
       if (s != "enforce" && s != "shadow") return false;
       p.mode = s == "shadow" ? MLPRIO_MODE_SHADOW : MLPRIO_MODE_ENFORCE;
       return true;
     },
     [](const Params& p) {
       return std::string(p.mode == MLPRIO_MODE_SHADOW ? "shadow" : "enforce");
     }},
    {"scope_partitions", "scope_partitions=gpu:debug, names joined by ':'",
     [](Params& p, std::string_view v) { return set_names(p.scope_partitions, v); },
     [](const Params& p) { return names(p.scope_partitions); }},
    {"scope_qos", "scope_qos=normal:high, names joined by ':'",
     [](Params& p, std::string_view v) { return set_names(p.scope_qos, v); },
     [](const Params& p) { return names(p.scope_qos); }},
    {"scope_accounts", "scope_accounts=ml:vision, names joined by ':'",
     [](Params& p, std::string_view v) { return set_names(p.scope_accounts, v); },
     [](const Params& p) { return names(p.scope_accounts); }},
    {"override_default_time", "override_default_time=1 or override_default_time=0",
     [](Params& p, std::string_view v) { return parse_bool(v, p.override_default_time); },
     [](const Params& p) { return flag(p.override_default_time); }},
    {"reload_wait_ms", "reload_wait_ms=1000 (0..10000)",
     [](Params& p, std::string_view v) { return set_int(p.reload_wait_ms, v, 0, 10000); },
     [](const Params& p) { return std::to_string(p.reload_wait_ms); }},
    {"fsdp_table", "fsdp_table=/etc/slurm/mlprio/fsdp_table.json, an absolute path",
     [](Params& p, std::string_view v) { return set_abs_path(p.fsdp_table, v); },
     [](const Params& p) { return p.fsdp_table; }},
    {"fsdp_refuse_oom", "fsdp_refuse_oom=1 or fsdp_refuse_oom=0",
     [](Params& p, std::string_view v) { return parse_bool(v, p.fsdp_refuse_oom); },
     [](const Params& p) { return flag(p.fsdp_refuse_oom); }},
    {"fsdp_gpu_gib", "fsdp_gpu_gib=a100/80:a100_40g/40, GRES type/GiB pairs joined by ':'",
     [](Params& p, std::string_view v) {
       std::vector<std::pair<std::string, int64_t>> types;
       size_t at = 0;
       while (!v.empty() && at <= v.size()) {
         size_t end = v.find(':', at);
         if (end == std::string_view::npos) end = v.size();
         const std::string_view pair = v.substr(at, end - at);
         const size_t slash = pair.find('/');
         int64_t gib = 0;
         const std::string type =
             lower(pair.substr(0, slash == std::string_view::npos ? 0 : slash));
         const bool ok = slash != std::string_view::npos && !type.empty() && type.size() <= 64 &&
                         std::all_of(type.begin(), type.end(),
                                     [](char c) {
                                       return std::isalnum(static_cast<unsigned char>(c)) ||
                                              c == '_' || c == '-' || c == '.';
                                     }) &&
                         parse_int(pair.substr(slash + 1), gib) && gib >= 1 && gib <= 65536 &&
                         types.size() < 64;
         if (!ok) return false;
         types.emplace_back(type, gib);
         at = end + 1;
       }
       p.fsdp_gpu_gib = std::move(types);
       return true;
     },
     [](const Params& p) {
       std::string s;
       for (const auto& [t, g] : p.fsdp_gpu_gib)
         s += (s.empty() ? "" : ":") + t + "/" + std::to_string(g);
       return s;
     }},
    {"fsdp_default_gpu_gib", "fsdp_default_gpu_gib=80 (1..65536)",
     [](Params& p, std::string_view v) { return set_int(p.fsdp_default_gpu_gib, v, 1, 65536); },
     [](const Params& p) { return std::to_string(p.fsdp_default_gpu_gib); }},
};

}  // namespace

std::span<const ParamRow> param_rows() {
  return ROWS;
}

ParseResult parse_params(std::string_view text) {
  ParseResult r;
  Params& p = r.params;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = trim(text.substr(pos, comma - pos));
    pos = comma + 1;
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string_view::npos) {
      r.warnings.push_back("parameter '" + std::string(item) +
                           "' has no value; write key=value, e.g. weight=1000");
      continue;
    }
    const std::string key = lower(trim(item.substr(0, eq)));
    const std::string_view val = trim(item.substr(eq + 1));
    const auto row = std::find_if(std::begin(ROWS), std::end(ROWS),
                                  [&](const ParamRow& x) { return x.key == key; });
    if (row == std::end(ROWS)) {
      std::string known;
      for (const ParamRow& x : ROWS) known += (known.empty() ? "" : ", ") + std::string(x.key);
      r.warnings.push_back("unknown parameter '" + key + "' ignored (known: " + known + ")");
    } else if (!row->set(p, val)) {
      r.warnings.push_back("parameter " + key + "='" + std::string(val) + "' is not valid (e.g. " +
                           std::string(row->example) + "); keeping the default");
    }
  }
  if (!p.llm_api_key_file.empty() && p.llm_url.rfind("http://", 0) == 0 && !loopback_url(p.llm_url))
    r.warnings.push_back(
        "llm_api_key_file is set but llm_url is http://: the API key travels "
        "unencrypted to " +
        p.llm_url + "; use https:// (and llm_ca_file)");
  return r;
}

std::string format_number(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}

std::string format_params(const Params& p) {
  std::string s;
  for (const ParamRow& x : ROWS) s += (s.empty() ? "" : ",") + std::string(x.key) + "=" + x.get(p);
  return s;
}

}  // namespace mlprio::plugin
