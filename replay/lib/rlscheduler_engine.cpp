// The rlscheduler profile: an independent re-implementation that follows the behaviour of
// RLScheduler's (SC20) simulator event by event (as documented in
// ../shared/reference/replay_protocols.md §4), because its published numbers depend on details a
// standard simulator does differently: it handles one event at a time (an arrival before a
// completion at the same instant), commits to the chosen head while waiting for it, computes the
// backfill shadow time once per head, backfills in submit order with a strict `now + r < shadow`,
// and scores WFP3 and UNICEP with wait = -1 - submit. Its lists are Python lists sorted with a
// stable sort at fixed points; they are kept here as vectors sorted with std::stable_sort at the
// same points, so that ties resolve exactly as there. Also: the job list preparation and machine of
// the profile.
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "engine_common.hpp"
#include "mlprio/jobs/trace.hpp"
#include "mlprio/replay/rlscheduler.hpp"

namespace mlprio::replay {

std::vector<Job> prepare_rlscheduler_jobs(std::vector<Job> jobs, RlschedulerPrepareReport* report) {
  RlschedulerPrepareReport rep;
  std::vector<Job> out;
  out.reserve(jobs.size());
  for (Job& j : jobs) {
    const int64_t procs = std::max(j.alloc_procs, j.req_procs);
    j.alloc_procs = procs;
    j.req_procs = procs;
    if (j.req_time == -1) j.req_time = j.run;  // before the run fix-up, as RLScheduler does
    if (j.run < 0) {
      j.run = 10;
      ++rep.fixed_negative_run;
    }
    if (j.run == 0) {
      ++rep.dropped_zero_run;
      continue;
    }
    out.push_back(std::move(j));
  }
  std::stable_sort(out.begin(), out.end(), [](const Job& a, const Job& b) { return a.id < b.id; });
  if (report) *report = rep;
  return out;
}

Machine rlscheduler_machine(const TraceHeader& h) {
  if (h.max_nodes <= 0)
    throw ConfigError("the rlscheduler profile needs a MaxNodes header line in the trace");
  const int64_t procs = h.max_procs > 0 ? h.max_procs : h.max_nodes;
  if (procs % h.max_nodes != 0)
    throw ConfigError("MaxProcs " + std::to_string(procs) + " is not a multiple of MaxNodes " +
                      std::to_string(h.max_nodes) +
                      ": RLScheduler's fractional cores per node are not supported");
  Machine m;
  m.nodes = h.max_nodes;
  m.cores_per_node = procs / h.max_nodes;
  m.allocation = Allocation::NODES;
  return m;
}

namespace detail {
namespace {

// std::stable_sort's result, at O(n) for input already sorted but for a few elements (the running
// jobs between two events: only those started since are out of place).
template <typename Less>
void stable_sort_mostly_sorted(std::vector<int32_t>& v, Less less) {
  if (!insertion_sort_while_cheap(v, less)) std::stable_sort(v.begin(), v.end(), less);
}

struct RJob {
  const Job* job;
  int64_t index;
  double r;  // request time (the estimate)
  int64_t procs;
  int64_t nodes;
  double scheduled = -1;
  double score = 0;
};

class RlschedulerEngine {
 public:
  RlschedulerEngine(const RlschedulerEngine&) = delete;  // tree_'s order points at this engine
  RlschedulerEngine& operator=(const RlschedulerEngine&) = delete;
  RlschedulerEngine(std::span<const Job> jobs, const SimConfig& c, QueuePolicy& p)
      : cfg_(c), policy_(p), metrics_(c) {
    if (c.backfill == Backfill::CONSERVATIVE || c.backfill == Backfill::EASY)
      throw ConfigError("the rlscheduler profile supports --backfill none or rlscheduler, not " +
                        std::string(backfill_name(c.backfill)));
    if (c.kill_at_limit) throw ConfigError("the rlscheduler event loop never kills jobs");
    quirk_wait_ = c.profile == Profile::RLSCHEDULER;
    total_nodes_ = c.machine.nodes;
    ppn_ = c.machine.cores_per_node;
    if (total_nodes_ <= 0 || ppn_ <= 0) throw ConfigError("the machine needs nodes and cores");
    free_nodes_ = total_nodes_;
    backfill_ = c.backfill == Backfill::RLSCHEDULER;
    all_.reserve(jobs.size());
    for (const Job& j : jobs) {
      if (!(j.run >= 0)) {  // standard job handling: no run time, nothing to replay
        ++skipped_;
        continue;
      }
      RJob r{&j, static_cast<int64_t>(all_.size()), job_estimate(j, c), j.procs(), 0};
      r.nodes = (r.procs + ppn_ - 1) / ppn_;
      if (r.procs <= 0 || r.nodes > total_nodes_) {
        if (c.too_large == TooLarge::SKIP) {
          ++skipped_;
          continue;
        }
        throw JobTooLargeError("job " + std::to_string(j.id) + " asks for " +
                               std::to_string(r.procs) + " processors but the machine has " +
                               std::to_string(total_nodes_ * ppn_) +
                               " (RLScheduler would wait forever); use --too-large skip");
      }
      r.index = static_cast<int64_t>(all_.size());
      all_.push_back(r);
    }
  }

