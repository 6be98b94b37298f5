// Parsing for the plugin ABI: PrioritySiteFactorParameters, LLM fine-tuning parameters found in
// job scripts, comments and names, and the plugin's job view -> core Job conversion. Pure
// functions over strings so tests check them without a cluster; errors become warnings with the
// offending key and a valid example, because a typo in slurm.conf must never stop slurmctld.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "abi_detail.hpp"
#include "mlprio/model/fsdp_table.hpp"
#include "mlprio/model/predictor.hpp"
#include "mlprio/util/checked_cast.hpp"
#include "mlprio/util/text.hpp"

namespace mlprio::plugin {
using util::trim;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A number with an optional k/m/b/t (or K/M/B/T, G) multiplier: "7e9", "7B", "1.5b", "4k".
bool parse_number(std::string_view s, double& out) {
  s = trim(s);
  if (s.empty() || s.size() > 64) return false;
  std::string buf(s);
  char* end = nullptr;
  double v = std::strtod(buf.c_str(), &end);
  if (end == buf.c_str()) return false;
  std::string_view rest(end);
  if (rest.size() == 1) {
    switch (std::tolower(static_cast<unsigned char>(rest[0]))) {
      case 'k':
        v *= 1e3;
        break;
      case 'm':
        v *= 1e6;
        break;
      case 'b':
      case 'g':
        v *= 1e9;
        break;
      case 't':
        v *= 1e12;
        break;
      default:
        return false;
    }
  } else if (!rest.empty()) {
    return false;
  }
  if (!std::isfinite(v)) return false;
  out = v;
  return true;
}

namespace {

// Canonical feature key for an alias, or "" when the key is not a fine-tuning parameter.
std::string canonical_key(std::string_view k) {
  const std::string key = lower(trim(k));
  static const std::pair<const char*, const char*> ALIASES[] = {
      {"model_size", "model_size"},
      {"params", "model_size"},
      {"model_params", "model_size"},
      {"seq_len", "seq_len"},
      {"seqlen", "seq_len"},
      {"max_seq_len", "seq_len"},
      {"sequence_length", "seq_len"},
      {"batch_size", "batch_size"},
      {"bs", "batch_size"},
      {"micro_batch", "batch_size"},
      {"global_batch", "batch_size"},
      {"lora_rank", "lora_rank"},
      {"lora_r", "lora_rank"},
      {"rank", "lora_rank"},
      {"epochs", "epochs"},
      {"num_epochs", "epochs"},
      {"epoch", "epochs"},
      {"quant_bits", "quant_bits"},
      {"bits", "quant_bits"},
  };
  for (const auto& [alias, canon] : ALIASES)
    if (key == alias) return canon;
  return {};
}

void set_feature(std::vector<std::pair<std::string, double>>& out, const std::string& k, double v) {
  for (auto& [key, value] : out)
    if (key == k) {
      value = v;
      return;
    }
  out.emplace_back(k, v);
}

// The plausible range of each canonical fine-tuning parameter; a value outside is ignored (and
// reported) rather than fed to the model.
bool in_range(const std::string& key, double v, const char*& expect) {
  struct Range {
    const char* key;
    double lo, hi;
    const char* expect;
  };
  static const Range R[] = {
      {"model_size", 1e6, 1e13, "parameters, 1e6..1e13 (7e9, or 7b in the name)"},
      {"seq_len", 1, 1e8, "tokens, 1..1e8"},
      {"batch_size", 1, 1e8, "1..1e8"},
      {"lora_rank", 1, 65536, "1..65536"},
      {"epochs", 1e-3, 1e5, "0.001..1e5"},
      {"quant_bits", 1, 64, "1..64"}};
  for (const auto& r : R)
    if (key == r.key) {
      expect = r.expect;
      return std::isfinite(v) && v >= r.lo && v <= r.hi;
    }
  expect = "a number";
  return std::isfinite(v);
}

// "k=v" tokens separated by spaces, commas or semicolons. With `problems`, what was ignored:
// unknown keys (only when `strict`: a "mlprio:" comment or an #MLPRIO line, text meant for us),
// values that are not numbers or out of range.
void scan_pairs(std::string_view text, std::vector<std::pair<std::string, double>>& out,
                std::vector<std::string>* problems = nullptr, bool strict = false) {
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() &&
           (std::isspace(static_cast<unsigned char>(text[i])) || text[i] == ',' || text[i] == ';'))
      ++i;
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j])) &&
           text[j] != ',' && text[j] != ';')
      ++j;
    std::string_view tok = text.substr(i, j - i);
    i = j;
    auto eq = tok.find('=');
    if (eq == std::string_view::npos) continue;
    std::string key = canonical_key(tok.substr(0, eq));
    const std::string shown(tok.substr(0, std::min<size_t>(tok.size(), 64)));
    double v = 0;
    const char* expect = "";
    if (key.empty()) {
      // The training-configuration keys are mlprio::model::parse_fsdp_directives()'s.
      if (strict && mlprio::model::is_fsdp_directive_key(tok.substr(0, eq))) continue;
      if (problems && strict && problems->size() < 16 &&
          lower(tok.substr(0, eq)).rfind("mlprio", 0) != 0)
        problems->push_back(shown +
                            " (unknown key; known: model_size, seq_len, batch_size, "
                            "lora_rank, epochs, quant_bits)");
    } else if (!parse_number(tok.substr(eq + 1), v)) {
      if (problems && problems->size() < 16) problems->push_back(shown + " (not a number)");
    } else if (!in_range(key, v, expect)) {
      if (problems && problems->size() < 16)
        problems->push_back(shown + " (out of range: " + key + " is " + expect + ")");
    } else {
      set_feature(out, key, v);
    }
  }
}

