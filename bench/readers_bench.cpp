// Trace reader throughput (jobs/s). Reads a synthetic SWF written to /tmp (always available)
// and, when ../shared/data is present, the real LCG-2005 gzip trace (188,041 jobs) and the
// 19-column Mira trace. Each benchmark checks the job count before it reports a figure and
// exits non-zero on a wrong answer.
#include <benchmark/benchmark.h>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "mlprio/jobs/lublin.hpp"
#include "mlprio/jobs/trace.hpp"

namespace mlprio::detail {
bool set_swf_scan_mode(int mode);     // core/src/jobs/swf_scan.hpp: 0 auto, 1 byte loop
bool set_gzip_whole_decode(bool on);  // core/src/jobs/line_reader.hpp
}  // namespace mlprio::detail

namespace {

// Arg 0: the SWF reader's automatic choice (its AVX-512 line scan where the CPU has it);
// arg 1: its byte loop. The label says which ran, so a regression in either shows.
void set_scan(benchmark::State& state) {
  const bool vector = mlprio::detail::set_swf_scan_mode(static_cast<int>(state.range(0)));
  state.SetLabel(state.range(0) == 0 && vector ? "vector scan" : "byte loop");
}

std::string synthetic_swf(int64_t n) {
  const std::string path =
      "/tmp/mlprio_bench_" + std::to_string(::getpid()) + "_" + std::to_string(n) + ".swf";
  if (std::filesystem::exists(path)) return path;
  std::vector<mlprio::Job> jobs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    auto& j = jobs[static_cast<size_t>(i)];
    j.id = i + 1;
    j.submit = static_cast<double>(i * 7);
    j.wait = static_cast<double>(i % 100);
    j.run = static_cast<double>(100 + (i * 37) % 5000);
    j.alloc_procs = j.req_procs = 1 + (i % 64);
    j.req_time = 6000;
    j.status = mlprio::JobStatus::COMPLETED;
    j.user = static_cast<int32_t>(i % 50);
  }
  mlprio::TraceHeader h;
  h.max_nodes = h.max_procs = 256;
  std::ofstream out(path);
  mlprio::write_swf(out, h, jobs);
  return path;
}

void read_and_check(benchmark::State& state, const std::string& path, int64_t expected) {
  int64_t jobs = 0;
  for (auto _ : state) {
    auto r = mlprio::open_job_reader(path);
    mlprio::Job j;
    int64_t n = 0;
    while (r->next(j)) ++n;
    benchmark::DoNotOptimize(n);
    if (n != expected) {
      std::cerr << "WRONG: " << path << " gave " << n << " jobs, expected " << expected << "\n";
      std::exit(1);
    }
    jobs += n;
  }
  state.SetItemsProcessed(jobs);
  state.counters["jobs_per_s"] =
      benchmark::Counter(static_cast<double>(jobs), benchmark::Counter::kIsRate);
}

void BM_swf_synthetic_100k(benchmark::State& state) {
  static const std::string path = synthetic_swf(100000);
  read_and_check(state, path, 100000);
}
BENCHMARK(BM_swf_synthetic_100k)->Unit(benchmark::kMillisecond);

// A Lublin-generated trace (1024 nodes, requested time = 2 x run), the shape of the 1M-job file
// bench/replay_speed_ratios.sh times against awk.
std::string lublin_swf(int64_t n) {
  const std::string path =
      "/tmp/mlprio_bench_" + std::to_string(::getpid()) + "_lublin_" + std::to_string(n) + ".swf";
  if (std::filesystem::exists(path)) return path;
  mlprio::LublinOptions o;
  o.nodes = 1024;
  o.seed = 1;
  o.req_time = mlprio::LublinReqTime::FACTOR;
  mlprio::TraceHeader h;
  h.max_nodes = h.max_procs = 1024;
  std::ofstream out(path);
  mlprio::write_swf(out, h, mlprio::generate_lublin(o, n));
  return path;
}

void BM_swf_lublin_200k(benchmark::State& state) {
  static const std::string path = lublin_swf(200000);
  set_scan(state);
  read_and_check(state, path, 200000);
  mlprio::detail::set_swf_scan_mode(0);
}
BENCHMARK(BM_swf_lublin_200k)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_swf_lcg_gzip(benchmark::State& state) {
  const std::string path = std::string(MLPRIO_SHARED_DATA) + "/swf/LCG-2005.swf.gz";
  if (!std::filesystem::exists(path)) {
    state.SkipWithError("../shared/data absent: LCG-2005.swf.gz not found");
    return;
  }
  // Arg 0: decoded whole by libdeflate where built in; arg 1: streamed through zlib.
  const bool whole = mlprio::detail::set_gzip_whole_decode(state.range(0) == 0);
  state.SetLabel(state.range(0) == 0 && whole ? "libdeflate, whole file" : "zlib, streamed");
  read_and_check(state, path, 188041);
  mlprio::detail::set_gzip_whole_decode(true);
}
BENCHMARK(BM_swf_lcg_gzip)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_swf_mira_19col(benchmark::State& state) {
  const std::string path = std::string(MLPRIO_SHARED_DATA) + "/swf/mira.swf";
  if (!std::filesystem::exists(path)) {
    state.SkipWithError("../shared/data absent: mira.swf not found");
    return;
  }
  set_scan(state);
  read_and_check(state, path, 22508);
  mlprio::detail::set_swf_scan_mode(0);
}
BENCHMARK(BM_swf_mira_19col)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  for (int64_t n : {100000}) {
    std::remove(
        ("/tmp/mlprio_bench_" + std::to_string(::getpid()) + "_" + std::to_string(n) + ".swf")
            .c_str());
  }
  std::remove(("/tmp/mlprio_bench_" + std::to_string(::getpid()) + "_lublin_200000.swf").c_str());
  return 0;
}
