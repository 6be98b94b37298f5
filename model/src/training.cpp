// `mlprio-model train`: builds causal features for a trace, splits it by time (the first F of
// jobs by submit time train; the tail of that slice calibrates), fits XGBoost on log run time
// (anchored on a per-job baseline, tuned, early-stopped, optionally continued by mode-seeking
// rounds, the point chosen on the calibration slice by a criterion against the request and
// last-two baselines, then refitted on the whole training slice) and, when the trace has both
// outcomes, a failure classifier, and writes everything a predictor needs into one model
// document. Never shuffles across time; with nthread = 1 and a fixed seed the same trace gives
// the same bytes. model/README.md describes the method.
// One file (about 800 lines) because the steps run in one order over one training slice and its
// calibration tail, and each reads what the one before chose.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <sstream>

#include "mlprio/model/model_file.hpp"
#include "mlprio/util/errors.hpp"
#include "model_tool.hpp"
#include "xgb.hpp"

namespace mlprio::model {
namespace {

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

std::string num(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

void set_common(Booster& b, const TrainOptions& o, int max_depth, double min_child_weight) {
  b.set("tree_method", "hist");
  b.set("max_depth", std::to_string(max_depth));
  b.set("eta", num(o.eta));
  b.set("subsample", "0.8");
  b.set("colsample_bytree", "0.8");
  b.set("min_child_weight", num(min_child_weight));
  b.set("seed", std::to_string(o.seed));
  b.set("nthread", std::to_string(o.nthread));
  b.set("verbosity", "0");
}

bool final_status_known(JobStatus s) {
  return s != JobStatus::UNKNOWN_STATE && s != JobStatus::RUNNING && s != JobStatus::PENDING;
}

// The options every kind of model reads.
void check_common_options(const TrainOptions& opt) {
  if (!(opt.train_fraction > 0 && opt.train_fraction <= 1))
    throw ::mlprio::UsageError("--train-fraction must be in (0, 1], got " +
                               num(opt.train_fraction));
  if (!(opt.underpredict_penalty > 0))
    throw ::mlprio::UsageError("--underpredict-penalty must be > 0 (1 = symmetric), got " +
                               num(opt.underpredict_penalty));
  if (!(opt.upper_quantile > 0 && opt.upper_quantile < 1))
    throw ::mlprio::UsageError("--upper-quantile must be in (0, 1)");
  if (opt.kind != "xgboost" && opt.kind != "formula")
    throw ::mlprio::UsageError("--kind must be xgboost or formula, got " + opt.kind);
}

// The options only the XGBoost model reads (a formula model ignores them).
void check_xgboost_options(const TrainOptions& opt) {
  if (opt.objective != "reg:squarederror" && opt.objective != "reg:absoluteerror" &&
      opt.objective != "reg:pseudohubererror")
    throw ::mlprio::UsageError(
        "--objective must be reg:squarederror, reg:absoluteerror or reg:pseudohubererror");
  if (opt.blend != "none" && opt.blend != "within2x" && opt.blend != "mae" && opt.blend != "both")
    throw ::mlprio::UsageError("--blend must be both, mae, within2x or none, got " + opt.blend);
  if (opt.anchor != "similar" && opt.anchor != "last2" && opt.anchor != "request" &&
      opt.anchor != "none")
    throw ::mlprio::UsageError("--anchor must be similar, last2, request or none, got " +
                               opt.anchor);
  if (opt.rounds < 1) throw ::mlprio::UsageError("--rounds must be >= 1");
  if (opt.early_stopping_rounds < 0)
    throw ::mlprio::UsageError("--early-stopping-rounds must be >= 0");
}

// The training slice's jobs with a known run time, in submit order (at least 20).
std::vector<size_t> known_runtime_rows(const std::vector<Job>& jobs, size_t n_train) {
  std::vector<size_t> train;
  for (size_t i = 0; i < n_train; ++i)
    if (jobs[i].run >= 0) train.push_back(i);
  if (train.size() < 20)
    throw ::mlprio::UsageError("the training slice has " + std::to_string(train.size()) +
                               " jobs with a known run time; need at least 20");
  return train;
}

// The time-ordered slices of the training rows: fit on the head, calibrate on the tail.
struct Slices {
  std::vector<size_t> train, fit, calib;
  // The rows calibration is measured on: the fitting rows when the calibration slice is empty.
  const std::vector<size_t>& cal_idx() const { return calib.empty() ? fit : calib; }
};

Slices split_for_calibration(const std::vector<size_t>& train, double calib_fraction) {
  Slices s;
  s.train = train;
  const auto n_fit = std::max<size_t>(
      10,
      static_cast<size_t>(std::floor((1.0 - calib_fraction) * static_cast<double>(train.size()))));
  s.fit.assign(train.begin(),
               train.begin() + static_cast<std::ptrdiff_t>(std::min(n_fit, train.size())));
  s.calib.assign(train.begin() + static_cast<std::ptrdiff_t>(s.fit.size()), train.end());
  return s;
}

// Rows idx of the feature matrix, row-major, in that order.
std::vector<float> gather(const FeatureMatrix& X, const std::vector<size_t>& idx) {
  std::vector<float> m(idx.size() * N_FEATURES);
  for (size_t k = 0; k < idx.size(); ++k)
    std::copy_n(X.values.data() + idx[k] * N_FEATURES, N_FEATURES, m.data() + k * N_FEATURES);
  return m;
}

double log_run(const Job& j) {
  return std::log(std::max(j.run, 1.0));
}

// XGBoost's saved JSON model with its trees removed: a model whose margin is its base score.
std::string without_trees(const std::string& saved) {
  nlohmann::json m = nlohmann::json::parse(saved);
  auto& model = m.at("learner").at("gradient_booster").at("model");
  model["trees"] = nlohmann::json::array();
  model["tree_info"] = nlohmann::json::array();
  model.at("gbtree_model_param")["num_trees"] = "0";
  if (model.contains("iteration_indptr")) model["iteration_indptr"] = nlohmann::json::array({0});
  return m.dump();
}

// The margin anchors of rows idx (features Xm, in the same order) around base score `base`.
std::vector<float> anchors(MarginAnchor anchor, const std::vector<Job>& jobs,
                           const std::vector<size_t>& idx, const std::vector<float>& Xm,
                           double base) {
  std::vector<float> b(idx.size());
  for (size_t k = 0; k < idx.size(); ++k)
    b[k] = static_cast<float>(
        anchor_log(anchor, Xm.data() + k * N_FEATURES, jobs[idx[k]].req_time, base));
  return b;
}

// Modal continuation: more trees on top of a fitted candidate, each fitted by squared error
// with weights exp(-r^2 / (2 s^2)) of the current residuals r (normalised to mean 1), i.e.
// one mean-shift step per round towards the conditional *mode* of log run time (kernel mode
// regression, Gaussian kernel). s = log(2) / sqrt(3): the standard deviation of the
// within-2x window |r| <= log 2, so the kernel scores roughly what within-2x counts. Early
// stopped by the calibration slice's kernel loss mean(1 - exp(-r^2 / (2 s^2))); at most
// `rounds` trees in all.
double modal_kernel(double r) {
  static const double modal_s = std::log(2.0) / std::sqrt(3.0);
  return std::exp(-r * r / (2 * modal_s * modal_s));
}

// One modal round's weights on matrix d (labels y, current margins m), normalised to mean 1.
void set_modal_weights(DMatrix& d, const std::vector<float>& y, const std::vector<float>& m) {
  std::vector<float> wts(y.size());
  double sum = 0;
  for (size_t k = 0; k < y.size(); ++k) {
    wts[k] =
        static_cast<float>(modal_kernel(static_cast<double>(y[k]) - static_cast<double>(m[k])));
    sum += static_cast<double>(wts[k]);
  }
  const double scale = sum > 0 ? static_cast<double>(y.size()) / sum : 1.0;
  for (float& x : wts) x = static_cast<float>(static_cast<double>(x) * scale);
  d.set_weights(wts);
}

// Error of point predictions on the calibration slice: mean pinball loss in seconds (X * under
// + over; the MAE at X = 1), the MAE and the within-2x fraction.
struct PointErr {
  double pinball = 0, mae = 0, within2x = 0;
};

nlohmann::json err_json(const PointErr& e) {
  return nlohmann::json{{"pinball", e.pinball}, {"mae", e.mae}, {"within_2x", e.within2x}};
}

// A point choice: blend weight w with the last-two baseline, shifted by q_tau(r) or not, and
// its selection loss.
struct Choice {
  double w = 1.0;
  bool shifted = true;
  double loss = 0;
};

// One regressor candidate: trained round by round on the fitting slice; with early stopping
// the objective's own loss on the calibration slice (squared error of log run time; absolute
// error for the other objectives) is measured after every round (XGBoost's prediction cache
// makes each measurement one tree's work) and the trees up to the best round are kept
// (strictly better only: ties keep fewer trees). The point prediction is chosen afterwards
// (choose_blend): a smooth loss picks the tree count, the selection loss the point.
struct RegFit {
  int max_depth = 0;
  double min_child_weight = 0;
  int rounds_run = 0, trees = 0;
  double stop_loss = 0;
  std::string json;
  std::vector<float> mcal;
  double w = 1.0;
  bool shifted = true;
  double loss = 0;  // the selection loss (see choose_blend)
  nlohmann::json trials = nlohmann::json::array();
  bool modal = false;   // a modal continuation (fit_modal)
  int modal_trees = 0;  // of `trees`, how many the modal rounds added
};

// The run-time regressor's steps, sharing the fitting and calibration matrices: fit and
// early-stop candidates (fit_regressor, fit_modal), choose each one's point on the calibration
// slice (choose_blend), pick among the tuning grid (tune), describe the calibration, and refit
// the chosen configuration on the whole training slice (refit).
class RuntimeFitter {
 public:
  RuntimeFitter(const std::vector<Job>& jobs, const FeatureMatrix& X, const TrainOptions& opt,
                const Slices& s, double median_run, std::vector<std::string>& notes)
      : jobs_(jobs),
        opt_(opt),
        s_(s),
        cal_idx_(s.cal_idx()),
        median_run_(median_run),
        anchor_(anchor_from_name(opt.anchor)),
        Xfit_(gather(X, s.fit)),
        dfit_(Xfit_.data(), s.fit.size(), N_FEATURES),
        // Calibration: residuals in log space on data the trees never saw. The point prediction
        // is the tau-quantile with tau = X/(1+X), which minimises the pinball loss that charges
        // an under-prediction X times an over-prediction of the same size.
        tau_(opt.underpredict_penalty / (1.0 + opt.underpredict_penalty)),
        Xcal_(gather(X, cal_idx_)),
        dcal_(Xcal_.data(), cal_idx_.size(), N_FEATURES),
        n_cal_(static_cast<double>(cal_idx_.size())),
        early_stop_(opt.early_stopping_rounds > 0 && !s.calib.empty()) {
    double ysum = 0;
    for (size_t i : s.fit) {
      yfit_.push_back(static_cast<float>(log_run(jobs[i])));
      ysum += log_run(jobs[i]);
    }
    dfit_.set_labels(yfit_);
    base_score_ = ysum / static_cast<double>(s.fit.size());
    if (anchor_ != MarginAnchor::NONE)
      dfit_.set_base_margin(anchors(anchor_, jobs, s.fit, Xfit_, base_score_));
    if (s.calib.empty())
      notes.push_back(
          "calibration slice empty; calibrated on the fitting data (no early stopping)");
    if (anchor_ != MarginAnchor::NONE)
      dcal_.set_base_margin(anchors(anchor_, jobs, cal_idx_, Xcal_, base_score_));
    measure_calibration_rows();
    measure_baselines();
  }

  // Candidates: the tuning grid (shallow and heavily regularised first) or the one given, each
  // also continued by modal rounds when enabled; the lowest selection loss wins (ties keep the
  // earlier). Each candidate's summary is appended to `candidates`.
  RegFit tune(nlohmann::json& candidates) {
    std::vector<std::pair<int, double>> grid;
    if (opt_.tune && !s_.calib.empty()) {
      for (int d : TUNE_DEPTHS)
        for (double c : TUNE_MIN_CHILD_WEIGHTS) grid.emplace_back(d, c);
    } else {
      grid.emplace_back(opt_.max_depth, opt_.min_child_weight);
    }
    RegFit chosen;
    chosen.loss = std::numeric_limits<double>::infinity();
    // The anchor alone (no trees) competes first: on a small or drifting trace, trees fitted to
    // the fitting slice can make the anchor worse on later jobs, which the selection then sees.
    if (anchor_ != MarginAnchor::NONE && opt_.tune && early_stop_) {
      RegFit a = anchor_only();
      choose_blend(a);
      candidates.push_back(candidate_json(a));
      chosen = std::move(a);
    }
    for (const auto& [d, c] : grid) {
      RegFit f = fit_regressor(d, c);
      choose_blend(f);
      std::vector<RegFit> fits;
      if (opt_.modal && early_stop_ && f.trees < opt_.rounds) {
        RegFit g = fit_modal(f);
        choose_blend(g);
        fits.push_back(std::move(f));
        fits.push_back(std::move(g));
      } else {
        fits.push_back(std::move(f));
      }
      for (RegFit& h : fits) {
        candidates.push_back(candidate_json(h));
        if (h.loss < chosen.loss) chosen = std::move(h);
      }
    }
    return chosen;
  }

  static nlohmann::json candidate_json(const RegFit& h) {
    return {{"anchor_alone", h.trees == 0 && h.rounds_run == 0},
            {"max_depth", h.max_depth},
            {"min_child_weight", h.min_child_weight},
            {"modal", h.modal},
            {"rounds_run", h.rounds_run},
            {"trees", h.trees},
            {"modal_trees", h.modal_trees},
            {"blend_weight", h.w},
            {"shifted", h.shifted},
            {"calib_loss", h.loss}};
  }

  // The model document's "calibration" object for the chosen candidate.
  nlohmann::json calibration_json(const RegFit& chosen) const {
    const std::vector<double> resid = residuals(chosen.mcal, chosen.w);
    Calibration cal{chosen.shifted ? quantile(resid, tau_) : 0.0,
                    quantile(resid, opt_.upper_quantile), chosen.w, anchor_};
    return {{"tau", tau_},
            {"underpredict_penalty", opt_.underpredict_penalty},
            {"point_shift", cal.point_shift},
            {"upper_quantile", opt_.upper_quantile},
            {"upper_shift", cal.upper_shift},
            {"blend", opt_.blend},
            {"blend_weight", cal.blend_weight},
            {"margin_anchor", anchor_name(cal.anchor)},
            {"blend_trials", chosen.trials},
            {"n_calib", cal_idx_.size()}};
  }

  // Refit: the chosen configuration (depth, min_child_weight, tree counts, modal rounds) trained
  // again on the whole training slice, calibration slice included: the most recent jobs are the
  // most informative under drift (the failure classifier is refitted the same way). The
  // anchor, blend weight and shifts stay as calibrated; the trees see the same features.
  // Returns the refitted booster's JSON.
  std::string refit(const RegFit& chosen, const FeatureMatrix& X) const {
    if (chosen.trees == 0) return chosen.json;  // the anchor alone: nothing to refit
    const std::vector<size_t>& train = s_.train;
    const std::vector<float> Xall = gather(X, train);
    std::vector<float> yall;
    double ysum_all = 0;
    for (size_t i : train) {
      yall.push_back(static_cast<float>(log_run(jobs_[i])));
      ysum_all += log_run(jobs_[i]);
    }
    const double base_all = ysum_all / static_cast<double>(train.size());
    DMatrix dall(Xall.data(), train.size(), N_FEATURES);
    dall.set_labels(yall);
    if (anchor_ != MarginAnchor::NONE)
      dall.set_base_margin(anchors(anchor_, jobs_, train, Xall, base_all));
    Booster reg(&dall);
    set_common(reg, opt_, chosen.max_depth, chosen.min_child_weight);
    reg.set("objective", opt_.objective);
    reg.set("base_score", num(base_all));
    const int plain = chosen.trees - chosen.modal_trees;
    for (int it = 0; it < plain; ++it) XGB_CHECK(XGBoosterUpdateOneIter(reg.get(), it, dall.get()));
    if (chosen.modal_trees > 0) {
      reg.set("objective", "reg:squarederror");
      for (int it = 0; it < chosen.modal_trees; ++it) {
        set_modal_weights(dall, yall, reg.predict(dall, 1));
        XGB_CHECK(XGBoosterUpdateOneIter(reg.get(), plain + it, dall.get()));
      }
    }
    return reg.save_json();
  }

  // The "tuning" object of the training record: candidates, the selection rule and the two
  // baselines' errors on the calibration slice.
  nlohmann::json tuning_json(const nlohmann::json& candidates) const {
    const char* selection =
        opt_.blend == "within2x" ? "calibration within-2x"
        : opt_.blend == "both"
            ? "calibration max(pinball / best baseline pinball, (1 - within-2x) / "
              "(1 - best baseline within-2x))"
            : "calibration pinball loss (MAE at penalty 1)";
    return {{"candidates", candidates},
            {"selection", selection},
            {"calib_request", err_json(base_request_)},
            {"calib_last2", err_json(base_last2_)}};
  }

  const std::vector<float>& calib_features() const { return Xcal_; }

 private:
  // Per calibration row, computed once: run, request, log run and the log of the last-two
  // baseline (NaN when the row has neither a last-two mean nor a request).
  void measure_calibration_rows() {
    const size_t n = cal_idx_.size();
    cal_run_.resize(n);
    cal_req_.resize(n);
    cal_log_.resize(n);
    cal_base_.resize(n);
    for (size_t k = 0; k < n; ++k) {
      const Job& j = jobs_[cal_idx_[k]];
      cal_run_[k] = j.run;
      cal_req_[k] = j.req_time;
      cal_log_[k] = log_run(j);
      const double b = blend_baseline(Xcal_.data() + k * N_FEATURES, j.req_time);
      cal_base_[k] = std::isnan(b) ? b : std::log(std::max(b, 1.0));
    }
  }

  // The two baselines on the calibration rows (a row without a request or history falls back
  // to the training slice's median run time, as the formula model does), and the references
  // of the selection loss of `--blend both` (the default): the worse of the two ratios to the
  // better baseline, max(pinball / best baseline pinball, (1 - within2x) / (1 - best baseline
  // within2x)). Below 1 exactly when the point beats both the request and last-two on both the
  // pinball loss (the MAE at penalty 1) and the within-2x rate of the calibration slice; taking
  // the worse ratio balances the two instead of trading one away for the other.
  void measure_baselines() {
    base_request_ = error_of([&](size_t k) { return cal_req_[k] > 0 ? cal_req_[k] : median_run_; });
    base_last2_ = error_of(
        [&](size_t k) { return std::isnan(cal_base_[k]) ? median_run_ : std::exp(cal_base_[k]); });
    ref_pinball_ = std::max(std::min(base_request_.pinball, base_last2_.pinball), 1e-9);
    ref_miss_ =
        std::max(1.0 - std::max(base_request_.within2x, base_last2_.within2x), 0.5 / n_cal_);
  }

  // Blended log prediction of calibration row k at weight w, before the shift (blend_log()):
  // the residuals log run - that.
  std::vector<double> residuals(const std::vector<float>& mcal, double w) const {
    std::vector<double> r(cal_idx_.size());
    for (size_t k = 0; k < cal_idx_.size(); ++k) {
      const double m = static_cast<double>(mcal[k]);
      const double z =
          (w == 1.0 || std::isnan(cal_base_[k])) ? m : w * m + (1.0 - w) * cal_base_[k];
      r[k] = cal_log_[k] - z;
    }
    return r;
  }

  // Error of point predictions point(k) (seconds, capped by the request here) on the
  // calibration slice.
  template <class Point>
  PointErr error_of(Point&& point) const {
    PointErr e;
    size_t within = 0;
    for (size_t k = 0; k < cal_idx_.size(); ++k) {
      double p = point(k);
      if (cal_req_[k] > 0) p = std::min(p, cal_req_[k]);
      const double a = std::max(cal_run_[k], 1.0), q = std::max(p, 1.0);
      within += (q <= 2 * a && a <= 2 * q) ? 1 : 0;
      const double d = cal_run_[k] - p;
      e.mae += std::abs(d);
      e.pinball += d > 0 ? opt_.underpredict_penalty * d : -d;
    }
    e.mae /= n_cal_;
    e.pinball /= n_cal_;
    e.within2x = static_cast<double>(within) / n_cal_;
    return e;
  }

  // The model's point prediction exp(log_run - r + shift).
  PointErr point_error(const std::vector<double>& r, double shift) const {
    return error_of([&](size_t k) { return std::exp(cal_log_[k] - r[k] + shift); });
  }

  double selection_loss(const PointErr& e) const {
    if (opt_.blend == "within2x") return -e.within2x;
    if (opt_.blend == "both")
      return std::max(e.pinball / ref_pinball_, (1.0 - e.within2x) / ref_miss_);
    return e.pinball;
  }

  // The point choices a candidate is scored over: w on a 0.05 grid (1 = the plain model; only
  // 1 with "none"), each with the shift q_tau(r) and (except "none", or a penalty other than 1,
  // which must move the point) without it: a shifted copy of the baseline is no longer the
  // baseline (w = 0 unshifted *is* last-two), and being within 2x rewards landing on one mode,
  // not the median. Ties keep the earlier (larger w, shifted).
  Choice best_choice(const std::vector<float>& mcal, nlohmann::json* trials) const {
    Choice best;
    best.loss = std::numeric_limits<double>::infinity();
    for (int step = 20; step >= 0; --step) {
      const double w = step / 20.0;
      if (opt_.blend == "none" && step != 20) break;
      const std::vector<double> r = residuals(mcal, w);
      for (const bool shifted : {true, false}) {
        // Unshifted only at the symmetric penalty: an asymmetric one acts through the shift.
        if (!shifted && (opt_.blend == "none" || opt_.underpredict_penalty != 1.0)) continue;
        const PointErr e = point_error(r, shifted ? quantile(r, tau_) : 0.0);
        const double loss = selection_loss(e);
        if (trials != nullptr && opt_.blend != "none")
          trials->push_back({{"w", w},
                             {"shifted", shifted},
                             {"calib_mae", e.mae},
                             {"calib_within_2x", e.within2x},
                             {"loss", loss}});
        if (loss < best.loss) best = {w, shifted, loss};
      }
    }
    return best;
  }

  // Blend weight with the last-two baseline and the shift, chosen on the calibration slice only
  // (jobs before every test job) by the selection loss above.
  void choose_blend(RegFit& f) const {
    const Choice c = best_choice(f.mcal, &f.trials);
    f.w = c.w;
    f.shifted = c.shifted;
    f.loss = c.loss;
  }

  RegFit fit_regressor(int max_depth, double min_child_weight) {
    RegFit f;
    f.max_depth = max_depth;
    f.min_child_weight = min_child_weight;
    Booster reg(&dfit_);
    set_common(reg, opt_, max_depth, min_child_weight);
    reg.set("objective", opt_.objective);
    reg.set("base_score", num(base_score_));
    double best = std::numeric_limits<double>::infinity();
    int best_it = opt_.rounds - 1;
    for (int it = 0; it < opt_.rounds; ++it) {
      XGB_CHECK(XGBoosterUpdateOneIter(reg.get(), it, dfit_.get()));
      f.rounds_run = it + 1;
      if (!early_stop_) continue;
      const std::vector<float> m = reg.predict(dcal_, 1);
      double loss = 0;
      for (size_t k = 0; k < m.size(); ++k) {
        const double d = cal_log_[k] - static_cast<double>(m[k]);
        loss += opt_.objective == "reg:squarederror" ? d * d : std::abs(d);
      }
      if (loss < best) {
        best = loss;
        best_it = it;
      } else if (it - best_it >= opt_.early_stopping_rounds) {
        break;
      }
    }
    f.trees = best_it + 1;
    f.stop_loss = best;
    f.json = f.trees == f.rounds_run ? reg.save_json() : reg.save_json_rounds(f.trees);
    return with_calibration_margins(std::move(f));
  }

  // The candidate without trees: its margin is the anchor (the base score where a row has none),
  // saved as a booster whose trees were removed (XGBoost cannot slice down to zero rounds).
  RegFit anchor_only() {
    Booster reg(&dfit_);
    set_common(reg, opt_, 1, 1.0);
    reg.set("objective", opt_.objective);
    reg.set("base_score", num(base_score_));
    XGB_CHECK(XGBoosterUpdateOneIter(reg.get(), 0, dfit_.get()));
    RegFit f;
    f.json = without_trees(reg.save_json());
    f.mcal = anchors(anchor_, jobs_, cal_idx_, Xcal_, base_score_);
    return f;
  }

  // The modal continuation of `base` (see modal_kernel).
  RegFit fit_modal(const RegFit& base) {
    if (!dfit_modal_) {
      dfit_modal_ = std::make_unique<DMatrix>(Xfit_.data(), s_.fit.size(), N_FEATURES);
      dfit_modal_->set_labels(yfit_);
      if (anchor_ != MarginAnchor::NONE)
        dfit_modal_->set_base_margin(anchors(anchor_, jobs_, s_.fit, Xfit_, base_score_));
    }
    RegFit f;
    f.max_depth = base.max_depth;
    f.min_child_weight = base.min_child_weight;
    f.modal = true;
    Booster reg(dfit_modal_.get());
    reg.load_json(base.json);
    set_common(reg, opt_, base.max_depth, base.min_child_weight);
    reg.set("objective", "reg:squarederror");
    double best = std::numeric_limits<double>::infinity();
    int best_it = -1;
    // `--rounds` bounds the whole ensemble (plain + modal trees): the deployed walker's cost.
    const int max_modal = opt_.rounds - base.trees;
    for (int it = 0; it <= max_modal; ++it) {
      if (early_stop_) {
        const std::vector<float> m = reg.predict(dcal_, 1);
        double loss = 0;
        for (size_t k = 0; k < m.size(); ++k)
          loss += 1.0 - modal_kernel(cal_log_[k] - static_cast<double>(m[k]));
        if (loss < best) {
          best = loss;
          best_it = it;
        } else if (it - best_it >= opt_.early_stopping_rounds) {
          break;
        }
      }
      if (it == max_modal) break;
      set_modal_weights(*dfit_modal_, yfit_, reg.predict(*dfit_modal_, 1));
      XGB_CHECK(XGBoosterUpdateOneIter(reg.get(), base.trees + it, dfit_modal_->get()));
      f.rounds_run = it + 1;
    }
    f.modal_trees = best_it;
    f.trees = base.trees + best_it;
    f.stop_loss = best;
    f.json = reg.save_json_rounds(f.trees);
    return with_calibration_margins(std::move(f));
  }

  // f with the kept trees' margins on the calibration slice.
  RegFit with_calibration_margins(RegFit f) const {
    Booster kept;
    kept.load_json(f.json);
    f.mcal = kept.predict(dcal_, 1);
    return f;
  }

  const std::vector<Job>& jobs_;
  const TrainOptions& opt_;
  const Slices& s_;
  const std::vector<size_t>& cal_idx_;
  const double median_run_;
  const MarginAnchor anchor_;
  const std::vector<float> Xfit_;
  std::vector<float> yfit_;
  DMatrix dfit_;
  double base_score_ = 0;
  std::unique_ptr<DMatrix> dfit_modal_;  // made on the first modal continuation
  const double tau_;
  const std::vector<float> Xcal_;
  DMatrix dcal_;
  const double n_cal_;
  const bool early_stop_;
  std::vector<double> cal_run_, cal_req_, cal_log_, cal_base_;
  PointErr base_request_, base_last2_;
  double ref_pinball_ = 0, ref_miss_ = 0;
};

// Failure classifier on the training slice's jobs with a known final state (the first
// n_train jobs; those before first_cal fit, the rest calibrate). With early stopping the
// number of rounds is chosen by log loss on the calibration slice's such jobs (trained on the
// fitting slice's), then the classifier is refitted on the whole training slice with that many
// rounds. Writes doc["booster_fail"] (null when skipped) and its counts into `training`.
void fit_failure_model(const std::vector<Job>& jobs, const FeatureMatrix& X,
                       const TrainOptions& opt, size_t n_train, size_t first_cal,
                       nlohmann::json& doc, nlohmann::json& training,
                       std::vector<std::string>& notes) {
  std::vector<size_t> cls, cls_fit, cls_cal;
  size_t n_fail = 0;
  for (size_t i = 0; i < n_train; ++i)
    if (final_status_known(jobs[i].status)) {
      cls.push_back(i);
      (i < first_cal ? cls_fit : cls_cal).push_back(i);
      n_fail += is_failure(jobs[i].status) ? 1 : 0;
    }
  if (n_fail == 0 || n_fail == cls.size() || cls.size() < 20) {
    notes.push_back("failure classifier skipped: the training slice has " +
                    std::to_string(cls.size()) + " jobs with a known final state, " +
                    std::to_string(n_fail) + " of them failures (needs both classes)");
    doc["booster_fail"] = nullptr;
    return;
  }
  auto labels = [&](const std::vector<size_t>& idx) {
    std::vector<float> y;
    for (size_t i : idx) y.push_back(is_failure(jobs[i].status) ? 1.0f : 0.0f);
    return y;
  };
  auto make_clf = [&](const DMatrix& d) {
    auto b = std::make_unique<Booster>(&d);
    set_common(*b, opt, opt.max_depth, opt.min_child_weight);
    b->set("objective", "binary:logistic");
    return b;
  };
  int clf_rounds = opt.rounds;
  size_t fit_fail = 0;
  for (size_t i : cls_fit) fit_fail += is_failure(jobs[i].status) ? 1 : 0;
  if (opt.early_stopping_rounds > 0 && !cls_cal.empty() && fit_fail > 0 &&
      fit_fail < cls_fit.size()) {
    const std::vector<float> Xf = gather(X, cls_fit), Xv = gather(X, cls_cal);
    const std::vector<float> yv = labels(cls_cal);
    DMatrix df(Xf.data(), cls_fit.size(), N_FEATURES);
    df.set_labels(labels(cls_fit));
    DMatrix dv(Xv.data(), cls_cal.size(), N_FEATURES);
    auto clf = make_clf(df);
    double best = std::numeric_limits<double>::infinity();
    int best_it = opt.rounds - 1;
    for (int it = 0; it < opt.rounds; ++it) {
      XGB_CHECK(XGBoosterUpdateOneIter(clf->get(), it, df.get()));
      const std::vector<float> m = clf->predict(dv, 1);
      double ll = 0;  // log loss from the margin, stable for large |m|
      for (size_t k = 0; k < m.size(); ++k) {
        const double z = yv[k] > 0.5f ? -static_cast<double>(m[k]) : static_cast<double>(m[k]);
        ll += z > 0 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z));
      }
      if (ll < best) {
        best = ll;
        best_it = it;
      } else if (it - best_it >= opt.early_stopping_rounds) {
        break;
      }
    }
    clf_rounds = best_it + 1;
    training["fail_calib_logloss"] = best / static_cast<double>(cls_cal.size());
  }
  const std::vector<float> Xc = gather(X, cls);
  DMatrix dc(Xc.data(), cls.size(), N_FEATURES);
  dc.set_labels(labels(cls));
  auto clf = make_clf(dc);
  for (int it = 0; it < clf_rounds; ++it)
    XGB_CHECK(XGBoosterUpdateOneIter(clf->get(), it, dc.get()));
  doc["booster_fail"] = base64_encode(clf->save_json());
  training["n_fail_train"] = n_fail;
  training["n_status_known_train"] = cls.size();
  training["fail_trees"] = clf_rounds;
}

// Calibration-slice metrics, measured through the predictor that will be deployed (after a
// refit its trees have seen the calibration slice: "refit" says so).
nlohmann::json calibration_metrics(const nlohmann::json& doc, const std::vector<Job>& jobs,
                                   const std::vector<size_t>& cal_idx,
                                   const std::vector<float>& Xcal) {
  const auto pred = make_predictor(doc);
  std::vector<Job> cjobs;
  for (size_t i : cal_idx) cjobs.push_back(jobs[i]);
  std::vector<Prediction> out(cjobs.size());
  pred->predict_rows(Xcal, cjobs, out);
  double abs_err = 0;
  size_t under = 0;
  for (size_t k = 0; k < cjobs.size(); ++k) {
    abs_err += std::abs(out[k].runtime - cjobs[k].run);
    under += out[k].runtime < cjobs[k].run ? 1 : 0;
  }
  return {
      {"calib_mae", abs_err / static_cast<double>(cjobs.size())},
      {"calib_underpredict_rate", static_cast<double>(under) / static_cast<double>(cjobs.size())}};
}

nlohmann::json training_params(const TrainOptions& opt, const RegFit& chosen, bool refitted) {
  return {{"rounds", opt.rounds},
          {"early_stopping_rounds", opt.early_stopping_rounds},
          {"tune", opt.tune},
          {"max_depth", chosen.max_depth},
          {"min_child_weight", chosen.min_child_weight},
          {"runtime_trees", chosen.trees},
          {"modal_trees", chosen.modal_trees},
          {"margin_anchor", opt.anchor},
          {"modal", opt.modal},
          {"refit", refitted},
          {"eta", opt.eta},
          {"seed", opt.seed},
          {"nthread", opt.nthread},
          {"objective", opt.objective + " on log(max(run,1))"}};
}

}  // namespace