// Job-name hints: "-7b" / "_13B" -> model_size, "lora16"/"r16" -> lora_rank, "seq2048"/"2k"
// after "seq" -> seq_len, "bs8" -> batch_size, "ep3" -> epochs, "qlora" -> quant_bits=4.
void scan_name(std::string_view name, std::vector<std::pair<std::string, double>>& out) {
  const std::string n = lower(name);
  size_t i = 0;
  while (i < n.size()) {
    if (!std::isalnum(static_cast<unsigned char>(n[i]))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < n.size() && std::isalnum(static_cast<unsigned char>(n[j]))) ++j;
    const std::string tok = n.substr(i, j - i);
    i = j;
    auto num_after = [&](std::string_view prefix, double& v) {
      return tok.size() > prefix.size() && tok.compare(0, prefix.size(), prefix) == 0 &&
             parse_number(std::string_view(tok).substr(prefix.size()), v);
    };
    double v = 0;
    if (tok == "qlora") {
      set_feature(out, "quant_bits", 4);
    } else if (num_after("lora", v) || num_after("r", v)) {
      set_feature(out, "lora_rank", v);
    } else if (num_after("seq", v)) {
      set_feature(out, "seq_len", v);
    } else if (num_after("bs", v)) {
      set_feature(out, "batch_size", v);
    } else if (num_after("ep", v)) {
      set_feature(out, "epochs", v);
    } else if (tok.size() >= 2 && tok.back() == 'b' &&
               std::isdigit(static_cast<unsigned char>(tok.front())) && parse_number(tok, v) &&
               v >= 1e8) {
      set_feature(out, "model_size", v);
    }
  }
}

}  // namespace

std::vector<std::pair<std::string, double>> extract_features(std::string_view script,
                                                             std::string_view comment,
                                                             std::string_view name) {
  std::vector<std::string> ignored;
  return extract_features(script, comment, name, ignored);
}

std::vector<std::pair<std::string, double>> extract_features(std::string_view script,
                                                             std::string_view comment,
                                                             std::string_view name,
                                                             std::vector<std::string>& problems) {
  std::vector<std::pair<std::string, double>> out;
  scan_name(name, out);
  // Scripts can be megabytes; the parameters live in the header, so look at the first 64 KiB.
  script = script.substr(0, std::min<size_t>(script.size(), 64 * 1024));
  size_t pos = 0;
  while (pos < script.size()) {
    size_t nl = script.find('\n', pos);
    if (nl == std::string_view::npos) nl = script.size();
    std::string_view line = trim(script.substr(pos, nl - pos));
    pos = nl + 1;
    if (line.rfind("#MLPRIO", 0) == 0) scan_pairs(line.substr(7), out, &problems, true);
  }
  std::string_view c = trim(comment);
  const bool ours = c.rfind("mlprio:", 0) == 0;
  if (ours) c.remove_prefix(7);
  scan_pairs(c, out, &problems, ours);
  return out;
}

std::string format_features(const std::vector<std::pair<std::string, double>>& f) {
  std::string s;
  char buf[64];
  for (const auto& [k, v] : f) {
    std::snprintf(buf, sizeof buf, "%.6g", v);
    if (!s.empty()) s += ' ';
    s += k + "=" + buf;
  }
  return s;
}

