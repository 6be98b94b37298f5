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
#include <optional>
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

// The master's side of the sweep (rank 0). The tasks not handed out yet (pending_), the compute
// thread's finished results (finished_), its error and the journal are shared with the compute
// thread under mu_; the rest belongs to the poll loop (the calling thread) alone.
class SweepMaster {
 public:
  SweepMaster(const SweepPlan& plan, const SweepRunOptions& opts, MPI_Comm comm, int size,
              Journal& journal, const std::vector<int64_t>& to_run, SweepOutcome& out)
      : plan_(plan),
        opts_(opts),
        comm_(comm),
        journal_(journal),
        to_run_(to_run),
        out_(out),
        pending_(to_run.begin(), to_run.end()),
        active_(size - 1) {}
  SweepMaster(const SweepMaster&) = delete;
  SweepMaster& operator=(const SweepMaster&) = delete;

  // Runs the compute thread and the poll loop until every rank and the thread are done; returns
  // the signal the sweep stopped on (0: none).
  int run() {
    std::thread local([this]() { compute(); });
    done_ = static_cast<int64_t>(plan_.tasks.size() - to_run_.size());
    progress_.emplace(static_cast<int64_t>(plan_.tasks.size()), done_, opts_.progress);
    start_done_ = done_;
    try {
      while (active_ > 0 || !local_done_) poll();
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        pending_.clear();  // let the compute thread stop after its current task
      }
      local.join();
      throw;
    }
    local.join();
    if (local_error_) std::rethrow_exception(local_error_);
    for (auto& r : finished_) record(std::move(r));
    progress_->finish();
    return stopping_;
  }

 private:
  int64_t take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_.empty()) return -1;
    const int64_t id = pending_.front();
    pending_.pop_front();
    return id;
  }

  // The compute thread: takes tasks until none is left; never calls MPI.
  void compute() {
    const int64_t kill_after = detail::test_kill_after(0);
    int64_t computed = 0;
    try {
      for (int64_t id = take(); id >= 0; id = take()) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          journal_.append(started_line(plan_, id, 0));
        }
        TaskResult r = run_task(plan_, plan_.tasks[static_cast<size_t>(id)]);
        if (kill_after >= 0 && ++computed >= kill_after) std::raise(SIGKILL);
        std::lock_guard<std::mutex> lock(mu_);
        if (!journaled_ok(journal_, id)) journal_.append(result_line(plan_, r));
        finished_.push_back(std::move(r));
      }
    } catch (...) {  // the journal could not be written: the master rethrows it
      std::lock_guard<std::mutex> lock(mu_);
      local_error_ = std::current_exception();
      pending_.clear();
    }
    local_done_ = true;
  }

  void record(TaskResult r) {
    check_recomputed(plan_, journal_, r);
    if (!r.ok)
      std::cerr << "mlprio-replay sweep: task '" << plan_.tasks[static_cast<size_t>(r.task)].key
                << "' failed: " << r.error << "\n";
    out_.results[static_cast<size_t>(r.task)] = std::move(r);
    ++done_;
  }

  void begin_stop(int sig, int from_rank) {
    stopping_ = sig;
    size_t left = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      left = pending_.size();
      pending_.clear();  // no new tasks; the compute thread stops after its current one
    }
    const int64_t in_flight = static_cast<int64_t>(to_run_.size() - left) - (done_ - start_done_);
    progress_->finish();
    std::cerr << "mlprio-replay sweep: " << util::signal_name(sig)
              << (from_rank > 0 ? " on rank " + std::to_string(from_rank) : std::string())
              << ": no new tasks; journaling the " << in_flight
              << " in flight (a second signal stops at once; they then run again on resume)\n";
  }

  // One pass of the poll loop: a signal, at most one worker's message, the compute thread's
  // results, the progress line.
  void poll() {
    if (stopping_ == 0 && util::stop_signal() != 0) begin_stop(util::stop_signal(), 0);
    int flag = 0;
    MPI_Status st;
    MLPRIO_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, &st));
    if (flag && st.MPI_TAG != TAG_RESULT && st.MPI_TAG <= TAG_STOP_BASE)
      throw SweepError("rank " + std::to_string(st.MPI_SOURCE) +
                       " sent an unexpected message (tag " + std::to_string(st.MPI_TAG) +
                       ") to the sweep's master");
    if (flag && st.MPI_TAG > TAG_STOP_BASE && stopping_ == 0)
      begin_stop(st.MPI_TAG - TAG_STOP_BASE, st.MPI_SOURCE);
    if (flag) serve(st);
    std::vector<TaskResult> mine;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (local_error_) std::rethrow_exception(local_error_);
      mine.swap(finished_);
    }
    for (auto& r : mine) record(std::move(r));
    progress_->update(done_);
    // Poll gently: Open MPI's blocking receive spins a core, which the compute thread needs.
    if (!flag && mine.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  // A worker's message: its previous result (journaled and recorded), answered with its next
  // task id (-1: stop).
  void serve(const MPI_Status& st) {
    int count = 0;
    MLPRIO_MPI_CHECK(MPI_Get_count(&st, MPI_CHAR, &count));
    buf_.assign(static_cast<size_t>(count), '\0');
    MLPRIO_MPI_CHECK(MPI_Recv(buf_.data(), count, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, comm_,
                              MPI_STATUS_IGNORE));
    if (count > 0) {
      const size_t nul = buf_.find('\0');
      const std::string line = buf_.substr(0, nul);
      auto r = Journal::parse_result(plan_, line);
      if (!r)
        throw SweepError("rank " + std::to_string(st.MPI_SOURCE) +
                         " sent a result line that does not parse: " + line.substr(0, 200));
      if (nul != std::string::npos) decode_detail(std::string_view(buf_).substr(nul + 1), *r);
      if (!journaled_ok(journal_, r->task)) {
        std::lock_guard<std::mutex> lock(mu_);
        journal_.append(line);
      }
      record(std::move(*r));
    }
    int64_t next = take();
    if (next >= 0) {
      std::lock_guard<std::mutex> lock(mu_);
      journal_.append(started_line(plan_, next, st.MPI_SOURCE));
    } else {
      --active_;
    }
    MLPRIO_MPI_CHECK(MPI_Send(&next, 1, MPI_INT64_T, st.MPI_SOURCE, TAG_TASK, comm_));
  }

  const SweepPlan& plan_;
  const SweepRunOptions& opts_;
  MPI_Comm comm_;
  Journal& journal_;
  const std::vector<int64_t>& to_run_;
  SweepOutcome& out_;

  std::mutex mu_;  // guards pending_, finished_, local_error_ and the journal
  std::deque<int64_t> pending_;
  std::vector<TaskResult> finished_;
  std::exception_ptr local_error_;  // set when the compute thread failed: a full disk
  std::atomic<bool> local_done_{false};

  int64_t done_ = 0, start_done_ = 0;
  std::optional<detail::Progress> progress_;  // made when the compute thread has started
  int active_;                                // workers not yet told to stop
  int stopping_ = 0;                          // the signal the sweep is stopping on
  std::string buf_;
};

}  // namespace

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
  const std::vector<int64_t> to_run = resume_tasks(plan, journal, out);
  const int stopping = SweepMaster(plan, opts, comm, size, journal, to_run, out).run();
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
