// Feature tests: the user-history columns are causal (a job sees exactly the jobs of its user
// that finished at or before its submit time, checked against a brute-force recount), a change
// to the future never changes a past row, and categorical hashes are stable.
#include <catch2/catch.hpp>
#include <cmath>

#include "mlprio/model/features.hpp"
#include "synthetic.hpp"

using namespace mlprio;
using namespace mlprio::model;

namespace {
Job make_job(Trace& t, const char* user, double submit, double wait, double run) {
  Job j;
  j.user = t.names.users.intern(user);
  j.submit = submit;
  j.wait = wait;
  j.run = run;
  j.req_time = 1000;
  j.status = JobStatus::COMPLETED;
  return j;
}
}  // namespace

TEST_CASE("history only counts jobs finished by the submit time", "[model][features]") {
  Trace t;
  t.jobs.push_back(make_job(t, "a", 0, 10, 100));    // finishes at 110
  t.jobs.push_back(make_job(t, "a", 50, 0, 300));    // finishes at 350
  t.jobs.push_back(make_job(t, "a", 110, 0, 20));    // sees job 0 (110 <= 110), not job 1
  t.jobs.push_back(make_job(t, "b", 400, 0, 5));     // another user: sees nothing
  t.jobs.push_back(make_job(t, "a", 400, 0, 5));     // sees jobs 0, 1 and 2
  const FeatureMatrix X = build_features(t.jobs, t.names);
  CHECK(X.row(0)[F_HIST_COUNT] == 0.0f);
  CHECK(std::isnan(X.row(0)[F_HIST_LAST2_MEAN]));
  CHECK(X.row(1)[F_HIST_COUNT] == 0.0f);
  CHECK(X.row(2)[F_HIST_COUNT] == 1.0f);
  CHECK(X.row(2)[F_HIST_LAST2_MEAN] == 100.0f);
  CHECK(X.row(3)[F_HIST_COUNT] == 0.0f);
  CHECK(X.row(4)[F_HIST_COUNT] == 3.0f);
  // Last two by finish time: job 2 (ends 130) then job 1 (ends 350).
  CHECK(X.row(4)[F_HIST_LAST2_MEAN] == Approx((20.0 + 300.0) / 2));
  CHECK(X.row(4)[F_HIST_LAST_RUN] == 300.0f);
}

TEST_CASE("history matches a brute-force causal recount on a synthetic trace", "[model][features]") {
  const Trace t = testing::synthetic_trace(1500, 7);
  const FeatureMatrix X = build_features(t.jobs, t.names);
  for (size_t i = 0; i < t.jobs.size(); i += 7) {
    const Job& j = t.jobs[i];
    std::vector<std::pair<double, double>> seen;  // (finish, run)
    int fails = 0;
    for (size_t k = 0; k < t.jobs.size(); ++k) {
      if (k == i || t.jobs[k].user != j.user) continue;
      const double fin = t.jobs[k].submit + t.jobs[k].wait + t.jobs[k].run;
      if (fin <= j.submit) {
        seen.emplace_back(fin, t.jobs[k].run);
        fails += is_failure(t.jobs[k].status) ? 1 : 0;
      }
    }
    std::sort(seen.begin(), seen.end());
    INFO("job " << i);
    REQUIRE(X.row(i)[F_HIST_COUNT] == static_cast<float>(seen.size()));
    if (seen.size() >= 2) {
      CHECK(X.row(i)[F_HIST_LAST2_MEAN] ==
            Approx((seen.back().second + seen[seen.size() - 2].second) / 2).epsilon(1e-6));
      CHECK(X.row(i)[F_HIST_FAIL_RATE] ==
            Approx(static_cast<double>(fails) / static_cast<double>(seen.size())));
    }
  }
}

TEST_CASE("changing jobs that finish after a submit leaves that row unchanged", "[model][features]") {
  Trace t = testing::synthetic_trace(800, 11);
  const FeatureMatrix before = build_features(t.jobs, t.names);
  const size_t i = 400;
  const double cut = t.jobs[i].submit;
  for (auto& j : t.jobs)
    if (j.submit + j.wait + j.run > cut) {
      j.run *= 3;
      j.status = JobStatus::FAILED;
    }
  const FeatureMatrix after = build_features(t.jobs, t.names);
  for (int f = 0; f < N_FEATURES; ++f) {
    INFO("feature " << feature_names()[f]);
    const float a = before.row(i)[f], b = after.row(i)[f];
    CHECK(((std::isnan(a) && std::isnan(b)) || a == b));
  }
}

TEST_CASE("categoricals, LLM features and time of day are encoded", "[model][features]") {
  Trace t;
  Job j;
  j.user = t.names.users.intern("alice");
  j.partition = t.names.partitions.intern("gpu");
  j.name = t.names.job_names.intern("llama_7b-lora");
  j.submit = 3 * 86400 + 2 * 3600;  // 1970-01-04 02:00 UTC, a Sunday
  j.features = {{t.names.features.intern("lora_rank"), 16}, {t.names.features.intern("seq_len"), 4096}};
  float row[N_FEATURES];
  FeatureEncoder enc(t.names);
  enc.encode(j, nullptr, row);
  CHECK(row[F_LLM_LORA_RANK] == 16.0f);
  CHECK(row[F_LLM_SEQ_LEN] == 4096.0f);
  CHECK(std::isnan(row[F_LLM_MODEL_SIZE]));
  CHECK(row[F_HOUR_OF_DAY] == Approx(2.0));
  CHECK(row[F_DAY_OF_WEEK] == 6.0f);
  CHECK(row[F_HIST_COUNT] == 0.0f);
  CHECK(std::isnan(row[F_REQ_TIME]));
  // Stable across runs and builds: a fixed FNV-1a value.
  CHECK(stable_hash("alice") == 0x508b2abb65a03907ULL);
  CHECK(!std::isnan(row[F_NAME_TOK0]));
  CHECK(row[F_NAME_TOK0] != row[F_NAME_TOK1]);
  Trace t2;  // the same names interned in another order hash the same
  t2.names.partitions.intern("cpu");
  Job j2 = j;
  j2.partition = t2.names.partitions.intern("gpu");
  j2.user = t2.names.users.intern("alice");
  j2.name = t2.names.job_names.intern("llama_7b-lora");
  j2.features.clear();
  float row2[N_FEATURES];
  FeatureEncoder(t2.names).encode(j2, nullptr, row2);
  CHECK(row2[F_PARTITION] == row[F_PARTITION]);
  CHECK(row2[F_USER] == row[F_USER]);
}

TEST_CASE("unsorted input is refused", "[model][features]") {
  Trace t;
  t.jobs.push_back(make_job(t, "a", 100, 0, 1));
  t.jobs.push_back(make_job(t, "a", 50, 0, 1));
  CHECK_THROWS_AS(build_features(t.jobs, t.names), std::invalid_argument);
}
