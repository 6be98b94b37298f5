// Unit tests of the FSDP advice without a cluster: the #MLPRIO training-configuration
// parser under hostile input (huge lines, bad values, binary junk give clean problems, never a
// crash or an exception), the table reader's refusals, the advice itself, the plugin parameters
// (fsdp_table, fsdp_gpu_gib, ...) and the ABI entry point mlprio_fsdp_advise() with a good, a
// corrupt and a missing table, including reload when the file changes.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>

#include "abi_detail.hpp"
#include "mlprio/model/fsdp_table.hpp"
#include "mlprio_abi.h"

namespace {

using namespace mlprio::model;

// A table entry as `mlprio-fsdp table` writes one.
std::string entry_json(const std::string& model, int gib, bool expandable, int safe, int retry,
                       int oom) {
  return "{\"model\": \"" + model + "\", \"dims\": \"24/24/1024/32/16384/32128\", \"gpu\": \"g\"," +
         "\"gpu_memory_gib\": " + std::to_string(gib) +
         ", \"world_size\": 8, \"sharding\": \"FULL_SHARD\", \"precision\": \"bf16\"," +
         "\"activation_checkpointing\": false, \"seq_len\": 128, \"tgt_len\": 128," +
         "\"default_lengths\": true, \"expandable_segments\": " + (expandable ? "true" : "false") +
         ", \"mbs_hi\": 256, \"max_safe_mbs\": " + std::to_string(safe) +
         ", \"first_retry_mbs\": " + (retry ? std::to_string(retry) : "null") +
         ", \"oom_mbs\": " + std::to_string(oom) + ", \"retry_points\": " +
         (retry
              ? "[[" + std::to_string(retry) + ", 0.04], [" + std::to_string(retry + 1) + ", 0.12]]"
              : "[]") +
         "}";
}

std::string table_json() {
  return "{\"format\": \"mlprio-fsdp-table\", \"version\": 1, \"generator\": {}, \"entries\": [" +
         entry_json("t5-3b-s128-t128", 80, false, 60, 61, 64) + "," +
         entry_json("t5-3b-s128-t128", 80, true, 62, 63, 64) + "]}";
}

std::string temp_dir() {
  char tmpl[] = "/tmp/mlprio-fsdp-test.XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}

void write_file(const std::string& path, const std::string& text, mode_t mode = 0644) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
  }
  REQUIRE(chmod(tmp.c_str(), mode) == 0);
  REQUIRE(std::rename(tmp.c_str(), path.c_str()) == 0);
}

}  // namespace

TEST_CASE("#MLPRIO training directives: every key, aliases and the exported allocator setting") {
  const auto r = parse_fsdp_directives(
      "#!/bin/bash\n#SBATCH -N 1\n"
      "#MLPRIO model=T5-3B sharding=shard_grad_op world_size=16 minibatch=69\n"
      "  #MLPRIO seq_len=512 tgt_len=128 precision=FP32 ac=1 model_size=3e9 lora_rank=8\n"
      "export PYTORCH_CUDA_ALLOC_CONF=\"max_split_size_mb:128,expandable_segments:True\"\n");
  CHECK(r.problems.empty());
  const FsdpDirective& d = r.directive;
  CHECK(d.model == "t5-3b");
  CHECK(d.sharding == "SHARD_GRAD_OP");
  CHECK(d.world_size == 16);
  CHECK(d.minibatch == 69);
  CHECK(d.seq_len == 512);
  CHECK(d.tgt_len == 128);
  CHECK(d.precision == "fp32");
  CHECK(d.activation_checkpointing);
  CHECK(d.alloc_conf == "max_split_size_mb:128,expandable_segments:True");
  CHECK(d.expandable_segments);
  CHECK(d.complete());
  // The directive's alloc_conf wins over the export; expandable_segments:False is off.
  const auto r2 = parse_fsdp_directives(
      "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
      "#MLPRIO model=gpt2-xl mbs=4 alloc_conf=expandable_segments:False\n");
  CHECK(r2.directive.alloc_conf == "expandable_segments:False");
  CHECK_FALSE(r2.directive.expandable_segments);
  CHECK(r2.directive.minibatch == 4);
  // Explicit dimensions instead of a name.
  const auto r3 = parse_fsdp_directives(
      "#MLPRIO n_layers=24 n_dec_layers=24 d_model=1024 n_heads=32 d_ff=16384 vocab=32128 "
      "minibatch=8\n");
  CHECK(r3.problems.empty());
  CHECK(r3.directive.dims == "24/24/1024/32/16384/32128");
  CHECK(r3.directive.complete());
  // Only LLM keys: no training configuration, nothing to report.
  const auto r4 = parse_fsdp_directives("#MLPRIO model_size=7e9 batch_size=32\n");
  CHECK_FALSE(r4.directive.any);
  CHECK(r4.problems.empty());
}

