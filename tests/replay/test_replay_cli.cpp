// mlprio-replay as a program, on failures that only show at the process level: a full disk
// while writing --out (simulated with a file-size limit, writes failing with EFBIG) must end
// with exit status 1, a message naming the file, and no output file under any name; sizes and
// counts out of their bounds are usage errors (exit 2) that name the option and the bound.
#include <sys/stat.h>
#include <sys/wait.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "../support/process.hpp"
#include "../support/skip.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path& replay_exe() {
  static const fs::path p = fs::path(MLPRIO_BIN_DIR) / "mlprio-replay";
  return p;
}

fs::path cli_scratch(const std::string& name) {
  return mlprio::test::scratch("mlprio_replay_cli_", name);
}
using mlprio::test::slurp;

int run_in(const fs::path& dir, const std::string& limits, const std::string& args) {
  return mlprio::test::run_in(replay_exe(), dir, limits, args, "/dev/null");
}

}  // namespace

TEST_CASE("replay run --out on a full disk exits 1 naming the file and leaves nothing",
          "[replay][cli][disk]") {
  if (!fs::exists(replay_exe())) MLPRIO_SKIP(replay_exe() << " is not built");
  const fs::path dir = cli_scratch("full");
  REQUIRE(run_in(dir, "true", "generate --jobs 2000 --seed 3 -q -o t.swf") == 0);
  // Unlimited, the result file is about 64 KiB; 16 KiB is not enough.
  CHECK(run_in(dir, "ulimit -f 16", "run --trace t.swf --out o.h5") == 1);
  const std::string err = slurp(dir / "err.txt");
  INFO(err);
  CHECK_THAT(err, Catch::Contains("o.h5") && Catch::Contains("File too large"));
  for (const auto& e : fs::directory_iterator(dir))
    CHECK(e.path().filename().string().rfind("o.h5", 0) == std::string::npos);
  // With room, the same command writes the file.
  CHECK(run_in(dir, "true", "run --trace t.swf --out o.h5") == 0);
  CHECK(fs::exists(dir / "o.h5"));
  fs::remove_all(dir);
}

TEST_CASE("replay run refuses a machine whose size overflows 64 bits", "[replay][cli][bounds]") {
  if (!fs::exists(replay_exe())) MLPRIO_SKIP(replay_exe() << " is not built");
  const fs::path dir = cli_scratch("machine");
  REQUIRE(run_in(dir, "true", "generate --jobs 50 --seed 3 -q -o t.swf") == 0);
  // 2^62 nodes used to replay with a null utilisation; 2^62 cores per node overflowed.
  CHECK(run_in(dir, "true", "run --trace t.swf --nodes 4611686018427387904") == 2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("--nodes") &&
                                         Catch::Contains("out of range") &&
                                         Catch::Contains("16777216"));
  CHECK(run_in(dir, "true", "run --trace t.swf --nodes 4 --cores-per-node 4611686018427387904") ==
        2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("cores per node"));
  CHECK(run_in(dir, "true", "run --trace t.swf --gpus-per-node 100000") == 2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("GPUs per node"));
  // The same bound for a machine read from the trace header.
  {
    std::ofstream o(dir / "big.swf");
    o << "; MaxNodes: 4611686018427387904\n; MaxProcs: 4611686018427387904\n"
      << "1 0 10 100 4 -1 -1 4 200 -1 1 1 1 -1 -1 -1 -1 -1\n";
  }
  CHECK(run_in(dir, "true", "run --trace big.swf") == 2);
  CHECK_THAT(slurp(dir / "err.txt"),
             Catch::Contains("big.swf's header") && Catch::Contains("nodes"));
  CHECK(run_in(dir, "true", "run --trace t.swf --nodes 16777216 --cores-per-node 1048576") == 0);
  fs::remove_all(dir);
}

