// Feature tests: the user-history columns are causal (a job sees exactly the jobs of its user
// that finished at or before its submit time, checked against a brute-force recount), a change
// to the future never changes a past row, and categorical hashes are stable.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

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
  t.jobs.push_back(make_job(t, "a", 0, 10, 100));  // finishes at 110
  t.jobs.push_back(make_job(t, "a", 50, 0, 300));  // finishes at 350
  t.jobs.push_back(make_job(t, "a", 110, 0, 20));  // sees job 0 (110 <= 110), not job 1
  t.jobs.push_back(make_job(t, "b", 400, 0, 5));   // another user: sees nothing
  t.jobs.push_back(make_job(t, "a", 400, 0, 5));   // sees jobs 0, 1 and 2
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

TEST_CASE("history matches a brute-force causal recount on a synthetic trace",
          "[model][features]") {
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

TEST_CASE("changing jobs that finish after a submit leaves that row unchanged",
          "[model][features]") {
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
  j.features = {{t.names.features.intern("lora_rank"), 16},
                {t.names.features.intern("seq_len"), 4096}};
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
  CHECK_THROWS_AS(build_features(t.jobs, t.names), mlprio::UsageError);
}

namespace {
Job sized_job(Trace& t, const char* user, double submit, double run, double req, int64_t procs) {
  Job j = make_job(t, user, submit, 0, run);
  j.req_time = req;
  j.req_procs = procs;
  return j;
}
bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}
}  // namespace

TEST_CASE("similar-job columns on hand-made resubmissions", "[model][features]") {
  Trace t;
  t.jobs.push_back(sized_job(t, "a", 0, 100, 1000, 4));     // ends 100
  t.jobs.push_back(sized_job(t, "a", 10, 500, 2000, 8));    // ends 510
  t.jobs.push_back(sized_job(t, "a", 20, 300, 1000, 8));    // ends 320
  t.jobs.push_back(sized_job(t, "a", 600, 5000, 1000, 4));  // sees 0, 2, 1 (in that finish order)
  t.jobs.push_back(sized_job(t, "a", 700, 1, 2000, 8));     // the same request as the latest job
  t.jobs.push_back(sized_job(t, "b", 700, 1, 1000, 4));     // a user without history
  Job anon = sized_job(t, "a", 700, 1, 1000, 4);
  anon.user = -1;  // an unknown user
  t.jobs.push_back(anon);
  Job noreq = sized_job(t, "a", 700, 1, -1, 4);  // no request
  t.jobs.push_back(noreq);
  const FeatureMatrix X = build_features(t.jobs, t.names);

  auto r = X.row(3);
  CHECK(r[F_SIM_LAST_RUN] == 100.0f);  // only job 0 asked for 1000 s on 4 processors
  CHECK(r[F_SIM_LAST2_MEAN] == 100.0f);
  CHECK(r[F_SIM_COUNT] == 1.0f);
  CHECK(r[F_SAME_REQ_LAST_RUN] == 300.0f);  // job 2: 1000 s on 8 processors, newer than job 0
  CHECK(r[F_SAME_AS_LAST] == 0.0f);         // the latest (job 1) asked for 2000 s
  CHECK(r[F_LAST_RATIO_TIMES_REQ] == Approx(500.0 / 2000.0 * 1000.0));
  CHECK(r[F_LAST2_CAPPED] == Approx((500.0 + 300.0) / 2));

  r = X.row(4);
  CHECK(r[F_SAME_AS_LAST] == 1.0f);
  CHECK(r[F_SIM_LAST_RUN] == 500.0f);
  CHECK(r[F_SIM_COUNT] == 1.0f);
  CHECK(r[F_SAME_REQ_LAST_RUN] == 500.0f);
  CHECK(r[F_LAST2_CAPPED] == Approx(400.0));

  r = X.row(5);  // known user, nothing finished: counts 0, values missing, baseline = request
  CHECK(r[F_SIM_COUNT] == 0.0f);
  CHECK(std::isnan(r[F_SIM_LAST_RUN]));
  CHECK(std::isnan(r[F_SIM_LAST2_MEAN]));
  CHECK(std::isnan(r[F_SAME_REQ_LAST_RUN]));
  CHECK(std::isnan(r[F_SAME_AS_LAST]));
  CHECK(std::isnan(r[F_LAST_RATIO_TIMES_REQ]));
  CHECK(r[F_LAST2_CAPPED] == 1000.0f);

  r = X.row(6);  // unknown user: no count at all
  CHECK(std::isnan(r[F_SIM_COUNT]));
  CHECK(r[F_LAST2_CAPPED] == 1000.0f);

  r = X.row(7);  // no request: nothing to compare or scale, last-two uncapped
  CHECK(r[F_SIM_COUNT] == 0.0f);
  CHECK(std::isnan(r[F_SAME_REQ_LAST_RUN]));
  CHECK(std::isnan(r[F_LAST_RATIO_TIMES_REQ]));
  CHECK(r[F_LAST2_CAPPED] == Approx(400.0));
}

