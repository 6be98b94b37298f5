// `tune --slurm-conf`: the tuned slurm.conf reads back as the candidate it was written from, the
// choice resists one noisy window and prefers fewer changes, the grids list only what the stack
// can apply, and `run --slurm-conf tuned.conf` replays exactly what tune measured.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../support/process.hpp"
#include "../support/skip.hpp"
#include "mlprio/model/model_file.hpp"
#include "mlprio/replay/tune_stack.hpp"

using namespace mlprio;
using namespace mlprio::replay;

namespace {

const char* const STACK_SITE_TEXT =
    "AccountingStorageType=accounting_storage/slurmdbd\n"
    "PriorityType=priority/multifactor\n"
    "PriorityWeightAge=1000\n"
    "  PriorityWeightFairshare=10000\n"
    "PriorityWeightJobSize=1000\n"
    "PriorityMaxAge=14-0\n"
    "PrioritySiteFactorParameters=history_period_ms=1000,weight=3\n";

std::vector<StackOutcome> stack_rows(std::initializer_list<std::pair<double, double>> rows) {
  std::vector<StackOutcome> out;
  for (const auto& [bsld, max_wait] : rows) out.push_back({bsld, max_wait, 0});
  return out;
}

}  // namespace

TEST_CASE("the tuned slurm.conf reads back as the candidate it was written from",
          "[replay][tune_stack]") {
  const SlurmStack stock = parse_slurm_conf(STACK_SITE_TEXT, "site.conf");
  StackCandidate c = stock_candidate(stock, model::ScoreConfig{});
  CHECK(c.stock);
  CHECK(c.site_weight == 0);
  c.stock = false;
  c.site_weight = 5000;
  c.weight_age = 5000;
  c.max_age = 3 * 86400;
  c.weight_fairshare = 5000;
  c.weight_job_size = 0;
  const std::string text = tuned_conf_text(STACK_SITE_TEXT, stock, c, "/m/tuned.json", "a test");
  INFO(text);
  // The site's lines of the keys set are kept, commented out where they stood.
  CHECK_THAT(text, Catch::Contains("#PriorityWeightAge=1000") &&
                       Catch::Contains("#  PriorityWeightFairshare=10000") &&
                       Catch::Contains("#PriorityMaxAge=14-0") &&
                       Catch::Contains("# mlprio-replay tune: a test") &&
                       Catch::Contains("\nPriorityType=priority/multifactor\n"));
  const SlurmStack back = parse_slurm_conf(text, "tuned.conf");
  const SlurmStack want = candidate_stack(stock, c, "/m/tuned.json");
  CHECK(back.weight_age == 5000);
  CHECK(back.max_age == 3 * 86400);
  CHECK(back.weight_fairshare == 5000);
  CHECK(back.weight_job_size == 0);
  CHECK(back.site.enabled);
  CHECK(back.site.weight == 5000);
  CHECK(back.site.model == "/m/tuned.json");
  // The site's other plugin parameters stay; its weight is the choice.
  CHECK_THAT(back.site.params,
             Catch::Contains("history_period_ms=1000") && !Catch::Contains("weight=3"));
  CHECK(back.weight_age == want.weight_age);
  CHECK(back.max_age == want.max_age);
  CHECK(back.site.weight == want.site.weight);
  CHECK(back.site.model == want.site.model);
  CHECK(back.site.max_boost == want.site.max_boost);

  // A stock that loads the plugin, tuned to no SITE: the plugin line goes, nothing replaces it.
  const std::string with_site = std::string(STACK_SITE_TEXT) +
                                "PrioritySiteFactorPlugin=site_factor/mlprio\n"
                                "PrioritySiteFactorParameters=model=/m/site.json,weight=10000\n";
  const SlurmStack stock2 = parse_slurm_conf(with_site, "site2.conf");
  StackCandidate off = stock_candidate(stock2, model::ScoreConfig{});
  CHECK(off.site_weight == 10000);
  off.stock = false;
  off.site_weight = 0;
  const SlurmStack back2 =
      parse_slurm_conf(tuned_conf_text(with_site, stock2, off, "/m/t.json", "off"), "t2");
  CHECK_FALSE(back2.site.enabled);
  CHECK_FALSE(candidate_stack(stock2, off, "/m/t.json").site.enabled);
  // The stock candidate is the site's configuration, untouched.
  const SlurmStack same = candidate_stack(stock2, stock_candidate(stock2, {}), "/m/other.json");
  CHECK(same.site.model == "/m/site.json");
}

