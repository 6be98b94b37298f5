// `mlprio-replay tune --slurm-conf`: chooses what a site can deploy, scored by the deployed-stack
// replay (slurm_replay.hpp). A candidate is the site's own slurm.conf with other values for the
// lines that interact with SITE (PriorityWeightAge, PriorityMaxAge, PriorityWeightFairshare,
// PriorityWeightJobSize), site_factor/mlprio's weight, and the model file's score settings that
// shape SITE (size, failure and request weights). Every candidate is replayed on many windows
// drawn from the training part, at several loads, beside the site's stock configuration on the
// same windows; a candidate is judged by the median over windows of its mean bounded slowdown
// relative to the stock's (one noisy window cannot decide), under a bound on the upper quartile
// of its max-wait ratios, and the candidate with the fewest changed lines wins among those
// within a tolerance of the best. The stock configuration is a candidate itself, so the choice
// is never worse than it on the training windows. Nothing here needs MPI; each (candidate,
// window) replay is independent, which the command distributes over ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mlprio/jobs/trace.hpp"
#include "mlprio/model/predictor.hpp"
#include "mlprio/replay/slurm_conf.hpp"
#include "mlprio/replay/slurm_replay.hpp"
#include "mlprio/replay/spec.hpp"
#include "mlprio/replay/tune.hpp"

namespace mlprio::replay {

struct StackCandidate {
  double site_weight = 0;  // site_factor/mlprio's weight=; 0: the plugin is not loaded
  double weight_age = 0, weight_fairshare = 0, weight_job_size = 0;
  int64_t max_age = 0;       // PriorityMaxAge, seconds
  model::ScoreConfig score;  // the model file's policy score: SITE's shape
  int changes = 0;           // settings that differ from the site's: fewer wins a near tie
  bool stock = false;        // the site's configuration itself, replayed as it is
};

// "site_weight=... age=W/MAXAGE fairshare=... job_size=... size=... fail=... request=..."
std::string describe(const StackCandidate& c);

// The site's own configuration as a candidate (its SITE weight when it loads the plugin).
StackCandidate stock_candidate(const SlurmStack& stock, const model::ScoreConfig& score);

// The configuration `c` stands for: `stock` with its values, the plugin loaded with `model_path`
// when site_weight > 0 (and removed when 0).
SlurmStack candidate_stack(const SlurmStack& stock, const StackCandidate& c,
                           const std::string& model_path);

// Stage 1: SITE's weight x the age term that bounds what SITE can hold back (the stock age, or
// a weight at least SITE's reaching it after 1, 3 or 7 days). Stage 2 around `best`: fair share
// at the stock weight or half of it x the job size term on or off. Stage 3 (SITE loaded only):
// the score's size and request weights. Each stage lists its incoming candidate first, so a
// stage can keep it. Age and fair-share variants need slurmdbd (without it Slurm forces those
// weights to 0): without it they are not listed. `score` is the model file's policy score, from
// which changes are counted.
inline const std::vector<double> DEFAULT_SITE_WEIGHTS = {0, 1000, 2500, 5000, 10000, 20000};
std::vector<StackCandidate> stack_stage1(const SlurmStack& stock, const StackCandidate& base,
                                         const std::vector<double>& site_weights);
std::vector<StackCandidate> stack_stage2(const SlurmStack& stock, const StackCandidate& best,
                                         const model::ScoreConfig& score);
std::vector<StackCandidate> stack_stage3(const SlurmStack& stock, const StackCandidate& best,
                                         const model::ScoreConfig& score);

// One replay as the choice compares them (three doubles: the command sums them over ranks).
struct StackOutcome {
  double avg_bsld = 0, max_wait = 0, p99_wait = 0;
};

// What every candidate's replay shares: the site's stack, the release, the trace and its model.
struct StackTuneContext {
  const SlurmStack* stock = nullptr;
  int release = 2605;
  const Trace* trace = nullptr;
  const ReplaySetup* setup = nullptr;
  SlurmModelCache* models = nullptr;
  std::string model_path;  // the model the candidates' plugin loads
};

// Replays window `w` (load-scaled when w.load != 1) under candidate `c`.
StackOutcome replay_stack(const StackTuneContext& ctx, const StackCandidate& c,
                          const TuneWindow& w);

struct StackVerdict {
  size_t best = 0;        // index into the candidates
  double bsld_ratio = 1;  // median over windows of avg_bsld / the stock's
  double bsld_p25 = 1, bsld_p75 = 1;
  double max_wait_ratio = 1;  // a quantile over windows of max_wait / max(stock's, floor)
  double worst_max_wait_ratio = 1;
  size_t feasible = 0;  // candidates within the bound
  size_t deciding = 0;  // windows the median was taken over (see deciding_windows)
};
// The windows that can tell the candidates apart: those on which some candidate's mean bounded
// slowdown differs from the stock's. Where none does (no queue forms, so every order starts every
// job at once), a window says nothing about the choice; counted in a median it would pull every
// candidate's ratio towards 1 and hide what the windows with a queue show.
std::vector<bool> deciding_windows(const std::vector<StackOutcome>& outcomes,
                                   const std::vector<StackOutcome>& stock, size_t windows);

// The fewest deciding windows a median is taken over: with three, no single window decides it.
inline constexpr size_t MIN_DECIDING_WINDOWS = 3;

// outcomes[c * W + w], stock[w]. A candidate's bsld figure is the median of its ratios over the
// deciding windows (1 when there are fewer than MIN_DECIDING_WINDOWS: the stock, with the fewest
// changes, then wins). A
// candidate's max-wait statistic is the `max_wait_quantile`
// (0.75: the upper quartile, 1: the worst window) of its windows' max-wait ratios. Among the
// candidates whose statistic is within `max_wait_ratio`, the lowest median bsld ratio; then,
// among those within (1 + tolerance) of it, the fewest changes (ties: the lower ratio, then the
// earlier). When none qualifies: the one with the smallest max-wait statistic.
StackVerdict pick_stack(const std::vector<StackOutcome>& outcomes,
                        const std::vector<StackOutcome>& stock, size_t windows,
                        const std::vector<StackCandidate>& candidates, double max_wait_ratio,
                        double max_wait_floor, double tolerance, double max_wait_quantile = 0.75);

// The per-window statistics of candidate `c` against the stock: ratios of avg_bsld (over the
// windows `keep` marks; every window when it is empty) and of max_wait (against max(stock's,
// floor)).
std::vector<double> bsld_ratios(const std::vector<StackOutcome>& outcomes,
                                const std::vector<StackOutcome>& stock, size_t windows, size_t c,
                                const std::vector<bool>& keep = {});
std::vector<double> max_wait_ratios(const std::vector<StackOutcome>& outcomes,
                                    const std::vector<StackOutcome>& stock, size_t windows,
                                    size_t c, double floor);
// The q-quantile (0..1) of `v` with linear interpolation; 1 for an empty list.
double quantile(std::vector<double> v, double q);

// The site's slurm.conf text with the candidate's lines: the lines of the keys it sets are
// commented out where they stand, and the chosen values follow at the end under a comment that
// says where they came from (`provenance`). Slurm, like read_slurm_conf, takes the last value of
// a key given twice, so a key set in an Included file is overridden too.
std::string tuned_conf_text(const std::string& site_text, const SlurmStack& stock,
                            const StackCandidate& c, const std::string& model_path,
                            const std::string& provenance);

}  // namespace mlprio::replay
