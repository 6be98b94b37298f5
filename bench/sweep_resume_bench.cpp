// Sweep resume against computing afresh: a sweep of N tasks (FCFS + EASY over N
// windows of 64 jobs starting at jobs 0, 1, ..., N-1 of a generated Lublin trace) run by
// run_sweep_serial(), the loop of `mlprio-replay sweep` without MPI, three ways:
//   BM_sweep_fresh   no journal: every task replayed, journaled (fdatasync'd) and written;
//   BM_sweep_resume  a complete journal: every task read back from it, the output written;
//   BM_journal_read  only reading the complete journal (Journal's constructor).
// Resuming must cost less than computing: the journal reader used to rebuild the index of task
// keys for every journal line, so resuming 5000 tasks took longer than running them.
// Before timing, the resumed results are checked against the fresh ones (same summaries, bit
// for bit); a difference exits non-zero. Files go to a scratch folder under the temporary
// directory (TMPDIR), whose fdatasync cost is part of the fresh figure.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "mlprio/jobs/lublin.hpp"
#include "mlprio/jobs/trace.hpp"
#include "mlprio/replay/dist/sweep_run.hpp"

using namespace mlprio;
using namespace mlprio::replay::dist;

namespace {

constexpr int64_t WINDOW_LEN = 64;

std::filesystem::path work_dir() {
  static const std::filesystem::path d = [] {
    const auto p = std::filesystem::temp_directory_path() /
                   ("mlprio-sweep-resume-bench." + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(std::filesystem::temp_directory_path() /
                                      ("mlprio-sweep-resume-bench." + std::to_string(::getpid())),
                                  ec);
    });
    return p;
  }();
  return d;
}

// The plan of an N-task sweep, built once per N (trace written and loaded once).
const SweepPlan& plan_for(int64_t tasks) {
  static std::map<int64_t, std::unique_ptr<SweepPlan>> plans;
  auto& p = plans[tasks];
  if (!p) {
    const std::string trace = (work_dir() / ("trace" + std::to_string(tasks) + ".swf")).string();
    LublinOptions o;
    o.nodes = 128;
    o.seed = 7;
    o.req_time = LublinReqTime::FACTOR;
    TraceHeader h;
    h.max_nodes = 128;
    h.max_procs = 128;
    {
      std::ofstream out(trace);
      write_swf(out, h, generate_lublin(o, tasks + 2 * WINDOW_LEN));
    }
    SweepSpec spec;
    spec.traces = {trace};
    spec.policies = {"fcfs"};
    spec.backfills = {"easy"};
    for (int64_t i = 0; i < tasks; ++i) spec.windows.emplace_back(i, WINDOW_LEN);
    p = std::make_unique<SweepPlan>(make_sweep_plan(spec));
  }
  return *p;
}

SweepRunOptions options(int64_t tasks) {
  SweepRunOptions o;
  o.out = (work_dir() / ("sweep" + std::to_string(tasks) + ".h5")).string();
  return o;
}

// A complete journal for the plan (one fresh run), checked: a resumed run gives the same bits.
void ensure_journal(const SweepPlan& plan, const SweepRunOptions& o) {
  static std::map<std::string, bool> done;
  if (done[o.out]) return;
  std::remove((o.out + ".journal").c_str());
  const SweepOutcome fresh = run_sweep_serial(plan, o);
  const SweepOutcome resumed = run_sweep_serial(plan, o);
  bool ok = fresh.failed == 0 && resumed.resumed == static_cast<int64_t>(plan.tasks.size()) &&
            fresh.results.size() == resumed.results.size();
  for (size_t i = 0; ok && i < fresh.results.size(); ++i)
    ok = result_line(plan, fresh.results[i]) == result_line(plan, resumed.results[i]);
  if (!ok) {
    std::fprintf(stderr, "sweep_resume_bench: the resumed sweep differs from the fresh one\n");
    std::exit(1);
  }
  done[o.out] = true;
}

void BM_sweep_fresh(benchmark::State& state) {
  const SweepPlan& plan = plan_for(state.range(0));
  SweepRunOptions o = options(state.range(0));
  o.out += ".fresh.h5";
  for (auto _ : state) {
    state.PauseTiming();
    std::remove((o.out + ".journal").c_str());
    state.ResumeTiming();
    const SweepOutcome out = run_sweep_serial(plan, o);
    benchmark::DoNotOptimize(out.results.data());
  }
  state.counters["tasks"] = static_cast<double>(plan.tasks.size());
}

void BM_sweep_resume(benchmark::State& state) {
  const SweepPlan& plan = plan_for(state.range(0));
  const SweepRunOptions o = options(state.range(0));
  ensure_journal(plan, o);
  for (auto _ : state) {
    const SweepOutcome out = run_sweep_serial(plan, o);
    if (out.resumed != static_cast<int64_t>(plan.tasks.size())) state.SkipWithError("not resumed");
    benchmark::DoNotOptimize(out.results.data());
  }
  state.counters["tasks"] = static_cast<double>(plan.tasks.size());
}

void BM_journal_read(benchmark::State& state) {
  const SweepPlan& plan = plan_for(state.range(0));
  const SweepRunOptions o = options(state.range(0));
  ensure_journal(plan, o);
  for (auto _ : state) {
    Journal j(o.out + ".journal", plan);
    if (j.done().size() != plan.tasks.size()) state.SkipWithError("journal incomplete");
    benchmark::DoNotOptimize(j.done().size());
  }
  state.counters["tasks"] = static_cast<double>(plan.tasks.size());
}

}  // namespace

BENCHMARK(BM_sweep_fresh)->Arg(5000)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_sweep_resume)->Arg(5000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_journal_read)->Arg(500)->Arg(5000)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
