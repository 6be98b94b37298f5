// A seeded, streaming generator for the Lublin & Feitelson workload model of rigid parallel jobs
// (U. Lublin, D. G. Feitelson, "The workload on parallel supercomputers: modeling the
// characteristics of rigid jobs", JPDC 63(11):1105-1122, 2003), so that tests and the default
// demo need no external trace: the same options and seed give the same jobs on every machine.
//
// What comes from where. The model's structure and every constant in LublinParams (serial and
// power-of-two probabilities, the two-stage uniform for log2(size), the hyper-gamma of log(runtime)
// whose mixing weight falls linearly with size, the gamma inter-arrival of the rush hours scaled by
// ARAR, the gamma-shaped daily cycle over 48 half-hour buckets starting CYCLIC_DAY_START buckets
// in, the rejection caps exp(12) s for runtimes and exp(13) s for inter-arrivals, START hour 0)
// are those of the authors' reference program m_lublin99.c (Parallel Workloads Archive), checked
// against GridSim's port WorkloadLublin99.java. Our own choices, each documented below: the
// random-number generator and samplers (so output is platform independent), scaling the size
// distribution to a system of `nodes` nodes, keeping power-of-two jobs a power of two when capped,
// fractional arrival-time bookkeeping, and the requested-time model.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mlprio/jobs/job.hpp"

namespace mlprio {

// Bump when the jobs produced for a given (options, seed) change; written into generated traces.
inline constexpr std::string_view LUBLIN_GENERATOR_VERSION = "1";

// Which of the reference program's job classes to draw.
enum class LublinJobTypes {
  BATCH,        // batch parameters only (the replayer's usual case)
  INTERACTIVE,  // interactive parameters only
  BOTH,         // two independent arrival streams merged by time (reference INCLUDE_JOBS_TYPE 1)
  TYPELESS,     // the "whole sample" parameters, one stream (reference INCLUDE_JOBS_TYPE 0)
};
std::string_view lublin_job_types_name(LublinJobTypes t);
// Parses "batch", "interactive", "both", "typeless"; throws std::invalid_argument otherwise.
LublinJobTypes parse_lublin_job_types(std::string_view s);

// How Job::req_time is filled. The model itself says nothing about user estimates.
enum class LublinReqTime {
  NONE,     // -1 ("unknown"), like the reference program and the published Lublin traces
  EXACT,    // the actual runtime: a perfect-estimate baseline
  FACTOR,   // run * req_time_factor rounded up to req_time_round seconds (users pick round limits)
};
std::string_view lublin_req_time_name(LublinReqTime r);
// Parses "unknown", "exact", "factor"; throws std::invalid_argument otherwise.
LublinReqTime parse_lublin_req_time(std::string_view s);

// The parameters of one job class, as in m_lublin99.c. Sizes are for the reference 128-node system
// (UHI = 7); LublinGenerator shifts ULow..UHi to the configured system size.
struct LublinParams {
  double serial_prob;  // P(size == 1)
  double pow2_prob;    // P(parallel and size rounded to a power of two), of all jobs
  double ulow, umed, uhi, uprob;  // two-stage uniform of log2(size): U(ulow,umed) w.p. uprob
  double a1, b1, a2, b2;          // hyper-gamma of ln(runtime): gamma(a1,b1) w.p. p, else (a2,b2)
  double pa, pb;                  // p = clamp(pa * size + pb, 0, 1)
  double aarr, barr;              // gamma(aarr * arar, barr) of ln(inter-arrival) in rush hours
  double arar;                    // Arrive-Rush-All-Ratio
  double anum, bnum;              // gamma(anum, bnum) shape of arrivals over the day's buckets
};

// The reference constants (m_lublin99.c): batch, interactive and whole-sample ("typeless").
LublinParams lublin_batch_params();
LublinParams lublin_interactive_params();
LublinParams lublin_typeless_params();

// Model structure shared by all classes (m_lublin99.c).
inline constexpr double LUBLIN_REFERENCE_UHI = 7.0;        // the fits are for 2^7 = 128 nodes
inline constexpr double LUBLIN_MAX_LOG_RUNTIME = 12.0;     // TOO_MUCH_TIME: runtime <= e^12 s
inline constexpr double LUBLIN_MAX_LOG_INTERARRIVAL = 13.0;  // TOO_MUCH_ARRIVE_TIME
inline constexpr int LUBLIN_BUCKETS = 48;                  // half-hour buckets in a day
inline constexpr int LUBLIN_CYCLIC_DAY_START = 11;         // first bucket index of the fitted day
inline constexpr double LUBLIN_SECONDS_IN_BUCKET = 1800.0;

struct LublinOptions {
  int64_t nodes = 128;            // system size; job sizes never exceed it
  int64_t procs_per_node = 1;     // Job procs = model nodes * procs_per_node
  uint64_t seed = 1;
  LublinJobTypes types = LublinJobTypes::BATCH;
  int start_hour = 0;             // hour of day at time 0 (reference START = 0, midnight)
  // Multiplies the arrival rate (divides every inter-arrival time) without changing the shape
  // of the daily cycle; 1 is the published model. The reference suggests changing aarr instead,
  // which also changes the inter-arrival CV.
  double load_scale = 1.0;
  LublinReqTime req_time = LublinReqTime::NONE;
  double req_time_factor = 2.0;   // FACTOR only; >= 1 so that no job outlives its limit
  double req_time_round = 60.0;   // FACTOR only; seconds, > 0
};

// Produces jobs one at a time in submit order; memory does not grow with the number of jobs.
// Throws std::invalid_argument from the constructor when an option is out of range.
class LublinGenerator {
 public:
  explicit LublinGenerator(const LublinOptions& opts);

