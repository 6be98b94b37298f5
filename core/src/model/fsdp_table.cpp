// The FSDP advice table, the #MLPRIO training-configuration directives and the advice (see
// mlprio/model/fsdp_table.hpp). Everything that reads untrusted text here (table files, batch
// scripts) bounds what it reads and reports problems by name; the directive parser never throws.
#include "mlprio/model/fsdp_table.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "mlprio/io/json_input.hpp"
#include "mlprio/util/text.hpp"

namespace mlprio::model {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}
std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

// Untrusted text as it may appear in a message: at most 64 bytes, printable ASCII only.
std::string shown(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 64; ++i) {
    const char c = s[i];
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (s.size() > 64) out += "...";
  return out;
}

bool valid_name(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
  });
}

bool valid_sharding(const std::string& s) {
  return s == "FULL_SHARD" || s == "SHARD_GRAD_OP" || s == "NO_SHARD";
}

bool parse_bool(std::string_view s, bool& out) {
  const std::string v = lower(util::trim(s));
  if (v == "1" || v == "yes" || v == "true" || v == "on") return out = true, true;
  if (v == "0" || v == "no" || v == "false" || v == "off") return out = false, true;
  return false;
}

bool bounded_int(std::string_view s, int64_t lo, int64_t hi, int64_t& out) {
  const auto v = util::parse_int(s);
  if (!v || *v < lo || *v > hi) return false;
  out = *v;
  return true;
}

// Fields of a table entry, each checked with a message that names it.
class EntryReader {
 public:
  EntryReader(const json& e, const std::string& where) : e_(e), where_(where) {
    if (!e.is_object()) fail("is not an object");
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw FsdpTableError(where_ + " " + what);
  }
  const json& field(const char* name, bool required = true) const {
    static const json null_value;
    const auto it = e_.find(name);
    if (it == e_.end()) {
      if (required) fail(std::string("has no field '") + name + "'");
      return null_value;
    }
    return *it;
  }
  std::string str(const char* name, bool required = true) const {
    const json& v = field(name, required);
    if (v.is_null() && !required) return {};
    if (!v.is_string() || v.get_ref<const std::string&>().size() > 256)
      fail(std::string("field '") + name + "' is " + io::describe_json_value(v) +
           ", expected a string");
    return v.get<std::string>();
  }
  int64_t integer(const char* name, int64_t lo, int64_t hi, bool nullable = false) const {
    const json& v = field(name);
    if (nullable && v.is_null()) return 0;
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      fail(std::string("field '") + name + "' is " + io::describe_json_value(v) +
           ", expected an integer in " + std::to_string(lo) + ".." + std::to_string(hi) +
           (nullable ? " or null" : ""));
    return v.get<int64_t>();
  }
  bool boolean(const char* name, bool required = true, bool dflt = false) const {
    const json& v = field(name, required);
    if (v.is_null() && !required) return dflt;
    if (!v.is_boolean())
      fail(std::string("field '") + name + "' is " + io::describe_json_value(v) +
           ", expected true or false");
    return v.get<bool>();
  }

 private:
  const json& e_;
  std::string where_;
};

