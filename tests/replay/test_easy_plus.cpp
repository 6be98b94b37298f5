// EASY++ and the online estimates (Tsafrir, Etsion and Feitelson 2007), on hand-made cases whose
// schedules are worked out in the comments: SJBF picks the shorter backfill candidate, the
// tsafrir correction moves the shadow time when a job outlives its prediction, last2 learns from
// finishes *in the replayed schedule* (not the recorded one), the model's online history does the
// same, the starvation/fairness metrics, and the tune search's pieces (the rank split sums to the
// one-process result, the max-wait bound is honoured).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "mlprio/model/features.hpp"
#include "mlprio/model/model_file.hpp"
#include "mlprio/replay/ml.hpp"
#include "mlprio/replay/spec.hpp"
#include "mlprio/replay/tune.hpp"

using namespace mlprio;
using namespace mlprio::replay;

namespace {

Job mk(int64_t id, double submit, int64_t nodes, double run, double req, int32_t user = 1) {
  Job j;
  j.id = id;
  j.submit = submit;
  j.req_procs = nodes;
  j.run = run;
  j.req_time = req;
  j.user = user;
  j.wait = 0;
  return j;
}

SimConfig machine(int64_t nodes) {
  SimConfig c;
  c.machine.nodes = nodes;
  c.machine.cores_per_node = 1;
  c.backfill = Backfill::EASY;
  c.check_invariants = true;
  return c;
}

std::map<int64_t, JobOutcome> by_id(const SimResult& r) {
  std::map<int64_t, JobOutcome> m;
  for (const auto& o : r.jobs) m[o.id] = o;
  return m;
}

// A "formula" model file (the user's last two finished runs capped by the request) in `dir`,
// created; returns its path.
std::string write_formula_model(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "formula.json").string();
  nlohmann::json doc = model::model_document_header("formula");
  doc["training"] = {{"trace", "hand"}};
  doc["formula"] = {{"name", "last2_capped_by_request"}, {"default_runtime", 600.0}};
  model::write_model_document(path, doc);
  return path;
}

}  // namespace

TEST_CASE("SJBF tries the shorter backfill candidate first", "[replay][easy++]") {
  // 4 nodes. Job 1 holds 3 nodes until 100. Job 2 (4 nodes) is the head, shadow time 100. One node
  // is free at t = 2: job 3 (estimate 90, queued first) and job 4 (estimate 50) both end by the
  // shadow time, but only one fits. Queue order starts 3; SJBF starts 4.
  const std::vector<Job> jobs = {mk(1, 0, 3, 100, 100), mk(2, 1, 4, 10, 10), mk(3, 2, 1, 90, 90),
                                 mk(4, 2, 1, 50, 50)};
  SimConfig c = machine(4);
  auto fcfs = by_id(simulate(jobs, c));
  CHECK(fcfs[3].start == 2);
  CHECK(fcfs[4].start > 2);
  c.backfill_order = BackfillOrder::SJBF;
  auto sjbf = by_id(simulate(jobs, c));
  CHECK(sjbf[4].start == 2);
  CHECK(sjbf[3].start > 2);
  CHECK(sjbf[2].start == 100);  // the head keeps its reservation either way
  CHECK(fcfs[2].start == 100);
}

TEST_CASE("the tsafrir correction moves the shadow time when a prediction runs out",
          "[replay][easy++]") {
  // 2 nodes. Job 1 (1 node) runs 60 s, asked for 100, predicted 10. Job 2 (2 nodes) is the head:
  // its shadow time is job 1's estimated end. Job 3 (1 node, 30 s) arrives at 20.
  // none: job 1 is past its estimate, so it "ends now"; 20 + 30 > 20 and no extra node: job 3
  //       waits for job 2 (starts at 60, ends 70) and starts at 70.
  // tsafrir: at 10 job 1's estimate becomes its request (ends 100); 20 + 30 <= 100: job 3
  //       backfills at 20.
  const std::vector<Job> jobs = {mk(1, 0, 1, 60, 100), mk(2, 1, 2, 10, 10), mk(3, 20, 1, 30, 30)};
  SimConfig c = machine(2);
  c.estimate = EstimateMode::CUSTOM;
  c.estimate_fn = [](const Job& j) { return j.id == 1 ? 10.0 : j.req_time; };
  auto none = by_id(simulate(jobs, c));
  CHECK(none[3].start == 70);
  c.correction = Correction::TSAFRIR;
  auto ts = by_id(simulate(jobs, c));
  CHECK(ts[3].start == 20);
  CHECK(ts[2].start == 60);
  // request behaves the same here (the job ends before its request).
  c.correction = Correction::REQUEST;
  CHECK(by_id(simulate(jobs, c))[3].start == 20);
}

