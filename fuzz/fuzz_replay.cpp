// The replay engine on hostile job lists: any bytes decode to a machine, a configuration
// (backfilling, queue order, estimates fixed or Tsafrir's online ones, corrections, limits) and
// up to 256 jobs, with sizes that do not fit, unknown run times, requests below and above the
// run time, GPUs, and times from seconds up to 2^62 s, where adding a run time to a start
// rounds. The engine must give a result or a UsageError (a bad configuration or a job too
// large), never a crash, a hang or an InvariantError. And every way of computing the same
// schedule must give the same one: the costly invariant checks on and off; for conservative
// backfilling, the profile's step loop, its AVX-512 scan and its AVX2 run scan (each where the CPU
// has it); and the run cut in two time segments at an arrival, the second started from the first's
// final state (the time-parallel replay's step). The fuzzer traps on any difference. RLScheduler's
// profile runs on its prepared list. The `ml` order gets fixed predictions and score settings made
// from the bytes.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "mlprio/replay/detail/profile_scan.hpp"
#include "mlprio/replay/ml.hpp"
#include "mlprio/replay/policy.hpp"
#include "mlprio/replay/rlscheduler.hpp"
#include "mlprio/replay/segment.hpp"
#include "mlprio/replay/simulator.hpp"
#include "mlprio/replay/spec.hpp"

