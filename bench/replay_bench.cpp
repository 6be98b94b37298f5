// Replayer throughput: jobs/s of simulate_stream() on Lublin-generated traces (1024 nodes, seed 1,
// requested time = 2 x run rounded up to minutes) for 10k, 100k and 1M jobs under FCFS with no,
// EASY and conservative backfilling. Jobs are generated on the fly, so memory follows the queue,
// not the trace; the generator's own cost is measured separately (BM_generate_only) and included
// in the replay numbers. Before timing, each configuration is checked on 20k jobs against the
// invariants a correct schedule keeps (every job started once, no more cores busy than exist,
// utilisation <= 1); a wrong answer exits non-zero. BM_replay_load replays 50k jobs with the
// arrival rate scaled (--load-scale) so that conservative's cost can be read against queue depth:
// its counters give the time-weighted mean and the maximum queue length of the run.
// BM_replay_out is BM_replay/fcfs_easy writing `run --out`'s HDF5 file as it goes (the jobs table
// and the series through RunFileWriter, compressed, committed to a temporary file): its ratio to
// BM_replay/fcfs_easy is the cost of the file. BM_wait_quantiles is the waits' p95/p99/max on
// their own, over 1M waits shaped like a 1M-job FCFS+EASY replay's (60 % zero, the rest spread
// over days): counting per second as run does past 2^16 jobs, and, for comparison, keeping every
// wait and selecting at the end.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "mlprio/io/hdf5.hpp"
#include "mlprio/jobs/lublin.hpp"
#include "mlprio/model/predictor.hpp"
#include "mlprio/replay/detail/metrics.hpp"
#include "mlprio/replay/ml.hpp"
#include "mlprio/replay/output.hpp"
#include "mlprio/replay/simulator.hpp"

using namespace mlprio;
using namespace mlprio::replay;