TEST_CASE("tsafrir adds increments once a job outlives its request", "[replay][easy++]") {
  // Job 1 asks for 100 but runs 400 (not killed). At 100 its estimate is the request (end 100),
  // then 100 + 60, 160 + 300 = 460 > 400. Job 3 (1 node, 250 s) arriving at 170 fits before the
  // corrected shadow time 460 (170 + 250 = 420) and backfills at once; without correction job 1
  // "ends now" at every pass and job 3 waits for the head.
  const std::vector<Job> jobs = {mk(1, 0, 1, 400, 100), mk(2, 1, 2, 10, 10),
                                 mk(3, 170, 1, 250, 250)};
  SimConfig c = machine(2);
  c.correction = Correction::TSAFRIR;
  auto ts = by_id(simulate(jobs, c));
  CHECK(ts[3].start == 170);
  c.correction = Correction::NONE;
  CHECK(by_id(simulate(jobs, c))[3].start == 410);
}

TEST_CASE("last2 learns from finishes in the replayed schedule", "[replay][easy++][online]") {
  // One node. User 1's job 1 runs 100 s (asked 1000). The trace says it started at once (wait 0,
  // recorded end 100), but user 2's job 0 holds the node until 500, so in this schedule it ends at
  // 600. Job 2 (user 1) arrives at 300: by the recorded schedule job 1 had finished, by this one
  // not, so its estimate is its request. Job 3 arrives at 700, after the simulated end: 100.
  std::vector<Job> jobs = {mk(10, 0, 1, 500, 500, 2), mk(1, 0, 1, 100, 1000, 1),
                           mk(2, 300, 1, 50, 800, 1), mk(3, 700, 1, 50, 900, 1)};
  SimConfig c = machine(1);
  c.online = last2_estimator(jobs, 0);
  auto r = by_id(simulate(jobs, c));
  CHECK(r[1].end == 600);
  CHECK(r[2].estimate == 800);         // no finished job yet in this schedule: the request
  CHECK(r[3].estimate == Approx(75));  // mean of job 1 (100) and job 2 (50)
  // A window starting at job 2 sees job 1 finish at its *recorded* time (100): estimate 100.
  c.online = last2_estimator(jobs, 2);
  auto w = by_id(simulate(select_window(jobs, 2, 2), c));
  CHECK(w[2].estimate == 100);
}

TEST_CASE("the model's online history changes a prediction after the job ends",
          "[replay][online][model]") {
  // A "formula" model (last two finished runs capped by the request) through the same feature
  // store the plugin uses: the prediction of user 1's next job changes once job 1 has ended in
  // this schedule, and the `ml` order sees it.
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mlprio_easy_plus_" + std::to_string(static_cast<long>(::getpid())));
  const std::string path = write_formula_model(dir);

  Trace trace;
  trace.jobs = {mk(10, 0, 1, 500, 500, 2), mk(1, 0, 1, 100, 1000, 1), mk(2, 300, 1, 50, 800, 1),
                mk(3, 700, 1, 50, 900, 1)};
  // Replays the four jobs under `ml` on one node, backfilling on estimate quantile `q`.
  const auto replay = [&](const char* q) {
    ReplaySpec spec;
    spec.estimate = "model:" + path;
    spec.estimate_quantile = q;
    spec.nodes = 1;
    const ReplaySetup setup(spec);
    SimConfig cfg = setup.base(trace);
    cfg.backfill = Backfill::EASY;
    cfg.policy = "ml";
    setup.apply_window(cfg, trace, trace.jobs, 0, 4);
    return by_id(simulate(trace.jobs, cfg));
  };
  auto r = replay("point");
  CHECK(r[2].estimate == 800);         // job 1 still running here: no history, the request
  CHECK(r[3].estimate == Approx(75));  // after it ended (600) and job 2 ended: last two

  // The backfill estimate `last2` (EASY++'s, from the same store) and `upper` (this formula's
  // upper is the request): the same order, other estimates.
  for (const char* q : {"last2", "upper"}) {
    auto r2 = replay(q);
    INFO(q);
    CHECK(r2[2].estimate == 800);  // no history yet: the request either way
    CHECK(r2[3].estimate == (std::string(q) == "last2" ? 75.0 : 900.0));
  }
  CHECK(parse_estimate_quantile("last2") == EstimateQuantile::LAST2);
  CHECK(estimate_quantile_name(EstimateQuantile::LAST2) == "last2");
  // Fixed predictions carry no history: there last2 is the request.
  Job lone = mk(5, 0, 1, 50, 700);
  model::Prediction pp;
  pp.runtime = 60;
  CHECK(model_estimate(lone, pp, EstimateQuantile::LAST2) == 700);
  std::filesystem::remove_all(dir);
}