TEST_CASE(
    "the choice resists one noisy window, keeps within the max-wait bound, and prefers "
    "fewer changes within the tolerance",
    "[replay][tune_stack]") {
  StackCandidate stock, a, b;
  stock.stock = true;
  a.changes = 1;
  b.changes = 3;
  const std::vector<StackOutcome> base =
      stack_rows({{10, 1000}, {10, 1000}, {10, 1000}, {10, 1000}, {10, 1000}});
  // a: half the stock's slowdown on four windows, five times it on one (noise): median 0.5.
  // b: 0.495 everywhere, the lowest; a is within 2 % of it and changes fewer settings.
  std::vector<StackOutcome> o = base;
  for (const auto& r : stack_rows({{5, 1000}, {5, 1000}, {5, 1000}, {5, 1000}, {50, 1000}}))
    o.push_back(r);
  for (int w = 0; w < 5; ++w) o.push_back({4.95, 1000, 0});
  StackVerdict v = pick_stack(o, base, 5, {stock, a, b}, 1.25, 0, 0.02);
  CHECK(v.best == 1);
  CHECK(v.bsld_ratio == Approx(0.5));
  CHECK(v.feasible == 3);
  // With no tolerance the lowest median wins.
  CHECK(pick_stack(o, base, 5, {stock, a, b}, 1.25, 0, 0.0).best == 2);
  // b starves on two of five windows: its upper-quartile max-wait ratio is 3, over the bound.
  for (int w = 3; w < 5; ++w) o[10 + static_cast<size_t>(w)].max_wait = 3000;
  v = pick_stack(o, base, 5, {stock, a, b}, 1.25, 0, 0.0);
  CHECK(v.best == 1);
  CHECK(v.feasible == 2);
  // Over the bound everywhere but the stock: the stock stays.
  for (int w = 0; w < 5; ++w) o[5 + static_cast<size_t>(w)].max_wait = 2000;
  v = pick_stack(o, base, 5, {stock, a, b}, 1.25, 0, 0.0);
  CHECK(v.best == 0);
  CHECK(v.bsld_ratio == 1.0);
  // A floor: max waits under it are not starvation.
  CHECK(pick_stack(o, base, 5, {stock, a, b}, 1.25, 4000, 0.0).best == 2);
}

TEST_CASE(
    "windows where no candidate changes the schedule do not decide: the median is taken over "
    "the windows with a queue, and with none the stock stays",
    "[replay][tune_stack]") {
  StackCandidate stock, a;
  stock.stock = true;
  a.changes = 1;
  // Seven windows: four where nothing queues (every candidate equals the stock), three with a
  // queue where a halves the stock's slowdown. Over all seven a's median would be 1 and the stock,
  // with fewer changes, would win.
  const std::vector<StackOutcome> base =
      stack_rows({{1, 10}, {1, 10}, {1, 10}, {1, 10}, {8, 1000}, {6, 1000}, {4, 1000}});
  std::vector<StackOutcome> o = base;
  for (const auto& r :
       stack_rows({{1, 10}, {1, 10}, {1, 10}, {1, 10}, {4, 900}, {3, 900}, {2, 900}}))
    o.push_back(r);
  const std::vector<bool> keep = deciding_windows(o, base, 7);
  CHECK(keep == std::vector<bool>{false, false, false, false, true, true, true});
  CHECK(bsld_ratios(o, base, 7, 1, keep) == std::vector<double>{0.5, 0.5, 0.5});
  CHECK(bsld_ratios(o, base, 7, 1).size() == 7);
  StackVerdict v = pick_stack(o, base, 7, {stock, a}, 1.25, 0, 0.02);
  CHECK(v.deciding == 3);
  CHECK(v.best == 1);
  CHECK(v.bsld_ratio == Approx(0.5));
  // Two windows with a queue are too few (either alone could swing the median): the stock stays.
  std::vector<StackOutcome> two(base.begin(), base.end() - 1);
  std::vector<StackOutcome> o2 = two;
  for (const auto& r : stack_rows({{1, 10}, {1, 10}, {1, 10}, {1, 10}, {4, 900}, {3, 900}}))
    o2.push_back(r);
  v = pick_stack(o2, two, 6, {stock, a}, 1.25, 0, 0.02);
  CHECK(v.deciding == 2);
  CHECK(v.best == 0);
  // No window with a queue: nothing to decide on, every median is 1 and the stock stays.
  std::vector<StackOutcome> quiet = base;
  quiet.resize(4);
  std::vector<StackOutcome> oq = quiet;
  for (const auto& r : stack_rows({{1, 10}, {1, 10}, {1, 10}, {1, 10}})) oq.push_back(r);
  v = pick_stack(oq, quiet, 4, {stock, a}, 1.25, 0, 0.02);
  CHECK(v.deciding == 0);
  CHECK(v.best == 0);
  CHECK(v.bsld_ratio == 1.0);
}