TEST_CASE("replay generate writes through a unique temporary, never a fixed name",
          "[replay][cli][generate]") {
  if (!fs::exists(replay_exe())) MLPRIO_SKIP(replay_exe() << " is not built");
  const fs::path dir = cli_scratch("gen");
  // The old fixed name "<out>.part" was opened with O_TRUNC, following links: a link planted
  // there made generate overwrite its target.
  { std::ofstream(dir / "victim.txt") << "keep me\n"; }
  fs::create_symlink(dir / "victim.txt", dir / "t.swf.part");
  REQUIRE(run_in(dir, "true", "generate --jobs 300 --seed 7 -q -o t.swf") == 0);
  CHECK(slurp(dir / "victim.txt") == "keep me\n");
  REQUIRE(run_in(dir, "true", "generate --jobs 300 --seed 7 -q -o ref.swf") == 0);
  CHECK(slurp(dir / "t.swf") == slurp(dir / "ref.swf"));
  // Two runs writing the same file at once: it ends up as one of them, whole.
  REQUIRE(run_in(dir, "true", "generate --jobs 20000 --seed 8 -q -o ref8.swf") == 0);
  REQUIRE(run_in(dir, "true", "generate --jobs 20000 --seed 9 -q -o ref9.swf") == 0);
  const std::string exe = "'" + replay_exe().string() + "'";
  const std::string both = "cd '" + dir.string() + "' && (" + exe +
                           " generate --jobs 20000 --seed 8 -q -o same.swf & " + exe +
                           " generate --jobs 20000 --seed 9 -q -o same.swf & wait)";
  REQUIRE(std::system(both.c_str()) == 0);
  const std::string same = slurp(dir / "same.swf");
  CHECK((same == slurp(dir / "ref8.swf") || same == slurp(dir / "ref9.swf")));
  for (const auto& e : fs::directory_iterator(dir))
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
  // The file gets the usual permissions (0666 less the umask), not mkstemp's 0600.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  CHECK(static_cast<unsigned>(fs::status(dir / "t.swf").permissions()) == (0666u & ~mask));
  fs::remove_all(dir);
}

TEST_CASE("replay counts that size memory or work are bounded, and the bound is named",
          "[replay][cli][bounds]") {
  if (!fs::exists(replay_exe())) MLPRIO_SKIP(replay_exe() << " is not built");
  const fs::path dir = cli_scratch("counts");
  REQUIRE(run_in(dir, "true", "generate --jobs 200 --seed 3 -q -o t.swf") == 0);
  // A million time-parallel segments (each a simulator state) for a 200-job trace.
  CHECK(run_in(dir, "true", "run --trace t.swf --time-parallel --segments 1000000") == 2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("--segments") && Catch::Contains("4096"));
  CHECK(run_in(dir, "true", "run --trace t.swf --time-parallel --segments 4") == 0);
  // A sweep config asking for 10^12 random windows: refused while reading the file.
  { std::ofstream(dir / "many.toml") << "[random_windows]\ncount = 1e12\nlen = 10\nseed = 1\n"; }
  CHECK(run_in(dir, "true", "sweep --trace t.swf --config many.toml --out s.h5") == 2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("count") && Catch::Contains("1000000"));
  // From the command line, and as a product: 2 policies x 1001^2 parameter sets x 1 window.
  CHECK(run_in(dir, "true", "sweep --trace t.swf --windows 2000000x10 --seed 1 --out s.h5") == 2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("MAX_SWEEP_TASKS"));
  {
    std::ofstream o(dir / "grid.toml");
    o << "policies = [\"fcfs\", \"multifactor\"]\nwindows = [\"0:100\"]\n[multifactor]\nweight_age "
         "= [";
    for (int i = 0; i <= 1000; ++i) o << (i ? ", " : "") << i;
    o << "]\nweight_fairshare = [";
    for (int i = 0; i <= 1000; ++i) o << (i ? ", " : "") << i;
    o << "]\n";
  }
  CHECK(run_in(dir, "true", "sweep --trace t.swf --config grid.toml --out s.h5") == 2);
  CHECK_THAT(slurp(dir / "err.txt"),
             Catch::Contains("parameter sets") && Catch::Contains("MAX_SWEEP_TASKS"));
  fs::remove_all(dir);
}