TEST_CASE("#MLPRIO training directives: bad values are named, never crash") {
  const auto r = parse_fsdp_directives(
      "#MLPRIO model=../../etc/passwd sharding=ZERO9 world_size=0 minibatch=-3 seq_len=1e9 "
      "precision=fp8 ac=maybe alloc_conf= minibatch=99999999999999999999999\n"
      "#MLPRIO n_layers=4\n");
  const auto& p = r.problems;
  REQUIRE(p.size() >= 8);
  CHECK(p[0] ==
        "model=../../etc/passwd (expected a model name such as gpt2-xl, t5-3b or "
        "llama2-7b)");
  CHECK(p[1] == "sharding=ZERO9 (expected FULL_SHARD, SHARD_GRAD_OP or NO_SHARD)");
  CHECK(p[2].rfind("world_size=0 (", 0) == 0);
  CHECK(p[3].rfind("minibatch=-3 (", 0) == 0);
  CHECK(p[4].rfind("seq_len=1e9 (", 0) == 0);
  CHECK(p[5] == "precision=fp8 (expected bf16 or fp32)");
  CHECK(p[6] == "ac=maybe (expected 1 or 0)");
  CHECK(p.back().find("without d_model") != std::string::npos);
  CHECK_FALSE(r.directive.complete());
  CHECK(r.directive.minibatch == 0);
}

TEST_CASE("#MLPRIO training directives: hostile input stays bounded and printable") {
  // A 10 MB line, a value of 1 MB, binary junk with NULs and high bytes, thousands of keys.
  std::string huge = "#MLPRIO model=" + std::string(1 << 20, 'a') +
                     " minibatch=" + std::string(1 << 20, '9') + " " + std::string(8 << 20, 'x') +
                     "\n";
  auto r = parse_fsdp_directives(huge);
  CHECK(r.problems.size() <= 16);
  for (const auto& p : r.problems) CHECK(p.size() < 200);
  CHECK_FALSE(r.directive.complete());

  std::string many = "#MLPRIO";
  for (int i = 0; i < 20000; ++i) many += " sharding=bad" + std::to_string(i);
  r = parse_fsdp_directives(many);
  CHECK(r.problems.size() == 16);
  // Only the first 64 #MLPRIO lines count: a later minibatch= is not seen.
  std::string lines;
  for (int i = 0; i < 64; ++i) lines += "#MLPRIO model=t5-3b\n";
  r = parse_fsdp_directives(lines + "#MLPRIO minibatch=8\n");
  CHECK(r.directive.minibatch == 0);
  CHECK(r.problems.back() == "more than 64 #MLPRIO lines; the rest are ignored");

  std::mt19937 rng(16);
  for (int round = 0; round < 200; ++round) {
    std::string junk = round % 2 ? "#MLPRIO " : "";
    const size_t n = rng() % 4096;
    for (size_t i = 0; i < n; ++i) junk += static_cast<char>(rng() & 0xff);
    if (round % 3 == 0) junk += "\n#MLPRIO model=\x01\xff minibatch=\x80 alloc_conf=\x1b[31m";
    const auto jr = parse_fsdp_directives(junk);
    CHECK(jr.problems.size() <= 16);
    for (const auto& p : jr.problems)
      for (char c : p) CHECK((c >= 0x20 && c < 0x7f));
  }
  // Only the first 64 KiB is read: a directive after it is not seen.
  const std::string late = std::string(70000, '\n') + "#MLPRIO model=t5-3b minibatch=8\n";
  CHECK_FALSE(parse_fsdp_directives(late).directive.any);
}