double trace_epoch_offset(const Trace& t) {
  return t.header.unix_start_time > 0 ? static_cast<double>(t.header.unix_start_time) : 0.0;
}

nlohmann::json train_model(const Trace& trace, const std::string& trace_sha256,
                           const TrainOptions& opt, std::vector<std::string>& notes) {
  check_common_options(opt);
  const auto& jobs = trace.jobs;
  UserHistory snapshot;
  const FeatureMatrix X = build_features(jobs, trace.names, trace_epoch_offset(trace), &snapshot);
  const auto n_train =
      static_cast<size_t>(std::floor(opt.train_fraction * static_cast<double>(jobs.size())));
  const std::vector<size_t> train = known_runtime_rows(jobs, n_train);

  nlohmann::json doc = model_document_header(opt.kind);
  nlohmann::json training;
  training["trace"] = std::filesystem::path(trace.path).filename().string();
  training["trace_sha256"] = trace_sha256;
  training["trace_format"] = std::string(trace_format_name(trace.format));
  training["window"] = {jobs[train.front()].submit, jobs[train.back()].submit};
  training["n_jobs"] = jobs.size();
  training["n_train"] = train.size();
  training["train_fraction"] = opt.train_fraction;
  doc["user_history"] = history_to_json(snapshot);

  std::vector<double> train_runs;
  for (size_t i : train) train_runs.push_back(jobs[i].run);
  const double median_run = quantile(train_runs, 0.5);

  if (opt.kind == "formula") {
    doc["formula"] = {{"name", "last2_capped_by_request"}, {"default_runtime", median_run}};
    doc["training"] = training;
    return doc;
  }

  // Fit on the head of the training slice, calibrate on its tail: both in time order.
  const Slices s = split_for_calibration(train, opt.calib_fraction);
  check_xgboost_options(opt);
  RuntimeFitter runtime(jobs, X, opt, s, median_run, notes);
  nlohmann::json candidates = nlohmann::json::array();
  RegFit chosen = runtime.tune(candidates);
  doc["calibration"] = runtime.calibration_json(chosen);
  const bool refitted = opt.refit && !s.calib.empty();
  if (refitted) chosen.json = runtime.refit(chosen, X);
  doc["booster_runtime"] = base64_encode(chosen.json);
  training["tuning"] = runtime.tuning_json(candidates);

  fit_failure_model(jobs, X, opt, n_train, s.calib.empty() ? n_train : s.calib.front(), doc,
                    training, notes);

  training["metrics"] = calibration_metrics(doc, jobs, s.cal_idx(), runtime.calib_features());
  training["params"] = training_params(opt, chosen, refitted);
  training["n_fit"] = s.fit.size();
  doc["training"] = training;
  return doc;
}

}  // namespace mlprio::model
