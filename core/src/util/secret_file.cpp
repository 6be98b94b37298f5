// read_secret_file(): see mlprio/util/secret_file.hpp. The checks are made on the opened file
// (fstat of the descriptor), so the file that was checked is the file that is read.
#include "mlprio/util/secret_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace mlprio {

namespace {

std::string octal_mode(mode_t m) {
  char b[16];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m & 07777));
  return b;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string read_secret_file(const std::string& path, uid_t service_uid) {
  const std::string where = "'" + path + "'";
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below).
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (f.fd < 0) throw SecretFileError(where + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    throw SecretFileError(where + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw SecretFileError(where + ": not a regular file");
  if (st.st_uid != 0 && st.st_uid != service_uid)
    throw SecretFileError(where + ": owned by uid " + std::to_string(st.st_uid) +
                          "; expected root (uid 0) or the user this daemon runs as (uid " +
                          std::to_string(service_uid) + "): chown it");
  const mode_t mode = st.st_mode & 07777;
  if (mode != 0600 && mode != 0400)
    throw SecretFileError(where + ": mode " + octal_mode(mode) +
                          " is not 0600 or 0400 (readable by its owner only): chmod 600 it");
  std::string text;
  char buf[1024];
  while (text.size() <= SECRET_MAX_BYTES) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw SecretFileError(where + ": cannot read: " + std::strerror(errno));
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  if (text.size() > SECRET_MAX_BYTES)
    throw SecretFileError(where + ": longer than " + std::to_string(SECRET_MAX_BYTES) +
                          " bytes; expected one key");
  while (!text.empty() &&
         (text.back() == '\n' || text.back() == '\r' || text.back() == ' ' || text.back() == '\t'))
    text.pop_back();
  if (text.empty()) throw SecretFileError(where + ": empty; expected one key");
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c <= 0x20 || c >= 0x7f)
      throw SecretFileError(where + ": byte " + std::to_string(i + 1) +
                            " is not printable ASCII (a space, control character or non-ASCII "
                            "byte); expected one key on one line");
  }
  return text;
}

}  // namespace mlprio