Job to_core_job(const mlprio_job_t& in, TraceNames& names) {
  Job j;
  j.id = in.job_id;
  j.submit = in.submit_time >= 0 ? in.submit_time : UNKNOWN;
  j.req_time = in.time_limit_s > 0 ? in.time_limit_s : UNKNOWN;
  j.req_procs = in.req_cpus > 0 ? in.req_cpus : UNKNOWN_INT;
  j.req_nodes = in.req_nodes > 0 ? in.req_nodes : UNKNOWN_INT;
  j.req_gpus = in.req_gpus >= 0 ? in.req_gpus : UNKNOWN;
  j.req_mem = in.req_mem_bytes > 0 ? in.req_mem_bytes : UNKNOWN_INT;
  j.status = JobStatus::PENDING;
  if (in.user) j.user = names.users.intern(in.user);
  if (in.account) j.account = names.accounts.intern(in.account);
  if (in.partition) j.partition = names.partitions.intern(in.partition);
  if (in.qos) j.qos = names.qos.intern(in.qos);
  if (in.name) j.name = names.job_names.intern(in.name);
  // Features: admin_comment (what job_submit/mlprio parsed from the script) wins over the
  // user's comment and the job name.
  auto feats = extract_features(in.script ? in.script : "", in.comment ? in.comment : "",
                                in.name ? in.name : "");
  if (in.admin_comment) {
    for (auto& [k, v] : extract_features("", in.admin_comment, "")) set_feature(feats, k, v);
  }
  j.features.reserve(feats.size());
  for (const auto& [k, v] : feats) j.features.emplace_back(names.features.intern(k), v);
  return j;
}

bool in_scope(const Params& p, const char* partitions, const char* qos, const char* account) {
  auto listed = [](const std::vector<std::string>& names, std::string_view v) {
    return std::find(names.begin(), names.end(), lower(trim(v))) != names.end();
  };
  auto bounded = [](const char* v) {
    return v ? std::string_view(v, ::strnlen(v, 4096)) : std::string_view();
  };
  if (!p.scope_qos.empty() && !listed(p.scope_qos, bounded(qos))) return false;
  if (!p.scope_accounts.empty() && !listed(p.scope_accounts, bounded(account))) return false;
  if (p.scope_partitions.empty()) return true;
  const std::string_view parts = bounded(partitions);
  for (size_t pos = 0; pos <= parts.size();) {
    size_t comma = parts.find(',', pos);
    if (comma == std::string_view::npos) comma = parts.size();
    if (listed(p.scope_partitions, parts.substr(pos, comma - pos))) return true;
    pos = comma + 1;
  }
  return false;
}

bool has_override_token(const char* comment) {
  if (!comment) return false;
  const std::string_view c(comment, ::strnlen(comment, 4096));
  const std::string_view tok(OVERRIDE_TOKEN);
  auto sep = [](char ch) {
    return std::isspace(static_cast<unsigned char>(ch)) || ch == ',' || ch == ';';
  };
  for (size_t at = c.find(tok); at != std::string_view::npos; at = c.find(tok, at + 1)) {
    const size_t end = at + tok.size();
    if ((at == 0 || sep(c[at - 1])) && (end == c.size() || sep(c[end]))) return true;
  }
  return false;
}

uint64_t llm_key_of(const char* admin_comment) {
  if (!admin_comment) return 0;
  const char* p = std::strstr(admin_comment, "mlprio_llm=");
  if (!p) return 0;
  p += 11;
  uint64_t v = 0;
  auto r = std::from_chars(p, p + std::strlen(p), v, 16);
  return r.ec == std::errc() ? v : 0;
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0)) return "unknown";  // negative or NaN
  // Range-checked: llround of 1e300 is undefined (in practice INT64_MIN, printed as nonsense).
  const auto rounded = to_integer<int64_t>(std::round(seconds), 0);
  if (!rounded) return "unknown";
  int64_t s = *rounded;
  const int64_t d = s / 86400;
  s %= 86400;
  char buf[48];
  if (d > 0)
    std::snprintf(buf, sizeof buf, "%lld-%02lld:%02lld:%02lld", static_cast<long long>(d),
                  static_cast<long long>(s / 3600), static_cast<long long>(s / 60 % 60),
                  static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%02lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return buf;
}

int64_t factor_value(double weighted_score, int64_t max_boost) {
  return mlprio::model::site_factor_value(weighted_score, max_boost);
}

