// Reading, checking and writing mlprio model files, and the registry that turns a checked
// document into a Predictor by its "kind". The checks run before any field is trusted: the file
// is opened once (O_NOFOLLOW is not used because sites link models into place; the permission
// check applies to the file the descriptor refers to), its mode and size are taken from that
// descriptor, the bytes are read twice from that descriptor and must agree with each other and
// with an unchanged fstat (a file rewritten in place must not load as a mix of two versions),
// then the JSON is parsed and its header compared with this build.
#include "mlprio/model/model_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <sstream>

#include "mlprio/io/json_input.hpp"

namespace mlprio::model {
namespace {

[[noreturn]] void refuse(const std::string& origin, const std::string& why) {
  throw ModelError("model file " + origin + ": " + why);
}

double json_double(const nlohmann::json& v) {
  return v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

void Predictor::predict_rows(std::span<const float>, std::span<const Job>,
                             std::span<Prediction>) const {
  throw ModelError("this predictor (" + describe() + ") does not predict from feature rows");
}

nlohmann::json schema_json() {
  nlohmann::json a = nlohmann::json::array();
  for (auto n : feature_names()) a.push_back(std::string(n));
  return a;
}

nlohmann::json model_document_header(const std::string& kind) {
  nlohmann::json doc;
  doc["format"] = MODEL_FORMAT;
  doc["version"] = MODEL_VERSION;
  doc["kind"] = kind;
  doc["schema_version"] = SCHEMA_VERSION;
  doc["schema"] = schema_json();
  return doc;
}

void check_model_document(const nlohmann::json& doc, const std::string& origin) {
  if (!doc.is_object()) refuse(origin, "top level is not a JSON object");
  if (!doc.contains("format") || doc["format"] != MODEL_FORMAT)
    refuse(origin, std::string("\"format\" is not \"") + MODEL_FORMAT +
                       "\" (is this an mlprio model file?)");
  if (!doc.contains("version") || !doc["version"].is_number_integer())
    refuse(origin, "\"version\" is missing or not an integer");
  if (doc["version"].get<int64_t>() != MODEL_VERSION)
    refuse(origin, "version " + std::to_string(doc["version"].get<int64_t>()) +
                       " is not supported (this build reads " + std::to_string(MODEL_VERSION) +
                       "); retrain with this mlprio-model");
  if (!doc.contains("kind") || !doc["kind"].is_string())
    refuse(origin, "\"kind\" is missing (expected \"xgboost\" or \"formula\")");
  if (!doc.contains("schema_version") || doc["schema_version"] != SCHEMA_VERSION)
    refuse(origin, "feature schema version differs from this build's (" +
                       std::to_string(SCHEMA_VERSION) + "); retrain");
  if (!doc.contains("schema") || doc["schema"] != schema_json()) {
    std::string detail;
    if (doc.contains("schema") && doc["schema"].is_array()) {
      const auto& s = doc["schema"];
      const auto want = schema_json();
      for (size_t i = 0; i < std::max(s.size(), want.size()); ++i) {
        const std::string got = i < s.size() ? io::describe_json_value(s[i]) : "(none)";
        const std::string exp = i < want.size() ? io::describe_json_value(want[i]) : "(none)";
        if (got != exp) {
          detail = ": column " + std::to_string(i) + " is " + got + ", this build expects " + exp;
          break;
        }
      }
    }
    refuse(origin, "feature schema does not match this build" + detail + "; retrain");
  }
}

namespace {

// What fstat says about the version of the file an open descriptor refers to. ctime is in it
// because `cp -p` and `touch -r` put an old mtime back on new contents; neither can set ctime.
struct FdVersion {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  bool operator==(const FdVersion&) const = default;
};

FdVersion version_of(const struct stat& st) {
  FdVersion v;
  v.dev = st.st_dev;
  v.ino = st.st_ino;
  v.size = st.st_size;
  v.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
  v.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000LL + st.st_ctim.tv_nsec;
  return v;
}

// fstat plus the checks every attempt repeats: a regular file, not group/world-writable, not
// over MODEL_MAX_BYTES.
FdVersion checked_version(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) refuse(path, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) refuse(path, "not a regular file");
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    refuse(path, std::string("is writable by group or others (mode ") + mode +
                     "); slurmctld loads it as root, so only its owner may write it "
                     "(chmod go-w)");
  }
  if (static_cast<uint64_t>(st.st_size) > MODEL_MAX_BYTES)
    refuse(path, "is larger than " + std::to_string(MODEL_MAX_BYTES >> 20) + " MiB");
  return version_of(st);
}

std::atomic<detail::ModelReadHook> g_read_hook{nullptr};
std::atomic<void*> g_read_hook_arg{nullptr};

// Calls `take(bytes, n, offset)` for each piece of the file from offset 0 to end of file (not to
// the size fstat gave: a file that grew while being read must show as different). Returns the
// number of bytes seen, stopping once it exceeds MODEL_MAX_BYTES.
template <class Take>
uint64_t read_to_eof(int fd, const std::string& path, int attempt, int pass, Take take) {
  char buf[64 * 1024];
  uint64_t off = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) refuse(path, std::string("read failed: ") + std::strerror(errno));
    if (n == 0) return off;
    take(buf, static_cast<size_t>(n), off);
    off += static_cast<uint64_t>(n);
    if (auto hook = g_read_hook.load()) hook(g_read_hook_arg.load(), attempt, pass, off);
    if (off > MODEL_MAX_BYTES) return off;
  }
}

}  // namespace