TEST_CASE("the similar-job memory is bounded and keeps the newest jobs", "[model][features]") {
  Trace t;
  // 2 * RECENT_JOBS identical jobs, one after another, then the same job again.
  for (int k = 0; k < 2 * RECENT_JOBS; ++k)
    t.jobs.push_back(sized_job(t, "a", 100.0 * k, 10.0 + k, 1000, 2));
  t.jobs.push_back(sized_job(t, "a", 100.0 * 2 * RECENT_JOBS, 1, 1000, 2));
  const FeatureMatrix X = build_features(t.jobs, t.names);
  const auto r = X.row(t.jobs.size() - 1);
  CHECK(r[F_SIM_COUNT] == static_cast<float>(RECENT_JOBS));
  CHECK(r[F_HIST_COUNT] == static_cast<float>(2 * RECENT_JOBS));
  CHECK(r[F_SIM_LAST_RUN] == 10.0f + (2 * RECENT_JOBS - 1));
  CHECK(r[F_SIM_LAST2_MEAN] == Approx(10.0 + (2 * RECENT_JOBS - 1) - 0.5));
  CHECK(r[F_SAME_AS_LAST] == 1.0f);
  UserStats s;
  for (const Job& j : t.jobs) s.record(j);
  CHECK(s.recent_n == RECENT_JOBS);
  CHECK(s.recent_at(0).run == 1.0);                                   // the latest recorded
  CHECK(s.recent_at(RECENT_JOBS - 1).run == 10.0 + RECENT_JOBS + 1);  // the oldest kept
}

TEST_CASE("similar-job columns match a brute-force causal recount", "[model][features]") {
  const Trace t = testing::synthetic_trace(1500, 29);
  const FeatureMatrix X = build_features(t.jobs, t.names);
  size_t with_similar = 0;
  for (size_t i = 0; i < t.jobs.size(); i += 3) {
    const Job& j = t.jobs[i];
    // The user's jobs finished by this submit, in the order the history sees them (finish time,
    // then index), newest RECENT_JOBS kept.
    std::vector<std::pair<double, size_t>> seen;
    for (size_t k = 0; k < t.jobs.size(); ++k) {
      if (t.jobs[k].user != j.user) continue;
      const double fin = t.jobs[k].submit + t.jobs[k].wait + t.jobs[k].run;
      if (fin <= j.submit) seen.emplace_back(fin, k);
    }
    std::sort(seen.begin(), seen.end());
    if (seen.size() > static_cast<size_t>(RECENT_JOBS))
      seen.erase(seen.begin(), seen.end() - RECENT_JOBS);
    std::vector<double> sim, same_req;
    for (auto it = seen.rbegin(); it != seen.rend(); ++it) {
      const Job& p = t.jobs[it->second];
      if (p.req_time != j.req_time) continue;
      same_req.push_back(p.run);
      if (p.req_procs == j.req_procs) sim.push_back(p.run);
    }
    INFO("job " << i);
    const auto r = X.row(i);
    REQUIRE(r[F_SIM_COUNT] == static_cast<float>(sim.size()));
    if (sim.empty()) {
      CHECK(std::isnan(r[F_SIM_LAST_RUN]));
    } else {
      ++with_similar;
      CHECK(r[F_SIM_LAST_RUN] == static_cast<float>(sim[0]));
      CHECK(r[F_SIM_LAST2_MEAN] ==
            Approx(sim.size() > 1 ? (sim[0] + sim[1]) / 2 : sim[0]).epsilon(1e-6));
    }
    CHECK(same_float(r[F_SAME_REQ_LAST_RUN],
                     same_req.empty() ? MISSING : static_cast<float>(same_req[0])));
    if (!seen.empty()) {
      const Job& last = t.jobs[seen.back().second];
      CHECK(r[F_SAME_AS_LAST] ==
            ((last.req_time == j.req_time && last.req_procs == j.req_procs) ? 1.0f : 0.0f));
      CHECK(r[F_LAST_RATIO_TIMES_REQ] ==
            Approx(last.run / last.req_time * j.req_time).epsilon(1e-6));
    }
  }
  CHECK(with_similar > 50);  // the synthetic users do resubmit
}

