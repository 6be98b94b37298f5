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
//
// The user model (LublinUserModel, off unless `users` > 0) is ours too: it gives the jobs users
// who behave the way users do in real logs (a few heavy users submit most jobs; a user resubmits
// the same application, often several copies at once; repeats run about as long as each other;
// requests are round limits chosen by habit), layered on the model above without changing its
// arrival process or its size and run-time distributions; see LublinUserModel.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mlprio/jobs/job.hpp"

namespace mlprio {

// Bump when the jobs produced for a given (options, seed) change; written into generated traces.
// The user model is versioned apart (LUBLIN_USER_MODEL_VERSION): without it the jobs are those of
// version 1.
inline constexpr std::string_view LUBLIN_GENERATOR_VERSION = "1";
// Bump when the jobs produced with a user model (LublinUserModel::users > 0) change.
inline constexpr std::string_view LUBLIN_USER_MODEL_VERSION = "1";

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
  NONE,    // -1 ("unknown"), like the reference program and the published Lublin traces
  EXACT,   // the actual runtime: a perfect-estimate baseline
  FACTOR,  // run * req_time_factor rounded up to req_time_round seconds (users pick round limits)
  USER,    // the user model's request habits (needs LublinUserModel::users > 0), see there
};
std::string_view lublin_req_time_name(LublinReqTime r);
// Parses "unknown", "exact", "factor", "user"; throws std::invalid_argument otherwise.
LublinReqTime parse_lublin_req_time(std::string_view s);

// The parameters of one job class, as in m_lublin99.c. Sizes are for the reference 128-node system
// (UHI = 7); LublinGenerator shifts ULow..UHi to the configured system size.
struct LublinParams {
  double serial_prob;             // P(size == 1)
  double pow2_prob;               // P(parallel and size rounded to a power of two), of all jobs
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
inline constexpr double LUBLIN_REFERENCE_UHI = 7.0;          // the fits are for 2^7 = 128 nodes
inline constexpr double LUBLIN_MAX_LOG_RUNTIME = 12.0;       // TOO_MUCH_TIME: runtime <= e^12 s
inline constexpr double LUBLIN_MAX_LOG_INTERARRIVAL = 13.0;  // TOO_MUCH_ARRIVE_TIME
inline constexpr int LUBLIN_BUCKETS = 48;                    // half-hour buckets in a day
inline constexpr int LUBLIN_CYCLIC_DAY_START = 11;           // first bucket index of the fitted day
inline constexpr double LUBLIN_SECONDS_IN_BUCKET = 1800.0;

// Users on top of the Lublin model (ours; the published model has none). Off when users == 0: the
// jobs are then exactly the plain model's (user -1), bit for bit. With users > 0:
//  * Submissions. Each arrival of the Lublin process is one submission of `b` jobs at the same
//    second (one script, a job array): b = 1 + geometric, mean `burst_mean`. The arrival rate is
//    divided by burst_mean, so jobs arrive at the published rate with the published daily cycle.
//  * Who. The user of a submission is, with probability `stickiness`, the user of the previous
//    submission (a working session), else user k of 1..users with weight k^-activity_exponent
//    (Zipf). Either way each user's long-run share of submissions is the Zipf one.
//  * What. Each user keeps a repertoire of applications per job class (batch / interactive); an
//    application is a size and a typical run time drawn once from the Lublin model of that class
//    (so sizes and run times keep the published distributions), and a request (below). A
//    submission resubmits the user's previous application of its class with probability
//    `repeat_prob`; otherwise it picks from the repertoire as a Chinese restaurant process: a new
//    application with probability new_app_weight / (new_app_weight + n), else an old one with
//    probability proportional to its past submissions (n = the user's submissions of the class).
//  * Run time. A job runs its application's run time times exp(runtime_spread x L), L a standard
//    Laplace variable (density e^-|x| / 2: the same input never runs exactly as long twice, and
//    now and then runs much shorter or longer, more often than a log-normal spread would allow),
//    in whole seconds in [1, e^12]; with probability crash_prob it instead crashes after a
//    log-uniform 1-59 s (status failed). Under LublinReqTime::USER a job that did not crash
//    hangs with probability hang_prob (a deadlock, a solver that does not converge) until its
//    request, and a job whose run would reach its request is killed there: run = request,
//    status timeout, as a batch system does (so a hang may run past e^12 s, up to its request).
//  * Request (LublinReqTime::USER). User u has an over-estimation factor f_u, log-uniform in
//    [factor_min, factor_max], and, with probability habit_share, a default limit H_u (a round
//    limit log-uniform between 1 h and 4 days) that they keep unless the job needs more. An
//    application's request is the round limit at or above max(run x f_u, H_u), fixed for all its
//    jobs. Round limits: 5, 10, 15, 20, 30, 45 min; 1, 2, 3, 4, 6, 8, 12, 18 h; 1, 2, 3, 4, 5, 7
//    days; beyond, whole days. The other request models apply to each job's own run time.
// The user draws come from a second PRNG stream, the Lublin draws from the model's own. The
// application is not written to the trace (SWF executable -1): real logs rarely record it, and a
// predictor must find the structure from users, requests and sizes as it must there.
// The defaults are calibrated on the shared real traces (replay/README.md, "Users").
struct LublinUserModel {
  int64_t users = 0;               // 0: no users (the plain model); at most LUBLIN_MAX_USERS
  double activity_exponent = 1.2;  // Zipf exponent of the users' activity, >= 0
  double stickiness = 0.65;        // P(a submission is by the previous submission's user), [0, 1)
  double repeat_prob = 0.3;        // P(resubmit the previous application of the class), [0, 1]
  double new_app_weight = 6.0;     // the repertoire's concentration, > 0
  double burst_mean = 2.0;         // mean jobs per submission, >= 1
  double runtime_spread = 0.12;    // Laplace scale of ln(run) around the application's, >= 0
  double crash_prob = 0.01;        // P(a job crashes within a minute), [0, 1]
  double hang_prob = 0.05;         // P(a job runs until killed at its request), [0, 1]
  double habit_share = 0.3;        // share of users with a default limit, [0, 1]
  double factor_min = 1.0;         // over-estimation factors, log-uniform in [min, max], >= 1
  double factor_max = 4.0;
};
inline constexpr int64_t LUBLIN_MAX_USERS = 1000000;
inline constexpr int64_t LUBLIN_MAX_BURST = 10000;  // jobs in one submission at most

struct LublinOptions {
  int64_t nodes = 128;         // system size; job sizes never exceed it
  int64_t procs_per_node = 1;  // Job procs = model nodes * procs_per_node
  uint64_t seed = 1;
  LublinJobTypes types = LublinJobTypes::BATCH;
  int start_hour = 0;  // hour of day at time 0 (reference START = 0, midnight)
  // Multiplies the arrival rate (divides every inter-arrival time) without changing the shape
  // of the daily cycle; 1 is the published model. The reference suggests changing aarr instead,
  // which also changes the inter-arrival CV.
  double load_scale = 1.0;
  LublinReqTime req_time = LublinReqTime::NONE;
  double req_time_factor = 2.0;  // FACTOR only; >= 1 so that no job outlives its limit
  double req_time_round = 60.0;  // FACTOR only; seconds, > 0
  LublinUserModel user_model{};  // users; off (users == 0) by default
};

// The round limit (see LublinUserModel) at or above `seconds`.
double lublin_round_limit(double seconds);

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
    double uniform();                          // [0, 1), 53 random bits
    double uniform_pos();                      // (0, 1), safe for log()
    double normal();                           // Marsaglia polar method
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