  SimResult run() {
    SimResult res;
    if (!all_.empty()) {
      now_ = all_[0].job->submit;
      enqueue(0);
      next_ = 1;
      for (;;) {
        sort_queue_by_policy();
        const int32_t head = in_tree_ ? *tree_.begin() : queue_.front();
        if (!fits(head)) {
          if (backfill_)
            wait_with_backfill(head);
          else
            wait_for(head);
        }
        start(head);
        remove_from_queue(head);
        if (!move_forward_for_job()) break;
      }
    }
    res.summary.skipped = skipped_;
    metrics_.finish(res, static_cast<double>(total_nodes_ * ppn_));
    // The protocol's utilisation: sum(run * procs) / ((last start - first submit) * MaxProcs).
    const double span = metrics_.last_start() - metrics_.first_submit();
    res.summary.utilization =
        span > 0 ? metrics_.core_seconds() / (span * static_cast<double>(total_nodes_ * ppn_)) : 0;
    return res;
  }

 private:
  bool fits(int32_t k) const { return all_[static_cast<size_t>(k)].nodes <= free_nodes_; }
  double end_of(int32_t k) const {
    const RJob& j = all_[static_cast<size_t>(k)];
    return j.scheduled + j.job->run;
  }
  double est_end_of(int32_t k) const {
    const RJob& j = all_[static_cast<size_t>(k)];
    return j.scheduled + j.r;
  }

  JobView view(const RJob& j) const {
    JobView v;
    v.index = j.index;
    v.submit = j.job->submit;
    // The profile's quirk: RLScheduler's wait is scheduled_time - submit with scheduled_time still
    // -1 for every queued job. Elsewhere the wait is the elapsed one.
    v.wait = quirk_wait_ ? j.scheduled - j.job->submit : now_ - j.job->submit;
    v.estimate = j.r;
    v.procs = j.procs;
    v.user = j.job->user;
    return v;
  }

  ClusterState cluster_state() const {
    ClusterState s;
    s.now = now_;
    s.total_cores = total_nodes_ * ppn_;
    s.free_cores = free_nodes_ * ppn_;
    s.queued = static_cast<int64_t>(queued());
    s.running = static_cast<int64_t>(running_.size());
    return s;
  }

  // RLScheduler's order: by score, then (for some policies) by submit time; stable.
  bool ranks_before(int32_t a, int32_t b) const {
    const RJob& x = all_[static_cast<size_t>(a)];
    const RJob& y = all_[static_cast<size_t>(b)];
    if (x.score != y.score) return x.score < y.score;
    return traits_.submit_breaks_ties && x.job->submit < y.job->submit;
  }

  // A job joins the queue. While the queue is in policy order and the order is static (a queued
  // job's score never changes, static_order()), it goes where the next stable sort would put it:
  // after every job that does not rank after it. Otherwise it is appended, as RLScheduler
  // appends, for the next sort.
  void enqueue(int32_t k) {
    if (cfg_.check_invariants) shadow_.push_back(k);
    if (!in_policy_order_) {
      queue_.push_back(k);
      return;
    }
    RJob& j = all_[static_cast<size_t>(k)];
    j.score = policy_.score(view(j), cluster_state());
    if (std::isnan(j.score)) leave_tree();  // the tree needs an order (see static_order())
    if (traits_.dynamic && std::isnan(j.score)) {
      nan_score_ = true;
      in_policy_order_ = false;
      queue_.push_back(k);
      return;
    }
    if (in_tree_) {  // at the end of the jobs ranking equal, as upper_bound below
      tree_.insert(tree_.end(), k);
      return;
    }
    const auto at = std::upper_bound(queue_.begin(), queue_.end(), k,
                                     [this](int32_t a, int32_t b) { return ranks_before(a, b); });
    queue_.insert(at, k);
  }