void detail::set_model_read_hook(detail::ModelReadHook hook, void* arg) {
  g_read_hook_arg = arg;
  g_read_hook = hook;
}

// A model file rewritten in place (cp over it, `>` redirection, an editor saving in place)
// while it is read can yield the first part of one version and the rest of another; when the
// two differ only in digits that mix is valid JSON, a model nobody wrote. So one attempt
// fstats the descriptor, reads the file to end of file, reads it a second time comparing
// byte for byte, and fstats again; it is accepted only if both reads agree, their length is
// the size, and dev, inode, size, mtime and ctime are unchanged. Otherwise it retries after a
// short pause (the writer may be finishing) and, after MODEL_READ_ATTEMPTS, refuses.
//
// Why both checks: an O_TRUNC rewrite that starts and ends between the two fstat calls within
// one timestamp tick, to the same size, leaves the stat unchanged; but the second read then
// sees the whole new version, which differs from the torn first read. A torn read is accepted
// only if the second read is torn at the same place between the same two versions and the
// stat is unchanged: two complete in-place rewrites within one tick, in step with the reader.
// Residual risk, which no reader can close: a writer that overwrites WITHOUT truncating and
// pauses half way leaves a mixed file at rest, and every reader reads it consistently; and a
// load that is accepted just before a same-size rewrite in the same tick is not noticed by a
// stamp check until the file changes again. Replace model files by renaming a complete file
// over the old one (write_model_document does); readers then see the old or the new file.
nlohmann::json read_model_document(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) refuse(path, std::string("cannot open: ") + std::strerror(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  std::string text;
  bool stable = false;
  for (int attempt = 0; attempt < MODEL_READ_ATTEMPTS && !stable; ++attempt) {
    if (attempt > 0) {
      const struct timespec pause { 0, 2000000L << (attempt - 1) };  // 2, 4, 8, 16 ms
      ::nanosleep(&pause, nullptr);
    }
    const FdVersion before = checked_version(fd, path);
    text.clear();
    text.reserve(static_cast<size_t>(before.size));
    const uint64_t first = read_to_eof(
        fd, path, attempt, 0, [&](const char* b, size_t n, uint64_t) { text.append(b, n); });
    if (first > MODEL_MAX_BYTES)
      refuse(path, "is larger than " + std::to_string(MODEL_MAX_BYTES >> 20) + " MiB");
    bool same = true;
    const uint64_t second =
        read_to_eof(fd, path, attempt, 1, [&](const char* b, size_t n, uint64_t off) {
          if (!same || off + n > text.size() || std::memcmp(text.data() + off, b, n) != 0)
            same = false;
        });
    const FdVersion after = checked_version(fd, path);
    stable =
        same && second == first && first == static_cast<uint64_t>(before.size) && before == after;
  }
  if (!stable)
    refuse(path, "changed while it was being read (" + std::to_string(MODEL_READ_ATTEMPTS) +
                     " attempts); something is rewriting it in place. Write the new model to a "
                     "temporary name in the same directory and rename it over the old one");
  nlohmann::json doc;
  try {
    doc = io::parse_untrusted_json(text);
  } catch (const io::JsonInputError& e) {
    refuse(path, std::string("is ") + e.what() + " (corrupt, truncated or not a model file)");
  }
  check_model_document(doc, path);
  return doc;
}

void write_model_document(const std::string& path, const nlohmann::json& doc) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) refuse(path, "cannot create " + tmp + ": " + std::strerror(errno));
  const std::string text = doc.dump(1) + "\n";
  // Each step names what failed and why (errno text), then the temporary is removed.
  std::string failed;
  size_t put = 0;
  while (put < text.size() && failed.empty()) {
    const ssize_t n = ::write(fd, text.data() + put, text.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      failed = "cannot write " + tmp + ": " + std::strerror(errno);
    else if (n == 0)
      failed = "cannot write " + tmp + ": no progress (disk full?)";
    else
      put += static_cast<size_t>(n);
  }
  if (failed.empty() && ::fchmod(fd, 0644) != 0)
    failed = "cannot chmod " + tmp + ": " + std::strerror(errno);
  if (failed.empty() && ::fsync(fd) != 0)
    failed = "cannot fsync " + tmp + ": " + std::strerror(errno);
  if (::close(fd) != 0 && failed.empty())
    failed = "cannot close " + tmp + ": " + std::strerror(errno);
  if (failed.empty() && std::rename(tmp.c_str(), path.c_str()) != 0)
    failed = "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno);
  if (!failed.empty()) {
    std::remove(tmp.c_str());
    refuse(path, "write failed: " + failed);
  }
}