TEST_CASE("the grids list what the stack can apply, the incoming candidate first",
          "[replay][tune_stack]") {
  const SlurmStack dbd = parse_slurm_conf(STACK_SITE_TEXT, "dbd.conf");
  const StackCandidate s = stock_candidate(dbd, {});
  const auto c1 = stack_stage1(dbd, s, {0, 5000});
  REQUIRE(c1.size() > 2);
  CHECK(c1.front().stock);
  bool aged = false;
  for (const auto& c : c1) {
    if (c.site_weight > 0 && c.max_age != dbd.max_age) {
      aged = true;
      CHECK(c.weight_age >= c.site_weight);  // waiting PriorityMaxAge outweighs any SITE
    }
  }
  CHECK(aged);
  // Without slurmdbd Slurm forces the age and fair-share weights to 0: no such variants.
  const SlurmStack none =
      parse_slurm_conf("PriorityType=priority/multifactor\nPriorityWeightJobSize=1000\n", "n");
  const auto n1 = stack_stage1(none, stock_candidate(none, {}), {0, 5000});
  CHECK(n1.size() == 2);  // the stock, and SITE 5000
  for (const auto& c : stack_stage2(none, n1[1], {})) CHECK(c.weight_fairshare == 0);
  // SITE's shape only matters with SITE.
  CHECK(stack_stage3(none, n1[0], {}).empty());
  const auto c3 = stack_stage3(none, n1[1], {});
  CHECK(c3.size() == 6);
  CHECK(c3.front().site_weight == 5000);
  CHECK_THROWS_AS(stack_stage1(none, n1[0], {-1}), ConfigError);
}

TEST_CASE("run --slurm-conf of the tuned slurm.conf replays what tune measured",
          "[replay][tune_stack][cli]") {
  namespace fs = std::filesystem;
  const fs::path exe = fs::path(MLPRIO_BIN_DIR) / "mlprio-replay";
  if (!fs::exists(exe)) MLPRIO_SKIP(exe << " is not built");
  const fs::path dir = mlprio::test::scratch("mlprio_tune_stack_", "cli");
  {
    nlohmann::json doc = model::model_document_header("formula");
    doc["training"] = {{"trace", "generated"}};
    doc["formula"] = {{"name", "last2_capped_by_request"}, {"default_runtime", 600.0}};
    model::write_model_document((dir / "m.json").string(), doc);
    std::ofstream(dir / "stock.conf") << STACK_SITE_TEXT;
  }
  auto run = [&](const std::string& args) {
    return mlprio::test::run_in(exe, dir, "true", args, "out.txt");
  };
  REQUIRE(run("generate --jobs 1500 --nodes 32 --users 8 --seed 5 -q -o t.swf") == 0);
  REQUIRE(run("tune --trace t.swf --model m.json --train-fraction 0.8 --slurm-conf stock.conf "
              "--slurm-conf-out tuned.conf -o tuned.json --windows 3x300 --loads 1 "
              "--site-weights 0,5000 --json") == 0);
  const auto j = nlohmann::json::parse(mlprio::test::slurp(dir / "out.txt"));
  INFO(j.dump());
  CHECK(j["train_bsld_ratio"].get<double>() <= 1.0);  // the stock is a candidate
  REQUIRE(j["windows"].size() == 3);
  for (const auto& w : j["windows"]) {
    const std::string win = std::to_string(w["window"][0].get<int64_t>()) + ":" +
                            std::to_string(w["window"][1].get<int64_t>());
    for (const auto& [conf, key] :
         {std::pair{"tuned.conf", "tuned_bsld"}, std::pair{"stock.conf", "stock_bsld"}}) {
      REQUIRE(run(std::string("run --trace t.swf --slurm-conf ") + conf + " --window " + win +
                  " --json") == 0);
      const auto r = nlohmann::json::parse(mlprio::test::slurp(dir / "out.txt"));
      CHECK(r["runs"][0]["avg_bsld"].get<double>() == Approx(w[key].get<double>()).epsilon(1e-12));
    }
  }
  // Without --slurm-conf-out, and with a basic stack, tune says what is missing.
  CHECK(run("tune --trace t.swf --model m.json --slurm-conf stock.conf -o x.json") == 2);
  CHECK_THAT(mlprio::test::slurp(dir / "err.txt"), Catch::Contains("--slurm-conf-out"));
  std::ofstream(dir / "basic.conf") << "PriorityType=priority/basic\n";
  CHECK(run("tune --trace t.swf --model m.json --slurm-conf basic.conf --slurm-conf-out b.conf "
            "-o x.json") == 2);
  CHECK_THAT(mlprio::test::slurp(dir / "err.txt"), Catch::Contains("priority/basic"));
  fs::remove_all(dir);
}
