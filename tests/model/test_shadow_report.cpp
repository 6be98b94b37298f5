// mlprio-model shadow-report: parsing site_factor/mlprio's shadow lines (malformed ones counted
// and named, the first line of a job wins) and joining them with what the jobs did.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>

#include "model_tool.hpp"

using namespace mlprio;
using namespace mlprio::model;

TEST_CASE("shadow-report: lines are parsed, malformed ones named, joined with the trace") {
  char path[] = "/tmp/mlprio-shadow-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  {
    std::ofstream f(path);
    f << "[t] site_factor/mlprio: loaded\n"
      << "[t] site_factor/mlprio: shadow: JobId=10 user=a would_site=5000 "
         "mlprio_shadow_limit=01:00:00 mlprio_shadow_refuse=0.90\n"
      << "[t] site_factor/mlprio: shadow: JobId=11 user=b would_site=2000 "
         "mlprio_shadow_limit=1-00:00:00\n"
      << "[t] site_factor/mlprio: shadow: JobId=12 user=c would_site=banana\n"
      << "[t] site_factor/mlprio: shadow: JobId=10 user=a would_site=1\n"  // repeat: ignored
      << "[t] site_factor/mlprio: shadow: JobId=13 user=d would_site=100 mlprio_shadow_limit=xx\n"
      << "[t] site_factor/mlprio: shadow: JobId=14 user=e would_site=100\n";
  }
  const ShadowLog log = read_shadow_log(path);
  std::remove(path);
  REQUIRE(log.records.size() == 3);
  CHECK(log.malformed == 2);
  CHECK(log.first_malformed.find(":4: field would_site") != std::string::npos);
  CHECK(log.records[0].job_id == 10);
  CHECK(log.records[0].site == 5000);
  CHECK(log.records[0].limit_s == 3600);
  CHECK(log.records[0].flagged);
  CHECK(log.records[0].fail_prob == Approx(0.9));
  CHECK(log.records[1].limit_s == 86400);
  CHECK_FALSE(log.records[1].flagged);

  Trace t;
  Job a, b, e;
  a.id = 10, a.run = 4000, a.status = JobStatus::FAILED;  // past its would-be limit, failed
  b.id = 11, b.run = 100, b.status = JobStatus::COMPLETED;
  e.id = 14, e.run = 5000, e.status = JobStatus::COMPLETED;
  t.jobs = {a, b, e};
  const auto r = shadow_report(log, t);
  CHECK(r["recorded"] == 3);
  CHECK(r["found"] == 3);
  CHECK(r["flagged"] == 1);
  CHECK(r["flagged_failed"] == 1);
  CHECK(r["unflagged"] == 2);
  CHECK(r["unflagged_failed"] == 0);
  CHECK(r["limited"] == 2);
  CHECK(r["past_limit"] == 1);
  // SITE 5000, 2000, 100 against runs 4000, 100, 5000: ranks (3,2,1) vs (2,1,3): rho = -0.5.
  CHECK(r["site_run_spearman"].get<double>() == Approx(-0.5));
  const std::string text = format_shadow_report(r);
  CHECK(text.find("would fill a time limit: 2 (of which ran past it: 1") != std::string::npos);
  CHECK_THROWS(read_shadow_log("/nonexistent/slurmctld.log"));
}
