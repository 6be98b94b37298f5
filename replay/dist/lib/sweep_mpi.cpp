// The MPI sweep: master/worker with dynamic hand-out. Rank 0 is the master and the only writer
// (journal and HDF5; see replay/README.md for why one writer rank and not parallel HDF5); it also
// computes tasks on a second thread, because on small allocations (2 ranks on 2 cores) a master
// that only waits would waste half the machine. That thread never calls MPI, so
// MPI_THREAD_FUNNELED is enough. Workers report a result and receive the next task id in one
// round trip; results travel as journal lines (exact hex floats; with --per-job followed by the
// task's per-job arrays in the same message), which the master appends as they arrive: a killed
// rank or an aborted job loses only the tasks in flight, and re-running the same command resumes
// from the journal.
//
// SIGTERM/SIGINT (mpirun and srun pass them to every rank; Slurm sends SIGTERM at a time limit or
// scancel): every rank only records the signal (mlprio/util/stop_signal.hpp). The master then
// hands out no more tasks, answers -1 to each worker as it reports, journals the results of the
// tasks in flight as they arrive and writes no output; a worker that alone was signalled says so
// with its result (tag TAG_STOP_BASE + signo) and the master stops the sweep the same way. The
// run exits 128 + signo with "N of M results journaled". A second signal ends a process at once
// (and Open MPI's mpirun itself sends SIGKILL about 1 s after SIGTERM, odls_base_sigkill_timeout):
// then the tasks in flight are lost and, named in the journal, run again on resume.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <csignal>
#include <deque>
#include <exception>
#include <iostream>
#include <mutex>
#include <thread>

#include "mlprio/replay/dist/mpi_support.hpp"
#include "mlprio/util/stop_signal.hpp"
#include "sweep_internal.hpp"

