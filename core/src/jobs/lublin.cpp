// The Lublin & Feitelson (2003) workload generator (see lublin.hpp for what is taken from the
// reference program m_lublin99.c and what is ours). The draws follow the reference's order and
// logic (one uniform decides serial / power-of-two / other, a two-stage uniform gives log2(size),
// a size-dependent hyper-gamma gives ln(runtime), and a "points" process over 48 weighted half-hour
// buckets turns gamma-distributed ln(inter-arrival) into a daily cycle), but every random number
// comes from our own fully specified PRNG and samplers, never from <random>'s distributions whose
// algorithms differ between standard libraries.
#include "mlprio/jobs/lublin.hpp"
#include "mlprio/util/errors.hpp"
#include "mlprio/util/splitmix64.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

// Bit-identical output needs every a*b+c rounded twice, as the source says; clang would otherwise
// fuse them into FMAs on targets that have them (GCC in ISO mode does not contract).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

namespace mlprio {

namespace {

constexpr int INTERACTIVE =
    0;  // also the typeless stream; SWF queue 0 conventionally = interactive
constexpr int BATCH = 1;

constexpr int64_t MAX_NODES = int64_t{1} << 40;
constexpr double MIN_LOAD_SCALE = 1e-3;  // below this a single inter-arrival spans years of buckets
constexpr double MAX_LOAD_SCALE = 1e3;

uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

using util::splitmix64;

// Mass of gamma(shape, scale) over [lo, hi] up to the constant 1/(Gamma(shape) scale^shape), which
// cancels when the bucket weights are normalised to mean 1. Simpson's rule on 64 panels is
// accurate to ~1e-10 relative for these smooth, half-unit-wide intervals, and needs no lgamma
// (whose glibc version writes the global signgam, a data race between generators on two threads).
double unnormalised_gamma_mass(double lo, double hi, double shape, double scale) {
  auto density = [&](double x) {
    return std::exp((shape - 1.0) * std::log(x / scale) - x / scale);
  };
  constexpr int PANELS = 64;
  const double h = (hi - lo) / PANELS;
  double sum = density(lo) + density(hi);
  for (int k = 1; k < PANELS; ++k) sum += density(lo + k * h) * ((k % 2) ? 4.0 : 2.0);
  return sum * h / 3.0;
}

void require(bool ok, const std::string& message) {
  if (!ok) throw ::mlprio::UsageError("Lublin generator: " + message);
}

bool in_range(double v, double lo, double hi) {
  return std::isfinite(v) && v >= lo && v <= hi;
}

// The user model's draws come from a second xoshiro stream, seeded from the same seed.
constexpr uint64_t USER_STREAM = 0x7573657273ULL;  // "users"

constexpr double MINUTE = 60.0, HOUR = 3600.0, DAY = 86400.0;
constexpr std::array<double, 20> ROUND_LIMITS = {
    5 * MINUTE, 10 * MINUTE, 15 * MINUTE, 20 * MINUTE, 30 * MINUTE, 45 * MINUTE, 1 * HOUR,
    2 * HOUR,   3 * HOUR,    4 * HOUR,    6 * HOUR,    8 * HOUR,    12 * HOUR,   18 * HOUR,
    1 * DAY,    2 * DAY,     3 * DAY,     4 * DAY,     5 * DAY,     7 * DAY};

constexpr double HABIT_MIN = 1 * HOUR, HABIT_MAX = 4 * DAY;  // default limits, log-uniform

}  // namespace

std::string_view lublin_job_types_name(LublinJobTypes t) {
  switch (t) {
    case LublinJobTypes::BATCH:
      return "batch";
    case LublinJobTypes::INTERACTIVE:
      return "interactive";
    case LublinJobTypes::BOTH:
      return "both";
    case LublinJobTypes::TYPELESS:
      return "typeless";
  }
  return "?";
}

LublinJobTypes parse_lublin_job_types(std::string_view s) {
  for (auto t : {LublinJobTypes::BATCH, LublinJobTypes::INTERACTIVE, LublinJobTypes::BOTH,
                 LublinJobTypes::TYPELESS})
    if (s == lublin_job_types_name(t)) return t;
  throw ::mlprio::UsageError("unknown Lublin job types '" + std::string(s) +
                             "' (valid: batch, interactive, both, typeless)");
}

std::string_view lublin_req_time_name(LublinReqTime r) {
  switch (r) {
    case LublinReqTime::NONE:
      return "unknown";
    case LublinReqTime::EXACT:
      return "exact";
    case LublinReqTime::FACTOR:
      return "factor";
    case LublinReqTime::USER:
      return "user";
  }
  return "?";
}

LublinReqTime parse_lublin_req_time(std::string_view s) {
  for (auto r :
       {LublinReqTime::NONE, LublinReqTime::EXACT, LublinReqTime::FACTOR, LublinReqTime::USER})
    if (s == lublin_req_time_name(r)) return r;
  throw ::mlprio::UsageError("unknown requested-time model '" + std::string(s) +
                             "' (valid: unknown, exact, factor, user)");
}

// Constants of m_lublin99.c (SERIAL_PROB_BATCH ... ARAR_BATCH and their _ACTIVE / plain twins).
LublinParams lublin_batch_params() {
  return {.serial_prob = 0.2927,
          .pow2_prob = 0.6686,
          .ulow = 1.2,
          .umed = 5.0,
          .uhi = 7.0,
          .uprob = 0.875,
          .a1 = 6.57,
          .b1 = 0.823,
          .a2 = 639.1,
          .b2 = 0.0156,
          .pa = -0.003,
          .pb = 0.6986,
          .aarr = 6.0415,
          .barr = 0.8531,
          .arar = 1.0519,
          .anum = 6.1271,
          .bnum = 5.2740};
}

LublinParams lublin_interactive_params() {
  return {.serial_prob = 0.1541,
          .pow2_prob = 0.625,
          .ulow = 1.0,
          .umed = 3.0,
          .uhi = 5.5,
          .uprob = 0.705,
          .a1 = 3.8351,
          .b1 = 0.6605,
          .a2 = 7.073,
          .b2 = 0.6856,
          .pa = -0.0118,
          .pb = 0.9156,
          .aarr = 6.5510,
          .barr = 0.6621,
          .arar = 0.9797,
          .anum = 8.9186,
          .bnum = 3.6680};
}

LublinParams lublin_typeless_params() {
  return {.serial_prob = 0.244,
          .pow2_prob = 0.576,
          .ulow = 0.8,
          .umed = 4.5,
          .uhi = 7.0,
          .uprob = 0.86,
          .a1 = 4.2,
          .b1 = 0.94,
          .a2 = 312.0,
          .b2 = 0.03,
          .pa = -0.0054,
          .pb = 0.78,
          .aarr = 10.2303,
          .barr = 0.4871,
          .arar = 1.0225,
          .anum = 8.1737,
          .bnum = 3.9631};
}

double lublin_round_limit(double seconds) {
  for (double limit : ROUND_LIMITS)
    if (seconds <= limit) return limit;
  return std::ceil(seconds / DAY) * DAY;
}

// ---- PRNG and samplers ------------------------------------------------------------------------

LublinGenerator::Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& word : s_) word = splitmix64(x);  // splitmix64 never yields an all-zero state
}