Calibration calibration_from_json(const nlohmann::json& doc) {
  Calibration cal;
  if (!doc.contains("calibration")) return cal;
  const auto& c = doc["calibration"];
  try {
    cal.point_shift = c.value("point_shift", 0.0);
    cal.upper_shift = c.value("upper_shift", 0.0);
    cal.blend_weight = c.value("blend_weight", 1.0);
    if (c.contains("margin_anchor")) {
      if (!c["margin_anchor"].is_string())
        throw ModelError("\"calibration.margin_anchor\" is " +
                         io::describe_json_value(c["margin_anchor"]) +
                         ", expected \"none\", \"request\", \"last2\" or \"similar\"");
      cal.anchor = anchor_from_name(c["margin_anchor"].get<std::string>());
    }
  } catch (const nlohmann::json::exception& e) {
    throw ModelError(std::string("\"calibration\" is malformed: ") + e.what());
  }
  if (!(cal.blend_weight >= 0.0 && cal.blend_weight <= 1.0))
    throw ModelError("\"calibration.blend_weight\" must be in [0, 1]");
  if (!std::isfinite(cal.point_shift) || !std::isfinite(cal.upper_shift))
    throw ModelError("\"calibration\" shifts must be finite numbers");
  return cal;
}

const char* anchor_name(MarginAnchor a) {
  switch (a) {
    case MarginAnchor::REQUEST:
      return "request";
    case MarginAnchor::LAST2:
      return "last2";
    case MarginAnchor::SIMILAR:
      return "similar";
    case MarginAnchor::NONE:
      break;
  }
  return "none";
}

MarginAnchor anchor_from_name(const std::string& name) {
  if (name == "none") return MarginAnchor::NONE;
  if (name == "request") return MarginAnchor::REQUEST;
  if (name == "last2") return MarginAnchor::LAST2;
  if (name == "similar") return MarginAnchor::SIMILAR;
  throw ModelError("\"calibration.margin_anchor\" is " +
                   io::describe_json_value(nlohmann::json(name)) +
                   ", expected \"none\", \"request\", \"last2\" or \"similar\"");
}

nlohmann::json history_to_json(const UserHistory& h) {
  // Sorted keys (nlohmann's object is a std::map), so equal histories give equal bytes.
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, s] : h.by_user) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(key));
    auto num = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
    // Schema 3 appends the similar-job memory: [req_time, procs, run] per job, oldest first.
    nlohmann::json recent = nlohmann::json::array();
    for (int k = s.recent_n - 1; k >= 0; --k) {
      const RecentJob& r = s.recent_at(k);
      recent.push_back({r.req_time, r.procs, r.run});
    }
    j[hex] = {num(s.last_run), num(s.prev_run), s.ratio_sum,      s.ratio_n,
              s.count,         s.failures,      num(s.prev2_run), s.run_sum,
              s.procs_sum,     s.procs_n,       num(s.last_end),  recent};
  }
  return j;
}

