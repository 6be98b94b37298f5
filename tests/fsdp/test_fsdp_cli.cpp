// mlprio-fsdp as a program, on failures that only show at the process level: a full disk while
// writing --out (simulated with a file-size limit, writes failing with EFBIG) must end with exit
// status 1, a message naming the file, and no output file under any name; a sweep stops at its
// first OOM, and counts and sizes past their bounds are usage errors (exit 2) naming the bound.
#include <sys/wait.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "../support/process.hpp"
#include "../support/skip.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path& fsdp_exe() {
  static const fs::path p = fs::path(MLPRIO_BIN_DIR) / "mlprio-fsdp";
  return p;
}

fs::path scratch(const std::string& name) {
  return mlprio::test::scratch("mlprio_fsdp_cli_", name);
}
using mlprio::test::slurp;

int run_in(const fs::path& dir, const std::string& limits, const std::string& args) {
  return mlprio::test::run_in(fsdp_exe(), dir, limits, args, "out.txt");
}

}  // namespace

TEST_CASE("fsdp sweep --out on a full disk exits 1 naming the file and leaves nothing",
          "[fsdp][cli][disk]") {
  if (!fs::exists(fsdp_exe())) MLPRIO_SKIP(fsdp_exe() << " is not built");
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

TEST_CASE("fsdp sweep stops at the first OOM and bounds what it sizes", "[fsdp][cli][bounds]") {
  if (!fs::exists(fsdp_exe())) MLPRIO_SKIP(fsdp_exe() << " is not built");
  const fs::path dir = scratch("bounds");
  // 1:100000 used to run 100,000 minibatch sizes; it now stops at the first OOM.
  CHECK(run_in(dir, "true", "sweep --model gpt2-xl --mbs 1:100000 --steps 1 --json") == 0);
  const std::string out = slurp(dir / "out.txt");
  INFO(out);
  const auto j = nlohmann::json::parse(out);
  REQUIRE(!j["points"].empty());
  CHECK(j["points"].size() < 100);
  CHECK(j["points"].back()["oom"] == true);
  for (size_t i = 0; i + 1 < j["points"].size(); ++i) CHECK(j["points"][i]["oom"] == false);
  CHECK(j["stopped_at_point_bound"] == false);
  // Going past the OOM is asked for, and then the range is bounded.
  CHECK(run_in(dir, "true", "sweep --model gpt2-xl --mbs 1:100000 --past-oom") == 2);
  CHECK_THAT(slurp(dir / "err.txt"),
             Catch::Contains("MAX_SWEEP_POINTS") && Catch::Contains("4096"));
  CHECK(run_in(dir, "true", "sweep --model gpt2-xl --mbs 5:7 --steps 1 --past-oom --json") == 0);
  CHECK(nlohmann::json::parse(slurp(dir / "out.txt"))["points"].size() == 3);
  CHECK(run_in(dir, "true", "sweep --model gpt2-xl --mbs 1:2000000") == 2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("MAX_MICRO_BATCH"));
  // Trailing text in a part is an error naming it (std::stoll used to read "4abc" as 4).
  for (const char* bad : {"4abc", "1:8:2x", "1:8x", "1.5:8", ":8", "1::2"}) {
    INFO(bad);
    CHECK(run_in(dir, "true", std::string("sweep --model gpt2-xl --steps 1 --mbs ") + bad) == 2);
    CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("--mbs") && Catch::Contains(bad) &&
                                           Catch::Contains("is not a whole number"));
  }
  CHECK(run_in(dir, "true", "sweep --model gpt2-xl --seq-len 100000000") == 2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("MAX_SEQ_LEN"));
  // A shapes file whose widths would overflow the parameter count.
  {
    std::ofstream(dir / "models.json")
        << R"({"models": [{"name": "huge", "n_layers": 4, "d_model": 4294967296, "n_heads": 8,)"
        << R"( "d_ff": 4096, "vocab": 32000, "seq_len": 1024}]})";
  }
  CHECK(run_in(dir, "true", "sweep --model huge --models-file models.json") == 2);
  CHECK_THAT(slurp(dir / "err.txt"),
             Catch::Contains("models[0].d_model") && Catch::Contains("1048576"));
  fs::remove_all(dir);
}