uint64_t LublinGenerator::Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double LublinGenerator::Rng::uniform() {
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

double LublinGenerator::Rng::uniform_pos() {
  return (static_cast<double>(next_u64() >> 11) + 0.5) * 0x1.0p-53;
}

double LublinGenerator::Rng::normal() {
  double u = 0, v = 0, s = 0;
  do {
    u = 2.0 * uniform() - 1.0;
    v = 2.0 * uniform() - 1.0;
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  return u * std::sqrt(-2.0 * std::log(s) / s);
}

double LublinGenerator::Rng::gamma(double shape, double scale) {
  if (shape < 1.0) {
    // Gamma(a) = Gamma(a + 1) * U^(1/a): Marsaglia & Tsang's boost for shapes below one.
    const double g = gamma(shape + 1.0, scale);
    return g * std::pow(uniform_pos(), 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = 0, v = 0;
    do {
      x = normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = uniform_pos();
    const double x2 = x * x;
    if (u < 1.0 - 0.0331 * x2 * x2) return d * v * scale;
    if (std::log(u) < 0.5 * x2 + d * (1.0 - v + std::log(v))) return d * v * scale;
  }
}

namespace {

// Every option in its range, with a message naming it and its value.
void check_options(const LublinOptions& opts) {
  require(opts.nodes >= 1 && opts.nodes <= MAX_NODES,
          "nodes must be in [1, 2^40], got " + std::to_string(opts.nodes));
  require(opts.procs_per_node >= 1 && opts.procs_per_node <= MAX_NODES / opts.nodes,
          "procs_per_node must be >= 1 with nodes * procs_per_node <= 2^40, got " +
              std::to_string(opts.procs_per_node));
  require(
      opts.start_hour >= 0 && opts.start_hour <= 23,
      "start_hour must be an hour of the day in [0, 23], got " + std::to_string(opts.start_hour));
  require(std::isfinite(opts.load_scale) && opts.load_scale >= MIN_LOAD_SCALE &&
              opts.load_scale <= MAX_LOAD_SCALE,
          "load_scale must be in [0.001, 1000] (1 = the published model), got " +
              std::to_string(opts.load_scale));
  if (opts.req_time == LublinReqTime::FACTOR) {
    require(std::isfinite(opts.req_time_factor) && opts.req_time_factor >= 1.0,
            "req_time_factor must be >= 1 so no job outlives its limit, got " +
                std::to_string(opts.req_time_factor));
    require(std::isfinite(opts.req_time_round) && opts.req_time_round > 0.0,
            "req_time_round must be > 0 seconds, got " + std::to_string(opts.req_time_round));
  }

  const LublinUserModel& um = opts.user_model;
  require(um.users >= 0 && um.users <= LUBLIN_MAX_USERS,
          "users must be in [0, " + std::to_string(LUBLIN_MAX_USERS) +
              "] (0 = no user model), got " + std::to_string(um.users));
  require(opts.req_time != LublinReqTime::USER || um.users > 0,
          "the 'user' requested-time model needs users > 0");
  if (um.users > 0) {
    require(
        in_range(um.activity_exponent, 0, 10),
        "user activity exponent must be in [0, 10], got " + std::to_string(um.activity_exponent));
    require(in_range(um.stickiness, 0, 1) && um.stickiness < 1,
            "user stickiness must be in [0, 1), got " + std::to_string(um.stickiness));
    require(in_range(um.repeat_prob, 0, 1),
            "repeat probability must be in [0, 1], got " + std::to_string(um.repeat_prob));
    require(in_range(um.new_app_weight, 0, 1e6) && um.new_app_weight > 0,
            "new-application weight must be in (0, 1e6], got " + std::to_string(um.new_app_weight));
    require(in_range(um.burst_mean, 1, 1000),
            "burst mean must be in [1, 1000] jobs, got " + std::to_string(um.burst_mean));
    require(in_range(um.runtime_spread, 0, 5),
            "run-time spread must be in [0, 5], got " + std::to_string(um.runtime_spread));
    require(in_range(um.crash_prob, 0, 1),
            "crash probability must be in [0, 1], got " + std::to_string(um.crash_prob));
    require(in_range(um.hang_prob, 0, 1),
            "hang probability must be in [0, 1], got " + std::to_string(um.hang_prob));
    require(in_range(um.habit_share, 0, 1),
            "habit share must be in [0, 1], got " + std::to_string(um.habit_share));
    require(in_range(um.factor_min, 1, 1000) && in_range(um.factor_max, um.factor_min, 1000),
            "over-estimation factors need 1 <= min <= max <= 1000, got " +
                std::to_string(um.factor_min) + " and " + std::to_string(um.factor_max));
  }
}

}  // namespace

// ---- the generator ------------------------------------------------------------------------------

LublinGenerator::LublinGenerator(const LublinOptions& opts)
    : opts_(opts),
      rng_(opts.seed),
      user_rng_(opts.seed ^ USER_STREAM),
      arrival_scale_(opts.load_scale) {
  check_options(opts);
  const LublinUserModel& um = opts.user_model;
  if (um.users > 0) {
    // Each submission carries burst_mean jobs on average: submissions arrive burst_mean times
    // less often, jobs at the published rate.
    arrival_scale_ = opts.load_scale / um.burst_mean;
    require(arrival_scale_ >= MIN_LOAD_SCALE,
            "load_scale / burst mean (the submission rate) must be >= 0.001, got " +
                std::to_string(arrival_scale_));
    user_cdf_.resize(static_cast<size_t>(um.users));
    users_.resize(static_cast<size_t>(um.users));
    double total = 0;
    for (int64_t k = 0; k < um.users; ++k) {
      total += std::pow(static_cast<double>(k + 1), -um.activity_exponent);
      user_cdf_[static_cast<size_t>(k)] = total;
      User& u = users_[static_cast<size_t>(k)];
      u.factor = um.factor_min * std::pow(um.factor_max / um.factor_min, user_rng_.uniform());
      const double habit = user_rng_.uniform();  // drawn for every user: one stream position each
      if (user_rng_.uniform() < um.habit_share)
        u.habit_limit = lublin_round_limit(HABIT_MIN * std::pow(HABIT_MAX / HABIT_MIN, habit));
    }
  }

  switch (opts.types) {
    case LublinJobTypes::BATCH:
      streams_[BATCH].active = true;
      break;
    case LublinJobTypes::INTERACTIVE:
      streams_[INTERACTIVE].active = true;
      break;
    case LublinJobTypes::BOTH:
      streams_[BATCH].active = streams_[INTERACTIVE].active = true;
      break;
    case LublinJobTypes::TYPELESS:
      streams_[INTERACTIVE].active = true;
      break;
  }
  if (opts.types == LublinJobTypes::TYPELESS) {
    params_[INTERACTIVE] = params_[BATCH] = lublin_typeless_params();
  } else {
    params_[BATCH] = lublin_batch_params();
    params_[INTERACTIVE] = lublin_interactive_params();
  }

  // The size fits are for 128 nodes (UHI = 7 = log2 of the system). For another system we move
  // UMed and UHi by the same number of doublings, keeping each class's largest job relative to the
  // machine and the smallest parallel job (ULow) where it is; then keep ULow <= UMed <= UHi.
  const double shift = std::log2(static_cast<double>(opts.nodes)) - LUBLIN_REFERENCE_UHI;
  for (auto& p : params_) {
    p.uhi += shift;
    if (p.uhi <= p.ulow) {
      p.ulow = p.umed = p.uhi;  // too small a machine for the fitted range: one parallel size
    } else {
      p.umed = std::clamp(p.umed + shift, p.ulow, p.uhi);
    }
  }

  // Daily cycle (arrive_init): bucket i of the fitted day, i in [CYCLIC_DAY_START, +48), gets the
  // gamma(anum, bnum) mass of [i - 0.5, i + 0.5] and lands in slot (i - 1) mod 48; weights are
  // then normalised to mean 1 so that one point buys one bucket of an average day.
  for (int t = 0; t < 2; ++t) {
    double sum = 0;
    for (int i = LUBLIN_CYCLIC_DAY_START; i < LUBLIN_BUCKETS + LUBLIN_CYCLIC_DAY_START; ++i) {
      const double w = unnormalised_gamma_mass(i - 0.5, i + 0.5, params_[t].anum, params_[t].bnum);
      weights_[t][(i - 1) % LUBLIN_BUCKETS] = w;
      sum += w;
    }
    const double mean = sum / LUBLIN_BUCKETS;
    for (auto& w : weights_[t]) {
      w /= mean;
      // Always on: a zero weight would stall the arrival process in an endless bucket loop.
      if (!(w > 0.0 && std::isfinite(w)))
        throw ::mlprio::InvariantError("Lublin generator: daily-cycle weight is not positive");
    }
  }

  // As the reference, the first job of each stream arrives one inter-arrival after time 0, and
  // batch draws before interactive.
  for (int t : {BATCH, INTERACTIVE}) {
    streams_[t].bucket = opts.start_hour * LUBLIN_BUCKETS / 24;
    if (streams_[t].active) advance(t);
  }
}

// calc_next_arrive: ln(inter-arrival) ~ gamma(aarr * arar, barr) sized for the rush hours; its
// exponential, in buckets, is spent as points, each bucket costing its weight. Quiet buckets are
// cheap, so time passes through them quickly and few jobs arrive there. Unlike the reference, the
// stream time stays fractional (the reference truncates at each step, drifting ~0.5 s per job).
void LublinGenerator::advance(int type) {
  const LublinParams& p = params_[type];
  Stream& s = streams_[type];
  const auto& w = weights_[type];
  double gam = 0;
  do {
    gam = rng_.gamma(p.aarr * p.arar, p.barr);
  } while (gam > LUBLIN_MAX_LOG_INTERARRIVAL);
  s.points += std::exp(gam) / LUBLIN_SECONDS_IN_BUCKET / arrival_scale_;
  double elapsed = 0;
  while (s.points > w[s.bucket]) {
    s.points -= w[s.bucket];
    s.bucket = (s.bucket + 1) % LUBLIN_BUCKETS;
    elapsed += LUBLIN_SECONDS_IN_BUCKET;
  }
  const double remainder = s.points / w[s.bucket];
  elapsed += LUBLIN_SECONDS_IN_BUCKET * (remainder - s.remainder);
  s.remainder = remainder;
  s.time += elapsed;
}

// calc_number_of_nodes. One uniform decides serial (u <= serial), power of two
// (u <= serial + pow2) or any size, as in the reference, so "other" sizes may still happen to be
// powers of two. Capping at the system size is ours: power-of-two jobs stay powers of two.
int64_t LublinGenerator::draw_size(int type) {
  const LublinParams& p = params_[type];
  const double u = rng_.uniform();
  if (u <= p.serial_prob) return 1;
  const bool first = rng_.uniform() <= p.uprob;
  const double lo = first ? p.ulow : p.umed;
  const double hi = first ? p.umed : p.uhi;
  const double par = lo + rng_.uniform() * (hi - lo);
  if (u <= p.serial_prob + p.pow2_prob) {
    const double k = std::floor(par + 0.5);
    if (k <= 0) return 1;
    int64_t size = k >= 62 ? (int64_t{1} << 62) : (int64_t{1} << static_cast<int>(k));
    while (size > opts_.nodes) size >>= 1;
    return size;
  }
  const double size = std::floor(std::exp2(par) + 0.5);
  return std::clamp(static_cast<int64_t>(std::min(size, 4e18)), int64_t{1}, opts_.nodes);
}

// time_from_nodes: ln(runtime) ~ hyper-gamma whose first (short) component's weight falls with
// size, p = pa * size + pb, redrawn whole while above TOO_MUCH_TIME. Whole seconds, as the
// reference and SWF have them; always >= 1 since ln(runtime) >= 0.
double LublinGenerator::draw_runtime(int type, int64_t size) {
  const LublinParams& p = params_[type];
  const double mix = std::clamp(p.pa * static_cast<double>(size) + p.pb, 0.0, 1.0);
  double hg = 0;
  do {
    const bool first = rng_.uniform() <= mix;
    hg = first ? rng_.gamma(p.a1, p.b1) : rng_.gamma(p.a2, p.b2);
  } while (hg > LUBLIN_MAX_LOG_RUNTIME);
  return std::floor(std::exp(hg));
}

bool LublinGenerator::next(Job& job) {
  if (submission_.left > 0) {  // the rest of a submission's burst
    fill_user_job(job);
    return true;
  }
  // arrive(): the stream whose next arrival is earlier; interactive wins ties, as in the reference.
  int type = INTERACTIVE;
  if (streams_[BATCH].active &&
      (!streams_[INTERACTIVE].active || streams_[BATCH].time < streams_[INTERACTIVE].time))
    type = BATCH;
  const double submit = std::floor(streams_[type].time);
  advance(type);
  if (!users_.empty()) {
    start_submission(type, submit);
    fill_user_job(job);
    return true;
  }
  const int64_t size = draw_size(type);
  const double run = draw_runtime(type, size);
  fill_job(job, type, submit, size, run);
  switch (opts_.req_time) {
    case LublinReqTime::NONE:
      job.req_time = UNKNOWN;
      break;
    case LublinReqTime::EXACT:
      job.req_time = run;
      break;
    case LublinReqTime::FACTOR:
      job.req_time =
          std::ceil(run * opts_.req_time_factor / opts_.req_time_round) * opts_.req_time_round;
      break;
    case LublinReqTime::USER:
      break;  // refused without users by the constructor
  }
  return true;
}

void LublinGenerator::fill_job(Job& job, int type, double submit, int64_t size, double run) {
  job = Job{};
  job.id = next_id_++;
  job.submit = submit;
  job.run = run;
  job.alloc_nodes = job.req_nodes = size;
  job.alloc_procs = job.req_procs = size * opts_.procs_per_node;
  job.status = JobStatus::COMPLETED;
  job.queue = opts_.types == LublinJobTypes::TYPELESS ? -1 : type;
}

// Who submits, which application, how many copies (LublinUserModel).
void LublinGenerator::start_submission(int type, double submit) {
  const LublinUserModel& um = opts_.user_model;
  int64_t user = last_user_;
  if (user < 0 || !(user_rng_.uniform() < um.stickiness)) {
    const double x = user_rng_.uniform() * user_cdf_.back();
    user = std::upper_bound(user_cdf_.begin(), user_cdf_.end(), x) - user_cdf_.begin();
    user = std::min<int64_t>(user, um.users - 1);
  }
  last_user_ = user;
  User& u = users_[static_cast<size_t>(user)];
  auto& apps = u.apps[type];
  int app = u.last_app[type];
  if (app < 0 || !(user_rng_.uniform() < um.repeat_prob)) {
    const double n = static_cast<double>(u.submissions[type]);
    double x = user_rng_.uniform() * (um.new_app_weight + n);
    app = -1;
    for (size_t i = 0; i < apps.size() && x >= um.new_app_weight; ++i) {
      x -= static_cast<double>(apps[i].uses);
      if (x < um.new_app_weight) app = static_cast<int>(i);
    }
    if (app < 0) {  // a new application: a size and run time from the Lublin model of the class
      App a;
      a.size = draw_size(type);
      a.run = draw_runtime(type, a.size);
      a.req = lublin_round_limit(std::max(a.run * u.factor, u.habit_limit));
      apps.push_back(a);
      app = static_cast<int>(apps.size()) - 1;
    }
  }
  ++apps[static_cast<size_t>(app)].uses;
  ++u.submissions[type];
  u.last_app[type] = app;
  // 1 + geometric number of further copies with mean burst_mean - 1.
  int64_t jobs = 1;
  if (um.burst_mean > 1) {
    const double q = (um.burst_mean - 1.0) / um.burst_mean;
    const double extra = std::floor(std::log(user_rng_.uniform_pos()) / std::log(q));
    jobs += static_cast<int64_t>(std::min(extra, static_cast<double>(LUBLIN_MAX_BURST - 1)));
  }
  submission_ = {.type = type, .submit = submit, .user = user, .app = app, .left = jobs};
}

void LublinGenerator::fill_user_job(Job& job) {
  const LublinUserModel& um = opts_.user_model;
  Submission& s = submission_;
  --s.left;
  const App& a = users_[static_cast<size_t>(s.user)].apps[s.type][static_cast<size_t>(s.app)];
  const double max_run = std::floor(std::exp(LUBLIN_MAX_LOG_RUNTIME));
  double run = 0;
  JobStatus status = JobStatus::COMPLETED;
  const double crash = user_rng_.uniform();
  const double hang = user_rng_.uniform();
  // Laplace(0, 1): an exponential with a random sign; drawn for every job (one stream position).
  const double sign = user_rng_.uniform() < 0.5 ? -1.0 : 1.0;
  const double spread = sign * -std::log(user_rng_.uniform_pos());
  if (crash < um.crash_prob) {
    run = std::floor(std::exp(user_rng_.uniform() * std::log(60.0)));
    status = JobStatus::FAILED;
  } else {
    run = std::clamp(std::floor(a.run * std::exp(um.runtime_spread * spread)), 1.0, max_run);
  }
  double req = UNKNOWN;
  switch (opts_.req_time) {
    case LublinReqTime::NONE:
      break;
    case LublinReqTime::EXACT:
      req = run;
      break;
    case LublinReqTime::FACTOR:
      req = std::ceil(run * opts_.req_time_factor / opts_.req_time_round) * opts_.req_time_round;
      break;
    case LublinReqTime::USER:
      req = a.req;
      if (status == JobStatus::COMPLETED && hang < um.hang_prob) run = req;  // hangs until killed
      if (run >= req) {                                                      // killed at the limit
        run = req;
        status = JobStatus::TIMEOUT;
      }
      break;
  }
  fill_job(job, s.type, s.submit, a.size, run);
  job.req_time = req;
  job.status = status;
  job.user = static_cast<int32_t>(s.user + 1);
}

std::vector<Job> generate_lublin(const LublinOptions& opts, int64_t n_jobs) {
  if (n_jobs < 0)
    throw ::mlprio::UsageError("Lublin generator: n_jobs must be >= 0, got " +
                               std::to_string(n_jobs));
  LublinGenerator gen(opts);
  std::vector<Job> jobs(static_cast<size_t>(n_jobs));
  for (auto& j : jobs) gen.next(j);
  return jobs;
}

}  // namespace mlprio