FsdpEntry read_entry(const json& j, const std::string& where) {
  const EntryReader r(j, where);
  FsdpEntry e;
  e.key.model = r.str("model");
  if (!valid_name(e.key.model))
    r.fail("field 'model' is '" + shown(e.key.model) +
           "', expected a lower-case name of letters, digits, '-', '_' or '.'");
  e.gpu = r.str("gpu", false);
  e.dims = r.str("dims", false);
  e.key.gpu_memory_gib = r.integer("gpu_memory_gib", 1, FSDP_MAX_GPU_GIB);
  e.key.world_size = r.integer("world_size", 1, FSDP_MAX_WORLD_SIZE);
  e.key.sharding = r.str("sharding");
  if (!valid_sharding(e.key.sharding))
    r.fail("field 'sharding' is '" + shown(e.key.sharding) +
           "', expected FULL_SHARD, SHARD_GRAD_OP or NO_SHARD");
  e.key.precision = r.str("precision");
  if (e.key.precision != "bf16" && e.key.precision != "fp32")
    r.fail("field 'precision' is '" + shown(e.key.precision) + "', expected bf16 or fp32");
  e.key.activation_checkpointing = r.boolean("activation_checkpointing");
  e.key.seq_len = r.integer("seq_len", 1, FSDP_MAX_SEQ_LEN);
  e.key.tgt_len = r.integer("tgt_len", 0, FSDP_MAX_SEQ_LEN);
  e.default_lengths = r.boolean("default_lengths", false, true);
  e.key.expandable_segments = r.boolean("expandable_segments");
  e.mbs_hi = r.integer("mbs_hi", 1, FSDP_MAX_MINIBATCH);
  e.max_safe_mbs = r.integer("max_safe_mbs", 0, FSDP_MAX_MINIBATCH);
  e.first_retry_mbs = r.integer("first_retry_mbs", 1, FSDP_MAX_MINIBATCH, true);
  e.oom_mbs = r.integer("oom_mbs", 1, FSDP_MAX_MINIBATCH, true);
  if (e.max_safe_mbs > e.mbs_hi || e.first_retry_mbs > e.mbs_hi || e.oom_mbs > e.mbs_hi)
    r.fail("has a minibatch above its mbs_hi " + std::to_string(e.mbs_hi));
  if ((e.first_retry_mbs && e.first_retry_mbs <= e.max_safe_mbs) ||
      (e.oom_mbs && e.oom_mbs <= e.max_safe_mbs))
    r.fail("has first_retry_mbs or oom_mbs at or below max_safe_mbs " +
           std::to_string(e.max_safe_mbs));
  const json& pts = r.field("retry_points");
  if (!pts.is_array() || pts.size() > FSDP_TABLE_MAX_RETRY_POINTS)
    r.fail("field 'retry_points' is not an array of at most " +
           std::to_string(FSDP_TABLE_MAX_RETRY_POINTS) + " [mbs, penalty] pairs");
  for (const json& p : pts) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number() ||
        p[0].get<int64_t>() < 1 || p[0].get<int64_t>() > e.mbs_hi ||
        !std::isfinite(p[1].get<double>()) || p[1].get<double>() < 0 || p[1].get<double>() > 1)
      r.fail("field 'retry_points' holds " + io::describe_json_value(p) +
             ", expected [mbs, penalty] with 1 <= mbs <= mbs_hi and 0 <= penalty <= 1");
    e.retry_points.emplace_back(p[0].get<int64_t>(), p[1].get<double>());
  }
  std::sort(e.retry_points.begin(), e.retry_points.end());
  return e;
}

}  // namespace

std::string FsdpKey::text() const {
  return model + " " + std::to_string(gpu_memory_gib) + "GiB x" + std::to_string(world_size) + " " +
         sharding + " " + precision + (activation_checkpointing ? " ac" : " no-ac") + " seq " +
         std::to_string(seq_len) + "/" + std::to_string(tgt_len) +
         (expandable_segments ? " expandable" : " not-expandable");
}

double FsdpEntry::penalty_at(int64_t mbs) const {
  double p = 0;
  for (const auto& [m, v] : retry_points) {
    if (m > mbs) break;
    p = v;
  }
  return p;
}

void FsdpTable::add(FsdpEntry e) {
  const std::string k = e.key.text();
  if (!e.dims.empty()) dims_model_[e.dims] = e.key.model;
  if (e.default_lengths) default_len_[e.key.model] = {e.key.seq_len, e.key.tgt_len};
  if (const auto it = index_.find(k); it != index_.end()) {
    entries_[it->second] = std::move(e);
    return;
  }
  index_.emplace(k, entries_.size());
  entries_.push_back(std::move(e));
}

const FsdpEntry* FsdpTable::find(const FsdpKey& k) const {
  const auto it = index_.find(k.text());
  return it == index_.end() ? nullptr : &entries_[it->second];
}

const FsdpEntry* FsdpTable::find_dims(const std::string& dims, FsdpKey k) const {
  const auto it = dims_model_.find(dims);
  if (it == dims_model_.end()) return nullptr;
  k.model = it->second;
  if (!resolve_lengths(k)) return nullptr;
  return find(k);
}

bool FsdpTable::resolve_lengths(FsdpKey& k) const {
  if (k.seq_len > 0) return true;
  const auto it = default_len_.find(k.model);
  if (it == default_len_.end()) return false;
  k.seq_len = it->second.first;
  if (k.tgt_len == 0) k.tgt_len = it->second.second;
  return true;
}