TEST_CASE("replay inspect --user-stats reports a hand-made trace's known figures",
          "[replay][cli][inspect]") {
  if (!fs::exists(replay_exe())) MLPRIO_SKIP(replay_exe() << " is not built");
  const fs::path dir = cli_scratch("user_stats");
  {
    // The trace of tests/core/test_user_stats.cpp ("a hand-made trace gives the worked-out
    // figures"): id submit wait run procs cpu mem req_procs req_time req_mem status user ...
    std::ofstream t(dir / "t.swf");
    t << "; MaxProcs: 16\n"
         "1 0 -1 100 4 -1 -1 4 600 -1 1 1 -1 -1 -1 -1 -1 -1\n"
         "2 5 -1 120 4 -1 -1 4 600 -1 1 1 -1 -1 -1 -1 -1 -1\n"
         "3 10 -1 30 1 -1 -1 1 300 -1 1 2 -1 -1 -1 -1 -1 -1\n"
         "4 20 -1 15 1 -1 -1 1 300 -1 1 2 -1 -1 -1 -1 -1 -1\n"
         "5 30 -1 -1 2 -1 -1 2 900 -1 1 3 -1 -1 -1 -1 -1 -1\n"
         "6 40 -1 50 1 -1 -1 1 100 -1 1 -1 -1 -1 -1 -1 -1 -1\n"
         "7 4000 -1 1000 8 -1 -1 8 3600 -1 1 1 -1 -1 -1 -1 -1 -1\n"
         "8 7300 -1 400 1 -1 -1 1 300 -1 1 2 -1 -1 -1 -1 -1 -1\n";
  }
  REQUIRE(mlprio::test::run_in(replay_exe(), dir, "true",
                               "inspect --trace t.swf --user-stats --json", "out.json") == 0);
  const std::string out = slurp(dir / "out.json");
  INFO(out);
  CHECK_THAT(out,
             Catch::Contains("\"user_stats\":{") && Catch::Contains("\"users\":3") &&
                 Catch::Contains("\"pairs\":4") && Catch::Contains("\"same_request_size\":0.75") &&
                 Catch::Contains("\"gap_within_10s\":0.5") &&
                 Catch::Contains("\"run_within_2x\":0.5") && Catch::Contains("\"request_jobs\":7"));
  // Text: the same figures, three decimals.
  REQUIRE(mlprio::test::run_in(replay_exe(), dir, "true", "inspect --trace t.swf --user-stats",
                               "out.txt") == 0);
  CHECK_THAT(slurp(dir / "out.txt"), Catch::Contains("top 10 % of users submit 0.429") &&
                                         Catch::Contains("0.750 same (request, size)"));
  // Without user ids (a generated plain trace) the per-user figures are null.
  REQUIRE(run_in(dir, "true", "generate --jobs 100 --seed 1 -q -o g.swf") == 0);
  REQUIRE(mlprio::test::run_in(replay_exe(), dir, "true",
                               "inspect --trace g.swf --user-stats --json", "g.json") == 0);
  CHECK_THAT(slurp(dir / "g.json"),
             Catch::Contains("\"users\":0") && Catch::Contains("\"top10_share\":null"));
  fs::remove_all(dir);
}

