// User-behaviour statistics of a trace (user_stats.hpp): one pass in the given order, keeping each
// user's previous job, then the shares and the median.
#include "mlprio/jobs/user_stats.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <unordered_map>
#include <vector>

namespace mlprio {

namespace {

constexpr double NaN = std::numeric_limits<double>::quiet_NaN();

double share(int64_t part, int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : NaN;
}

double median(std::vector<double>& v) {
  if (v.empty()) return NaN;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

}  // namespace

UserBehaviourStats user_behaviour_stats(std::span<const Job> jobs) {
  UserBehaviourStats s;
  s.jobs = static_cast<int64_t>(jobs.size());
  struct Seen {
    int64_t jobs = 0;
    const Job* last = nullptr;
  };
  std::unordered_map<int32_t, Seen> users;
  int64_t same = 0, within_10s = 0, within_1h = 0, within_2x = 0;
  int64_t at_limit = 0, short_runs = 0;
  double ratio_sum = 0;
  std::vector<double> abs_log2;
  for (const Job& j : jobs) {
    if (j.run >= 0) {
      ++s.run_jobs;
      if (j.run < 60) ++short_runs;
      if (j.req_time > 0) {
        ++s.request_jobs;
        ratio_sum += j.run / j.req_time;
        if (j.run >= j.req_time) ++at_limit;
      }
    }
    if (j.user < 0) continue;
    ++s.jobs_with_user;
    Seen& u = users[j.user];
    ++u.jobs;
    if (const Job* p = u.last) {
      ++s.pairs;
      if (j.req_time == p->req_time && j.procs() == p->procs()) ++same;
      const double gap = j.submit - p->submit;
      if (gap <= 10) ++within_10s;
      if (gap <= 3600) ++within_1h;
      if (j.run >= 0 && p->run >= 0) {
        const double d = std::fabs(std::log2(std::max(j.run, 1.0) / std::max(p->run, 1.0)));
        abs_log2.push_back(d);
        if (d <= 1.0) ++within_2x;
      }
    }
    u.last = &j;
  }
  s.users = static_cast<int64_t>(users.size());
  std::vector<int64_t> counts;
  counts.reserve(users.size());
  for (const auto& [id, u] : users) counts.push_back(u.jobs);
  std::sort(counts.begin(), counts.end(), std::greater<>());
  const auto top = static_cast<size_t>((counts.size() + 9) / 10);  // ceil(10 % of users)
  int64_t top_jobs = 0;
  for (size_t k = 0; k < top; ++k) top_jobs += counts[k];
  s.top10_share = share(top_jobs, s.jobs_with_user);
  s.same_request_size = share(same, s.pairs);
  s.gap_within_10s = share(within_10s, s.pairs);
  s.gap_within_1h = share(within_1h, s.pairs);
  s.run_pairs = static_cast<int64_t>(abs_log2.size());
  s.run_within_2x = share(within_2x, s.run_pairs);
  s.median_abs_log2_ratio = median(abs_log2);
  s.mean_run_over_request =
      s.request_jobs > 0 ? ratio_sum / static_cast<double>(s.request_jobs) : NaN;
  s.run_at_limit_share = share(at_limit, s.request_jobs);
  s.short_run_share = share(short_runs, s.run_jobs);
  return s;
}

}  // namespace mlprio
