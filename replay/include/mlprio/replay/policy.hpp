// Queue orders for the replayer: one small interface, one file per order in
// replay/lib/policy_*.cpp, registered by name in replay/lib/policy_registry.cpp. A policy only
// scores jobs; the simulator sorts the queue by score and backfilling decides what may start, so a
// future learned (`ml`) order is just another score(job, cluster state) function and the Slurm
// plugin can call the same code. Lower scores run first; ties go to the earlier submit time, then
// to trace order. Policies that decide outside the process (`external:CMD`, `llm:URL`) also
// reorder the whole queue at each scheduling pass through order_queue() (see replay/README.md,
// "External and LLM policies"); backfilling then works on that order.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mlprio/model/score_terms.hpp"
#include "mlprio/util/errors.hpp"

namespace mlprio::replay {

struct MlPredictions;  // mlprio/replay/ml.hpp

// What a policy may look at for one queued job.
struct JobView {
  int64_t index = 0;    // position in the replayed job list (trace order)
  int64_t id = 0;       // the trace's job number
  double submit = 0;    // absolute submit time, seconds, as in the trace
  double wait = 0;      // seconds waited so far (the rlscheduler profile passes its quirk here)
  double estimate = 0;  // runtime estimate, seconds (requested time, actual, or a predictor's)
  int64_t procs = 0;    // processors requested
  double gpus = 0;      // GPUs requested (0 when none)
  int32_t user = -1;
  double req_time = -1;  // requested time, seconds (-1 when none)
  // The runtime model's prediction for this job (order 'ml'); NaN when there is none.
  double pred_runtime = std::numeric_limits<double>::quiet_NaN();
  double pred_upper = std::numeric_limits<double>::quiet_NaN();
  double fail_prob = std::numeric_limits<double>::quiet_NaN();
  // What QueuePolicy::prepare() worked out for this job when it was queued (the `ml` order's
  // score terms that its wait does not move), where the engine keeps it (terms_set).
  model::ScoreTerms terms;
  bool terms_set = false;
};

// What a policy may look at for the whole machine.
struct ClusterState {
  double now = 0;
  int64_t total_cores = 0;
  int64_t free_cores = 0;
  int64_t queued = 0;
  int64_t running = 0;
};

// A running job, as an order that sees the whole machine (external and LLM agents) is shown it.
struct RunningView {
  int64_t id = 0;
  int64_t procs = 0;
  double start = 0;
  double req_time = -1;  // seconds (-1 when none)
  double estimate = 0;   // the estimate backfilling uses, seconds
};

// The state at one scheduling pass: the queue in base order (the policy's own scores), the
// running jobs by start order.
struct QueueSnapshot {
  ClusterState state;
  std::span<const JobView> queue;
  std::span<const RunningView> running;
};

// Settings of the orders that ask an outside decision-maker (`external:CMD`, `llm:URL`).
struct AgentOptions {
  std::string base = "fcfs";  // built-in order for unlisted jobs and for fallbacks
  double timeout = 10;        // seconds to wait for one answer
  int64_t every = 1;          // ask at every K-th scheduling pass only
  // llm:URL only.
  std::string llm_prompt_file;        // prompt template; empty: the built-in default
  int64_t llm_top = 32;               // queued jobs shown (the first N in base order)
  std::string llm_model = "default";  // the request's "model" field
  std::string llm_api_key_env;        // environment variable holding the API key; empty: none
};

// What an agent-driven order did in one run (all zero for the built-in orders).
struct AgentStats {
  int64_t points = 0;           // scheduling passes with a non-empty queue
  int64_t calls = 0;            // questions asked (requests sent)
  int64_t answers = 0;          // valid answers used
  int64_t failures = 0;         // calls without a valid answer (malformed, late, transport, ...)
  int64_t timeouts = 0;         // ... of which late (past --external-timeout)
  int64_t malformed = 0;        // ... of which malformed or naming jobs not in the queue
  int64_t fallbacks = 0;        // passes run on the base order because the answer was unusable
  int64_t tokens_sent = 0;      // LLM: prompt tokens as the server counted them
  int64_t tokens_received = 0;  // LLM: completion tokens
  double wait_seconds = 0;      // wall time spent waiting for answers
  bool used() const { return points > 0 || calls > 0; }
};

// Settings of the orders that have any (Slurm priority/multifactor's names in brackets).
struct PolicyOptions {
  double weight_age = 1000;         // [PriorityWeightAge]
  double weight_job_size = 1000;    // [PriorityWeightJobSize]
  double weight_fairshare = 10000;  // [PriorityWeightFairshare]
  double max_age = 7 * 86400.0;     // [PriorityMaxAge] seconds at which the age factor saturates
  double decay_half_life = 7 * 86400.0;  // [PriorityDecayHalfLife] seconds; 0 = no decay
  bool favor_small = false;              // [PriorityFavorSmall]
  // Order 'ml': the runtime model's predictions for the replayed jobs and the score settings
  // (built by --estimate model:FILE); null for every other order.
  std::shared_ptr<const MlPredictions> ml;
  AgentOptions agent;  // external:CMD and llm:URL
};

// What an order is, as the engines' shortcuts need it: the answers of QueuePolicy's boolean hooks
// (each field is the hook of the same name, documented there) in one value. An order's nature does
// not change during a run, so an engine reads it once, when it is made.
struct PolicyTraits {
  bool dynamic = false;
  bool scores_view_only = false;
  bool finite_scores = false;
  bool prepares = false;
  bool submit_breaks_ties = true;
  bool tracks_job_ends = true;
  bool scores_submit = false;
  bool orders_queue = false;
};

class QueuePolicy {
 public:
  virtual ~QueuePolicy() = default;
  virtual std::string_view name() const = 0;
  // Lower runs first.
  virtual double score(const JobView& job, const ClusterState& state) const = 0;
  // True when the score changes with time or history (age, fair share): the simulator then
  // re-scores the whole queue at every scheduling pass instead of once at submission.
  virtual bool dynamic() const { return false; }
  // True when the score reads the JobView alone (neither the ClusterState nor any history): a
  // dynamic order then moves only through the view's wait, and where that wait does not move
  // (the rlscheduler profile's queued jobs, whose wait is -1 - submit) the order is static.
  virtual bool scores_view_only() const { return false; }
  // True when score() is finite for every view whose submit time is finite (the `ml` order:
  // model::score's guarantee). A dynamic order's sort then has one result whatever order the queue
  // comes in, so the engine may leave the queue unsorted at a pass that cannot start any job (no
  // queued job fits the free resources) and sort it at the next pass, to the same order.
  virtual bool finite_scores() const { return false; }
  // True when the order has per-job values to work out once (prepare): the engine then calls
  // prepare() when a job is queued, after its prediction is attached, keeps the result beside
  // the job and shows it in every later JobView (terms, terms_set). score() must give the same
  // value with or without them (engines that keep none leave terms_set false).
  virtual bool prepares() const { return false; }
  virtual model::ScoreTerms prepare(const JobView& /*job*/) const { return {}; }
  // RLScheduler sorts by the bare score for F1-F4, WFP3 and UNICEP, and by (score, submit) for
  // FCFS, SJF and smallest; the rlscheduler profile needs to know which to copy its ties exactly.
  virtual bool submit_breaks_ties() const { return true; }
  // Usage hook for history-based orders (fair share): called when a job ends.
  virtual void on_job_end(const JobView& /*job*/, double /*start*/, double /*end*/,
                          int64_t /*cores*/) {}
  // False when on_job_end() does nothing: the engine then neither calls it nor builds the view
  // for it. True unless an order says otherwise, so an order that keeps history is always told.
  virtual bool tracks_job_ends() const { return true; }
  // True when score() is the view's submit time, whatever the state (fcfs): the engine then
  // takes it from the job without building a view.
  virtual bool scores_submit() const { return false; }
  // The history the score depends on (fair-share usage) as plain numbers, so the time-parallel
  // replay can carry it across a segment boundary. Equal saved states must give equal futures;
  // load_state(save_state()) must restore the policy exactly.
  virtual std::vector<double> save_state() const { return {}; }
  virtual void load_state(std::span<const double> /*state*/) {}
  // The whole-queue hook. When orders_queue() is true the simulator re-scores the queue at every
  // pass, sorts it (score, submit, trace order: the base order) and then calls order_queue()
  // with that queue; the policy fills `order` with a permutation of 0..queue.size()-1 (the
  // positions in base order, most urgent first), which backfilling then works on. It may throw
  // mlprio::RuntimeError (an agent that died) to stop the run.
  virtual bool orders_queue() const { return false; }
  virtual void order_queue(const QueueSnapshot& /*snapshot*/, std::vector<size_t>& order) {
    order.clear();
  }
  // All of the above in one value (what the engines read). The default collects the hooks, so an
  // order overrides only those; one that overrides traits() must answer as its hooks do.
  virtual PolicyTraits traits() const {
    PolicyTraits t;
    t.dynamic = dynamic();
    t.scores_view_only = scores_view_only();
    t.finite_scores = finite_scores();
    t.prepares = prepares();
    t.submit_breaks_ties = submit_breaks_ties();
    t.tracks_job_ends = tracks_job_ends();
    t.scores_submit = scores_submit();
    t.orders_queue = orders_queue();
    return t;
  }
  virtual AgentStats agent_stats() const { return {}; }
  // The last unusable answer's reason, one line (empty when none), for a run's warning.
  virtual std::string agent_last_error() const { return {}; }
};

class UnknownPolicyError : public ::mlprio::UsageError {
 public:
  using ::mlprio::UsageError::UsageError;
};

// True for the names of orders decided outside the process: "external:CMD" and "llm:URL".
bool is_agent_policy(std::string_view name);

// Names accepted by make_policy, in registration order (the agent orders are not listed: their
// names carry a command or a URL).
std::vector<std::string> policy_names();
// Throws UnknownPolicyError listing the valid names.
std::unique_ptr<QueuePolicy> make_policy(std::string_view name, const PolicyOptions& opts = {});

}  // namespace mlprio::replay