namespace {

namespace rp = mlprio::replay;

// Reads the input a byte at a time; zeros past its end.
struct Bytes {
  const uint8_t* p;
  size_t n, at = 0;
  uint8_t u8() { return at < n ? p[at++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  bool more() const { return at < n; }
};

bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// The run's outcome: the result, or the text of the UsageError it threw.
struct Outcome {
  bool ok = false;
  std::string error;
  rp::SimResult result;
};

bool same(const Outcome& a, const Outcome& b) {
  if (a.ok != b.ok || a.error != b.error) return false;
  if (!a.ok) return true;
  const rp::Summary &x = a.result.summary, &y = b.result.summary;
  if (x.jobs != y.jobs || x.skipped != y.skipped || x.killed != y.killed ||
      x.estimates_raised != y.estimates_raised || !same_bits(x.avg_wait, y.avg_wait) ||
      !same_bits(x.avg_bsld, y.avg_bsld) || !same_bits(x.max_wait, y.max_wait) ||
      !same_bits(x.p99_wait, y.p99_wait) || !same_bits(x.makespan, y.makespan))
    return false;
  const auto &ja = a.result.jobs, &jb = b.result.jobs;
  if (ja.size() != jb.size()) return false;
  for (size_t i = 0; i < ja.size(); ++i)
    if (ja[i].id != jb[i].id || !same_bits(ja[i].start, jb[i].start) ||
        !same_bits(ja[i].end, jb[i].end))
      return false;
  return true;
}

Outcome run(const std::vector<mlprio::Job>& jobs, rp::SimConfig cfg, bool check, int scan) {
  cfg.check_invariants = check;
  rp::detail::set_profile_scan_mode(scan);
  Outcome o;
  try {
    o.result = rp::simulate(jobs, cfg);
    o.ok = true;
  } catch (const rp::InvariantError& e) {
    std::fprintf(stderr, "fuzz_replay: %s\n", e.what());
    __builtin_trap();  // a broken invariant is an engine bug, whatever the input
  } catch (const mlprio::UsageError& e) {
    o.error = e.what();
  }
  rp::detail::set_profile_scan_mode(0);
  return o;
}

// The same run in two time segments cut at jobs[cut]'s submit time (the first job submitted
// then), the second resumed from the first's final state: the outcomes must be the serial run's.
void check_segments(const std::vector<mlprio::Job>& jobs, const rp::SimConfig& cfg,
                    const Outcome& serial, size_t cut) {
  if (!serial.ok || jobs.empty()) return;
  const double t = jobs[cut].submit;
  while (cut > 0 && jobs[cut - 1].submit == t) --cut;
  const auto n = static_cast<int64_t>(jobs.size()), k = static_cast<int64_t>(cut);
  rp::SimConfig c = cfg;
  c.check_invariants = true;
  try {
    const rp::SegmentResult a = rp::simulate_segment(jobs, 0, k, 0, t, rp::idle_state(c), c);
    const rp::SegmentResult b = rp::simulate_segment(
        jobs, k, n, t, std::numeric_limits<double>::infinity(), a.final_state, c);
    const auto& want = serial.result.jobs;
    bool same = a.skipped + b.skipped == serial.result.summary.skipped &&
                a.jobs.size() + b.jobs.size() == want.size();
    for (size_t i = 0; same && i < want.size(); ++i) {
      const rp::JobOutcome& o = i < a.jobs.size() ? a.jobs[i] : b.jobs[i - a.jobs.size()];
      same =
          o.id == want[i].id && same_bits(o.start, want[i].start) && same_bits(o.end, want[i].end);
    }
    if (!same) __builtin_trap();
  } catch (const rp::InvariantError& e) {
    std::fprintf(stderr, "fuzz_replay (segments): %s\n", e.what());
    __builtin_trap();
  } catch (const mlprio::UsageError&) {  // e.g. an order whose state cannot be carried
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in{data, size};
  rp::SimConfig cfg;
  const uint8_t mode = in.u8();
  static const rp::Backfill BACKFILL[] = {rp::Backfill::NONE, rp::Backfill::EASY,
                                          rp::Backfill::CONSERVATIVE, rp::Backfill::CONSERVATIVE};
  cfg.backfill = BACKFILL[mode & 3];
  cfg.estimate = (mode >> 2) & 1 ? rp::EstimateMode::ACTUAL : rp::EstimateMode::REQUEST;
  cfg.machine.allocation = (mode >> 3) & 1 ? rp::Allocation::CORES : rp::Allocation::NODES;
  cfg.kill_at_limit = (mode >> 4) & 1;
  cfg.backfill_order = (mode >> 5) & 1 ? rp::BackfillOrder::SJBF : rp::BackfillOrder::QUEUE;
  static const rp::Correction CORRECTION[] = {rp::Correction::NONE, rp::Correction::REQUEST,
                                              rp::Correction::TSAFRIR, rp::Correction::NONE};
  cfg.correction = CORRECTION[(mode >> 6) & 3];
  static const std::vector<std::string> POLICIES = rp::policy_names();
  const uint8_t order = in.u8();
  cfg.policy = POLICIES[(order & 127) % POLICIES.size()];
  const bool last2 = order >> 7;  // Tsafrir's online estimates (set once the jobs are known)
  const uint8_t shape = in.u8();
  cfg.machine.nodes = 1 + (shape & 7);
  cfg.machine.cores_per_node = 1 + ((shape >> 3) & 3);
  cfg.machine.gpus_per_node = (shape >> 5) & 3;
  cfg.too_large = rp::TooLarge::SKIP;
  cfg.record_series = false;
  // Time units: seconds, minutes, a million seconds, and 2^40 s (near 2^62 s a run time of a
  // few units no longer changes a start when added to it).
  static const double SCALE[] = {1.0, 60.0, 1e6, 1099511627776.0};
  const uint8_t time = in.u8();
  const double scale = SCALE[time & 3];
  const size_t cut_at = time >> 2;  // the time segments' cut: this job's arrival (mod the jobs)

  std::vector<mlprio::Job> jobs;
  double submit = 0;
  while (in.more() && jobs.size() < 256) {
    mlprio::Job j;
    j.id = static_cast<int64_t>(jobs.size()) + 1;
    submit += static_cast<double>(in.u8() & 63) * scale;  // ties where the byte is 0
    j.submit = submit;
    const uint16_t run = in.u16();
    j.run = run == 0xffff ? -1.0 : static_cast<double>(run & 0x3fff) * scale;
    const uint8_t req = in.u8();  // 0: none; else run x req / 16 (below, at and above it)
    j.req_time = req == 0 ? -1.0 : j.run * static_cast<double>(req) / 16.0;
    if (j.req_time < 0 && req != 0) j.req_time = static_cast<double>(req) * scale;
    const uint8_t size = in.u8();
    j.req_procs = size & 63;  // 0 cannot be replayed; above the machine's: skipped
    j.alloc_procs = (size >> 6) & 1 ? j.req_procs : -1;
    j.req_gpus = (size >> 7) & 1 ? static_cast<double>(in.u8() & 7) : -1.0;
    j.user = in.u8() & 7;
    jobs.push_back(j);
  }

  if (cfg.policy == "ml") {  // fixed predictions and score settings, from the bytes already read
    std::vector<mlprio::model::Prediction> preds(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      const mlprio::Job& j = jobs[i];
      const auto h = static_cast<unsigned>(j.user) * 5u + static_cast<unsigned>(i) * 3u;
      // A run time off by 1/4 to 2x, or none (the score falls back to the request).
      preds[i].runtime = h % 11 == 0 ? std::numeric_limits<double>::quiet_NaN()
                                     : j.run * (0.25 + static_cast<double>(h % 8) / 4.0);
      preds[i].runtime_upper = preds[i].runtime;
      preds[i].fail_prob = static_cast<double>(h % 5) / 4.0;
    }
    static const double AGE[] = {0.0, 1.0, 2.5};
    static const double SIZE[] = {0.0, -0.5, 0.5};
    mlprio::model::ScoreConfig sc;
    sc.age_weight = AGE[cut_at % 3];
    sc.size_weight = SIZE[(cut_at / 3) % 3];
    sc.fairshare_weight = (cut_at / 9) % 2;
    sc.request_weight = (cut_at / 18) % 2 ? 0.5 : 0.0;
    sc.fail_weight = (cut_at / 36) % 2;
    sc.starvation_limit = (shape >> 6) & 1 ? 30.0 * scale : 86400.0;
    cfg.policy_options.ml = std::make_shared<const rp::MlPredictions>(jobs, preds, sc);
  }
  if (last2) cfg.online = rp::last2_estimator(jobs, 0);
  if (shape >> 7) {  // RLScheduler's profile (its job handling first), its backfilling or none
    cfg.profile = rp::Profile::RLSCHEDULER;
    cfg.backfill = (mode & 1) ? rp::Backfill::RLSCHEDULER : rp::Backfill::NONE;
    cfg.kill_at_limit = false;
    cfg.online = nullptr;
    const std::vector<mlprio::Job> prepared = rp::prepare_rlscheduler_jobs(jobs);
    const Outcome checked = run(prepared, cfg, true, 0);
    if (!same(checked, run(prepared, cfg, false, 0))) __builtin_trap();
    return 0;
  }
  const bool conservative = cfg.backfill == rp::Backfill::CONSERVATIVE;
  const Outcome checked = run(jobs, cfg, true, conservative ? 1 : 0);
  if (!same(checked, run(jobs, cfg, false, conservative ? 1 : 0))) __builtin_trap();
  if (conservative) {  // the AVX-512 and AVX2 scans (the step loop again where the CPU lacks one)
    for (int scan : {2, 3}) {
      if (!same(checked, run(jobs, cfg, true, scan))) __builtin_trap();
      if (!same(checked, run(jobs, cfg, false, scan))) __builtin_trap();
    }
  }
  if (!jobs.empty()) check_segments(jobs, cfg, checked, cut_at % jobs.size());
  return 0;
}
