// `mlprio-replay fsdp-advice` on a hand-checked job list: the GPU-hours saved are the
// retrying jobs' recorded GPU-hours times the table's penalty at their minibatch; OOM jobs are
// counted apart; a bad line is named by file and line.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>

#include "mlprio/jobs/trace.hpp"
#include "mlprio/replay/fsdp_advice.hpp"

namespace {

const char* ADVICE_TABLE = R"({"format": "mlprio-fsdp-table", "version": 1, "entries": [
 {"model": "t5-3b-s128-t128", "gpu_memory_gib": 80, "world_size": 8, "sharding": "FULL_SHARD",
  "precision": "bf16", "activation_checkpointing": false, "seq_len": 128, "tgt_len": 128,
  "expandable_segments": false, "mbs_hi": 256, "max_safe_mbs": 60, "first_retry_mbs": 61,
  "oom_mbs": 64, "retry_points": [[61, 0.04], [62, 0.12]]}]})";

std::string write_temp(const std::string& text) {
  char name[] = "/tmp/mlprio-fsdp-jobs.XXXXXX";
  const int fd = mkstemp(name);
  REQUIRE(fd >= 0);
  close(fd);
  std::ofstream(name) << text;
  return name;
}

}  // namespace

TEST_CASE("fsdp-advice: GPU-hours saved on a hand-checked job list") {
  using namespace mlprio;
  const auto table = model::FsdpTable::parse(ADVICE_TABLE, "table");
  const std::string path = write_temp(
      "# id, training keys, recorded run\n"
      "1 model=t5-3b-s128-t128 world_size=8 minibatch=62 run_s=36000\n"
      "2 model=t5-3b-s128-t128 world_size=8 minibatch=60 run_s=7200\n"
      "3 model=t5-3b-s128-t128 world_size=8 minibatch=64 run_s=600\n"
      "4 model=gpt2-xl world_size=8 minibatch=4 run_s=3600\n"
      "5 model=t5-3b-s128-t128 world_size=8 minibatch=61\n");
  const auto jobs = replay::read_fsdp_jobs(path);
  REQUIRE(jobs.size() == 5);
  const auto r = replay::apply_fsdp_advice(table, jobs, 80);
  CHECK(r.retries == 2);
  CHECK(r.ok == 1);
  CHECK(r.oom == 1);
  CHECK(r.no_advice == 1);
  CHECK(r.unknown_run == 1);
  // 36000 s x 8 GPUs = 80 GPU-hours at a 12 % penalty: 9.6 saved.
  CHECK(r.gpu_hours_retry == Approx(80.0));
  CHECK(r.gpu_hours_saved == Approx(9.6));
  CHECK(r.gpu_hours_oom == Approx(600.0 * 8 / 3600));
  CHECK(r.gpu_hours == Approx(80.0 + 16.0 + 600.0 * 8 / 3600 + 8.0));
  CHECK(r.rows[0].advised_run_s == Approx(36000 * 0.88));
  std::remove(path.c_str());

  const std::string bad = write_temp("1 model=t5-3b minibatch=4\n2 model=t5-3b minibatch=x\n");
  try {
    (void)replay::read_fsdp_jobs(bad);
    FAIL("a bad line was accepted");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("line 2: minibatch=x") != std::string::npos);
  }
  std::remove(bad.c_str());
}

TEST_CASE("fsdp-advice: a generated job list is reproducible and advisable") {
  using namespace mlprio;
  const auto table = model::FsdpTable::parse(ADVICE_TABLE, "table");
  const auto a = replay::generate_fsdp_jobs(table, 200, 7);
  const auto b = replay::generate_fsdp_jobs(table, 200, 7);
  REQUIRE(a.size() == 200);
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].line == b[i].line);
  const auto r = replay::apply_fsdp_advice(table, a, 80);
  CHECK(r.no_advice == 0);
  CHECK(r.retries > 0);
  CHECK(r.gpu_hours_saved > 0);
  CHECK(r.gpu_hours_saved < r.gpu_hours_retry * 0.13);
}
