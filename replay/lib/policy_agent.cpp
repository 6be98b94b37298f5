// The common half of the agent orders (policy_agent.hpp): the request JSON, the answer parser
// and AgentPolicy, which turns an answer (or its absence) into a queue order. Jobs the answer
// lists go first, in its order; the rest keep their base order after them. A missing, late or
// malformed answer gives the base order for that pass and is counted. Between asks
// (--external-every K) the last usable answer's ranks are reused for the jobs it listed that are
// still queued; after an unusable answer the base order holds until the next ask.
#include "policy_agent.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "mlprio/io/json_input.hpp"
#include "mlprio/replay/simulator.hpp"

namespace mlprio::replay::detail {
namespace {

// Integers as integers, other numbers with full precision (%.17g round-trips a double).
void put_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char b[40];
  if (v == std::trunc(v) && std::abs(v) < 9e15)
    std::snprintf(b, sizeof b, "%lld", static_cast<long long>(v));
  else
    std::snprintf(b, sizeof b, "%.17g", v);
  out += b;
}
void put_int(std::string& out, int64_t v) {
  out += std::to_string(v);
}

}  // namespace

std::string agent_request_json(const QueueSnapshot& snap, int64_t queue_limit,
                               int64_t running_limit) {
  std::string out;
  const ClusterState& s = snap.state;
  const size_t shown = queue_limit < 0
                           ? snap.queue.size()
                           : std::min(snap.queue.size(), static_cast<size_t>(queue_limit));
  out.reserve(64 + 120 * shown + 64 * snap.running.size());
  out += "{\"time\": ";
  put_number(out, s.now);
  out += ", \"free_procs\": ";
  put_int(out, s.free_cores);
  out += ", \"total_procs\": ";
  put_int(out, s.total_cores);
  out += ", \"queued\": ";  // the whole queue's length, even when the list is cut
  put_int(out, static_cast<int64_t>(snap.queue.size()));
  out += ", \"queue\": [";
  for (size_t k = 0; k < shown; ++k) {
    const JobView& j = snap.queue[k];
    out += k ? ", {\"id\": " : "{\"id\": ";
    put_int(out, j.id);
    out += ", \"user\": \"";
    put_int(out, j.user);
    out += "\", \"submit\": ";
    put_number(out, j.submit);
    out += ", \"procs\": ";
    put_int(out, j.procs);
    out += ", \"req_time\": ";
    put_number(out, j.req_time);
    out += ", \"wait\": ";
    put_number(out, j.wait);
    out += ", \"estimate\": ";
    put_number(out, j.estimate);
    out += "}";
  }
  const size_t running_shown =
      running_limit < 0 ? snap.running.size()
                        : std::min(snap.running.size(), static_cast<size_t>(running_limit));
  if (running_shown < snap.running.size()) {
    out += "], \"running_total\": ";
    put_int(out, static_cast<int64_t>(snap.running.size()));
    out += ", \"running\": [";
  } else {
    out += "], \"running\": [";
  }
  for (size_t k = 0; k < running_shown; ++k) {
    const RunningView& r = snap.running[k];
    out += k ? ", {\"id\": " : "{\"id\": ";
    put_int(out, r.id);
    out += ", \"procs\": ";
    put_int(out, r.procs);
    out += ", \"start\": ";
    put_number(out, r.start);
    out += ", \"req_time\": ";
    put_number(out, r.req_time);
    out += ", \"estimate\": ";
    put_number(out, r.estimate);
    out += "}";
  }
  out += "]}";
  return out;
}