FsdpTable FsdpTable::parse(std::string_view text, const std::string& source) {
  if (text.size() > FSDP_TABLE_MAX_BYTES)
    throw FsdpTableError(source + ": larger than " + std::to_string(FSDP_TABLE_MAX_BYTES >> 20) +
                         " MiB");
  json doc;
  try {
    doc = io::parse_untrusted_json(text);
  } catch (const io::JsonInputError& e) {
    throw FsdpTableError(source + ": " + e.what());
  }
  if (!doc.is_object() || !doc.contains("format") || doc["format"] != FSDP_TABLE_FORMAT)
    throw FsdpTableError(source + ": not an FSDP advice table (expected \"format\": \"" +
                         FSDP_TABLE_FORMAT + "\"; write one with `mlprio-fsdp table`)");
  if (!doc.contains("version") || !doc["version"].is_number_integer() ||
      doc["version"].get<int64_t>() != FSDP_TABLE_VERSION)
    throw FsdpTableError(source + ": table version " +
                         (doc.contains("version") ? io::describe_json_value(doc["version"])
                                                  : std::string("(none)")) +
                         " is not supported (this build reads version " +
                         std::to_string(FSDP_TABLE_VERSION) + ")");
  if (!doc.contains("entries") || !doc["entries"].is_array())
    throw FsdpTableError(source + ": no \"entries\" array");
  const json& entries = doc["entries"];
  if (entries.size() > FSDP_TABLE_MAX_ENTRIES)
    throw FsdpTableError(source + ": " + std::to_string(entries.size()) +
                         " entries is more than the bound of " +
                         std::to_string(FSDP_TABLE_MAX_ENTRIES) + " (FSDP_TABLE_MAX_ENTRIES)");
  FsdpTable t;
  for (size_t i = 0; i < entries.size(); ++i)
    t.add(read_entry(entries[i], source + ": entry " + std::to_string(i)));
  return t;
}