TEST_CASE("max, p95 and p99 wait and the per-user fairness figures", "[replay][metrics]") {
  // One node, jobs of 10 s all at t = 0: waits 0, 10, ..., 190 (20 jobs). Nearest rank: p95 = the
  // 19th smallest (180), p99 = the 20th (190) = max. Users 1 (even ids) and 2 (odd ids).
  std::vector<Job> jobs;
  for (int i = 0; i < 20; ++i) jobs.push_back(mk(i + 1, 0, 1, 10, 10, 1 + (i % 2)));
  const SimResult r = simulate(jobs, machine(1));
  CHECK(r.summary.max_wait == 190);
  CHECK(r.summary.p95_wait == 180);
  CHECK(r.summary.p99_wait == 190);
  // bsld = (w + 10) / 10: user 1 waits 0, 20, .., 180 -> mean bsld 10; user 2: 11.
  CHECK(r.summary.max_user_bsld == Approx(11));
  CHECK(r.summary.jain_user_bsld == Approx(21.0 * 21.0 / (2 * (100 + 121))));
}

TEST_CASE("tune: windows, the bound, and the rank split", "[replay][tune]") {
  const auto w = training_windows(1000, 4, 300);
  REQUIRE(w.size() == 4);
  CHECK(w.front().start == 0);  // LEN cut to 1000 / 4
  CHECK(w.back().start + w.back().len == 1000);
  CHECK_THROWS_AS(training_windows(100, 4, 300), ConfigError);

  // Load factors: each window once per load, window-major; gaps divided by the load.
  const auto wl = training_windows(1000, 2, 300, {1.0, 2.0});
  REQUIRE(wl.size() == 4);
  CHECK((wl[0].start == wl[1].start && wl[0].load == 1.0 && wl[1].load == 2.0));
  CHECK(wl[2].start == 700);
  CHECK_THROWS_AS(training_windows(1000, 2, 300, {0.5}), ConfigError);
  CHECK_THROWS_AS(training_windows(1000, 2, 300, {}), ConfigError);
  {
    std::vector<Job> js;
    for (int i = 0; i < 6; ++i) js.push_back(mk(i + 1, 100.0 + 40.0 * i, 1, 50, 60, 1));
    const auto sw = scaled_window(js, {2, 3, 2.0});
    REQUIRE(sw.size() == 3);
    CHECK(sw[0].id == 3);
    CHECK(sw[0].submit == 180.0);  // the first submission stays
    CHECK(sw[1].submit == 200.0);  // 40 s gaps become 20 s
    CHECK(sw[2].submit == 220.0);
    CHECK(sw[2].run == 50.0);
    CHECK(scaled_window(js, {2, 3, 1.0})[2].submit == 260.0);
  }

  // Candidate 0 halves the slowdown but doubles the max wait; candidate 1 is 10 % better within
  // the bound; the bound picks 1; with no feasible candidate, the least starving.
  const std::vector<TuneOutcome> base = {{10, 100}, {20, 100}};
  const std::vector<TuneOutcome> out = {{5, 200}, {10, 200}, {9, 110}, {18, 120}};
  const TuneVerdict v = pick_best(out, base, 2, 1.25);
  CHECK(v.feasible);
  CHECK(v.best == 1);
  CHECK(v.bsld_ratio == Approx(0.9));
  CHECK(v.max_wait_ratio == Approx(1.2));
  const TuneVerdict none = pick_best(out, base, 2, 1.1);
  CHECK_FALSE(none.feasible);
  CHECK(none.best == 1);
  // The floor: against max(100, 200) candidate 0 is within 1.25x (ratio 1.0) and wins; a floor
  // below FCFS's max waits changes nothing.
  const TuneVerdict floored = pick_best(out, base, 2, 1.25, 200);
  CHECK(floored.feasible);
  CHECK(floored.best == 0);
  CHECK(floored.bsld_ratio == Approx(0.5));
  CHECK(floored.max_wait_ratio == Approx(1.0));
  CHECK(pick_best(out, base, 2, 1.25, 50).best == 1);

  // The mean statistic: candidate 1 is within 1.25x on average (1.0 and 1.4: mean 1.2) although
  // its second window alone is not, and it halves the slowdown; the worst statistic refuses it.
  const std::vector<TuneOutcome> out3 = {{9, 110}, {18, 120}, {5, 100}, {10, 140}};
  const TuneVerdict worst = pick_best(out3, base, 2, 1.25, 0, MaxWaitStat::WORST);
  CHECK(worst.best == 0);
  CHECK(worst.worst_max_wait_ratio == Approx(1.2));
  const TuneVerdict mean = pick_best(out3, base, 2, 1.25, 0, MaxWaitStat::MEAN);
  CHECK(mean.feasible);
  CHECK(mean.best == 1);
  CHECK(mean.bsld_ratio == Approx(0.5));
  CHECK(mean.max_wait_ratio == Approx(1.2));
  CHECK(mean.worst_max_wait_ratio == Approx(1.4));
  // Nothing within 1.1x: the fallback is the candidate whose worst window is least starved (1.3),
  // not the best mean (1.25, with one window at 1.5).
  const std::vector<TuneOutcome> out4 = {{9, 100}, {18, 150}, {9, 130}, {18, 130}};
  const TuneVerdict fallback = pick_best(out4, base, 2, 1.1, 0, MaxWaitStat::MEAN);
  CHECK_FALSE(fallback.feasible);
  CHECK(fallback.best == 1);
  CHECK(fallback.worst_max_wait_ratio == Approx(1.3));
  CHECK(parse_max_wait_stat("mean") == MaxWaitStat::MEAN);
  CHECK(max_wait_stat_name(MaxWaitStat::WORST) == "worst");
  CHECK_THROWS_AS(parse_max_wait_stat("p99"), ConfigError);

  // Stage 1 ranks by the prediction (the default) or, asked, also by the request and halfway;
  // FCFS order (the 1 s limit) once per estimate, and last the baseline itself (FCFS order on
  // the requested times).
  const auto c1 = tune_stage1(model::PolicyParams{}, {0.0, 0.5, 1.0});
  std::set<double> requests;
  size_t fcfs_order = 0;
  for (const auto& p : c1) {
    requests.insert(p.score.request_weight);
    fcfs_order += p.score.starvation_limit == 1.0 ? 1 : 0;
  }
  CHECK(requests == std::set<double>{0.0, 0.5, 1.0});
  CHECK(fcfs_order == 3);  // upper and point estimates, and the baseline
  CHECK(c1.size() == 3 + 6 * 5 * 3 * 2);
  CHECK(c1.back().score.starvation_limit == 1.0);
  CHECK(c1.back().backfill_estimate == "request");
  CHECK(c1.back().correction == "none");
  CHECK(c1.back().backfill_order == "fcfs");
  const auto c1_pred = tune_stage1(model::PolicyParams{});
  CHECK(c1_pred.size() == 3 + 6 * 5 * 2);
  for (const auto& p : c1_pred) CHECK(p.score.request_weight == 0.0);
  CHECK_THROWS_AS(tune_stage1(model::PolicyParams{}, {}), ConfigError);
  CHECK_THROWS_AS(tune_stage1(model::PolicyParams{}, {1.5}), ConfigError);
  // `tune --estimates`: the backfill estimates stage 1 tries (the baseline keeps `request`).
  const auto c1_l2 = tune_stage1(model::PolicyParams{}, {0.0}, {"last2"});
  CHECK(c1_l2.size() == 2 + 6 * 5);
  for (size_t i = 0; i + 1 < c1_l2.size(); ++i) CHECK(c1_l2[i].backfill_estimate == "last2");
  CHECK(c1_l2.back().backfill_estimate == "request");
  CHECK_THROWS_AS(tune_stage1(model::PolicyParams{}, {0.0}, {"median"}), ConfigError);
  CHECK_THROWS_AS(tune_stage1(model::PolicyParams{}, {0.0}, {}), ConfigError);

  // Stage 2 searches the failure weight too (the hazard of likely failures jumping the queue),
  // the model file's value first so that ties keep it.
  model::PolicyParams b1;
  b1.score.fail_weight = 1.0;
  const auto c2 = tune_stage2(b1);
  CHECK(c2.size() == 60);
  CHECK(c2.front().score.fail_weight == 1.0);
  std::set<double> fails;
  for (const auto& p : c2) fails.insert(p.score.fail_weight);
  CHECK(fails == std::set<double>{0.0, 1.0, 4.0});
  // The size weights are a list (`tune --size-weights`): each appears, nothing else.
  const auto c2w = tune_stage2(b1, {-4.0, 0.0});
  CHECK(c2w.size() == 24);
  std::set<double> sizes;
  for (const auto& p : c2w) sizes.insert(p.score.size_weight);
  CHECK(sizes == std::set<double>{-4.0, 0.0});
  CHECK_THROWS_AS(tune_stage2(b1, {}), ConfigError);
  CHECK_THROWS_AS(tune_stage2(b1, {-65.0}), ConfigError);

  // Two "ranks" each replaying their share and summing equals one process doing all.
  std::vector<Job> jobs;
  for (int i = 0; i < 400; ++i)
    jobs.push_back(mk(i + 1, i * 20.0, 1 + (i * 7) % 4, 30 + (i * 37) % 300, 400, 1 + i % 5));
  Trace trace;
  trace.jobs = jobs;
  ReplaySpec spec;
  spec.estimate = "last2";
  spec.nodes = 4;
  const ReplaySetup setup(spec);
  const auto wins = training_windows(400, 2, 200);
  std::vector<model::PolicyParams> cands = tune_stage1(model::PolicyParams{});
  cands.resize(6);
  const auto all = run_tune_stage(setup, trace, cands, wins, [](size_t) { return true; });
  auto r0 = run_tune_stage(setup, trace, cands, wins, [](size_t i) { return i % 2 == 0; });
  const auto r1 = run_tune_stage(setup, trace, cands, wins, [](size_t i) { return i % 2 == 1; });
  for (size_t i = 0; i < all.size(); ++i) {
    r0[i].avg_bsld += r1[i].avg_bsld;
    r0[i].max_wait += r1[i].max_wait;
    CHECK(r0[i].avg_bsld == all[i].avg_bsld);
    CHECK(r0[i].max_wait == all[i].max_wait);
  }
  // Stage 1's last candidate replays as the baseline the bound is measured against (distinct
  // submit times here), so a feasible candidate always exists and tune never has to fall back
  // to one that starves jobs or is slower than FCFS+EASY. Tune always replays with a model file
  // (here the last-two formula, whose estimates differ from the requests).
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mlprio_tune_baseline_" + std::to_string(::getpid()));
  const std::string path = write_formula_model(dir);
  ReplaySpec mspec;
  mspec.estimate = "model:" + path;
  mspec.nodes = 4;
  const ReplaySetup msetup(mspec);
  size_t differs = 0;
  for (const auto& win : wins) {
    const TuneOutcome ml = tune_replay(msetup, c1_pred.back(), trace, win);
    const TuneOutcome fcfs = baseline_replay(msetup, trace, win);
    CHECK(ml.avg_bsld == fcfs.avg_bsld);
    CHECK(ml.max_wait == fcfs.max_wait);
    // The same FCFS order on the model's estimates is another schedule: the check can fail.
    model::PolicyParams point = c1_pred.back();
    point.backfill_estimate = "point";
    const TuneOutcome on_model = tune_replay(msetup, point, trace, win);
    differs += on_model.avg_bsld != fcfs.avg_bsld ? 1 : 0;
  }
  CHECK(differs > 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("the ml order's fair-share term serves the user under their share first",
          "[replay][ml][fairshare]") {
  // One node. User 1's job 1 runs 0..1000; meanwhile user 1 submits job 2 (predicted 100 s, at
  // t = 10) and user 2 job 3 (predicted 200 s, at t = 20). At t = 1000 job 1's 1000 core-seconds
  // are charged: user 1 holds all usage (U/S = 1), user 2 none. Score terms (log2, age weight 1):
  // job 2 log2(1 + 990/60) - log2(1 + 100/60) = 2.714, job 3 log2(1 + 980/60) - log2(1 + 200/60)
  // = 2.000. Without the term job 2 runs first (1000, then job 3 at 1100); with weight 1 job 2
  // loses 1.0 and job 3 runs first (1000, then job 2 at 1200).
  const std::vector<Job> jobs = {mk(1, 0, 1, 1000, 1000, 1), mk(2, 10, 1, 100, 100, 1),
                                 mk(3, 20, 1, 200, 200, 2)};
  std::vector<model::Prediction> preds(3);
  for (size_t i = 0; i < 3; ++i) preds[i].runtime = preds[i].runtime_upper = jobs[i].run;
  const auto starts = [&](double fairshare_weight) {
    model::ScoreConfig score;
    score.fairshare_weight = fairshare_weight;
    SimConfig cfg = machine(1);
    cfg.policy = "ml";
    cfg.policy_options.ml = std::make_shared<const MlPredictions>(jobs, preds, score);
    auto r = by_id(simulate(jobs, cfg));
    return std::vector<double>{r[1].start, r[2].start, r[3].start};
  };
  CHECK(starts(0) == std::vector<double>{0, 1000, 1100});
  CHECK(starts(0.5) == std::vector<double>{0, 1000, 1100});  // 0.5 < 0.714: order kept
  CHECK(starts(1) == std::vector<double>{0, 1200, 1000});

  // Its usage record is the policy state a segment boundary carries: saved and loaded, it scores
  // the same (an unknown user has no usage; the heavier user is lowered).
  model::ScoreConfig fs;
  fs.fairshare_weight = 1;
  PolicyOptions opts;
  opts.ml = std::make_shared<const MlPredictions>(jobs, preds, fs);
  auto p1 = make_policy("ml", opts);
  JobView heavy_user, light_user, unknown;
  heavy_user.user = 1;
  light_user.user = 2;
  unknown.user = 9;
  for (JobView* v : {&heavy_user, &light_user, &unknown}) v->pred_runtime = v->req_time = 600;
  p1->on_job_end(heavy_user, 0, 1000, 4);
  p1->on_job_end(light_user, 100, 200, 1);
  const ClusterState st{2000, 8, 8, 3, 0};
  CHECK(p1->score(heavy_user, st) > p1->score(light_user, st));  // lower runs first
  CHECK(p1->score(light_user, st) > p1->score(unknown, st));
  auto p2 = make_policy("ml", opts);
  p2->load_state(p1->save_state());
  CHECK(p2->save_state() == p1->save_state());
  for (const JobView* v : {&heavy_user, &light_user, &unknown})
    CHECK(p2->score(*v, st) == p1->score(*v, st));
  CHECK_THROWS(p2->load_state(std::vector<double>{1.0, 2.0}));

  // Stage 3 of tune searches the weights around the chosen policy, that policy's own weight
  // first (ties keep it); one weight, or none, means no stage 3.
  model::PolicyParams best;
  best.score.age_weight = 0.5;
  const auto c3 = tune_stage3(best, {0.0, 0.5, 2.0, 0.5});
  REQUIRE(c3.size() == 3);
  CHECK(c3[0].score.fairshare_weight == 0.0);
  CHECK(c3[1].score.fairshare_weight == 0.5);
  CHECK(c3[2].score.fairshare_weight == 2.0);
  for (const auto& p : c3) CHECK(p.score.age_weight == 0.5);
  best.score.fairshare_weight = 2.0;
  CHECK(tune_stage3(best, {0.0, 2.0}).front().score.fairshare_weight == 2.0);
  CHECK(tune_stage3(best, DEFAULT_FAIRSHARE_WEIGHTS).empty());
  CHECK(tune_stage3(best, {}).empty());
  CHECK_THROWS_AS(tune_stage3(best, {0.0, 65.0}), ConfigError);
  CHECK_THROWS_AS(tune_stage3(best, {-1.0}), ConfigError);
}