  // Fills `job` with the next job (ids 1, 2, ...). Always returns true: the model is endless.
  bool next(Job& job);

  const LublinOptions& options() const { return opts_; }
  // Effective parameters of a class after scaling to the system size (type 0 interactive or
  // typeless, 1 batch; the SWF queue numbers the generator writes).
  const LublinParams& params(int type) const { return params_[type]; }
  // Normalised arrival weight of each half-hour bucket of the day (mean 1); the expected share of
  // arrivals in bucket k is weights[k] / LUBLIN_BUCKETS.
  const std::array<double, LUBLIN_BUCKETS>& daily_weights(int type) const { return weights_[type]; }

  // The fixed PRNG: xoshiro256** (Blackman & Vigna) seeded by splitmix64, both fully specified.
  class Rng {
   public:
    explicit Rng(uint64_t seed);
    uint64_t next_u64();
    double uniform();       // [0, 1), 53 random bits
    double uniform_pos();   // (0, 1), safe for log()
    double normal();        // Marsaglia polar method
    double gamma(double shape, double scale);  // Marsaglia & Tsang (2000)

   private:
    std::array<uint64_t, 4> s_{};
  };

 private:
  struct Stream {
    double time = 0;       // seconds from 0 of the stream's next arrival
    int bucket = 0;        // bucket of the day that `time` falls in
    double points = 0;     // unspent points in the current bucket
    double remainder = 0;  // fraction of the current bucket already elapsed
    bool active = false;
  };

  void advance(int type);
  int64_t draw_size(int type);
  double draw_runtime(int type, int64_t size);

  LublinOptions opts_;
  Rng rng_;
  std::array<LublinParams, 2> params_{};
  std::array<std::array<double, LUBLIN_BUCKETS>, 2> weights_{};
  std::array<Stream, 2> streams_{};
  int64_t next_id_ = 1;
};

// The first n_jobs jobs of LublinGenerator(opts).
std::vector<Job> generate_lublin(const LublinOptions& opts, int64_t n_jobs);

}  // namespace mlprio
