// Benchmarks of the plugin C ABI on the paths slurmctld drives: site_factor_p_set for one job
// (cache hit, and cold = one inline model call) with per-call p99 as a counter, and
// site_factor_p_update over 10,000 and 100,000 pending jobs (all hits, and all cold after a model
// change): the time slurmctld holds its job write lock for one priority pass.
// Each benchmark first checks the factors are non-zero and ordered, and exits non-zero if not.
#include <sys/stat.h>
#include <unistd.h>

#include <benchmark/benchmark.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mlprio/model/model_file.hpp"
#include "mlprio_abi.h"

namespace {

namespace m = mlprio::model;
using Clock = std::chrono::steady_clock;

struct Fixture {
  std::string dir, path;
  mlprio_ctx_t* ctx = nullptr;
  std::vector<mlprio_job_t> jobs;
  Fixture() {
    char tmpl[] = "/tmp/mlprio-bench-XXXXXX";
    dir = ::mkdtemp(tmpl);
    path = dir + "/model.json";
    m::UserHistory h;
    for (int u = 0; u < 50; ++u) {
      m::UserStats s;
      s.last_run = 300.0 * (u + 1);
      s.prev_run = 200.0 * (u + 1);
      s.count = 10;
      h.by_user[m::stable_hash("user" + std::to_string(u))] = s;
    }
    nlohmann::json doc = {{"format", m::MODEL_FORMAT},  {"version", m::MODEL_VERSION},
                          {"kind", "formula"},          {"schema_version", m::SCHEMA_VERSION},
                          {"schema", m::schema_json()}, {"user_history", m::history_to_json(h)}};
    m::write_model_document(path, doc);
    if (mlprio_ctx_create(("model=" + path).c_str(), 0, &ctx) != MLPRIO_OK) {
      std::fprintf(stderr, "bench: %s\n", mlprio_last_error());
      std::exit(1);
    }
    static std::vector<std::string> users;
    for (int u = 0; u < 50; ++u) users.push_back("user" + std::to_string(u));
    jobs.resize(100000);
    for (size_t i = 0; i < jobs.size(); ++i) {
      mlprio_job_t& j = jobs[i];
      j = {};
      j.job_id = static_cast<uint32_t>(i + 1);
      j.submit_time = 1.7e9 + static_cast<double>(i);
      j.time_limit_s = 600.0 * static_cast<double>(1 + i % 48);
      j.req_cpus = 1 + static_cast<int64_t>(i % 64);
      j.req_nodes = 1;
      j.req_gpus = static_cast<double>(i % 8);
      j.req_mem_bytes = -1;
      j.user = users[i % users.size()].c_str();
      j.partition = "gpu";
      j.name = (i % 3) ? "llama-7b-lora16" : "train";
      j.comment = (i % 5) ? nullptr : "mlprio: seq_len=4096 batch_size=8";
    }
    check();
  }
  ~Fixture() {
    mlprio_ctx_free(ctx);
    std::remove(path.c_str());
    ::rmdir(dir.c_str());
  }
  // Correctness before timing: a shorter request gets a larger factor.
  void check() {
    mlprio_job_t a = jobs[0], b = jobs[0];
    a.job_id = 900001;
    b.job_id = 900002;
    a.user = b.user = "nobody";
    a.time_limit_s = 300;
    b.time_limit_s = 86400;
    int64_t fa = 0, fb = 0;
    if (mlprio_site_factor(ctx, &a, &fa) != MLPRIO_OK ||
        mlprio_site_factor(ctx, &b, &fb) != MLPRIO_OK || !(fa > fb && fb > 0)) {
      std::fprintf(stderr, "bench: wrong factors %lld %lld\n", static_cast<long long>(fa),
                   static_cast<long long>(fb));
      std::exit(1);
    }
  }
  // Forces every cached factor stale (what a model reload does).
  void invalidate() { mlprio_ctx_reconfigure(ctx, ("model=" + path).c_str(), ++epoch); }
  uint64_t epoch = 0;
};

Fixture& fx() {
  static Fixture f;
  return f;
}

double p99(std::vector<double>& ns) {
  std::sort(ns.begin(), ns.end());
  return ns.empty() ? 0 : ns[static_cast<size_t>(0.99 * static_cast<double>(ns.size() - 1))];
}

void BM_site_factor_set_cached(benchmark::State& state) {
  auto& f = fx();
  for (auto& j : f.jobs) {
    int64_t x;
    mlprio_site_factor(f.ctx, &j, &x);
  }
  std::vector<double> ns;
  ns.reserve(1 << 20);
  size_t i = 0;
  for (auto _ : state) {
    int64_t x = 0;
    auto t0 = Clock::now();
    mlprio_site_factor(f.ctx, &f.jobs[i++ % f.jobs.size()], &x);
    if (ns.size() < ns.capacity())
      ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
    benchmark::DoNotOptimize(x);
  }
  state.counters["p99_us"] = p99(ns) / 1000.0;
}
BENCHMARK(BM_site_factor_set_cached);

void BM_site_factor_set_cold(benchmark::State& state) {
  auto& f = fx();
  std::vector<double> ns;
  ns.reserve(1 << 20);
  uint32_t id = 1000000;
  for (auto _ : state) {
    mlprio_job_t j = f.jobs[id % f.jobs.size()];
    j.job_id = id++;  // never cached: one inline model call each
    int64_t x = 0;
    auto t0 = Clock::now();
    mlprio_site_factor(f.ctx, &j, &x);
    if (ns.size() < ns.capacity())
      ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
    benchmark::DoNotOptimize(x);
  }
  state.counters["p99_us"] = p99(ns) / 1000.0;
}
BENCHMARK(BM_site_factor_set_cold);

// Args: {cold, n}: one pass over the first n pending jobs, as site_factor_p_update makes it.
void BM_site_factor_update(benchmark::State& state) {
  auto& f = fx();
  const bool cold = state.range(0) != 0;
  const auto n = static_cast<size_t>(state.range(1));
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      f.invalidate();
      state.ResumeTiming();
    }
    int64_t sum = 0;
    for (size_t i = 0; i < n; ++i) {
      int64_t x = 0;
      mlprio_site_factor(f.ctx, &f.jobs[i], &x);
      sum += x;
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
}
BENCHMARK(BM_site_factor_update)
    ->ArgNames({"cold", "n"})
    ->Args({0, 10000})
    ->Args({1, 10000})
    ->Args({0, 100000})
    ->Args({1, 100000})
    ->Unit(benchmark::kMillisecond);

// One history scan (_scan_history in site_factor_mlprio.c) over 10,000 ended jobs still in the
// job list: Arg(1) all new (learned), Arg(0) all offered before (only the dedup), the two costs
// the job read lock is held for, one ABI call per job as the shim makes them.
void BM_history_scan_10k(benchmark::State& state) {
  auto& f = fx();
  const bool fresh = state.range(0) != 0;
  std::vector<mlprio_finish_t> ended(10000);
  uint32_t base = 5000000;
  auto fill = [&] {
    for (size_t i = 0; i < ended.size(); ++i) {
      ended[i].job = f.jobs[i];
      ended[i].job.job_id = base + static_cast<uint32_t>(i);
      ended[i].start_time = 1.7e9 + static_cast<double>(i);
      ended[i].end_time = ended[i].start_time + 60 + static_cast<double>(i % 600);
      ended[i].state = MLPRIO_END_COMPLETED;
    }
  };
  fill();
  size_t total = 0;
  for (auto _ : state) {
    if (fresh) {
      state.PauseTiming();
      base += static_cast<uint32_t>(ended.size());
      fill();
      state.ResumeTiming();
    }
    for (auto& e : ended) {
      size_t n = 0;
      mlprio_observe_finished(f.ctx, &e, 1, &n);
      total += n;
    }
  }
  benchmark::DoNotOptimize(total);
  state.counters["learned_per_scan"] =
      static_cast<double>(total) / static_cast<double>(std::max<int64_t>(state.iterations(), 1));
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(ended.size()));
}
BENCHMARK(BM_history_scan_10k)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace

