// Tests of the user-behaviour statistics (core/jobs/user_stats.hpp) on hand-made traces whose
// answers are worked out in the comments.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "mlprio/jobs/user_stats.hpp"

using namespace mlprio;

namespace {

Job job(double submit, int32_t user, double run, double req, int64_t procs) {
  Job j;
  j.submit = submit;
  j.user = user;
  j.run = run;
  j.req_time = req;
  j.alloc_procs = j.req_procs = procs;
  return j;
}

}  // namespace

TEST_CASE("user stats: a hand-made trace gives the worked-out figures", "[user_stats]") {
  // submit, user, run, request, procs
  const std::vector<Job> jobs = {
      job(0, 1, 100, 600, 4),       // u1 first
      job(5, 1, 120, 600, 4),       // u1 after 5 s: same (req, size); run x1.2
      job(10, 2, 30, 300, 1),       // u2 first
      job(20, 2, 15, 300, 1),       // u2 after 10 s: same; run x0.5 (exactly 2x: within)
      job(30, 3, -1, 900, 2),       // u3 only job, run unknown
      job(40, -1, 50, 100, 1),      // no user: whole-trace figures only
      job(4000, 1, 1000, 3600, 8),  // u1 after 3995 s: other (req, size); run x8.33
      job(7300, 2, 400, 300, 1),  // u2 after 7280 s: same (req, size); run x26.7, past its request
  };
  const UserBehaviourStats s = user_behaviour_stats(jobs);
  CHECK(s.jobs == 8);
  CHECK(s.jobs_with_user == 7);
  CHECK(s.users == 3);
  // Top ceil(0.3) = 1 user (u1 or u2, 3 jobs each) of 7 jobs with users.
  CHECK(s.top10_share == Approx(3.0 / 7.0));
  CHECK(s.pairs == 4);
  CHECK(s.same_request_size == Approx(0.75));
  CHECK(s.gap_within_10s == Approx(0.5));  // 5 s and 10 s (inclusive)
  CHECK(s.gap_within_1h == Approx(0.5));   // 3995 s and 7280 s are over
  CHECK(s.run_pairs == 4);
  CHECK(s.run_within_2x == Approx(0.5));  // 1.2 and 0.5
  // |log2| = {0.263, 1, 3.059, 4.737}: the median is the mean of the middle two.
  CHECK(s.median_abs_log2_ratio == Approx((1.0 + std::log2(1000.0 / 120.0)) / 2.0));
  // Every job but u3's (no run time) has a request: 7 ratios.
  CHECK(s.request_jobs == 7);
  CHECK(s.mean_run_over_request == Approx((100.0 / 600 + 120.0 / 600 + 30.0 / 300 + 15.0 / 300 +
                                           50.0 / 100 + 1000.0 / 3600 + 400.0 / 300) /
                                          7.0));
  CHECK(s.run_at_limit_share == Approx(1.0 / 7.0));
  CHECK(s.run_jobs == 7);
  CHECK(s.short_run_share == Approx(3.0 / 7.0));  // 30, 15, 50 s
}

TEST_CASE("user stats: run times are floored at 1 s and empty figures are NaN", "[user_stats]") {
  SECTION("a 0 s run after a 1 s run is the same run time") {
    const std::vector<Job> jobs = {job(0, 7, 1, -1, 1), job(1, 7, 0, -1, 1), job(2, 7, 4, -1, 1)};
    const UserBehaviourStats s = user_behaviour_stats(jobs);
    CHECK(s.run_pairs == 2);
    CHECK(s.run_within_2x == Approx(0.5));          // 0 vs 1: ratio 1; 4 vs 0: ratio 4
    CHECK(s.median_abs_log2_ratio == Approx(1.0));  // mean of 0 and 2
    CHECK(s.same_request_size == Approx(1.0));      // unknown requests are equal
    CHECK(s.request_jobs == 0);
    CHECK(std::isnan(s.mean_run_over_request));
    CHECK(std::isnan(s.run_at_limit_share));
  }
  SECTION("no user ids: the per-user figures are NaN, the whole-trace ones are not") {
    const std::vector<Job> jobs = {job(0, -1, 10, 20, 1), job(1, -1, 100, 200, 1)};
    const UserBehaviourStats s = user_behaviour_stats(jobs);
    CHECK(s.users == 0);
    CHECK(s.pairs == 0);
    CHECK(std::isnan(s.top10_share));
    CHECK(std::isnan(s.same_request_size));
    CHECK(std::isnan(s.run_within_2x));
    CHECK(std::isnan(s.median_abs_log2_ratio));
    CHECK(s.mean_run_over_request == Approx(0.5));
    CHECK(s.short_run_share == Approx(0.5));
  }
  SECTION("an empty trace") {
    const UserBehaviourStats s = user_behaviour_stats(std::vector<Job>{});
    CHECK(s.jobs == 0);
    CHECK(std::isnan(s.short_run_share));
  }
}