TEST_CASE("the example FSDP jobs declare complete training configurations") {
  const std::string jobs = std::string(MLPRIO_TEST_DATA) + "/../../jobs/";
  for (const char* name : {"finetune_t5_3b_fsdp.sbatch", "finetune_fsdp_8gpu.sbatch"}) {
    INFO(name);
    std::ifstream in(jobs + name);
    REQUIRE(in);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto r = parse_fsdp_directives(text);
    CHECK(r.problems.empty());
    CHECK(r.directive.complete());
    CHECK(r.directive.world_size == 8);
    // The LLM feature scanner leaves the training keys alone (no "unknown key" for them).
    std::vector<std::string> problems;
    mlprio::plugin::extract_features(text, "", "", problems);
    CHECK(problems.empty());
  }
  const auto t5 = parse_fsdp_directives(
      std::string("#MLPRIO model=t5-3b-s128-t128 world_size=8 minibatch=62\n"
                  "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False\n"));
  CHECK_FALSE(t5.directive.expandable_segments);
}

TEST_CASE("FSDP table: reads what the writer writes, refuses bad tables by name") {
  const FsdpTable t = FsdpTable::parse(table_json(), "t.json");
  REQUIRE(t.entries().size() == 2);
  const FsdpTable back = FsdpTable::parse(t.to_json({}).dump(), "back.json");
  CHECK(back.to_json({}).dump() == t.to_json({}).dump());

  auto refused = [](const std::string& text, const std::string& says) {
    try {
      (void)FsdpTable::parse(text, "bad.json");
      FAIL("accepted: " << text.substr(0, 80));
    } catch (const FsdpTableError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(says) != std::string::npos);
    }
  };
  refused("{\"format\": \"mlprio-fsdp-table\", \"version\": 1, \"entries\": [{\"model\": ",
          "not valid JSON");
  refused("{\"format\": \"other\"}", "not an FSDP advice table");
  refused("{\"format\": \"mlprio-fsdp-table\", \"version\": 2, \"entries\": []}",
          "version 2 is not supported");
  refused(std::string(100000, '[') + std::string(100000, ']'), "nested deeper");
  std::string e = table_json();
  refused(std::string(e).replace(e.find("\"max_safe_mbs\": 60"), 18, "\"max_safe_mbs\": \"x\""),
          "entry 0 field 'max_safe_mbs'");
  refused(std::string(e).replace(e.find("\"oom_mbs\": 64"), 13, "\"oom_mbs\": 10"),
          "at or below max_safe_mbs");
  refused(std::string(e).replace(e.find("0.04"), 4, "7"), "retry_points");
}

