// The common half of the orders decided outside the process (`external:CMD` in
// policy_external.cpp, `llm:URL` in policy_llm.cpp): a base order that scores the queue, the
// request's JSON, the answer's parser, --external-every and the fall-back to the base order,
// with the counts a run reports. A transport only sends one request and returns one answer (or
// why there is none). Internal to the replay library; the protocol is in replay/README.md,
// "External and LLM policies".
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mlprio/replay/policy.hpp"

namespace mlprio::replay::detail {

// The request of one scheduling pass, one line of JSON without the newline (see the README).
// `queue_limit` cuts the queue list to its first N jobs in base order and `running_limit` the
// running list to its first N in start order (the LLM's bounded context; a cut running list adds
// "running_total", the whole list's length); -1 sends all of it.
std::string agent_request_json(const QueueSnapshot& snap, int64_t queue_limit = -1,
                               int64_t running_limit = -1);

// Parses an answer {"order": [id, ...]} (other keys ignored). Returns false with a reason in
// *error when it is not exactly that: not JSON, nested too deep, no "order" array, an element
// that is not an integer.
bool parse_agent_answer(std::string_view text, std::vector<int64_t>& ids, std::string* error);

enum class AgentReply { OK, LATE, MALFORMED, FAILED };

struct AgentAnswer {
  AgentReply status = AgentReply::FAILED;
  std::vector<int64_t> ids;  // OK: the order, most urgent first
  std::string error;         // otherwise: why, one line
  int64_t tokens_sent = 0, tokens_received = 0;
};

class AgentPolicy : public QueuePolicy {
 public:
  // `name` is the full policy name ("external:CMD"); opts.agent.base the built-in base order.
  AgentPolicy(std::string name, const PolicyOptions& opts);

  std::string_view name() const override { return name_; }
  double score(const JobView& job, const ClusterState& state) const override {
    return base_->score(job, state);
  }
  bool dynamic() const override { return true; }  // the queue is re-sorted, then reordered
  bool submit_breaks_ties() const override { return base_->submit_breaks_ties(); }
  void on_job_end(const JobView& job, double start, double end, int64_t cores) override {
    base_->on_job_end(job, start, end, cores);
  }
  bool tracks_job_ends() const override { return base_->tracks_job_ends(); }
  std::vector<double> save_state() const override { return base_->save_state(); }
  void load_state(std::span<const double> state) override { base_->load_state(state); }
  bool orders_queue() const override { return true; }
  void order_queue(const QueueSnapshot& snap, std::vector<size_t>& order) override;
  AgentStats agent_stats() const override { return stats_; }
  std::string agent_last_error() const override { return last_error_; }

 protected:
  // Sends one request and waits for its answer. Throws mlprio::RuntimeError when the agent can
  // no longer answer at all (it died); the message should name snap.state.now.
  virtual AgentAnswer ask(const QueueSnapshot& snap) = 0;
  const AgentOptions& options() const { return opts_; }

 private:
  std::string name_;
  AgentOptions opts_;
  std::unique_ptr<QueuePolicy> base_;
  AgentStats stats_;
  std::string last_error_;
  // The last usable answer's ranks by job id (--external-every K reuses them between asks).
  std::unordered_map<int64_t, size_t> ranks_;
  std::unordered_map<int64_t, size_t> position_;   // scratch: job id -> position in base order
  std::vector<std::pair<size_t, size_t>> listed_;  // scratch: (rank, position)
  std::vector<char> taken_;
};

std::unique_ptr<QueuePolicy> make_external_policy(std::string_view name, const PolicyOptions& opts);
std::unique_ptr<QueuePolicy> make_llm_policy(std::string_view name, const PolicyOptions& opts);

}  // namespace mlprio::replay::detail
