// `mlprio-model train`: builds causal features for a trace, splits it by time (the first F of
// jobs by submit time train; the tail of that slice calibrates), fits XGBoost on log run time
// and, when the trace has both outcomes, a failure classifier, and writes everything a
// predictor needs into one model document. Never shuffles across time; with nthread = 1 and a
// fixed seed the same trace gives the same bytes.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <sstream>

#include "model_tool.hpp"
#include "mlprio/model/model_file.hpp"
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

}  // namespace

double trace_epoch_offset(const Trace& t) {
  return t.header.unix_start_time > 0 ? static_cast<double>(t.header.unix_start_time) : 0.0;
}

nlohmann::json train_model(const Trace& trace, const std::string& trace_sha256,
                           const TrainOptions& opt, std::vector<std::string>& notes) {
  if (!(opt.train_fraction > 0 && opt.train_fraction <= 1))
    throw std::invalid_argument("--train-fraction must be in (0, 1], got " + num(opt.train_fraction));
  if (!(opt.underpredict_penalty > 0))
    throw std::invalid_argument("--underpredict-penalty must be > 0 (1 = symmetric), got " +
                                num(opt.underpredict_penalty));
  if (!(opt.upper_quantile > 0 && opt.upper_quantile < 1))
    throw std::invalid_argument("--upper-quantile must be in (0, 1)");
  if (opt.kind != "xgboost" && opt.kind != "formula")
    throw std::invalid_argument("--kind must be xgboost or formula, got " + opt.kind);

  const auto& jobs = trace.jobs;
  UserHistory snapshot;
  const FeatureMatrix X = build_features(jobs, trace.names, trace_epoch_offset(trace), &snapshot);
  const auto n_train = static_cast<size_t>(std::floor(opt.train_fraction * static_cast<double>(jobs.size())));

  std::vector<size_t> train;  // jobs with a known run time, in submit order
  for (size_t i = 0; i < n_train; ++i)
    if (jobs[i].run >= 0) train.push_back(i);
  if (train.size() < 20)
    throw std::invalid_argument("the training slice has " + std::to_string(train.size()) +
                                " jobs with a known run time; need at least 20");

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
  const auto n_fit = std::max<size_t>(
      10, static_cast<size_t>(std::floor((1.0 - opt.calib_fraction) * static_cast<double>(train.size()))));
  const std::vector<size_t> fit(train.begin(), train.begin() + static_cast<std::ptrdiff_t>(std::min(n_fit, train.size())));
  const std::vector<size_t> calib(train.begin() + static_cast<std::ptrdiff_t>(fit.size()), train.end());
  auto gather = [&](const std::vector<size_t>& idx) {
    std::vector<float> m(idx.size() * N_FEATURES);
    for (size_t k = 0; k < idx.size(); ++k)
      std::copy_n(X.values.data() + idx[k] * N_FEATURES, N_FEATURES, m.data() + k * N_FEATURES);
    return m;
  };
  auto log_run = [&](size_t i) { return std::log(std::max(jobs[i].run, 1.0)); };

  if (opt.objective != "reg:squarederror" && opt.objective != "reg:absoluteerror" &&
      opt.objective != "reg:pseudohubererror")
    throw std::invalid_argument("--objective must be reg:squarederror, reg:absoluteerror or reg:pseudohubererror");
  if (opt.blend != "none" && opt.blend != "within2x" && opt.blend != "mae")
    throw std::invalid_argument("--blend must be none, within2x or mae, got " + opt.blend);
  if (opt.rounds < 1) throw std::invalid_argument("--rounds must be >= 1");
  if (opt.early_stopping_rounds < 0) throw std::invalid_argument("--early-stopping-rounds must be >= 0");

  const std::vector<float> Xfit = gather(fit);
  std::vector<float> yfit;
  double ysum = 0;
  for (size_t i : fit) {
    yfit.push_back(static_cast<float>(log_run(i)));
    ysum += log_run(i);
  }
  DMatrix dfit(Xfit.data(), fit.size(), N_FEATURES);
  dfit.set_labels(yfit);

  // Calibration: residuals in log space on data the trees never saw. The point prediction is
  // the tau-quantile with tau = X/(1+X), which minimises the pinball loss that charges an
  // under-prediction X times an over-prediction of the same size.
  const double tau = opt.underpredict_penalty / (1.0 + opt.underpredict_penalty);
  const std::vector<size_t>& cal_idx = calib.empty() ? fit : calib;
  if (calib.empty()) notes.push_back("calibration slice empty; calibrated on the fitting data (no early stopping)");
  const std::vector<float> Xcal = gather(cal_idx);
  DMatrix dcal(Xcal.data(), cal_idx.size(), N_FEATURES);
  const double n_cal = static_cast<double>(cal_idx.size());
  const bool early_stop = opt.early_stopping_rounds > 0 && !calib.empty();

  // Blended log prediction of calibration row k at weight w, before the shift.
  auto residuals = [&](const std::vector<float>& mcal, double w) {
    std::vector<double> r;
    r.reserve(cal_idx.size());
    for (size_t k = 0; k < cal_idx.size(); ++k) {
      const Job& j = jobs[cal_idx[k]];
      const double z = blend_log(static_cast<double>(mcal[k]),
                                 blend_baseline(Xcal.data() + k * N_FEATURES, j.req_time), w);
      r.push_back(log_run(cal_idx[k]) - z);
    }
    return r;
  };
  // Error of the point prediction exp(log_run - r + shift), capped by the request, on the
  // calibration slice: mean pinball loss in seconds (X * under + over; the MAE at X = 1), the
  // MAE and the within-2x fraction.
  struct PointErr { double pinball = 0, mae = 0, within2x = 0; };
  auto point_error = [&](const std::vector<double>& r, double shift) {
    PointErr e;
    size_t within = 0;
    for (size_t k = 0; k < cal_idx.size(); ++k) {
      const Job& j = jobs[cal_idx[k]];
      double p = std::exp(log_run(cal_idx[k]) - r[k] + shift);
      if (j.req_time > 0) p = std::min(p, j.req_time);
      const double a = std::max(j.run, 1.0), q = std::max(p, 1.0);
      within += (q <= 2 * a && a <= 2 * q) ? 1 : 0;
      const double d = j.run - p;
      e.mae += std::abs(d);
      e.pinball += d > 0 ? opt.underpredict_penalty * d : -d;
    }
    e.mae /= n_cal;
    e.pinball /= n_cal;
    e.within2x = static_cast<double>(within) / n_cal;
    return e;
  };

  // One regressor candidate: trained round by round on the fitting slice; with early stopping
  // the calibrated point's pinball loss on the calibration slice is measured after every round
  // (XGBoost's prediction cache makes each measurement one tree's work) and the trees up to the
  // best round are kept (strictly better only: ties keep fewer trees).
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
  };
  auto fit_regressor = [&](int max_depth, double min_child_weight) {
    RegFit f;
    f.max_depth = max_depth;
    f.min_child_weight = min_child_weight;
    Booster reg(&dfit);
    set_common(reg, opt, max_depth, min_child_weight);
    reg.set("objective", opt.objective);
    reg.set("base_score", num(ysum / static_cast<double>(fit.size())));
    double best = std::numeric_limits<double>::infinity();
    int best_it = opt.rounds - 1;
    for (int it = 0; it < opt.rounds; ++it) {
      XGB_CHECK(XGBoosterUpdateOneIter(reg.get(), it, dfit.get()));
      f.rounds_run = it + 1;
      if (!early_stop) continue;
      const std::vector<float> m = reg.predict(dcal, 1);
      const std::vector<double> r = residuals(m, 1.0);
      const double loss = point_error(r, quantile(r, tau)).pinball;
      if (loss < best) {
        best = loss;
        best_it = it;
      } else if (it - best_it >= opt.early_stopping_rounds) {
        break;
      }
    }
    f.trees = best_it + 1;
    f.stop_loss = best;
    f.json = f.trees == f.rounds_run ? reg.save_json() : reg.save_json_rounds(f.trees);
    Booster kept;
    kept.load_json(f.json);
    f.mcal = kept.predict(dcal, 1);
    return f;
  };

  // Blend weight with the last-two baseline, chosen on the calibration slice only (jobs before
  // every test job): for each w on a grid the shift is re-fitted and the blended, capped point
  // prediction scored; w = 1 is the plain model. Ties keep the larger w (less baseline). The
  // loss is minus within-2x ("within2x") or the pinball loss with the under-prediction penalty
  // ("mae", and "none" with w = 1 only): the MAE at the default penalty 1, and the penalty
  // still moves the point when it is not 1.
  auto choose_blend = [&](RegFit& f) {
    f.loss = std::numeric_limits<double>::infinity();
    for (int step = 20; step >= 0; --step) {
      const double w = step / 20.0;
      if (opt.blend == "none" && step != 20) break;
      const std::vector<double> r = residuals(f.mcal, w);
      // The blend objectives may also drop the shift: a shifted copy of the baseline is no
      // longer the baseline (w = 0 unshifted *is* last-two), and being within 2x rewards landing
      // on one mode, not the median.
      for (const bool shifted : {true, false}) {
        if (!shifted && opt.blend == "none") continue;
        const PointErr e = point_error(r, shifted ? quantile(r, tau) : 0.0);
        const double loss = opt.blend == "within2x" ? -e.within2x : e.pinball;
        if (opt.blend != "none")
          f.trials.push_back({{"w", w}, {"shifted", shifted}, {"calib_mae", e.mae}, {"calib_within_2x", e.within2x}});
        if (loss < f.loss) {
          f.loss = loss;
          f.w = w;
          f.shifted = shifted;
        }
      }
    }
  };

  // Candidates: the tuning grid (shallow and heavily regularised first) or the one given.
  std::vector<std::pair<int, double>> grid;
  if (opt.tune && !calib.empty()) {
    for (int d : TUNE_DEPTHS)
      for (double c : TUNE_MIN_CHILD_WEIGHTS) grid.emplace_back(d, c);
  } else {
    grid.emplace_back(opt.max_depth, opt.min_child_weight);
  }
  RegFit chosen;
  chosen.loss = std::numeric_limits<double>::infinity();
  nlohmann::json candidates = nlohmann::json::array();
  for (const auto& [d, c] : grid) {
    RegFit f = fit_regressor(d, c);
    choose_blend(f);
    candidates.push_back({{"max_depth", d}, {"min_child_weight", c}, {"rounds_run", f.rounds_run},
                          {"trees", f.trees}, {"blend_weight", f.w}, {"calib_loss", f.loss}});
    if (f.loss < chosen.loss) chosen = std::move(f);
  }

  const std::vector<double> resid = residuals(chosen.mcal, chosen.w);
  Calibration cal{chosen.shifted ? quantile(resid, tau) : 0.0, quantile(resid, opt.upper_quantile), chosen.w};
  doc["calibration"] = {{"tau", tau},
                        {"underpredict_penalty", opt.underpredict_penalty},
                        {"point_shift", cal.point_shift},
                        {"upper_quantile", opt.upper_quantile},
                        {"upper_shift", cal.upper_shift},
                        {"blend", opt.blend},
                        {"blend_weight", cal.blend_weight},
                        {"blend_trials", chosen.trials},
                        {"n_calib", cal_idx.size()}};
  doc["booster_runtime"] = base64_encode(chosen.json);
  training["tuning"] = {{"candidates", candidates},
                        {"selection", opt.blend == "within2x" ? "calibration within-2x"
                                                              : "calibration pinball loss (MAE at penalty 1)"}};

  // Failure classifier on the training slice's jobs with a known final state. With early
  // stopping the number of rounds is chosen by log loss on the calibration slice's such jobs
  // (trained on the fitting slice's), then the classifier is refitted on the whole training
  // slice with that many rounds.
  std::vector<size_t> cls, cls_fit, cls_cal;
  size_t n_fail = 0;
  const size_t first_cal = calib.empty() ? n_train : calib.front();
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
  } else {
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
    if (opt.early_stopping_rounds > 0 && !cls_cal.empty() && fit_fail > 0 && fit_fail < cls_fit.size()) {
      const std::vector<float> Xf = gather(cls_fit), Xv = gather(cls_cal);
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
    const std::vector<float> Xc = gather(cls);
    DMatrix dc(Xc.data(), cls.size(), N_FEATURES);
    dc.set_labels(labels(cls));
    auto clf = make_clf(dc);
    for (int it = 0; it < clf_rounds; ++it) XGB_CHECK(XGBoosterUpdateOneIter(clf->get(), it, dc.get()));
    doc["booster_fail"] = base64_encode(clf->save_json());
    training["n_fail_train"] = n_fail;
    training["n_status_known_train"] = cls.size();
    training["fail_trees"] = clf_rounds;
  }

  // Calibration-slice metrics, measured through the predictor that will be deployed.
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
  training["metrics"] = {{"calib_mae", abs_err / static_cast<double>(cjobs.size())},
                         {"calib_underpredict_rate", static_cast<double>(under) / static_cast<double>(cjobs.size())}};
  training["params"] = {{"rounds", opt.rounds}, {"early_stopping_rounds", opt.early_stopping_rounds},
                        {"tune", opt.tune}, {"max_depth", chosen.max_depth},
                        {"min_child_weight", chosen.min_child_weight},
                        {"runtime_trees", chosen.trees}, {"eta", opt.eta},
                        {"seed", opt.seed}, {"nthread", opt.nthread}, {"objective", opt.objective + " on log(max(run,1))"}};
  training["n_fit"] = fit.size();
  doc["training"] = training;
  return doc;
}

}  // namespace mlprio::model