namespace mlprio::replay::dist {

namespace {

// worker -> master: the previous result's journal line ("" at first), followed, when the task
// has per-job detail (--per-job), by a NUL byte and encode_detail()'s bytes.
constexpr int TAG_RESULT = 11;
constexpr int TAG_TASK = 12;  // master -> worker: task id, or -1 to stop
// worker -> master: as TAG_RESULT, from a worker that received signal (tag - TAG_STOP_BASE).
constexpr int TAG_STOP_BASE = 1000;

void worker_loop(const SweepPlan& plan, MPI_Comm comm, int rank) {
  const int64_t kill_after = detail::test_kill_after(rank);
  int64_t computed = 0;
  std::string line;
  for (;;) {
    const int sig = util::stop_signal();
    const int tag = sig != 0 ? TAG_STOP_BASE + sig : TAG_RESULT;
    MLPRIO_MPI_CHECK(MPI_Send(line.data(), static_cast<int>(line.size()), MPI_CHAR, 0, tag, comm));
    int64_t id = -1;
    MLPRIO_MPI_CHECK(MPI_Recv(&id, 1, MPI_INT64_T, 0, TAG_TASK, comm, MPI_STATUS_IGNORE));
    if (id < 0) break;
    const TaskResult r = run_task(plan, plan.tasks.at(static_cast<size_t>(id)));
    if (kill_after >= 0 && ++computed >= kill_after) std::raise(SIGKILL);  // test hook
    line = result_line(plan, r);
    if (r.has_detail) {
      line.push_back('\0');
      line += encode_detail(r);
      if (line.size() > static_cast<size_t>(INT_MAX))
        throw SweepError("task '" + plan.tasks.at(static_cast<size_t>(id)).key +
                         "': its per-job detail exceeds one MPI message (2 GiB); use shorter "
                         "windows or no --per-job");
    }
  }
}

}  // namespace

// Long (~160 lines) on purpose for now: the master's poll loop, its compute thread and the stop
// path share one mutex over pending/finished/journal; splitting them means a class owning that
// state and lock (see CONVENTIONS, "a lock per piece of state"), left for a change with MPI runs.
SweepOutcome run_sweep_mpi(const SweepPlan& plan, const SweepRunOptions& opts, MPI_Comm comm) {
  int rank = 0, size = 1;
  MLPRIO_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MLPRIO_MPI_CHECK(MPI_Comm_size(comm, &size));
  SweepOutcome out;
  // On every rank, alive until the output is committed (a signal during the write is only
  // recorded: the write is never cut, and the finished sweep reports success).
  const util::StopOnSignal stop_on_signal;
  if (rank != 0) {
    worker_loop(plan, comm, rank);
    MLPRIO_MPI_CHECK(MPI_Barrier(comm));
    return out;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Journal journal(opts.out + ".journal", plan);
  report_resume(plan, journal);
  const std::vector<int64_t> todo = resume_tasks(plan, journal, out);
  std::deque<int64_t> pending(todo.begin(), todo.end());

  std::mutex mu;  // guards pending, finished and the journal
  std::vector<TaskResult> finished;
  std::atomic<bool> local_done{false};
  std::exception_ptr local_error;  // set (under mu) when the compute thread failed: a full disk
  auto take = [&]() -> int64_t {
    std::lock_guard<std::mutex> lock(mu);
    if (pending.empty()) return -1;
    const int64_t id = pending.front();
    pending.pop_front();
    return id;
  };
  std::thread local([&]() {
    const int64_t kill_after = detail::test_kill_after(0);
    int64_t computed = 0;
    try {
      for (int64_t id = take(); id >= 0; id = take()) {
        {
          std::lock_guard<std::mutex> lock(mu);
          journal.append(started_line(plan, id, 0));
        }
        TaskResult r = run_task(plan, plan.tasks[static_cast<size_t>(id)]);
        if (kill_after >= 0 && ++computed >= kill_after) std::raise(SIGKILL);
        std::lock_guard<std::mutex> lock(mu);
        if (!journaled_ok(journal, id)) journal.append(result_line(plan, r));
        finished.push_back(std::move(r));
      }
    } catch (...) {  // the journal could not be written: the master rethrows it
      std::lock_guard<std::mutex> lock(mu);
      local_error = std::current_exception();
      pending.clear();
    }
    local_done = true;
  });

  int64_t done = static_cast<int64_t>(plan.tasks.size() - todo.size());
  detail::Progress progress(static_cast<int64_t>(plan.tasks.size()), done, opts.progress);
  auto record = [&](TaskResult r) {
    check_recomputed(plan, journal, r);
    if (!r.ok)
      std::cerr << "mlprio-replay sweep: task '" << plan.tasks[static_cast<size_t>(r.task)].key
                << "' failed: " << r.error << "\n";
    out.results[static_cast<size_t>(r.task)] = std::move(r);
    ++done;
  };
  int active = size - 1;
  int stopping = 0;  // the signal the sweep is stopping on
  const int64_t start_done = done;
  auto begin_stop = [&](int sig, int from_rank) {
    stopping = sig;
    size_t left = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      left = pending.size();
      pending.clear();  // no new tasks; the compute thread stops after its current one
    }
    const int64_t in_flight = static_cast<int64_t>(todo.size() - left) - (done - start_done);
    progress.finish();
    std::cerr << "mlprio-replay sweep: " << util::signal_name(sig)
              << (from_rank > 0 ? " on rank " + std::to_string(from_rank) : std::string())
              << ": no new tasks; journaling the " << in_flight
              << " in flight (a second signal stops at once; they then run again on resume)\n";
  };
  std::string buf;
  try {
    while (active > 0 || !local_done) {
      if (stopping == 0 && util::stop_signal() != 0) begin_stop(util::stop_signal(), 0);
      int flag = 0;
      MPI_Status st;
      MLPRIO_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, &st));
      if (flag && st.MPI_TAG != TAG_RESULT && st.MPI_TAG <= TAG_STOP_BASE)
        throw SweepError("rank " + std::to_string(st.MPI_SOURCE) +
                         " sent an unexpected message (tag " + std::to_string(st.MPI_TAG) +
                         ") to the sweep's master");
      if (flag && st.MPI_TAG > TAG_STOP_BASE && stopping == 0)
        begin_stop(st.MPI_TAG - TAG_STOP_BASE, st.MPI_SOURCE);
      if (flag) {
        int count = 0;
        MLPRIO_MPI_CHECK(MPI_Get_count(&st, MPI_CHAR, &count));
        buf.assign(static_cast<size_t>(count), '\0');
        MLPRIO_MPI_CHECK(MPI_Recv(buf.data(), count, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, comm,
                                  MPI_STATUS_IGNORE));
        if (count > 0) {
          const size_t nul = buf.find('\0');
          const std::string line = buf.substr(0, nul);
          auto r = Journal::parse_result(plan, line);
          if (!r)
            throw SweepError("rank " + std::to_string(st.MPI_SOURCE) +
                             " sent a result line that does not parse: " + line.substr(0, 200));
          if (nul != std::string::npos) decode_detail(std::string_view(buf).substr(nul + 1), *r);
          if (!journaled_ok(journal, r->task)) {
            std::lock_guard<std::mutex> lock(mu);
            journal.append(line);
          }
          record(std::move(*r));
        }
        int64_t next = take();
        if (next >= 0) {
          std::lock_guard<std::mutex> lock(mu);
          journal.append(started_line(plan, next, st.MPI_SOURCE));
        } else {
          --active;
        }
        MLPRIO_MPI_CHECK(MPI_Send(&next, 1, MPI_INT64_T, st.MPI_SOURCE, TAG_TASK, comm));
      }
      std::vector<TaskResult> mine;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (local_error) std::rethrow_exception(local_error);
        mine.swap(finished);
      }
      for (auto& r : mine) record(std::move(r));
      progress.update(done);
      // Poll gently: Open MPI's blocking receive spins a core, which the compute thread needs.
      if (!flag && mine.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu);
      pending.clear();  // let the compute thread stop after its current task
    }
    local.join();
    throw;
  }
  local.join();
  if (local_error) std::rethrow_exception(local_error);
  for (auto& r : finished) record(std::move(r));
  progress.finish();
  if (stopping != 0) {  // every in-flight result is journaled; no output is written
    out.interrupted = stopping;
    out.journaled = count_journaled(out.results);
    MLPRIO_MPI_CHECK(MPI_Barrier(comm));
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }
  for (const auto& r : out.results) out.failed += r.ok ? 0 : 1;
  write_sweep_hdf5(plan, out.results, opts);
  MLPRIO_MPI_CHECK(MPI_Barrier(comm));
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace mlprio::replay::dist
