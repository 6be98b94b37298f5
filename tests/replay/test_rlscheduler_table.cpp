// The replayer's most important correctness check: with the rlscheduler profile and the published
// window starts (seed 1, length 1024), the mean bounded slowdown over the 10 windows reproduces
// RLScheduler's SC20 table (Lublin-1, Lublin-2; FCFS, WFP3, UNICEP, SJF, F1; with and without
// backfilling) to the printed two decimals, and the utilisation table to its three. Skipped, with a
// message, when the shared traces are absent.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "../support/skip.hpp"
#include "mlprio/jobs/trace.hpp"
#include "mlprio/replay/rlscheduler.hpp"
#include "mlprio/replay/simulator.hpp"

using namespace mlprio;
using namespace mlprio::replay;

namespace {

struct Published {
  const char* trace;
  const char* policy;
  Backfill backfill;
  double bsld;
  double util;
};

// replay_protocols.md §1 (RLScheduler README Tables V/VI and the utilisation table).
const Published PUBLISHED[] = {
    {"lublin_1", "fcfs", Backfill::NONE, 7273.77, 0.657},
    {"lublin_1", "wfp3", Backfill::NONE, 19753.53, 0.747},
    {"lublin_1", "unicep", Backfill::NONE, 22274.74, 0.691},
    {"lublin_1", "sjf", Backfill::NONE, 277.35, 0.762},
    {"lublin_1", "f1", Backfill::NONE, 258.37, 0.816},
    {"lublin_2", "fcfs", Backfill::NONE, 7842.47, 0.404},
    {"lublin_2", "wfp3", Backfill::NONE, 9523.18, 0.543},
    {"lublin_2", "unicep", Backfill::NONE, 11265.31, 0.510},
    {"lublin_2", "sjf", Backfill::NONE, 787.89, 0.562},
    {"lublin_2", "f1", Backfill::NONE, 698.34, 0.478},
    {"lublin_1", "fcfs", Backfill::RLSCHEDULER, 235.82, 0.868},
    {"lublin_1", "wfp3", Backfill::RLSCHEDULER, 133.87, 0.864},
    {"lublin_1", "unicep", Backfill::RLSCHEDULER, 307.23, 0.883},
    {"lublin_1", "sjf", Backfill::RLSCHEDULER, 73.31, 0.778},
    {"lublin_1", "f1", Backfill::RLSCHEDULER, 75.07, 0.840},
    {"lublin_2", "fcfs", Backfill::RLSCHEDULER, 247.61, 0.587},
    {"lublin_2", "wfp3", Backfill::RLSCHEDULER, 318.35, 0.583},
    {"lublin_2", "unicep", Backfill::RLSCHEDULER, 379.59, 0.587},
    {"lublin_2", "sjf", Backfill::RLSCHEDULER, 91.99, 0.593},
    {"lublin_2", "f1", Backfill::RLSCHEDULER, 148.25, 0.552},
};

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

TEST_CASE("rlscheduler profile reproduces the published Lublin-1/Lublin-2 table",
          "[replay][rlscheduler]") {
  const std::string dir = std::string(MLPRIO_SHARED_DATA) + "/swf";
  if (!std::filesystem::exists(dir + "/lublin_1.swf") ||
      !std::filesystem::exists(dir + "/lublin_2.swf"))
    MLPRIO_SKIP(dir << "/lublin_{1,2}.swf not present (set MLPRIO_DATA_DIR)");
  for (const char* name : {"lublin_1", "lublin_2"}) {
    const Trace trace = load_trace(dir + "/" + name + ".swf");
    const std::vector<Job> jobs = prepare_rlscheduler_jobs(trace.jobs);
    REQUIRE(jobs.size() == 10000);
    SimConfig cfg;
    cfg.profile = Profile::RLSCHEDULER;
    cfg.machine = rlscheduler_machine(trace.header);
    cfg.record_series = false;
    cfg.check_invariants = true;
    for (const Published& p : PUBLISHED) {
      if (std::string(p.trace) != name) continue;
      cfg.policy = p.policy;
      cfg.backfill = p.backfill;
      double bsld = 0, util = 0;
      for (int64_t start : rlscheduler_table_starts()) {
        const SimResult r = simulate(select_window(jobs, start, RLSCHEDULER_TABLE_LEN), cfg);
        REQUIRE(r.summary.jobs == RLSCHEDULER_TABLE_LEN);
        bsld += r.summary.avg_bsld;
        util += r.summary.utilization;
      }
      bsld /= 10;
      util /= 10;
      INFO(name << " " << p.policy << " backfill=" << backfill_name(p.backfill) << ": bsld "
                << fixed(bsld, 4) << " (published " << p.bsld << "), util " << fixed(util, 4)
                << " (published " << p.util << ")");
      CHECK(fixed(bsld, 2) == fixed(p.bsld, 2));
      CHECK(fixed(util, 3) == fixed(p.util, 3));
    }
  }
}
