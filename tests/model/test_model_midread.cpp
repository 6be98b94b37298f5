// Fault injection: a model file rewritten in place (open with O_TRUNC, written in small pieces,
// as `cp` over it or `>` redirection do) while it is being loaded. Versions A and B of the
// file have the same length and differ only in digits (the formula's default run time and
// every user's last run time: 3300 vs 5000), so a read that takes the start of one and the
// rest of the other is valid JSON: a model nobody wrote. "Nothing lost" here means:
//   1. every load that succeeds returns exactly A or exactly B, never a mix;
//   2. a load that cannot get one whole version fails with a ModelError naming the file
//      (refusals are counted, not failures);
//   3. once the writer stops, the next load returns exactly the version written last.
// The counts of each outcome depend on scheduling and are printed, never asserted.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "mlprio/model/model_file.hpp"
#include "model_tool.hpp"
#include "synthetic.hpp"

using namespace mlprio;
using namespace mlprio::model;

namespace {

constexpr int USERS = 1000;

// A formula model with every number that differs between A and B set to `run`, printed with
// the same number of characters for both values used here.
std::string make_model_text(double run) {
  const Trace t = testing::synthetic_trace(600, 7);
  TrainOptions o;
  o.kind = "formula";
  std::vector<std::string> notes;
  nlohmann::json doc = train_model(t, "none", o, notes);
  doc["formula"]["default_runtime"] = run;
  // A site-sized history (a few hundred KB, several reads' worth), each user's last run in it.
  const nlohmann::json one = doc["user_history"].begin().value();
  for (int u = 0; u < USERS; ++u) {
    char key[17];
    std::snprintf(key, sizeof key, "%016llx",
                  0x1000000000000000ULL + static_cast<unsigned long long>(u));
    doc["user_history"][key] = one;
  }
  for (auto& [key, v] : doc["user_history"].items()) v[0] = run;  // last_run
  return doc.dump(1) + "\n";
}

const std::string& text_a() {
  static const std::string t = make_model_text(3300.0);
  return t;
}
const std::string& text_b() {
  static const std::string t = make_model_text(5000.0);
  return t;
}

std::string fresh_file(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("mlprio_" + name + "_" + std::to_string(::getpid()) + ".json"))
                               .string();
  std::filesystem::remove(path);
  std::ofstream(path) << text;
  ::chmod(path.c_str(), 0644);
  return path;
}

// Rewrites `path` in place with `text`: truncate, then `chunk` bytes per write with a yield
// between writes, so readers run in the middle of the rewrite.
void rewrite_in_place(const std::string& path, const std::string& text, size_t chunk) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  REQUIRE(fd >= 0);
  for (size_t put = 0; put < text.size();) {
    const ssize_t n = ::write(fd, text.data() + put, std::min(chunk, text.size() - put));
    if (n <= 0) break;
    put += static_cast<size_t>(n);
    std::this_thread::yield();
  }
  ::close(fd);
}

}  // namespace