// job_submit's FSDP advice (mlprio_fsdp_advise): a plain #MLPRIO script (Arg 0) and the worst
// case, 64 KiB of #MLPRIO lines (Arg 1), against a one-entry table.
void BM_fsdp_advise(benchmark::State& state) {
  char tmpl[] = "/tmp/mlprio-bench-fsdp-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string table = dir + "/fsdp_table.json";
  {
    std::FILE* f = std::fopen(table.c_str(), "w");
    std::fputs(
        "{\"format\": \"mlprio-fsdp-table\", \"version\": 1, \"generator\": {}, \"entries\": "
        "[{\"model\": \"t5-3b-s128-t128\", \"dims\": \"24/24/1024/32/16384/32128\", \"gpu\": "
        "\"g\", \"gpu_memory_gib\": 80, \"world_size\": 8, \"sharding\": \"FULL_SHARD\", "
        "\"precision\": \"bf16\", \"activation_checkpointing\": false, \"seq_len\": 128, "
        "\"tgt_len\": 128, \"default_lengths\": true, \"expandable_segments\": false, "
        "\"mbs_hi\": 256, \"max_safe_mbs\": 60, \"first_retry_mbs\": 61, \"oom_mbs\": 64, "
        "\"retry_points\": [[61, 0.04], [62, 0.12]]}]}",
        f);
    std::fclose(f);
    ::chmod(table.c_str(), 0644);
  }
  mlprio_ctx_t* ctx = nullptr;
  // No model: the context is neutral (create says so) but advises from the table all the same.
  mlprio_ctx_create(("fsdp_table=" + table).c_str(), 1, &ctx);
  if (!ctx) {
    state.SkipWithError(mlprio_last_error());
    return;
  }
  std::string script = "#!/bin/bash\n#MLPRIO model=t5-3b-s128-t128 world_size=8 minibatch=64\n";
  if (state.range(0))
    while (script.size() < 70000) script += "#MLPRIO model_size=7e9 epochs=1 minibatch=64 ac=0\n";
  mlprio_job_t j{};
  j.time_limit_s = -1;
  j.script = script.c_str();
  mlprio_fsdp_advice_t a;
  if (mlprio_fsdp_advise(ctx, &j, nullptr, 8, &a) != MLPRIO_OK || a.verdict != MLPRIO_FSDP_OOM)
    state.SkipWithError("the table did not advise");
  for (auto _ : state) {
    mlprio_fsdp_advise(ctx, &j, nullptr, 8, &a);
    benchmark::DoNotOptimize(a.verdict);
  }
  mlprio_ctx_free(ctx);
  std::remove(table.c_str());
  ::rmdir(dir.c_str());
}
BENCHMARK(BM_fsdp_advise)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