UserHistory history_from_json(const nlohmann::json& j) {
  UserHistory h;
  if (!j.is_object()) throw ModelError("\"user_history\" is not an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const auto& v = it.value();
    const std::string entry = "\"user_history\" entry " + io::describe_json_value(it.key());
    // 11 values (no similar-job memory) or 12 (the memory as the last one).
    if (!v.is_array() || (v.size() != 11 && v.size() != 12))
      throw ModelError(entry +
                       " is not [last_run, prev_run, ratio_sum, ratio_n, count, failures, "
                       "prev2_run, run_sum, procs_sum, procs_n, last_end, recent_jobs]");
    uint64_t key = 0;
    const std::string& k = it.key();
    const auto [end, ec] = std::from_chars(k.data(), k.data() + k.size(), key, 16);
    if (k.empty() || ec != std::errc() || end != k.data() + k.size())
      throw ModelError(entry + ": the key is not a 64-bit hex user hash");
    // Run times, sums and the last finish: finite numbers, or null for "none yet" (NaN in
    // memory); counts: integers >= 0. A NaN or infinity here would reach every prediction.
    static constexpr size_t NUMBERS[] = {0, 1, 2, 6, 7, 8, 10};
    static constexpr size_t COUNTS[] = {3, 4, 5, 9};
    for (size_t i : NUMBERS)
      if (!(v[i].is_null() || (v[i].is_number() && std::isfinite(v[i].get<double>()))))
        throw ModelError(entry + ": value " + std::to_string(i) + " is " +
                         io::describe_json_value(v[i]) + ", expected a finite number or null");
    for (size_t i : COUNTS)
      if (!v[i].is_number_integer() || v[i].get<int64_t>() < 0)
        throw ModelError(entry + ": value " + std::to_string(i) + " is " +
                         io::describe_json_value(v[i]) + ", expected an integer >= 0");
    UserStats s;
    s.last_run = json_double(v[0]);
    s.prev_run = json_double(v[1]);
    s.ratio_sum = json_double(v[2]);
    s.ratio_n = v[3].get<int64_t>();
    s.count = v[4].get<int64_t>();
    s.failures = v[5].get<int64_t>();
    s.prev2_run = json_double(v[6]);
    s.run_sum = json_double(v[7]);
    s.procs_sum = json_double(v[8]);
    s.procs_n = v[9].get<int64_t>();
    s.last_end = json_double(v[10]);
    if (v.size() == 12) {
      const auto& rec = v[11];
      if (!rec.is_array() || rec.size() > static_cast<size_t>(RECENT_JOBS))
        throw ModelError(entry + ": value 11 is " + io::describe_json_value(rec) +
                         ", expected an array of at most " + std::to_string(RECENT_JOBS) +
                         " [req_time, procs, run] jobs");
      for (size_t i = 0; i < rec.size(); ++i) {
        const auto& r = rec[i];
        const std::string what = entry + ": recent job " + std::to_string(i);
        if (!r.is_array() || r.size() != 3)
          throw ModelError(what + " is not [req_time, procs, run]");
        // req_time: seconds > 0 or -1 (unknown); procs: an integer >= -1; run: seconds >= 0.
        if (!r[0].is_number() || !std::isfinite(r[0].get<double>()) ||
            !(r[0].get<double>() > 0 || r[0].get<double>() == -1))
          throw ModelError(what + ": req_time " + io::describe_json_value(r[0]) +
                           " is not a finite number > 0 or -1");
        if (!r[1].is_number_integer() || r[1].get<int64_t>() < -1)
          throw ModelError(what + ": procs " + io::describe_json_value(r[1]) +
                           " is not an integer >= -1");
        if (!r[2].is_number() || !std::isfinite(r[2].get<double>()) || r[2].get<double>() < 0)
          throw ModelError(what + ": run " + io::describe_json_value(r[2]) +
                           " is not a finite number >= 0");
        s.remember({r[0].get<double>(), r[1].get<int64_t>(), r[2].get<double>()});
      }
    }
    h.by_user.emplace(key, s);
  }
  return h;
}