namespace {

LublinOptions lublin_options(double load_scale = 1.0) {
  LublinOptions o;
  o.load_scale = load_scale;
  o.nodes = 1024;
  o.seed = 1;
  o.req_time = LublinReqTime::FACTOR;
  return o;
}

SimConfig config(Backfill b) {
  SimConfig c;
  c.machine = {1024, 1, 0, Allocation::NODES};
  c.policy = "fcfs";
  c.backfill = b;
  c.record_jobs = false;
  c.record_series = false;
  c.check_invariants = false;
  return c;
}

SimResult replay_generated(int64_t n, const SimConfig& c, double load_scale = 1.0) {
  LublinGenerator gen(lublin_options(load_scale));
  int64_t produced = 0;
  return simulate_stream(
      [&](Job& j) {
        if (produced >= n) return false;
        ++produced;
        return gen.next(j);
      },
      c);
}

void check_or_die(Backfill b) {
  SimConfig c = config(b);
  c.check_invariants = true;
  c.record_jobs = true;
  const int64_t n = 20000;
  const SimResult r = replay_generated(n, c);
  bool ok = r.summary.jobs == n && r.summary.utilization <= 1.0 + 1e-12 &&
            static_cast<int64_t>(r.jobs.size()) == n;
  for (const auto& o : r.jobs) ok = ok && o.start >= o.submit && o.end >= o.start;
  if (!ok) {
    std::fprintf(stderr, "replay_bench: WRONG schedule for backfill %s\n",
                 std::string(backfill_name(b)).c_str());
    std::exit(1);
  }
}

void BM_replay(benchmark::State& state, Backfill b) {
  const int64_t n = state.range(0);
  const SimConfig c = config(b);
  for (auto _ : state) {
    const SimResult r = replay_generated(n, c);
    benchmark::DoNotOptimize(r.summary.avg_bsld);
    state.counters["avg_bsld"] = r.summary.avg_bsld;
    state.counters["util"] = r.summary.utilization;
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// Time-weighted mean queue length over the run (the series holds the length after each pass).
double mean_queue(const TimeSeries& s) {
  double area = 0;
  for (size_t k = 0; k + 1 < s.time.size(); ++k)
    area += static_cast<double>(s.queue_length[k]) * (s.time[k + 1] - s.time[k]);
  const double span = s.time.empty() ? 0 : s.time.back() - s.time.front();
  return span > 0 ? area / span : 0;
}

// range(0) = load scale x 10 (arrival rate multiplied by it); 50k jobs.
void BM_replay_load(benchmark::State& state, Backfill b) {
  const double load = static_cast<double>(state.range(0)) / 10.0;
  const int64_t n = 50000;
  SimConfig c = config(b);
  c.record_series = true;  // for the queue-depth counters; costs little next to the replay
  for (auto _ : state) {
    const SimResult r = replay_generated(n, c, load);
    benchmark::DoNotOptimize(r.summary.avg_bsld);
    int64_t max_q = 0;
    for (int64_t q : r.series.queue_length) max_q = std::max(max_q, q);
    state.counters["mean_queue"] = mean_queue(r.series);
    state.counters["max_queue"] = static_cast<double>(max_q);
    state.counters["util"] = r.summary.utilization;
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_generate_only(benchmark::State& state) {
  const int64_t n = state.range(0);
  for (auto _ : state) {
    LublinGenerator gen(lublin_options());
    Job j;
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      gen.next(j);
      sum += j.run;
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// Conservative against EASY on a deep queue: 10k jobs at load scale 2.5 (the queue grows to
// hundreds of jobs); the two rows' ratio is the figure bench/replay_speed_ratios.sh records on
// 50k.
void BM_deep_queue(benchmark::State& state, Backfill b, const char* policy) {
  const int64_t n = state.range(0);
  SimConfig c = config(b);
  c.policy = policy;
  for (auto _ : state) {
    const SimResult r = replay_generated(n, c, 2.5);
    if (r.summary.jobs != n || !(r.summary.utilization <= 1.0 + 1e-12)) {
      std::fprintf(stderr, "replay_bench: WRONG deep-queue run (%lld jobs)\n",
                   static_cast<long long>(r.summary.jobs));
      std::exit(1);
    }
    state.counters["util"] = r.summary.utilization;
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// EASY with shortest-first backfilling (EASY++'s candidate order) on the same deep queue: each
// pass sorts the candidates that fit the free resources.
void BM_deep_queue_sjbf(benchmark::State& state) {
  const int64_t n = state.range(0);
  SimConfig c = config(Backfill::EASY);
  c.backfill_order = BackfillOrder::SJBF;
  for (auto _ : state) {
    const SimResult r = replay_generated(n, c, 2.5);
    if (r.summary.jobs != n) {
      std::fprintf(stderr, "replay_bench: WRONG deep-queue SJBF run\n");
      std::exit(1);
    }
    benchmark::DoNotOptimize(r.summary.avg_bsld);
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// The `ml` order (what tune replays hundreds of times) on the same deep queue, EASY, with fixed
// predictions (the run time times a factor in [0.5, 2)): every pass re-scores the queue from the
// terms each job keeps. Age weight 1 (the default: the wait's term moves) and 0 (the score below
// the starvation limit does not move).
void BM_deep_queue_ml(benchmark::State& state, double age_weight) {
  const int64_t n = state.range(0);
  LublinGenerator gen(lublin_options(2.5));
  std::vector<Job> jobs(static_cast<size_t>(n));
  std::vector<model::Prediction> preds(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    gen.next(jobs[i]);
    const double factor = 0.5 + 1.5 * static_cast<double>((i * 2654435761u) % 1000) / 1000.0;
    preds[i].runtime = preds[i].runtime_upper = jobs[i].run * factor;
  }
  model::ScoreConfig sc;
  sc.age_weight = age_weight;
  SimConfig c = config(Backfill::EASY);
  c.policy = "ml";
  c.policy_options.ml = std::make_shared<const MlPredictions>(jobs, preds, sc);
  for (auto _ : state) {
    const SimResult r = simulate(jobs, c);
    if (r.summary.jobs != n) {
      std::fprintf(stderr, "replay_bench: WRONG deep-queue ml run\n");
      std::exit(1);
    }
    benchmark::DoNotOptimize(r.summary.avg_bsld);
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// The rlscheduler profile without backfilling on an overloaded typeless Lublin trace
// (256 nodes): the time per job must not grow with the trace (the queue does). WFP3 and UNICEP
// score by the wait, which this profile fixes for queued jobs, so they must not either.
void BM_rlscheduler_none(benchmark::State& state, const char* policy) {
  const int64_t n = state.range(0);
  LublinOptions o;
  o.nodes = 256;
  o.seed = 1;
  o.types = LublinJobTypes::TYPELESS;
  const std::vector<Job> jobs = generate_lublin(o, n);
  SimConfig c;
  c.machine = {256, 1, 0, Allocation::NODES};
  c.profile = Profile::RLSCHEDULER;
  c.backfill = Backfill::NONE;
  c.policy = policy;
  c.record_jobs = false;
  c.record_series = false;
  for (auto _ : state) {
    const SimResult r = simulate(jobs, c);
    if (r.summary.jobs + r.summary.skipped > n || r.summary.jobs < n / 2) {
      std::fprintf(stderr, "replay_bench: WRONG rlscheduler run (%lld of %lld jobs)\n",
                   static_cast<long long>(r.summary.jobs), static_cast<long long>(n));
      std::exit(1);
    }
    benchmark::DoNotOptimize(r.summary.avg_bsld);
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_replay_out(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("mlprio_bench_out_" + std::to_string(::getpid()) + ".h5"))
                               .string();
  SimConfig c = config(Backfill::EASY);
  c.record_jobs = true;
  c.record_series = true;
  for (auto _ : state) {
    RunFileWriter file(path, h5::Provenance{"replay", "bench_replay", "", ""}, c.machine);
    c.sink = &file;
    RunRecord r;
    r.policy = c.policy;
    r.window_len = n;
    r.result = replay_generated(n, c);
    file.finish(r);
    benchmark::DoNotOptimize(r.result.summary.avg_bsld);
  }
  state.counters["file_MB"] = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
  std::filesystem::remove(path);
  state.SetItemsProcessed(state.iterations() * n);
}

}  // namespace

void BM_wait_quantiles(benchmark::State& state, bool counting) {
  std::vector<double> waits(static_cast<size_t>(state.range(0)));
  uint64_t x = 88172645463325252ULL;  // xorshift64: the same waits on every run
  for (double& w : waits) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const uint64_t r = x % 1000;
    // 60 % start at once; the rest wait up to about a day, and one in 25 of them up to a week.
    w = r < 600 ? 0.0 : static_cast<double>((x >> 20) % (r < 984 ? 86400 : 640000));
  }
  for (auto _ : state) {
    detail::WaitQuantiles q(counting ? 0 : waits.size() + 1);
    for (double w : waits) q.add(w);
    benchmark::DoNotOptimize(q.finish());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

BENCHMARK(BM_generate_only)->Arg(10000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_wait_quantiles, counting, true)->Arg(1000000)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_wait_quantiles, kept, false)->Arg(1000000)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_replay, fcfs_none, Backfill::NONE)
    ->Arg(10000)
    ->Arg(100000)
    ->Arg(1000000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_replay, fcfs_easy, Backfill::EASY)
    ->Arg(10000)
    ->Arg(100000)
    ->Arg(1000000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_replay_out)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_replay, fcfs_conservative, Backfill::CONSERVATIVE)
    ->Arg(10000)
    ->Arg(100000)
    ->Arg(1000000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_replay_load, easy, Backfill::EASY)
    ->Arg(10)
    ->Arg(15)
    ->Arg(18)
    ->Arg(20)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_replay_load, conservative, Backfill::CONSERVATIVE)
    ->Arg(10)
    ->Arg(15)
    ->Arg(18)
    ->Arg(20)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(BM_deep_queue, easy, Backfill::EASY, "fcfs")
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_deep_queue, conservative, Backfill::CONSERVATIVE, "fcfs")
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond);
// Dynamic orders re-score the whole queue at every pass: multifactor (age and fair share) and
// WFP3 on the same deep queue, EASY.
BENCHMARK_CAPTURE(BM_deep_queue, easy_multifactor, Backfill::EASY, "multifactor")
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_deep_queue, easy_wfp3, Backfill::EASY, "wfp3")
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_deep_queue_sjbf)->Arg(10000)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_deep_queue_ml, age1, 1.0)->Arg(10000)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_deep_queue_ml, age0, 0.0)->Arg(10000)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_rlscheduler_none, fcfs, "fcfs")
    ->Arg(17500)
    ->Arg(35000)
    ->Arg(70000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_rlscheduler_none, wfp3, "wfp3")
    ->Arg(17500)
    ->Arg(35000)
    ->Arg(70000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_rlscheduler_none, unicep, "unicep")
    ->Arg(17500)
    ->Arg(35000)
    ->Arg(70000)
    ->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  for (Backfill b : {Backfill::NONE, Backfill::EASY, Backfill::CONSERVATIVE}) check_or_die(b);
  benchmark::AddCustomContext("build_type", MLPRIO_BUILD_TYPE);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