  // Whether a queued job's score never changes: a static order, or one that reads only the job's
  // view in this profile, where a queued job's view (its wait -1 - submit included) is fixed
  // (WFP3, UNICEP). The stable sort then only merges the new jobs in, where enqueue() puts them.
  // A NaN score compares false both ways, and the sorted queue is then no longer one a search
  // can insert into as the sort would: such a run re-sorts at every pick, as RLScheduler does.
  bool static_order() const {
    if (!traits_.dynamic) return true;
    return quirk_wait_ && traits_.scores_view_only && !nan_score_;
  }

  // RLScheduler re-scores and stably re-sorts the whole queue before every pick. With a static
  // order and the queue kept in that order by enqueue(), the sort would change nothing: skip it
  // (it made the no-backfill loop quadratic in the queue length).
  void sort_queue_by_policy() {
    if (in_policy_order_) {
      if (cfg_.check_invariants) check_kept_order();
      return;
    }
    if (cfg_.check_invariants) shadow_.assign(queue_.begin(), queue_.end());
    const ClusterState s = cluster_state();
    bool nan = false;
    for (int32_t k : queue_) {
      RJob& j = all_[static_cast<size_t>(k)];
      j.score = policy_.score(view(j), s);
      nan |= std::isnan(j.score);
    }
    if (nan && traits_.dynamic) nan_score_ = true;
    std::stable_sort(queue_.begin(), queue_.end(),
                     [this](int32_t a, int32_t b) { return ranks_before(a, b); });
    in_policy_order_ = static_order();
    // Without backfilling nothing re-sorts a queue kept in order (the head always leaves first):
    // it moves to the tree, where a new job's place costs O(log) instead of shifting the queue.
    if (in_policy_order_ && !backfill_ && !nan) {
      for (int32_t k : queue_) tree_.insert(tree_.end(), k);
      queue_.clear();
      in_tree_ = true;
    }
  }

  // Back from the tree to the queue, in the same order (a NaN score: the tree needs an order).
  void leave_tree() {
    if (!in_tree_) return;
    queue_.assign(tree_.begin(), tree_.end());
    tree_.clear();
    in_tree_ = false;
  }

  size_t queued() const { return in_tree_ ? tree_.size() : queue_.size(); }

  // check_invariants: the queue kept in order is what RLScheduler's way would have made of it:
  // every job appended as it comes, and before each pick all re-scored and stably re-sorted.
  // `shadow_` is that queue, kept beside queue_ (same removals, same re-sort by submit time).
  void check_kept_order() {
    const ClusterState s = cluster_state();
    for (int32_t k : shadow_) {
      const RJob& j = all_[static_cast<size_t>(k)];
      const double fresh = policy_.score(view(j), s);
      MLPRIO_REPLAY_CHECK(fresh == j.score || (std::isnan(fresh) && std::isnan(j.score)),
                          "a queued job's score changed under an order kept as static");
    }
    std::stable_sort(shadow_.begin(), shadow_.end(),
                     [this](int32_t a, int32_t b) { return ranks_before(a, b); });
    const bool same =
        in_tree_ ? std::equal(shadow_.begin(), shadow_.end(), tree_.begin(), tree_.end())
                 : std::equal(shadow_.begin(), shadow_.end(), queue_.begin(), queue_.end());
    MLPRIO_REPLAY_CHECK(same, "the queue kept in order differs from RLScheduler's re-sorted one");
  }

  void start(int32_t k) {
    RJob& j = all_[static_cast<size_t>(k)];
    MLPRIO_REPLAY_CHECK(j.nodes <= free_nodes_, "job started without free nodes");
    MLPRIO_REPLAY_CHECK(now_ >= j.job->submit, "job started before its submit time");
    j.scheduled = now_;
    free_nodes_ -= j.nodes;
    running_.push_back(k);
    metrics_.started(*j.job, now_, now_ + j.job->run, j.r, j.procs, false);
  }

  void remove_from_queue(int32_t k) {
    if (in_tree_) {  // the head, without backfilling
      auto it = tree_.begin();
      if (*it != k) it = std::find(tree_.begin(), tree_.end(), k);
      tree_.erase(it);
    } else {
      queue_.erase(std::find(queue_.begin(), queue_.end(), k));
    }
    if (cfg_.check_invariants) shadow_.erase(std::find(shadow_.begin(), shadow_.end(), k));
  }