FsdpTable FsdpTable::load(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw FsdpTableError(path + ": cannot read: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw FsdpTableError(path + ": not a regular file");
  if (static_cast<uint64_t>(st.st_size) > FSDP_TABLE_MAX_BYTES)
    throw FsdpTableError(path + ": larger than " + std::to_string(FSDP_TABLE_MAX_BYTES >> 20) +
                         " MiB");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FsdpTableError(path + ": cannot open: " + std::strerror(errno));
  std::string text;
  text.resize(FSDP_TABLE_MAX_BYTES + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return parse(text, path);  // a file grown past the bound since stat() is refused there
}

ordered_json FsdpTable::to_json(const ordered_json& generator) const {
  ordered_json j;
  j["format"] = FSDP_TABLE_FORMAT;
  j["version"] = FSDP_TABLE_VERSION;
  j["generator"] = generator;
  j["entries"] = ordered_json::array();
  for (const FsdpEntry& e : entries_) {
    ordered_json pts = ordered_json::array();
    for (const auto& [m, p] : e.retry_points) {
      // Four significant decimals: the table is diffable and the penalty is a model, not a fact.
      pts.push_back(ordered_json::array({m, std::round(p * 1e4) / 1e4}));
    }
    j["entries"].push_back(ordered_json{
        {"model", e.key.model},
        {"dims", e.dims},
        {"gpu", e.gpu},
        {"gpu_memory_gib", e.key.gpu_memory_gib},
        {"world_size", e.key.world_size},
        {"sharding", e.key.sharding},
        {"precision", e.key.precision},
        {"activation_checkpointing", e.key.activation_checkpointing},
        {"seq_len", e.key.seq_len},
        {"tgt_len", e.key.tgt_len},
        {"default_lengths", e.default_lengths},
        {"expandable_segments", e.key.expandable_segments},
        {"mbs_hi", e.mbs_hi},
        {"max_safe_mbs", e.max_safe_mbs},
        {"first_retry_mbs", e.first_retry_mbs ? ordered_json(e.first_retry_mbs) : nullptr},
        {"oom_mbs", e.oom_mbs ? ordered_json(e.oom_mbs) : nullptr},
        {"retry_points", pts}});
  }
  return j;
}

std::string FsdpTable::describe() const {
  std::set<std::string> models;
  std::set<int64_t> gib;
  for (const auto& e : entries_) {
    models.insert(e.key.model);
    gib.insert(e.key.gpu_memory_gib);
  }
  std::string s = std::to_string(entries_.size()) + " entries (models:";
  for (const auto& m : models) s += " " + m;
  s += "; GPU memory GiB:";
  for (int64_t g : gib) s += " " + std::to_string(g);
  return s + ")";
}

// ---- directives ---------------------------------------------------------------------------

namespace {

const char* const FSDP_KEYS[] = {
    "model", "n_layers",  "n_dec_layers", "d_model",    "n_heads",
    "d_ff",  "vocab",     "sharding",     "world_size", "minibatch",
    "mbs",   "seq_len",   "tgt_len",      "precision",  "activation_checkpointing",
    "ac",    "alloc_conf"};

// One "key=value" of an #MLPRIO line into d; a problem string when it is not valid.
void apply_key(FsdpDirective& d, std::map<std::string, int64_t>& dims, const std::string& key,
               std::string_view val, std::vector<std::string>& problems) {
  auto bad = [&](const char* expect) {
    if (problems.size() < 16) problems.push_back(key + "=" + shown(val) + " (" + expect + ")");
  };
  int64_t n = 0;
  d.any = true;
  if (key == "model") {
    const std::string m = lower(val);
    if (valid_name(m))
      d.model = m;
    else
      bad("expected a model name such as gpt2-xl, t5-3b or llama2-7b");
  } else if (key == "n_layers" || key == "n_dec_layers" || key == "d_model" || key == "n_heads" ||
             key == "d_ff" || key == "vocab") {
    if (bounded_int(val, key == "n_dec_layers" ? 0 : 1, 1 << 24, n))
      dims[key] = n;
    else
      bad("expected a whole number, 1..16777216");
  } else if (key == "sharding") {
    const std::string s = upper(val);
    if (valid_sharding(s))
      d.sharding = s;
    else
      bad("expected FULL_SHARD, SHARD_GRAD_OP or NO_SHARD");
  } else if (key == "world_size") {
    if (bounded_int(val, 1, FSDP_MAX_WORLD_SIZE, n))
      d.world_size = n;
    else
      bad("expected the number of GPUs, 1..1048576");
  } else if (key == "minibatch" || key == "mbs") {
    if (bounded_int(val, 1, FSDP_MAX_MINIBATCH, n))
      d.minibatch = n;
    else
      bad("expected the per-GPU minibatch, 1..1048576");
  } else if (key == "seq_len" || key == "tgt_len") {
    if (bounded_int(val, 1, FSDP_MAX_SEQ_LEN, n))
      (key == "seq_len" ? d.seq_len : d.tgt_len) = n;
    else
      bad("expected tokens, 1..16777216");
  } else if (key == "precision") {
    const std::string p = lower(val);
    if (p == "bf16" || p == "fp32")
      d.precision = p;
    else
      bad("expected bf16 or fp32");
  } else if (key == "activation_checkpointing" || key == "ac") {
    if (!parse_bool(val, d.activation_checkpointing)) bad("expected 1 or 0");
  } else if (key == "alloc_conf") {
    if (val.size() <= 256 &&
        std::all_of(val.begin(), val.end(), [](char c) { return c > 0x20 && c < 0x7f; }))
      d.alloc_conf = std::string(val);
    else
      bad("expected a PYTORCH_CUDA_ALLOC_CONF value such as expandable_segments:True");
  }
}

// The value of `export PYTORCH_CUDA_ALLOC_CONF=...` (or a plain assignment) on a line, unquoted.
bool exported_alloc_conf(std::string_view line, std::string& out) {
  if (line.rfind("export ", 0) == 0) line = util::trim(line.substr(7));
  static constexpr std::string_view VAR = "PYTORCH_CUDA_ALLOC_CONF=";
  if (line.rfind(VAR, 0) != 0) return false;
  std::string_view v = line.substr(VAR.size());
  if (!v.empty() && (v.front() == '"' || v.front() == '\'')) {
    const char q = v.front();
    v.remove_prefix(1);
    const size_t end = v.find(q);
    v = v.substr(0, end == std::string_view::npos ? v.size() : end);
  } else {
    size_t end = 0;
    while (end < v.size() && !util::is_space(v[end]) && v[end] != ';' && v[end] != '#') ++end;
    v = v.substr(0, end);
  }
  if (v.size() > 256) return false;
  out = std::string(v);
  return true;
}

}  // namespace

bool is_fsdp_directive_key(std::string_view key) {
  const std::string k = lower(util::trim(key));
  return std::any_of(std::begin(FSDP_KEYS), std::end(FSDP_KEYS),
                     [&](const char* f) { return k == f; });
}

bool alloc_conf_expandable(std::string_view conf) {
  const std::string c = lower(conf);
  size_t pos = 0;
  while (pos <= c.size()) {
    size_t end = c.find(',', pos);
    if (end == std::string::npos) end = c.size();
    const std::string_view item = util::trim(std::string_view(c).substr(pos, end - pos));
    if (item == "expandable_segments:true") return true;
    pos = end + 1;
  }
  return false;
}

DirectiveParse parse_fsdp_directives(std::string_view script) {
  DirectiveParse out;
  FsdpDirective& d = out.directive;
  std::map<std::string, int64_t> dims;
  std::string exported;
  bool declared_conf = false;
  size_t directive_lines = 0;
  script = script.substr(0, std::min<size_t>(script.size(), 64 * 1024));
  size_t pos = 0;
  while (pos < script.size()) {
    size_t nl = script.find('\n', pos);
    if (nl == std::string_view::npos) nl = script.size();
    const std::string_view line = util::trim(script.substr(pos, nl - pos));
    pos = nl + 1;
    if (exported_alloc_conf(line, exported)) continue;
    if (line.rfind("#MLPRIO", 0) != 0) continue;
    // A bound on the work one script can cause under job_submit's locks (a header has a few).
    if (++directive_lines > FSDP_MAX_DIRECTIVE_LINES) {
      if (directive_lines == FSDP_MAX_DIRECTIVE_LINES + 1 && out.problems.size() < 16)
        out.problems.push_back("more than " + std::to_string(FSDP_MAX_DIRECTIVE_LINES) +
                               " #MLPRIO lines; the rest are ignored");
      continue;
    }
    std::string_view rest = line.substr(7);
    size_t i = 0;
    while (i < rest.size()) {
      while (i < rest.size() && util::is_space(rest[i])) ++i;
      size_t j = i;
      while (j < rest.size() && !util::is_space(rest[j])) ++j;
      const std::string_view tok = rest.substr(i, j - i);
      i = j;
      const size_t eq = tok.find('=');
      if (eq == std::string_view::npos || eq > 64) continue;
      const std::string key = lower(tok.substr(0, eq));
      if (!is_fsdp_directive_key(key)) continue;  // LLM keys: job_submit's feature scanner
      if (key == "alloc_conf") declared_conf = true;
      apply_key(d, dims, key, tok.substr(eq + 1), out.problems);
    }
  }
  if (!declared_conf && !exported.empty()) d.alloc_conf = exported;
  d.expandable_segments = alloc_conf_expandable(d.alloc_conf);
  if (!dims.empty()) {
    for (const char* k : {"n_layers", "d_model", "n_heads", "d_ff", "vocab"})
      if (!dims.count(k)) {
        if (out.problems.size() < 16)
          out.problems.push_back(std::string("explicit model dimensions without ") + k +
                                 " (give n_layers, d_model, n_heads, d_ff and vocab, or model=)");
        return out;
      }
    if (d.model.empty())
      d.dims = std::to_string(dims["n_layers"]) + "/" + std::to_string(dims["n_dec_layers"]) + "/" +
               std::to_string(dims["d_model"]) + "/" + std::to_string(dims["n_heads"]) + "/" +
               std::to_string(dims["d_ff"]) + "/" + std::to_string(dims["vocab"]);
  }
  return out;
}

// ---- advice -------------------------------------------------------------------------------

FsdpAdvice advise(const FsdpTable& table, const FsdpDirective& d, int64_t gpu_memory_gib,
                  int64_t world_size_fallback) {
  FsdpAdvice a;
  a.minibatch = d.minibatch;
  if (!d.complete()) {
    a.why = "no complete #MLPRIO training configuration (model= and minibatch=)";
    return a;
  }
  FsdpKey k;
  k.model = d.model;
  k.gpu_memory_gib = gpu_memory_gib;
  k.world_size = d.world_size > 0 ? d.world_size : world_size_fallback;
  k.sharding = d.sharding;
  k.precision = d.precision;
  k.activation_checkpointing = d.activation_checkpointing;
  k.seq_len = d.seq_len;
  k.tgt_len = d.tgt_len;
  k.expandable_segments = d.expandable_segments;
  if (k.world_size <= 0) {
    a.why = "no world_size= and no GPU count";
    return a;
  }
  const FsdpEntry* e = nullptr;
  if (!d.dims.empty()) {
    e = table.find_dims(d.dims, k);
  } else if (table.resolve_lengths(k)) {
    e = table.find(k);
  }
  if (!e) {
    a.why = "no table entry for " + (d.dims.empty() ? k.text() : "dims " + d.dims);
    return a;
  }
  a.entry = e;
  FsdpKey flipped = e->key;
  flipped.expandable_segments = !flipped.expandable_segments;
  a.other = table.find(flipped);
  const int64_t mbs = d.minibatch;
  if (e->oom_mbs > 0 && mbs >= e->oom_mbs)
    a.verdict = FsdpVerdict::OOM;
  else if (mbs > e->max_safe_mbs && e->max_safe_mbs < e->mbs_hi)
    a.verdict = FsdpVerdict::RETRIES;
  else if (mbs > e->mbs_hi)
    a.why = "minibatch " + std::to_string(mbs) + " is beyond the table's range (" +
            std::to_string(e->mbs_hi) + ")";
  else
    a.verdict = FsdpVerdict::OK;
  if (a.verdict != FsdpVerdict::RETRIES && a.verdict != FsdpVerdict::OOM) return a;
  a.penalty = a.verdict == FsdpVerdict::RETRIES ? e->penalty_at(mbs) : 0.0;
  const FsdpKey& K = e->key;
  char buf[512];
  std::string what;
  if (a.verdict == FsdpVerdict::OOM) {
    std::snprintf(buf, sizeof buf,
                  "is predicted to run out of GPU memory (OOM from minibatch %lld)",
                  static_cast<long long>(e->oom_mbs));
  } else {
    const int64_t from = e->first_retry_mbs ? e->first_retry_mbs : e->max_safe_mbs + 1;
    std::snprintf(buf, sizeof buf,
                  "is past the predicted cudaMalloc-retry point (retries from minibatch %lld, "
                  "about %.0f %% less throughput)",
                  static_cast<long long>(from), a.penalty * 100.0);
  }
  what = buf;
  std::snprintf(buf, sizeof buf,
                "mlprio: minibatch %lld per GPU %s for %s on %lld x %lld GiB GPUs (%s, %s%s). "
                "Largest safe minibatch: %lld.",
                static_cast<long long>(mbs), what.c_str(), K.model.c_str(),
                static_cast<long long>(K.world_size), static_cast<long long>(K.gpu_memory_gib),
                K.sharding.c_str(), K.precision.c_str(),
                K.activation_checkpointing ? ", activation checkpointing" : "",
                static_cast<long long>(e->max_safe_mbs));
  a.message = buf;
  if (a.other) {
    if (K.expandable_segments)
      std::snprintf(buf, sizeof buf, " Without expandable_segments it would be %lld.",
                    static_cast<long long>(a.other->max_safe_mbs));
    else if (a.other->max_safe_mbs != e->max_safe_mbs)
      std::snprintf(buf, sizeof buf,
                    " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True moves it to %lld.",
                    static_cast<long long>(a.other->max_safe_mbs));
    else
      std::snprintf(buf, sizeof buf,
                    " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True does not move it.");
    a.message += buf;
  }
  std::snprintf(buf, sizeof buf, "mlprio_fsdp=%s:%lld>%lld",
                a.verdict == FsdpVerdict::OOM ? "oom" : "retries", static_cast<long long>(mbs),
                static_cast<long long>(e->max_safe_mbs));
  a.note = buf;
  return a;
}

}  // namespace mlprio::model
