// mlprio-fsdp as a program, on failures that only show at the process level: a full disk while
// writing --out (simulated with a file-size limit, writes failing with EFBIG) must end with exit
// status 1, a message naming the file, and no output file under any name.
#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

const fs::path& fsdp_exe() {
  static const fs::path p = fs::path(MLPRIO_BIN_DIR) / "mlprio-fsdp";
  return p;
}

fs::path scratch(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("mlprio_fsdp_cli_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs mlprio-fsdp `args` in `dir` under bash with `limits` applied first; returns the exit
// status (-1 when killed by a signal). stdout goes to out.txt, stderr to err.txt.
int run_in(const fs::path& dir, const std::string& limits, const std::string& args) {
  const std::string cmd = "cd '" + dir.string() + "' && bash -c \"trap '' XFSZ; " + limits +
                          "; exec '" + fsdp_exe().string() + "' " + args +
                          " > out.txt 2> err.txt\"";
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace

TEST_CASE("fsdp sweep --out on a full disk exits 1 naming the file and leaves nothing",
          "[fsdp][cli][disk]") {
  REQUIRE(fs::exists(fsdp_exe()));
  const fs::path dir = scratch("full");
  const std::string sweep = "sweep --model gpt2-xl --mbs 1:1 --steps 1 --out f.h5";
  // Unlimited, the result file is about 50 KiB; 16 KiB is not enough (out.txt stays tiny).
  CHECK(run_in(dir, "ulimit -f 16", sweep) == 1);
  const std::string err = slurp(dir / "err.txt");
  INFO(err);
  CHECK_THAT(err, Catch::Contains("f.h5") && Catch::Contains("File too large"));
  for (const auto& e : fs::directory_iterator(dir))
    CHECK(e.path().filename().string().rfind("f.h5", 0) == std::string::npos);
  CHECK(run_in(dir, "true", sweep) == 0);
  CHECK(fs::exists(dir / "f.h5"));
  fs::remove_all(dir);
}