bool parse_agent_answer(std::string_view text, std::vector<int64_t>& ids, std::string* error) {
  ids.clear();
  auto fail = [&](const std::string& why) {
    if (error) *error = why;
    ids.clear();
    return false;
  };
  nlohmann::json doc;
  try {
    // An answer nests two levels; anything deeper is not one.
    doc = io::parse_untrusted_json(text, 4);
  } catch (const io::JsonInputError& e) {
    return fail(e.what());
  }
  if (!doc.is_object()) return fail("the answer is not a JSON object");
  const auto it = doc.find("order");
  if (it == doc.end()) return fail("the answer has no \"order\" key");
  if (!it->is_array()) return fail("\"order\" is not an array of job ids");
  ids.reserve(it->size());
  for (const auto& v : *it) {
    if (v.is_number_integer()) {
      ids.push_back(v.get<int64_t>());
    } else if (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>() &&
               std::abs(v.get<double>()) < 9e15) {
      ids.push_back(static_cast<int64_t>(v.get<double>()));
    } else {
      return fail("\"order\" holds " + io::describe_json_value(v) + ", not a job id");
    }
  }
  return true;
}

AgentPolicy::AgentPolicy(std::string name, const PolicyOptions& opts)
    : name_(std::move(name)), opts_(opts.agent) {
  if (is_agent_policy(opts_.base))
    throw ConfigError("--external-base must be a built-in order, not '" + opts_.base + "'");
  base_ = make_policy(opts_.base, opts);
  if (!(opts_.timeout > 0) || !(opts_.timeout <= 86400))
    throw ConfigError("--external-timeout must lie in (0, 86400] seconds (got " +
                      std::to_string(opts_.timeout) + ")");
  if (opts_.every < 1 || opts_.every > 1000000000)
    throw ConfigError("--external-every must lie in 1 to 1000000000 (got " +
                      std::to_string(opts_.every) + ")");
}

void AgentPolicy::order_queue(const QueueSnapshot& snap, std::vector<size_t>& order) {
  const size_t n = snap.queue.size();
  const bool asking = stats_.points % opts_.every == 0;
  ++stats_.points;
  position_.clear();
  for (size_t k = 0; k < n; ++k) position_.emplace(snap.queue[k].id, k);  // first of equal ids
  if (asking) {
    const auto t0 = std::chrono::steady_clock::now();
    AgentAnswer a = ask(snap);
    stats_.wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++stats_.calls;
    stats_.tokens_sent += a.tokens_sent;
    stats_.tokens_received += a.tokens_received;
    ranks_.clear();
    if (a.status == AgentReply::OK) {
      for (size_t r = 0; r < a.ids.size(); ++r) {
        const int64_t id = a.ids[r];
        if (position_.find(id) == position_.end()) {
          a.status = AgentReply::MALFORMED;
          a.error = "job " + std::to_string(id) + " is not in the queue";
          break;
        }
        if (!ranks_.emplace(id, r).second) {
          a.status = AgentReply::MALFORMED;
          a.error = "job " + std::to_string(id) + " is listed twice";
          break;
        }
      }
    }
    if (a.status == AgentReply::OK) {
      ++stats_.answers;
    } else {
      ranks_.clear();
      last_error_ = "at event time ";
      put_number(last_error_, snap.state.now);
      last_error_ += ": " + (a.error.empty() ? std::string("no usable answer") : a.error);
      ++stats_.failures;
      ++stats_.fallbacks;
      if (a.status == AgentReply::LATE) ++stats_.timeouts;
      if (a.status == AgentReply::MALFORMED) ++stats_.malformed;
    }
  } else if (ranks_.empty()) {
    ++stats_.fallbacks;  // reusing a failed answer: the base order
  }
  // Listed jobs by rank, then every other job in base order.
  listed_.clear();
  taken_.assign(n, 0);
  for (const auto& [id, rank] : ranks_) {
    const auto it = position_.find(id);
    if (it != position_.end()) listed_.emplace_back(rank, it->second);
  }
  std::sort(listed_.begin(), listed_.end());
  order.clear();
  order.reserve(n);
  for (const auto& [rank, pos] : listed_) {
    order.push_back(pos);
    taken_[pos] = 1;
  }
  for (size_t k = 0; k < n; ++k)
    if (!taken_[k]) order.push_back(k);
}

}  // namespace mlprio::replay::detail