TEST_CASE("a model file rewritten in place while it is read loads as A or B, never a mix",
          "[model][file][midread]") {
  const std::string& a_text = text_a();
  const std::string& b_text = text_b();
  REQUIRE(a_text.size() == b_text.size());
  REQUIRE(a_text != b_text);
  // The differences must be spread over the file, or a torn read would equal A or B anyway.
  size_t first_diff = 0, last_diff = 0, n_diff = 0;
  for (size_t i = 0; i < a_text.size(); ++i)
    if (a_text[i] != b_text[i]) {
      if (n_diff++ == 0) first_diff = i;
      last_diff = i;
    }
  INFO("size " << a_text.size() << ", " << n_diff << " differing bytes in [" << first_diff << ", "
               << last_diff << "]");
  REQUIRE(n_diff >= 20);
  REQUIRE(last_diff - first_diff > a_text.size() / 2);
  const nlohmann::json a_doc = nlohmann::json::parse(a_text);
  const nlohmann::json b_doc = nlohmann::json::parse(b_text);

  const std::string path = fresh_file("midread", a_text);

  // Pieces of 64 KiB, or the whole file in one write (every third rewrite, as cp does for a
  // small file): a reader lands mid-write, or its read spans a truncation and the writer gets
  // past it, which is how a torn read becomes valid JSON. Such tears are rare here (the writer
  // must overtake a stalled reader); the hook tests below make them on purpose.
  constexpr int REWRITES = 300;
  constexpr int MAX_LOADS = 200000;
  std::atomic<bool> writing{true};
  std::thread writer([&] {
    for (int i = 1; i <= REWRITES; ++i) {
      const size_t chunk = i % 3 == 0 ? a_text.size() : 64 * 1024;
      rewrite_in_place(path, i % 2 ? b_text : a_text, chunk);
    }
    writing = false;
  });

  int as = 0, bs = 0, mixes = 0, refused = 0, changed = 0, loads = 0;
  std::string first_mix, other_refusal;
  while (writing && loads < MAX_LOADS) {
    ++loads;
    try {
      const nlohmann::json doc = read_model_document(path);
      if (doc == a_doc)
        ++as;
      else if (doc == b_doc)
        ++bs;
      else if (mixes++ == 0)
        first_mix = doc["formula"].dump();
    } catch (const ModelError& e) {
      ++refused;
      const std::string what = e.what();
      if (what.find("changed while it was being read") != std::string::npos) ++changed;
      if (what.find(path) == std::string::npos) other_refusal = what;
    }
  }
  writer.join();
  WARN("in-place rewrite race: " << loads << " loads, " << as << " A, " << bs << " B, " << refused
                                 << " refused (" << changed << " as changed while read), " << mixes
                                 << " mixed");
  INFO("first mixed load accepted, its formula: " << first_mix);
  CHECK(mixes == 0);
  INFO("a refusal without the file's name: " << other_refusal);
  CHECK(other_refusal.empty());

  // The writer has stopped: the next load is the last version written (REWRITES is even: A).
  CHECK(read_model_document(path) == a_doc);
  std::filesystem::remove(path);
}

// The deterministic half: the read hook rewrites the file completely (truncate, write the
// other version) at a chosen point of a chosen read, which is exactly the torn read the race
// above can only hope to hit.
namespace {
struct Tear {
  std::string path;
  int at_pass = 0;  // which read of an attempt to tear
  bool every_attempt = false;
  int rewrites = 0;
  static void hook(void* arg, int attempt, int pass, uint64_t offset) {
    auto* t = static_cast<Tear*>(arg);
    // After the first piece only (64 KiB of a file of several hundred KiB).
    if (pass != t->at_pass || offset > 64 * 1024 || (!t->every_attempt && attempt > 0)) return;
    ++t->rewrites;
    rewrite_in_place(t->path, t->rewrites % 2 ? text_b() : text_a(), text_a().size());
  }
};
struct HookGuard {
  explicit HookGuard(Tear& t) { detail::set_model_read_hook(&Tear::hook, &t); }
  ~HookGuard() { detail::set_model_read_hook(nullptr, nullptr); }
};
}  // namespace

TEST_CASE("a read torn by an in-place rewrite is read again and loads the new version",
          "[model][file][midread]") {
  REQUIRE(text_a().size() > 2 * 64 * 1024);
  const nlohmann::json b_doc = nlohmann::json::parse(text_b());
  for (int pass : {0, 1}) {
    // pass 0: the kept read is A's first 64 KiB then B's rest (valid JSON, neither model);
    // pass 1: the kept read is all of A, the comparing read is torn.
    DYNAMIC_SECTION("rewritten during read " << pass) {
      Tear tear{fresh_file("torn", text_a()), pass};
      nlohmann::json doc;
      {
        HookGuard g(tear);
        doc = read_model_document(tear.path);
      }
      CHECK(tear.rewrites == 1);
      CHECK(doc == b_doc);  // the version on disk when the reader returned: B, whole
      std::filesystem::remove(tear.path);
    }
  }
}

TEST_CASE("a model file that changes on every read is refused with advice to rename",
          "[model][file][midread]") {
  Tear tear{fresh_file("churn", text_a()), 0, true};
  std::string message;
  {
    HookGuard g(tear);
    try {
      read_model_document(tear.path);
    } catch (const ModelError& e) {
      message = e.what();
    }
  }
  INFO(message);
  CHECK(tear.rewrites == MODEL_READ_ATTEMPTS);
  CHECK(message.find(tear.path) != std::string::npos);
  CHECK(message.find("changed while it was being read") != std::string::npos);
  CHECK(message.find("rename it over the old one") != std::string::npos);
  // Once the writer stops, the file loads as it was left.
  CHECK(read_model_document(tear.path) ==
        nlohmann::json::parse(MODEL_READ_ATTEMPTS % 2 ? text_b() : text_a()));
  std::filesystem::remove(tear.path);
}