  // One event: the next arrival if it comes no later than the next completion, else that
  // completion. Running jobs are re-sorted by end time (stably) first, as RLScheduler does.
  void advance_one_event() {
    MLPRIO_REPLAY_CHECK(!running_.empty(), "waiting for a job while nothing runs");
    stable_sort_mostly_sorted(running_,
                              [&](int32_t a, int32_t b) { return end_of(a) < end_of(b); });
    const double release = end_of(running_.front());
    if (next_ < all_.size() && all_[next_].job->submit <= release) {
      now_ = std::max(now_, all_[next_].job->submit);
      enqueue(static_cast<int32_t>(next_++));
    } else {
      now_ = std::max(now_, release);
      free_nodes_ += all_[static_cast<size_t>(running_.front())].nodes;
      running_.erase(running_.begin());
    }
  }

  void wait_for(int32_t head) {
    while (!fits(head)) advance_one_event();
  }

  void wait_with_backfill(int32_t head) {
    const RJob& h = all_[static_cast<size_t>(head)];
    stable_sort_mostly_sorted(running_,
                              [&](int32_t a, int32_t b) { return est_end_of(a) < est_end_of(b); });
    double shadow = now_;
    int64_t free_procs = free_nodes_ * ppn_;
    for (int32_t k : running_) {
      free_procs += all_[static_cast<size_t>(k)].nodes * ppn_;
      shadow = est_end_of(k);
      if (free_procs >= h.procs) break;
    }
    while (!fits(head)) {
      in_policy_order_ = false;  // re-sorted by submit time here
      std::stable_sort(queue_.begin(), queue_.end(), [&](int32_t a, int32_t b) {
        return all_[static_cast<size_t>(a)].job->submit < all_[static_cast<size_t>(b)].job->submit;
      });
      const std::vector<int32_t> snapshot(queue_.begin(), queue_.end());
      for (int32_t k : snapshot) {
        if (now_ + all_[static_cast<size_t>(k)].r < shadow && fits(k)) {
          start(k);
          remove_from_queue(k);
        }
      }
      advance_one_event();
    }
  }

  // After a start: true if a job is queued (adding one, moving time, when the queue is empty);
  // false when the window is exhausted.
  bool move_forward_for_job() {
    if (queued() != 0) return true;
    if (next_ >= all_.size()) return false;
    for (;;) {
      double release = std::numeric_limits<double>::infinity();
      if (!running_.empty()) {
        stable_sort_mostly_sorted(running_,
                                  [&](int32_t a, int32_t b) { return end_of(a) < end_of(b); });
        release = end_of(running_.front());
      }
      if (all_[next_].job->submit <= release) {
        now_ = std::max(now_, all_[next_].job->submit);
        enqueue(static_cast<int32_t>(next_++));
        return true;
      }
      now_ = std::max(now_, release);
      free_nodes_ += all_[static_cast<size_t>(running_.front())].nodes;
      running_.erase(running_.begin());
    }
  }

  const SimConfig& cfg_;
  QueuePolicy& policy_;
  const PolicyTraits traits_ = policy_.traits();  // an order's nature does not change in a run
  MetricsAccumulator metrics_;
  std::vector<RJob> all_;
  // A deque: the head leaves from the front at every start, and the queue holds thousands.
  std::deque<int32_t> queue_;
  // The queue kept in order without backfilling (in_tree_; queue_ is then empty): a multiset by
  // rank, a new job inserted at the end of the jobs ranking equal to it, as upper_bound places it.
  struct RankLess {
    const RlschedulerEngine* e;
    bool operator()(int32_t a, int32_t b) const { return e->ranks_before(a, b); }
  };
  std::multiset<int32_t, RankLess> tree_{RankLess{this}};
  bool in_tree_ = false;
  std::vector<int32_t> running_;
  std::deque<int32_t> shadow_;  // check_invariants: the queue as RLScheduler keeps it
  size_t next_ = 0;
  int64_t total_nodes_ = 0, ppn_ = 1, free_nodes_ = 0, skipped_ = 0;
  double now_ = 0;
  bool backfill_ = false;
  bool quirk_wait_ = true;
  bool in_policy_order_ = false;  // queue_ sorted by ranks_before() and the order is static
  bool nan_score_ = false;        // a dynamic order gave a queued job a NaN score
};

}  // namespace

SimResult simulate_rlscheduler(std::span<const Job> jobs, const SimConfig& config) {
  auto policy = make_policy(config.policy, config.policy_options);
  RlschedulerEngine engine(jobs, config, *policy);
  return engine.run();
}

}  // namespace detail
}  // namespace mlprio::replay