namespace {
constexpr char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint32_t(uint8_t(bytes[i])) << 16) |
                       (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint32_t(uint8_t(bytes[i + 2]));
    out += B64[v >> 18];
    out += B64[(v >> 12) & 63];
    out += B64[(v >> 6) & 63];
    out += B64[v & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += B64[v >> 18];
    out += B64[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? B64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) throw ModelError("base64 text length is not a multiple of 4");
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + k];
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else {
        v[k] = val(c);
        if (v[k] < 0 || pad > 0) throw ModelError("base64 text has an invalid character");
      }
    }
    const uint32_t w =
        (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out += static_cast<char>(w >> 16);
    if (pad < 2) out += static_cast<char>((w >> 8) & 255);
    if (pad < 1) out += static_cast<char>(w & 255);
  }
  return out;
}

std::unique_ptr<Predictor> make_predictor(const nlohmann::json& doc) {
  auto p = make_predictor_of_kind(doc);
  p->set_policy(doc.contains("policy") ? policy_from_json(doc["policy"]) : PolicyParams{});
  return p;
}

std::unique_ptr<Predictor> make_predictor_of_kind(const nlohmann::json& doc) {
  const std::string kind = doc.at("kind").get<std::string>();
  const UserHistory hist =
      doc.contains("user_history") ? history_from_json(doc["user_history"]) : UserHistory{};
  std::string desc = kind + " model, schema v" + std::to_string(SCHEMA_VERSION);
  if (doc.contains("training") && doc["training"].contains("window")) {
    const auto& w = doc["training"]["window"];  // [first, last] submit time of the training jobs
    if (w.is_array() && w.size() == 2 && w[0].is_number() && w[1].is_number()) {
      const double a = w[0].get<double>(), b = w[1].get<double>();
      // sacct times are Unix seconds: print dates an admin can read; SWF times count from the
      // trace's start: say so.
      auto date = [](double t) {
        const std::time_t tt = static_cast<std::time_t>(t);
        std::tm tm{};
        char buf[32] = "?";
        if (::gmtime_r(&tt, &tm)) std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
        return std::string(buf);
      };
      char buf[96];
      if (a >= 1e8 && b >= a && b < 4e9)
        desc += ", trained on jobs submitted " + date(a) + " .. " + date(b) + " UTC";
      else if (std::isfinite(a) && std::isfinite(b) && std::fabs(a) < 1e15 && std::fabs(b) < 1e15 &&
               std::snprintf(buf, sizeof buf, ", trained on trace seconds %.0f .. %.0f", a, b) > 0)
        desc += buf;
    }
  }
  try {
    if (kind == "xgboost") {
      if (!doc.contains("booster_runtime") || !doc["booster_runtime"].is_string())
        throw ModelError("\"booster_runtime\" is missing");
      const std::string rt = base64_decode(doc["booster_runtime"].get<std::string>());
      std::string fail;
      if (doc.contains("booster_fail") && doc["booster_fail"].is_string())
        fail = base64_decode(doc["booster_fail"].get<std::string>());
      return make_tree_predictor(rt, fail, calibration_from_json(doc), hist, 0.0, desc);
    }
    if (kind == "formula") {
      const double def =
          doc.contains("formula") ? doc["formula"].value("default_runtime", 3600.0) : 3600.0;
      if (!(std::isfinite(def) && def >= 0.0))
        throw ModelError("\"formula.default_runtime\" must be a finite number of seconds >= 0");
      return make_formula_predictor(hist, def, desc);
    }
  } catch (const nlohmann::json::exception& e) {
    throw ModelError(std::string("model document is malformed: ") + e.what());
  }
  throw ModelError("unknown model kind \"" + kind + "\" (expected \"xgboost\" or \"formula\")");
}

std::unique_ptr<Predictor> load_predictor(const std::string& path) {
  const nlohmann::json doc = read_model_document(path);
  try {
    return make_predictor(doc);
  } catch (const ModelError& e) {
    throw ModelError("model file " + path + ": " + e.what());
  }
}

}  // namespace mlprio::model