  // One application of a user (user model).
  struct App {
    int64_t size = 1;
    double run = 1;    // typical run time, s
    double req = -1;   // request under LublinReqTime::USER
    int64_t uses = 0;  // submissions so far
  };
  struct User {
    double factor = 1;                     // over-estimation factor
    double habit_limit = 0;                // default limit, 0 for none
    std::array<std::vector<App>, 2> apps;  // by job class
    std::array<int, 2> last_app{-1, -1};
    std::array<int64_t, 2> submissions{};
  };

  void advance(int type);
  int64_t draw_size(int type);
  double draw_runtime(int type, int64_t size);
  void start_submission(int type, double submit);  // user model: who, what, how many
  void fill_job(Job& job, int type, double submit, int64_t size, double run);
  void fill_user_job(Job& job);  // user model: the next job of the submission

  LublinOptions opts_;
  Rng rng_;
  Rng user_rng_;                  // the user model's draws
  double arrival_scale_ = 1;      // load_scale, divided by burst_mean with users
  std::vector<double> user_cdf_;  // cumulative Zipf weights
  std::vector<User> users_;
  int64_t last_user_ = -1;
  struct Submission {
    int type = 0;
    double submit = 0;
    int64_t user = -1;
    int app = -1;
    int64_t left = 0;  // jobs still to emit
  } submission_;
  std::array<LublinParams, 2> params_{};
  std::array<std::array<double, LUBLIN_BUCKETS>, 2> weights_{};
  std::array<Stream, 2> streams_{};
  int64_t next_id_ = 1;
};

// The first n_jobs jobs of LublinGenerator(opts).
std::vector<Job> generate_lublin(const LublinOptions& opts, int64_t n_jobs);

}  // namespace mlprio
