// Shared by the libFuzzer targets: the input as a file (the readers and the model loader take
// paths), written under /dev/shm when it exists so a run is not disk-bound.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mlprio::fuzz {

inline std::string scratch_path(const char* suffix) {
  static const std::string dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  return dir + "/mlprio-fuzz-" + std::to_string(::getpid()) + suffix;
}

inline std::string write_input(const uint8_t* data, size_t size, const char* suffix = "") {
  const std::string path = scratch_path(suffix);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  ::chmod(path.c_str(), 0644);
  return path;
}

}  // namespace mlprio::fuzz