TEST_CASE("similar-job columns do not see the future", "[model][features]") {
  // Every job after the cut, and every job that had not finished by then, is rewritten: run
  // time, and (for jobs submitted after the cut) request and size too. The rows of jobs
  // submitted up to the cut must not move, new columns included.
  Trace t = testing::synthetic_trace(1200, 31);
  const FeatureMatrix before = build_features(t.jobs, t.names);
  const double cut = t.jobs[700].submit;
  for (auto& j : t.jobs) {
    if (j.submit + j.wait + j.run > cut) j.run = 7.0 + j.run * 5;
    if (j.submit > cut) {
      j.req_time *= 2;
      j.req_procs = 3;
    }
  }
  const FeatureMatrix after = build_features(t.jobs, t.names);
  size_t rows = 0;
  for (size_t i = 0; i < t.jobs.size() && t.jobs[i].submit <= cut; ++i, ++rows)
    for (int f = F_SIM_LAST_RUN; f < N_FEATURES; ++f) {
      INFO("job " << i << " feature " << feature_names()[f]);
      REQUIRE(same_float(before.row(i)[f], after.row(i)[f]));
    }
  CHECK(rows > 700);
  // ... and the rewrite did reach later rows (the test would be empty otherwise).
  bool moved = false;
  for (size_t i = rows; i < t.jobs.size() && !moved; ++i)
    moved = !same_float(before.row(i)[F_SIM_LAST_RUN], after.row(i)[F_SIM_LAST_RUN]);
  CHECK(moved);
}

TEST_CASE("the online store and build_features give the same similar-job columns",
          "[model][features]") {
  // The replayer and the plugin feed OnlineHistory finish by finish; training feeds it through
  // build_features. Same finishes in the same order, same rows.
  const Trace t = testing::synthetic_trace(600, 37);
  const FeatureMatrix X = build_features(t.jobs, t.names);
  OnlineHistory store(t.names);
  std::vector<std::pair<double, size_t>> pending;
  std::vector<float> row(N_FEATURES);
  for (size_t i = 0; i < t.jobs.size(); ++i) {
    std::sort(pending.begin(), pending.end());
    size_t done = 0;
    while (done < pending.size() && pending[done].first <= t.jobs[i].submit) {
      const Job& f = t.jobs[pending[done].second];
      store.record_finish(f, f.run, pending[done].first);
      ++done;
    }
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(done));
    store.encode(t.jobs[i], row);
    INFO("job " << i);
    for (int f = 0; f < N_FEATURES; ++f)
      REQUIRE(same_float(row[static_cast<size_t>(f)], X.row(i)[f]));
    pending.emplace_back(finish_time(t.jobs[i]), i);
  }
}
