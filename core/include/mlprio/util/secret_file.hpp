// Secrets kept in files (the LLM endpoint's API key, llm_api_key_file=PATH): slurm.conf is
// world-readable, so a key may only live in a file that nobody but the service can read. The file
// is refused unless it is a regular file owned by root or by the service's own user, with mode
// exactly 0600 or 0400. Its text is one token of printable ASCII (what an HTTP header can carry:
// a CR or LF in it would forge headers); trailing white space and newlines are dropped. Error
// messages name the file and what is wrong with it, never a byte of its content.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "mlprio/util/errors.hpp"

namespace mlprio {

class SecretFileError : public UsageError {
 public:
  using UsageError::UsageError;
};

// The longest secret accepted (bytes, before trailing white space is dropped).
inline constexpr std::size_t SECRET_MAX_BYTES = 4096;

// Reads the secret in `path`, accepting a file owned by uid 0 or by `service_uid` (the daemon's
// effective uid, geteuid()). Never blocks on a FIFO or device. Throws SecretFileError naming the
// path and the fault: cannot open (errno text), not a regular file, owner, mode, empty, too long,
// or a character outside printable ASCII.
std::string read_secret_file(const std::string& path, uid_t service_uid);

}  // namespace mlprio
