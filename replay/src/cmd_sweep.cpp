// `mlprio-replay sweep`: many replays (traces x policies x multifactor grid x backfilling rules x
// windows) as one resumable job. Under mpirun/srun the tasks are handed out by rank 0
// (replay/dist/lib/sweep_mpi.cpp); alone, or in a build without MPI, they run in a serial loop.
// This file only gathers options (command line over config file) and chooses the driver; only
// here is it decided what an error does to the exit code and to the other ranks. SIGTERM/SIGINT
// stop a sweep cleanly (the drivers journal what is in flight and write no output): exit 128 +
// signo, see mlprio/util/errors.hpp.
#include <unistd.h>

#include <iostream>
#include <memory>

#include "commands.hpp"
#include "mlprio/cli/program.hpp"
#include "mlprio/replay/dist/sweep_run.hpp"
#include "mlprio/replay/dist/sweep_windows.hpp"
#include "mlprio/util/stop_signal.hpp"
#include "replay_options.hpp"
#ifdef MLPRIO_REPLAY_HAVE_MPI
#include "mlprio/replay/dist/mpi_support.hpp"
#endif

namespace mlprio::cli {

namespace {

struct SweepArgs {
  std::vector<std::string> traces, policies, backfills, windows, slurm_confs;
  std::string windows_random, config, out, slurm_release;
  uint64_t seed = 1;
  bool seed_given = false, json = false, no_progress = false, per_job = false;
  // The shared replay options; what the command line gives wins over the config file.
  replay::ReplaySpec replay;
  replay::AgentOptions agent;  // external:CMD, llm:URL
  CLI::App* cmd = nullptr;
};

replay::dist::SweepSpec build_spec(const SweepArgs& a) {
  replay::dist::SweepSpec spec;
  spec.policies.clear();  // fcfs when neither policies nor slurm.conf files are given
  if (!a.config.empty()) replay::dist::apply_sweep_config(a.config, spec);
  // The command line wins over the config file, option by option.
  if (!a.traces.empty()) spec.traces = a.traces;
  if (!a.policies.empty()) spec.policies = a.policies;
  if (!a.slurm_confs.empty()) spec.slurm_confs = a.slurm_confs;
  if (!a.slurm_release.empty()) spec.slurm_release = a.slurm_release;
  if (spec.policies.empty() && spec.slurm_confs.empty()) spec.policies = {"fcfs"};
  if (!a.backfills.empty()) spec.backfills = a.backfills;
  if (!a.windows.empty()) {
    spec.windows.clear();
    for (const auto& w : a.windows) spec.windows.push_back(replay::dist::parse_window_arg(w));
  }
  if (!a.windows_random.empty()) {
    const auto [count, len] = replay::dist::parse_windows_arg(a.windows_random);
    spec.random_count = count;
    spec.random_len = len;
    if (!a.seed_given && a.config.empty())
      throw replay::dist::SweepError(
          "--windows COUNTxLEN needs --seed S (the draw must be reproducible)");
  }
  if (a.seed_given) spec.seed = a.seed;
  merge_given(*a.cmd, a.replay, spec.replay);
  spec.agent = a.agent;
  if (a.per_job) spec.per_job = true;
  return spec;
}

// The deployed-stack files' warnings, once (rank 0).
void print_slurm_warnings(const replay::dist::SweepPlan& plan) {
  for (size_t i = 0; i < plan.slurm.size(); ++i)
    for (const auto& w : replay::slurm_conf_warnings(plan.slurm[i]))
      std::cerr << "mlprio-replay sweep: --slurm-conf " << plan.spec.slurm_confs[i] << ": " << w
                << "\n";
}

void print_outcome(const replay::dist::SweepPlan& plan, const replay::dist::SweepOutcome& o,
                   const SweepArgs& a) {
  if (o.interrupted != 0) {
    // Stopped cleanly on SIGTERM/SIGINT: no output, the journal is the state to resume from.
    std::cerr << "mlprio-replay sweep: interrupted by " << util::signal_name(o.interrupted) << "; "
              << o.journaled << " of " << plan.tasks.size()
              << " results journaled; run the same command again to resume\n";
    exit_code() = exit_code_for_signal(o.interrupted);
    return;
  }
  if (a.json) std::cout << replay::dist::sweep_json(plan, o.results) << "\n";
  std::cerr << "mlprio-replay sweep: " << plan.tasks.size() << " tasks (" << o.resumed
            << " from the journal), " << o.failed << " failed, " << o.seconds << " s -> " << a.out
            << "\n";
  if (o.failed > 0) exit_code() = 1;
}

void run_sweep_command(const SweepArgs& a) {
  replay::dist::SweepRunOptions opts;
  opts.out = a.out;
  opts.progress = !a.no_progress;
  opts.command_line = command_line();
#ifdef MLPRIO_REPLAY_HAVE_MPI
  util::MpiSession mpi(nullptr, nullptr);
  try {
    const auto plan = replay::dist::make_sweep_plan(build_spec(a));
    if (mpi.rank() == 0) print_slurm_warnings(plan);
    const auto outcome = replay::dist::run_sweep_mpi(plan, opts, MPI_COMM_WORLD);
    if (mpi.rank() == 0) print_outcome(plan, outcome, a);
  } catch (const std::exception& e) {
    // Every rank builds the same plan, so input errors stop all ranks alike; anything else
    // leaves the others waiting, so the whole job is stopped (the journal keeps what finished).
    if (mpi.size() > 1) {
      std::cerr << "mlprio-replay sweep: error on rank " << mpi.rank() << ": " << e.what() << "\n";
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    throw;
  }
#else
  const auto plan = replay::dist::make_sweep_plan(build_spec(a));
  print_slurm_warnings(plan);
  print_outcome(plan, replay::dist::run_sweep_serial(plan, opts), a);
#endif
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto args = std::make_shared<SweepArgs>();
  CLI::App* cmd = app.add_subcommand(
      "sweep", "Replay many (trace, policy, backfill, window) tasks; resumable, runs under mpirun");
  cmd->add_option("--trace", args->traces, "Trace file(s), comma separated")->delimiter(',');
  cmd->add_option("--policy", args->policies,
                  "Queue order(s), comma separated (as run; ml needs --estimate model:FILE; "
                  "external:CMD and llm:URL start one agent per task on the rank that runs it)")
      ->delimiter(',');
  cmd->add_option("--backfill", args->backfills,
                  "Backfilling rule(s), comma separated: none, easy, conservative")
      ->delimiter(',');
  cmd->add_option("--slurm-conf", args->slurm_confs,
                  "slurm.conf file(s), comma separated: each replayed as run --slurm-conf does, "
                  "per trace and window, beside the --policy tasks (only these without --policy)")
      ->delimiter(',');
  cmd->add_option("--slurm-release", args->slurm_release,
                  "With --slurm-conf: the Slurm release (YY.MM) whose scheduler to replay "
                  "(default 26.05)");
  cmd->add_option("--window", args->windows, "START:LEN, repeatable")->take_all();
  cmd->add_option("--windows", args->windows_random,
                  "COUNTxLEN: COUNT window starts drawn with SplitMix64(--seed), same on any "
                  "machine and any number of ranks");
  cmd->add_option("--seed", args->seed, "Seed of the --windows draw")
      ->each([args](const std::string&) { args->seed_given = true; });
  cmd->add_option("--config", args->config,
                  "sweep.toml (TOML subset, see replay/README.md); command-line options win");
  cmd->add_option("--out", args->out,
                  "HDF5 output; the resume journal is written beside it as OUT.journal")
      ->required();
  add_replay_spec_options(*cmd, args->replay);
  add_agent_options(*cmd, args->agent);
  args->cmd = cmd;
  cmd->add_flag("--per-job", args->per_job,
                "Also store every task's per-job tables (as run --out) under /tasks/task_NNNN");
  cmd->add_flag("--json", args->json, "Print {\"runs\":[...],\"failed\":[...]} on stdout");
  cmd->add_flag("--no-progress", args->no_progress, "No progress line on a terminal");
  cmd->callback([args]() { run_sweep_command(*args); });
}

}  // namespace mlprio::cli
