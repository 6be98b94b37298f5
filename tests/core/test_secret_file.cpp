// read_secret_file() (core/src/util/secret_file.cpp), the reader of llm_api_key_file: a key file
// is accepted only when it is a regular file owned by root or by the service's user with mode
// 0600 or 0400, and no error message ever carries a byte of the file.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "mlprio/util/secret_file.hpp"

namespace fs = std::filesystem;
using mlprio::read_secret_file;
using mlprio::SecretFileError;

namespace {

const std::string KEY = "sk-test-5f0c2b1e9a7d4c38";

struct Dir {
  fs::path path;
  Dir() {
    char tmpl[] = "/tmp/mlprio-secret-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~Dir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text, mode_t mode) const {
    const std::string p = (path / name).string();
    std::ofstream(p) << text;
    REQUIRE(::chmod(p.c_str(), mode) == 0);
    return p;
  }
};

// The refusal's message, checked to name the file and never to contain the key.
std::string refusal(const std::string& path, uid_t service_uid) {
  try {
    read_secret_file(path, service_uid);
  } catch (const SecretFileError& e) {
    const std::string what = e.what();
    CHECK(what.find(path) != std::string::npos);
    CHECK(what.find(KEY) == std::string::npos);
    CHECK(what.find("sk-") == std::string::npos);
    return what;
  }
  FAIL("accepted " << path);
  return {};
}

}  // namespace

TEST_CASE("a key file owned by its reader with mode 0600 or 0400 is read", "[core][secret]") {
  Dir d;
  const uid_t me = ::geteuid();
  CHECK(read_secret_file(d.write("a", KEY + "\n", 0600), me) == KEY);
  CHECK(read_secret_file(d.write("b", KEY, 0400), me) == KEY);
  CHECK(read_secret_file(d.write("c", KEY + " \r\n\n", 0600), me) == KEY);
}

TEST_CASE("key files others could read or write are refused, saying why", "[core][secret]") {
  Dir d;
  const uid_t me = ::geteuid();
  for (mode_t m : {0640, 0644, 0660, 0604, 0602, 0700, 04600}) {
    INFO(std::oct << m);
    const std::string what = refusal(d.write("k", KEY, m), me);
    CHECK(what.find("is not 0600 or 0400") != std::string::npos);
  }
  CHECK(refusal(d.write("g", KEY, 0640), me).find("mode 0640") != std::string::npos);
}

TEST_CASE("a key file owned by another user is refused", "[core][secret]") {
  Dir d;
  const std::string p = d.write("k", KEY, 0600);
  if (::geteuid() != 0) {
    // Not root: the file is ours, so pretend the service runs as someone else.
    const uid_t other = ::geteuid() + 1;
    CHECK(refusal(p, other).find("owned by uid " + std::to_string(::geteuid())) !=
          std::string::npos);
    return;
  }
  // Root may own it whatever the service's uid; the service's own user may too.
  CHECK(read_secret_file(p, 4242) == KEY);
  REQUIRE(::chown(p.c_str(), 4242, 4242) == 0);
  CHECK(read_secret_file(p, 4242) == KEY);
  const std::string what = refusal(p, 4343);
  CHECK(what.find("owned by uid 4242") != std::string::npos);
  CHECK(what.find("(uid 4343)") != std::string::npos);
}

TEST_CASE("key files that are not one printable token are refused", "[core][secret]") {
  Dir d;
  const uid_t me = ::geteuid();
  CHECK(refusal(d.write("empty", "\n\n", 0600), me).find("empty") != std::string::npos);
  // A CR or LF inside the key would forge HTTP headers.
  CHECK(refusal(d.write("crlf", KEY + "\r\nX-Evil: 1", 0600), me).find("not printable ASCII") !=
        std::string::npos);
  CHECK(refusal(d.write("space", "sk-a b", 0600), me).find("byte 5") != std::string::npos);
  CHECK(refusal(d.write("utf8", "sk-\xc3\xa9", 0600), me).find("not printable") !=
        std::string::npos);
  CHECK(refusal(d.write("long", std::string(5000, 'k'), 0600), me).find("longer than 4096") !=
        std::string::npos);
  CHECK(refusal((d.path / "missing").string(), me).find("No such file") != std::string::npos);
  fs::create_directory(d.path / "dir");
  ::chmod((d.path / "dir").c_str(), 0600);
  CHECK(refusal((d.path / "dir").string(), me).find("not a regular file") != std::string::npos);
  // A FIFO is refused at once, not waited on.
  const std::string fifo = (d.path / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(refusal(fifo, me).find("not a regular file") != std::string::npos);
  // A symbolic link is followed, and the file it names is what is checked.
  const std::string target = d.write("target", KEY, 0644);
  fs::create_symlink(target, d.path / "link");
  CHECK(refusal((d.path / "link").string(), me).find("mode 0644") != std::string::npos);
  ::chmod(target.c_str(), 0600);
  CHECK(read_secret_file((d.path / "link").string(), me) == KEY);
}
