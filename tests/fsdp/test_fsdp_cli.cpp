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
#include <vector>

#include "../support/process.hpp"
#include "../support/skip.hpp"
#include "mlprio/fsdp/device.hpp"
#include "mlprio/fsdp/settings.hpp"

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

TEST_CASE("fit_latency: hand-worked cudaMalloc lines, per-call means, untouched kinds",
          "[fsdp][latency]") {
  using mlprio::fsdp::DeviceCallTimes;
  using mlprio::fsdp::fit_latency;
  using mlprio::fsdp::LatencyModel;
  // Calls of `gib` GiB taking `us` microseconds each.
  const auto mallocs = [](std::initializer_list<std::pair<double, double>> calls) {
    DeviceCallTimes t;
    for (const auto& [gib, us] : calls) {
      DeviceCallTimes one;
      one.mallocs = 1;
      one.malloc_us = us;
      one.malloc_gib = gib;
      one.malloc_gib2 = gib * gib;
      one.malloc_gib_us = gib * us;
      t += one;
    }
    return t;
  };
  // 1 GiB in 100 us, 3 GiB in 140 us: 80 us + 20 us/GiB.
  DeviceCallTimes t = mallocs({{1, 100}, {3, 140}});
  t.frees = 2;
  t.free_us = 600;
  t.syncs = 1;
  t.sync_us = 1000;
  const LatencyModel base;
  LatencyModel m = fit_latency(t, base);
  CHECK(m.malloc_us == Approx(80));
  CHECK(m.malloc_us_per_gib == Approx(20));
  CHECK(m.free_us == Approx(300));
  CHECK(m.sync_all_streams_us == Approx(1000));
  CHECK(m.map_page_us == base.map_page_us);  // no map calls: the base value stays
  CHECK(m.unmap_page_us == base.unmap_page_us);
  // Larger segments faster: no slope, the mean.
  m = fit_latency(mallocs({{1, 200}, {3, 100}}), base);
  CHECK(m.malloc_us == Approx(150));
  CHECK(m.malloc_us_per_gib == 0);
  // One size only: the mean.
  m = fit_latency(mallocs({{2, 100}, {2, 300}}), base);
  CHECK(m.malloc_us == Approx(200));
  CHECK(m.malloc_us_per_gib == 0);
  // A line with a negative intercept (505 - 495*2 < 0): through the origin, 3010/10 us per GiB.
  m = fit_latency(mallocs({{1, 10}, {3, 1000}}), base);
  CHECK(m.malloc_us == 0);
  CHECK(m.malloc_us_per_gib == Approx(301));
  // The totals of a sum are the sums of the totals.
  DeviceCallTimes a = mallocs({{1, 100}});
  a.failed = 1;
  a.failed_us = 5;
  a += mallocs({{3, 140}});
  CHECK(a.mallocs == 2);
  CHECK(a.total_us() == Approx(245));
}

TEST_CASE("fsdp --latency: parsed strictly, printed back, and charged linearly by sweep",
          "[fsdp][cli][latency]") {
  using mlprio::fsdp::LatencyModel;
  using mlprio::fsdp::parse_latency;
  LatencyModel want;
  want.malloc_us = 81.5;
  want.malloc_us_per_gib = 12.25;
  want.free_us = 300;
  want.map_page_us = 40;
  want.unmap_page_us = 55.5;
  want.sync_all_streams_us = 7;
  const std::string text = mlprio::fsdp::latency_text(want);
  CHECK(text ==
        "malloc_us=81.5,malloc_us_per_gib=12.25,free_us=300,map_page_us=40,unmap_page_us=55.5,"
        "sync_all_streams_us=7");
  const LatencyModel got = parse_latency(text);
  CHECK(mlprio::fsdp::latency_text(got) == text);  // every field read back
  CHECK(got.unmap_page_us == 55.5);
  CHECK(parse_latency("free_us=1").malloc_us == LatencyModel{}.malloc_us);  // the rest: defaults
  for (const char* bad : {"free_us", "free_us=", "free_us=-1", "free_us=nan", "free_us=1x",
                          "bogus=1", "free_us=1,", "free_us=1e10"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_latency(bad), mlprio::fsdp::SettingsError);
  }

  if (!fs::exists(fsdp_exe())) MLPRIO_SKIP(fsdp_exe() << " is not built");
  const fs::path dir = scratch("latency");
  // T5-3B on 70 GiB retries at minibatch 22 (the sweep's own table), so every cost is charged.
  const std::string args =
      "sweep --model t5-3b --seq-len 128 --tgt-len 128 --world-size 1 --capacity 70GiB "
      "--mbs 20:22:2 --steps 2 --json --latency ";
  const auto overheads = [&](const std::string& latency) {
    REQUIRE(run_in(dir, "true", args + latency) == 0);
    const auto j = nlohmann::json::parse(slurp(dir / "out.txt"));
    CHECK(j["latency"] == mlprio::fsdp::latency_text(parse_latency(latency)));
    std::vector<double> o;
    for (const auto& p : j["points"]) o.push_back(p["alloc_overhead_ms_per_step"].get<double>());
    return o;
  };
  const std::string one =
      "malloc_us=10,malloc_us_per_gib=1,free_us=20,map_page_us=3,unmap_page_us=4,"
      "sync_all_streams_us=50";
  const std::string two =
      "malloc_us=20,malloc_us_per_gib=2,free_us=40,map_page_us=6,unmap_page_us=8,"
      "sync_all_streams_us=100";
  const std::string zero =
      "malloc_us=0,malloc_us_per_gib=0,free_us=0,map_page_us=0,unmap_page_us=0,"
      "sync_all_streams_us=0";
  const auto o1 = overheads(one), o2 = overheads(two), o0 = overheads(zero);
  REQUIRE(o1.size() == 2);
  REQUIRE(o2.size() == 2);
  for (size_t i = 0; i < o1.size(); ++i) {
    CHECK(o1[i] > 0);
    CHECK(o2[i] == Approx(2 * o1[i]));
    CHECK(o0[i] == 0);
  }
  CHECK(o1[1] > o1[0]);  // the retrying minibatch costs more
  CHECK(run_in(dir, "true", args + "free_us=oops") == 2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("--latency") && Catch::Contains("oops"));
  // The advice table takes the same costs and records them.
  const std::string table =
      "table --models gpt2-xl --gpus g:40 --world-sizes 8 --mbs-hi 16 --steps 1 -o t.json ";
  REQUIRE(run_in(dir, "true", table + "--latency " + one) == 0);
  std::ifstream in(dir / "t.json");
  const auto t = nlohmann::json::parse(in);
  CHECK(t["generator"]["latency"] == mlprio::fsdp::latency_text(parse_latency(one)));
  CHECK(run_in(dir, "true", table + "--latency map_page_us=") == 2);
  // measure checks its options before it looks for a GPU.
  CHECK(run_in(dir, "true", "measure --model gpt2-xl --latency free_us=x") == 2);
  CHECK(run_in(dir, "true", "measure --model gpt2-xl --compute-tflops -1") == 2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("--compute-tflops"));
  fs::remove_all(dir);
}