TEST_CASE("fsdp exit codes: 2 usage and bad input, 1 runtime failure, 3 no device",
          "[fsdp][cli][exit]") {
  if (!fs::exists(fsdp_exe())) MLPRIO_SKIP(fsdp_exe() << " is not built");
  const fs::path dir = scratch("exit");
  // Usage: an unknown subcommand, a missing required option.
  CHECK(run_in(dir, "true", "frobnicate") == 2);
  CHECK(run_in(dir, "true", "sweep --mbs 1:1") == 2);
  // Bad input: a missing snapshot, an unknown model, a bad allocator setting.
  CHECK(run_in(dir, "true", "replay --snapshot missing.json") == 2);
  CHECK(run_in(dir, "true", "sweep --model no-such-model --mbs 1:1 --steps 1") == 2);
  CHECK(run_in(dir, "true", "sweep --model gpt2-xl --mbs 1:1 --torch-version 3.0") == 2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::StartsWith("mlprio-fsdp: --torch-version"));
  // A runtime failure: the result file cannot be written (its folder does not exist).
  CHECK(run_in(dir, "true", "sweep --model gpt2-xl --mbs 1:1 --steps 1 --out no-such/f.h5") == 1);
  CHECK_THAT(slurp(dir / "err.txt"),
             Catch::StartsWith("mlprio-fsdp: error: ") && Catch::Contains("no-such/f.h5"));
  // No device: measure on a machine without a CUDA device (or a build without CUDA).
  if (std::system("nvidia-smi -L > /dev/null 2>&1") == 0)
    MLPRIO_SKIP("a GPU is present: measure runs (fsdp_measure_smoke covers it)");
  CHECK(run_in(dir, "true", "measure --model gpt2-xl --mbs 1:1 --steps 1") == 3);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("no CUDA device"));
}

TEST_CASE("fsdp table agrees with a one-by-one sweep and refuses bad grids", "[fsdp][cli][table]") {
  if (!fs::exists(fsdp_exe())) MLPRIO_SKIP(fsdp_exe() << " is not built");
  const fs::path dir = scratch("table");
  for (const char* model : {"t5-3b-s128-t128", "gpt2-xl"}) {
    INFO(model);
    REQUIRE(run_in(dir, "true",
                   std::string("table --models ") + model + " --gpus g80:80 -o t.json") == 0);
    const auto t = nlohmann::json::parse(slurp(dir / "t.json"));
    CHECK(t["format"] == "mlprio-fsdp-table");
    CHECK(t["version"] == 1);
    REQUIRE(t["entries"].size() == 2);
    for (const auto& e : t["entries"]) {
      // The coarse-then-fine table finds what a sweep of every minibatch finds.
      const std::string conf =
          e["expandable_segments"].get<bool>() ? " --alloc-conf expandable_segments:True" : "";
      REQUIRE(run_in(dir, "true",
                     std::string("sweep --model ") + model + " --mbs 1:96 --steps 3 --json" +
                         conf) == 0);
      const auto s = nlohmann::json::parse(slurp(dir / "out.txt"));
      CHECK(e["max_safe_mbs"] == s["max_safe_mbs"]);
      int64_t oom = 0;
      for (const auto& p : s["points"])
        if (p["oom"].get<bool>() && oom == 0) oom = p["mbs"].get<int64_t>();
      CHECK(e["oom_mbs"] == oom);
      for (const auto& rp : e["retry_points"]) {
        CHECK(rp[1].get<double>() >= 0);
        CHECK(rp[1].get<double>() < 1);
      }
    }
  }
  CHECK(run_in(dir, "true", "table --gpus a100 -o t.json") == 2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("NAME:GIB"));
  CHECK(run_in(dir, "true", "table --activation-checkpointing 2 -o t.json") == 2);
  fs::remove_all(dir);
}