TEST_CASE("replay generate --users: a user model, its header note, and refused combinations",
          "[replay][cli][generate]") {
  if (!fs::exists(replay_exe())) MLPRIO_SKIP(replay_exe() << " is not built");
  const fs::path dir = cli_scratch("gen_users");
  REQUIRE(run_in(dir, "true", "generate --jobs 500 --seed 4 --users 7 -q -o a.swf") == 0);
  REQUIRE(run_in(dir, "true", "generate --jobs 500 --seed 4 --users 7 -q -o b.swf") == 0);
  const std::string a = slurp(dir / "a.swf");
  CHECK(a == slurp(dir / "b.swf"));
  CHECK_THAT(a, Catch::Contains("; Note: user model version 1: 7 users") &&
                    Catch::Contains("; Note: requested time user"));
  // Plain (no --users): no user-model note, requests unknown as before.
  REQUIRE(run_in(dir, "true", "generate --jobs 50 --seed 4 -q -o p.swf") == 0);
  const std::string p = slurp(dir / "p.swf");
  CHECK_THAT(p,
             Catch::Contains("; Note: requested time unknown") && !Catch::Contains("user model"));
  // The user request model needs users; bad user-model values are usage errors naming them.
  CHECK(run_in(dir, "true", "generate --jobs 5 --req-time user -o u.swf") == 2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("users > 0"));
  CHECK(run_in(dir, "true", "generate --jobs 5 --users 3 --user-stickiness 1 -o u.swf") == 2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("stickiness"));
  CHECK_FALSE(fs::exists(dir / "u.swf"));
  fs::remove_all(dir);
}

TEST_CASE("replay exit codes: 2 for usage and bad input, 1 for a runtime failure",
          "[replay][cli][exit]") {
  if (!fs::exists(replay_exe())) MLPRIO_SKIP(replay_exe() << " is not built");
  const fs::path dir = cli_scratch("exit");
  REQUIRE(run_in(dir, "true", "generate --jobs 50 --seed 3 -q -o t.swf") == 0);
  // Usage: an unknown subcommand, a missing required option, an unknown option.
  CHECK(run_in(dir, "true", "frobnicate") == 2);
  CHECK(run_in(dir, "true", "run") == 2);
  CHECK(run_in(dir, "true", "run --trace t.swf --no-such-option") == 2);
  CHECK(run_in(dir, "true", "--help") == 0);
  // Bad input: a missing trace (InputError), an unknown policy, a corrupt model file.
  CHECK(run_in(dir, "true", "run --trace missing.swf") == 2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("mlprio-replay: error: missing.swf"));
  CHECK(run_in(dir, "true", "run --trace t.swf --policy no-such-policy") == 2);
  std::ofstream(dir / "corrupt.json") << "{\"format\": ";
  CHECK(run_in(dir, "true", "run --trace t.swf --estimate model:corrupt.json") == 2);
  // A runtime failure: the result file cannot be written (its folder does not exist).
  CHECK(run_in(dir, "true", "run --trace t.swf --out no-such-folder/o.h5") == 1);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("no-such-folder/o.h5"));
  fs::remove_all(dir);
}

TEST_CASE("replay run --out that fails part-way through a streamed trace leaves no file",
          "[replay][cli][out]") {
  if (!fs::exists(replay_exe())) MLPRIO_SKIP(replay_exe() << " is not built");
  const fs::path dir = cli_scratch("stream_fail");
  // 70,000 jobs (more than one block of rows goes into the file), then one job wider than the
  // machine, submitted last.
  REQUIRE(run_in(dir, "true", "generate --jobs 70000 --nodes 64 --seed 4 -q -o t.swf") == 0);
  std::ofstream(dir / "t.swf", std::ios::app)
      << "70001 999999999 -1 10 4096 -1 -1 4096 10 -1 1 1 -1 -1 -1 -1 -1 -1\n";
  CHECK(run_in(dir, "true", "run --trace t.swf --out o.h5") == 2);
  CHECK_THAT(slurp(dir / "err.txt"), Catch::Contains("job 70001 asks for 4096 processors"));
  for (const auto& e : fs::directory_iterator(dir))
    CHECK(e.path().filename().string().rfind("o.h5", 0) == std::string::npos);
  // The same trace with the wide job skipped writes the file, every other job in it.
  CHECK(run_in(dir, "true", "run --trace t.swf --too-large skip --out o.h5") == 0);
  CHECK(fs::exists(dir / "o.h5"));
  fs::remove_all(dir);
}