TEST_CASE("FSDP advice: the largest safe minibatch, the penalty and expandable_segments") {
  const FsdpTable t = FsdpTable::parse(table_json(), "t.json");
  FsdpDirective d;
  d.model = "t5-3b-s128-t128";
  d.world_size = 8;
  d.minibatch = 60;
  CHECK(advise(t, d, 80, 0).verdict == FsdpVerdict::OK);
  d.minibatch = 62;
  auto a = advise(t, d, 80, 0);
  REQUIRE(a.verdict == FsdpVerdict::RETRIES);
  CHECK(a.penalty == Approx(0.12));
  CHECK(a.message ==
        "mlprio: minibatch 62 per GPU is past the predicted cudaMalloc-retry point (retries from "
        "minibatch 61, about 12 % less throughput) for t5-3b-s128-t128 on 8 x 80 GiB GPUs "
        "(FULL_SHARD, bf16). Largest safe minibatch: 60. "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True moves it to 62.");
  CHECK(a.note == "mlprio_fsdp=retries:62>60");
  d.expandable_segments = true;
  CHECK(advise(t, d, 80, 0).verdict == FsdpVerdict::OK);
  d.minibatch = 64;
  a = advise(t, d, 80, 0);
  CHECK(a.verdict == FsdpVerdict::OOM);
  CHECK(a.message.find("Without expandable_segments it would be 60.") != std::string::npos);
  // World size from the job's GPU count; other GPUs or world sizes: no advice, and why.
  d.world_size = 0;
  CHECK(advise(t, d, 80, 8).verdict == FsdpVerdict::OOM);
  a = advise(t, d, 40, 8);
  CHECK(a.verdict == FsdpVerdict::NO_ADVICE);
  CHECK(a.why.find("no table entry for t5-3b-s128-t128 40GiB x8") != std::string::npos);
  // Explicit dimensions find the named shape.
  FsdpDirective dims;
  dims.dims = "24/24/1024/32/16384/32128";
  dims.world_size = 8;
  dims.minibatch = 63;
  CHECK(advise(t, dims, 80, 0).verdict == FsdpVerdict::RETRIES);
}

TEST_CASE("plugin parameters: fsdp_table, fsdp_refuse_oom, fsdp_gpu_gib, GPU type of a request") {
  using namespace mlprio::plugin;
  auto r = parse_params(
      "fsdp_table=/etc/t.json,fsdp_refuse_oom=1,fsdp_gpu_gib=A100/80:a100_40g/40,"
      "fsdp_default_gpu_gib=24");
  CHECK(r.warnings.empty());
  CHECK(r.params.fsdp_table == "/etc/t.json");
  CHECK(r.params.fsdp_refuse_oom);
  CHECK(r.params.fsdp_default_gpu_gib == 24);
  CHECK(gpu_memory_gib(r.params, "gres:gpu:a100:4") == 80);
  CHECK(gpu_memory_gib(r.params, "gres/gpu:a100_40g=2") == 40);
  CHECK(gpu_memory_gib(r.params, "gres:gpu:8") == 24);
  CHECK(gpu_memory_gib(r.params, "gres:gpu:h100:8") == 24);
  CHECK(gpu_memory_gib(r.params, "") == 24);
  CHECK(tres_gpu_type("cpu=4,gres:gpu:H100") == "h100");
  r = parse_params("fsdp_table=rel.json,fsdp_gpu_gib=a100:80,fsdp_default_gpu_gib=0");
  CHECK(r.warnings.size() == 3);
  CHECK(r.params.fsdp_table.empty());
  CHECK(r.params.fsdp_default_gpu_gib == 80);
}

TEST_CASE("mlprio_fsdp_advise: good, corrupt and missing tables; reload on change") {
  const std::string dir = temp_dir();
  const std::string table = dir + "/fsdp_table.json";
  write_file(table, table_json());
  const std::string params = "fsdp_table=" + table + ",check_period_ms=100";
  mlprio_ctx_t* ctx = nullptr;
  // No model: the context is neutral, but it still advises.
  mlprio_ctx_create(params.c_str(), 1, &ctx);
  REQUIRE(ctx != nullptr);
  mlprio_job_t j{};
  j.time_limit_s = -1;
  std::string script = "#!/bin/bash\n#MLPRIO model=t5-3b-s128-t128 world_size=8 minibatch=64\n";
  j.script = script.c_str();
  mlprio_fsdp_advice_t a;
  REQUIRE(mlprio_fsdp_advise(ctx, &j, "gres:gpu:8", 8, &a) == MLPRIO_OK);
  CHECK(a.verdict == MLPRIO_FSDP_OOM);
  CHECK(a.refuse == 0);  // fsdp_refuse_oom not set
  CHECK(a.max_safe_mbs == 60);
  CHECK(a.gpu_memory_gib == 80);
  CHECK(std::string(a.message).find("Largest safe minibatch: 60.") != std::string::npos);
  CHECK(std::string(a.note) == "mlprio_fsdp=oom:64>60");
  // Bad keys reach the user as problems.
  std::string bad = script + "#MLPRIO precision=fp8\n";
  j.script = bad.c_str();
  REQUIRE(mlprio_fsdp_advise(ctx, &j, nullptr, 8, &a) == MLPRIO_OK);
  CHECK(std::string(a.problems) == "precision=fp8 (expected bf16 or fp32)");
  j.script = script.c_str();

  // Corrupt in place: the reload logs it and advice stops; the job is never refused.
  write_file(table, "{\"format\": \"mlprio-fsdp-table\", \"version\": 1, \"entries\": [");
  int reloaded = 0;
  REQUIRE(mlprio_ctx_check_reload(ctx, &reloaded) == MLPRIO_OK);
  CHECK(reloaded == 1);
  REQUIRE(mlprio_fsdp_advise(ctx, &j, nullptr, 8, &a) == MLPRIO_OK);
  CHECK(a.verdict == MLPRIO_FSDP_NONE);
  CHECK(std::string(a.why).find("FSDP table rejected") != std::string::npos);
  // Fixed again: advice is back.
  write_file(table, table_json());
  REQUIRE(mlprio_ctx_check_reload(ctx, &reloaded) == MLPRIO_OK);
  REQUIRE(mlprio_fsdp_advise(ctx, &j, nullptr, 8, &a) == MLPRIO_OK);
  CHECK(a.verdict == MLPRIO_FSDP_OOM);
  mlprio_ctx_free(ctx);

  // Missing, group-writable, and refuse mode with a good table.
  for (const std::string& p :
       {"fsdp_table=" + dir + "/missing.json", "fsdp_table=" + dir + "/gw.json"}) {
    write_file(dir + "/gw.json", table_json(), 0664);
    ctx = nullptr;
    mlprio_ctx_create(p.c_str(), 1, &ctx);
    REQUIRE(ctx != nullptr);
    REQUIRE(mlprio_fsdp_advise(ctx, &j, nullptr, 8, &a) == MLPRIO_OK);
    CHECK(a.verdict == MLPRIO_FSDP_NONE);
    CHECK(std::string(a.why).find("no FSDP advice") != std::string::npos);
    mlprio_ctx_free(ctx);
  }
  const std::string refuse = params + ",fsdp_refuse_oom=1";
  mlprio_ctx_create(refuse.c_str(), 1, &ctx);
  REQUIRE(mlprio_fsdp_advise(ctx, &j, nullptr, 8, &a) == MLPRIO_OK);
  CHECK(a.refuse == 1);
  mlprio_ctx_free(ctx);
  // Exempt QOS and the user's override (when allowed) lift the refusal, as for failures.
  const std::string ways = refuse + ",exempt_qos=urgent,allow_override=1";
  mlprio_ctx_create(ways.c_str(), 1, &ctx);
  j.qos = "URGENT";
  REQUIRE(mlprio_fsdp_advise(ctx, &j, nullptr, 8, &a) == MLPRIO_OK);
  CHECK(a.refuse == 0);
  CHECK(std::string(a.message).find("Not refused: QOS urgent is exempt.") != std::string::npos);
  CHECK(std::string(a.note) == "mlprio_fsdp=oom:64>60 mlprio_exempt=qos:urgent");
  j.qos = "normal";
  REQUIRE(mlprio_fsdp_advise(ctx, &j, nullptr, 8, &a) == MLPRIO_OK);
  CHECK(a.refuse == 1);
  j.comment = "mlprio:override";
  REQUIRE(mlprio_fsdp_advise(ctx, &j, nullptr, 8, &a) == MLPRIO_OK);
  CHECK(a.refuse == 0);
  CHECK(std::string(a.note) == "mlprio_fsdp=oom:64>60 mlprio_override=1");
  j.comment = nullptr;
  // The worst a script can do: 64 KiB (all that is read) of #MLPRIO lines. (What a lookup
  // costs, for this and for a plain script, is measured by bench_plugin_abi's BM_fsdp_advise.)
  std::string big = script;
  while (big.size() < 70000) big += "#MLPRIO model_size=7e9 epochs=1 minibatch=64 ac=0\n";
  j.script = big.c_str();
  REQUIRE(mlprio_fsdp_advise(ctx, &j, nullptr, 8, &a) == MLPRIO_OK);
  CHECK(a.verdict == MLPRIO_FSDP_OOM);
  CHECK(std::string(a.problems) == "more than 64 #MLPRIO lines; the rest are ignored");
  mlprio_ctx_free(ctx);
  std::filesystem::remove_all(dir);
}