namespace {

// A GRES count as Slurm reads it (gres.c _is_valid_number + suffix_mult): decimal digits, then
// nothing or one of k/kib (1024), kb (1000), m, mib, mb, g, ..., p, pb, any case.
std::optional<int64_t> gres_count(std::string_view s) {
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  if (digits == 0 || digits > 18) return std::nullopt;
  int64_t v = 0;
  std::from_chars(s.data(), s.data() + digits, v);
  const std::string suffix = lower(s.substr(digits));
  int64_t mult = 1;
  if (!suffix.empty()) {
    static const char* const UNITS = "kmgtp";
    const char* u = std::strchr(UNITS, suffix[0]);
    if (!u || suffix[0] == '\0') return std::nullopt;
    const bool si = suffix.size() == 2 && suffix[1] == 'b';
    const bool bin = suffix.size() == 1 || suffix.substr(1) == "ib";
    if (!si && !bin) return std::nullopt;
    for (const char* k = UNITS; k <= u; ++k) mult *= si ? 1000 : 1024;
  }
  const auto total = checked_mul(v, mult);
  if (!total || *total > JOB_MAX_COUNT) return std::nullopt;
  return total;
}

// The next entry of a GRES/TRES list ("gres:gpu:a100:2,gres/gpu=1;..."), trimmed and without its
// "gres:" or "gres/" prefix; false at the end. `pos` is the walk's position, 0 at the start.
bool next_gres_entry(std::string_view tres, size_t& pos, std::string_view& entry) {
  if (pos > tres.size()) return false;
  size_t end = tres.find_first_of(",;", pos);
  if (end == std::string_view::npos) end = tres.size();
  entry = trim(tres.substr(pos, end - pos));
  pos = end + 1;
  if (entry.size() >= 5 &&
      (lower(entry.substr(0, 5)) == "gres:" || lower(entry.substr(0, 5)) == "gres/"))
    entry.remove_prefix(5);
  return true;
}

}  // namespace

double tres_gpus(std::string_view tres) {
  int64_t total = 0;
  bool any = false;
  size_t pos = 0;
  std::string_view e;
  while (next_gres_entry(tres, pos, e)) {
    const size_t name_end = std::min(e.find(':'), e.find('='));
    if (e.substr(0, name_end) != "gpu") continue;  // another GRES or TRES: not ours
    any = true;
    std::string_view rest =
        name_end == std::string_view::npos ? std::string_view() : e.substr(name_end);
    std::optional<int64_t> n;
    if (rest.empty()) {
      n = 1;  // "gres:gpu": one
    } else if (rest.front() == '=') {
      n = gres_count(rest.substr(1));  // TRES form "gres/gpu=2"
    } else {
      rest.remove_prefix(1);  // after "gpu:"
      const size_t eq = rest.find('=');
      const size_t colon = rest.find(':');
      if (eq != std::string_view::npos) {
        // "gres/gpu:a100=2": a type, then the count
        const std::string_view type = rest.substr(0, eq);
        if (!type.empty() && type.find(':') == std::string_view::npos)
          n = gres_count(rest.substr(eq + 1));
      } else if (colon == std::string_view::npos) {
        // "gpu:2" a count, or "gpu:a100" a type with an implicit count of 1 (digits too many
        // to count are not a type)
        n = gres_count(rest);
        const bool digits = std::all_of(rest.begin(), rest.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c)) != 0;
        });
        if (!n && !rest.empty() && !digits) n = 1;
      } else {
        // "gpu:a100:2": a type and a count
        const std::string_view type = rest.substr(0, colon), count = rest.substr(colon + 1);
        if (!type.empty() && count.find(':') == std::string_view::npos) n = gres_count(count);
      }
    }
    if (!n) return -1;  // a GPU entry we cannot read: unknown, not a guess
    total += *n;
    if (total > JOB_MAX_COUNT) return -1;
  }
  return any ? static_cast<double>(total) : -1.0;
}

std::string tres_gpu_type(std::string_view tres) {
  size_t pos = 0;
  std::string_view e;
  while (next_gres_entry(tres, pos, e)) {
    if (e.substr(0, 4) != "gpu:") continue;  // no type, another GRES or a TRES
    std::string_view rest = e.substr(4);
    const size_t cut = rest.find_first_of(":=");
    std::string_view type = rest.substr(0, cut);
    if (cut == std::string_view::npos && gres_count(type)) continue;  // "gpu:2": a count
    if (type.empty() || type.size() > 64) continue;
    return lower(type);
  }
  return {};
}

int64_t gpu_memory_gib(const Params& p, std::string_view tres) {
  const std::string type = tres_gpu_type(tres);
  for (const auto& [t, gib] : p.fsdp_gpu_gib)
    if (t == type) return gib;
  return p.fsdp_default_gpu_gib;
}

}  // namespace mlprio::plugin

extern "C" double mlprio_tres_gpus(const char* tres) {
  if (!tres) return -1;
  try {
    return mlprio::plugin::tres_gpus(std::string_view(tres, ::strnlen(tres, 65536)));
  } catch (...) {
    return -1;
  }
}
