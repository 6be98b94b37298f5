// Test support for tests that run one of our programs as a process (exit codes, messages and
// files only visible at that level): a fresh scratch folder, a file's text, and a run under bash
// with resource limits applied first (SIGXFSZ ignored, so `ulimit -f` makes writes fail with
// EFBIG instead of killing the program). Header-only; included by relative path.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace mlprio::test {

// An empty folder <tmp>/<prefix><name>, removed first if it exists.
inline std::filesystem::path scratch(const std::string& prefix, const std::string& name) {
  const std::filesystem::path d = std::filesystem::temp_directory_path() / (prefix + name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// A file name of this process's own under <tmp>: ctest runs the cases of one binary in parallel
// processes.
inline std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "-" + name);
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `exe args` in `dir` under bash with `limits` (e.g. "ulimit -f 16") first; stdout goes to
// `out` (relative to dir), stderr to err.txt. Returns the exit status, -1 when killed by a signal.
inline int run_in(const std::filesystem::path& exe, const std::filesystem::path& dir,
                  const std::string& limits, const std::string& args,
                  const std::string& out = "/dev/null") {
  const std::string cmd = "cd '" + dir.string() + "' && bash -c \"trap '' XFSZ; " + limits +
                          "; exec '" + exe.string() + "' " + args + " > " + out + " 2> err.txt\"";
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace mlprio::test
