// `mlprio-model train`: builds causal features for a trace, splits it by time (the first F of
// jobs by submit time train; the tail of that slice calibrates), fits XGBoost on log run time
// (anchored on a per-job baseline, tuned, early-stopped, optionally continued by mode-seeking
// rounds, the point chosen on the calibration slice by a criterion against the request and
// last-two baselines, then refitted on the whole training slice) and, when the trace has both
// outcomes, a failure classifier, and writes everything a predictor needs into one model
// document. Never shuffles across time; with nthread = 1 and a fixed seed the same trace gives
// the same bytes. model/README.md describes the method.
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
  if (opt.blend != "none" && opt.blend != "within2x" && opt.blend != "mae" && opt.blend != "both")
    throw std::invalid_argument("--blend must be both, mae, within2x or none, got " + opt.blend);
  if (opt.anchor != "similar" && opt.anchor != "last2" && opt.anchor != "request" && opt.anchor != "none")
    throw std::invalid_argument("--anchor must be similar, last2, request or none, got " + opt.anchor);
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
  const double base_score = ysum / static_cast<double>(fit.size());
  const MarginAnchor anchor = anchor_from_name(opt.anchor);
  auto anchors = [&](const std::vector<size_t>& idx, const std::vector<float>& Xm) {
    std::vector<float> b(idx.size());
    for (size_t k = 0; k < idx.size(); ++k)
      b[k] = static_cast<float>(anchor_log(anchor, Xm.data() + k * N_FEATURES, jobs[idx[k]].req_time, base_score));
    return b;
  };
  if (anchor != MarginAnchor::NONE) dfit.set_base_margin(anchors(fit, Xfit));

  // Calibration: residuals in log space on data the trees never saw. The point prediction is
  // the tau-quantile with tau = X/(1+X), which minimises the pinball loss that charges an
  // under-prediction X times an over-prediction of the same size.
  const double tau = opt.underpredict_penalty / (1.0 + opt.underpredict_penalty);
  const std::vector<size_t>& cal_idx = calib.empty() ? fit : calib;
  if (calib.empty()) notes.push_back("calibration slice empty; calibrated on the fitting data (no early stopping)");
  const std::vector<float> Xcal = gather(cal_idx);
  DMatrix dcal(Xcal.data(), cal_idx.size(), N_FEATURES);
  if (anchor != MarginAnchor::NONE) dcal.set_base_margin(anchors(cal_idx, Xcal));
  const double n_cal = static_cast<double>(cal_idx.size());
  const bool early_stop = opt.early_stopping_rounds > 0 && !calib.empty();

  // Per calibration row, computed once: run, request, log run and the log of the last-two
  // baseline (NaN when the row has neither a last-two mean nor a request).
  std::vector<double> cal_run(cal_idx.size()), cal_req(cal_idx.size()), cal_log(cal_idx.size()),
      cal_base(cal_idx.size());
  for (size_t k = 0; k < cal_idx.size(); ++k) {
    const Job& j = jobs[cal_idx[k]];
    cal_run[k] = j.run;
    cal_req[k] = j.req_time;
    cal_log[k] = log_run(cal_idx[k]);
    const double b = blend_baseline(Xcal.data() + k * N_FEATURES, j.req_time);
    cal_base[k] = std::isnan(b) ? b : std::log(std::max(b, 1.0));
  }
  // Blended log prediction of calibration row k at weight w, before the shift (blend_log()).
  auto residuals = [&](const std::vector<float>& mcal, double w) {
    std::vector<double> r(cal_idx.size());
    for (size_t k = 0; k < cal_idx.size(); ++k) {
      const double m = static_cast<double>(mcal[k]);
      const double z = (w == 1.0 || std::isnan(cal_base[k])) ? m : w * m + (1.0 - w) * cal_base[k];
      r[k] = cal_log[k] - z;
    }
    return r;
  };
  // Error of point predictions p[k] (seconds, capped by the request here) on the calibration
  // slice: mean pinball loss in seconds (X * under + over; the MAE at X = 1), the MAE and the
  // within-2x fraction.
  struct PointErr { double pinball = 0, mae = 0, within2x = 0; };
  auto error_of = [&](auto&& point) {
    PointErr e;
    size_t within = 0;
    for (size_t k = 0; k < cal_idx.size(); ++k) {
      double p = point(k);
      if (cal_req[k] > 0) p = std::min(p, cal_req[k]);
      const double a = std::max(cal_run[k], 1.0), q = std::max(p, 1.0);
      within += (q <= 2 * a && a <= 2 * q) ? 1 : 0;
      const double d = cal_run[k] - p;
      e.mae += std::abs(d);
      e.pinball += d > 0 ? opt.underpredict_penalty * d : -d;
    }
    e.mae /= n_cal;
    e.pinball /= n_cal;
    e.within2x = static_cast<double>(within) / n_cal;
    return e;
  };
  // The model's point prediction exp(log_run - r + shift).
  auto point_error = [&](const std::vector<double>& r, double shift) {
    return error_of([&](size_t k) { return std::exp(cal_log[k] - r[k] + shift); });
  };
  // The two baselines on the same rows (a row without a request or history falls back to the
  // training slice's median run time, as the formula model does).
  const PointErr base_request =
      error_of([&](size_t k) { return cal_req[k] > 0 ? cal_req[k] : median_run; });
  const PointErr base_last2 = error_of(
      [&](size_t k) { return std::isnan(cal_base[k]) ? median_run : std::exp(cal_base[k]); });
  // Selection loss of `--blend both` (the default): the worse of the two ratios to the better
  // baseline, max(pinball / best baseline pinball, (1 - within2x) / (1 - best baseline
  // within2x)). Below 1 exactly when the point beats both the request and last-two on both the
  // pinball loss (the MAE at penalty 1) and the within-2x rate of the calibration slice; taking
  // the worse ratio balances the two instead of trading one away for the other.
  const double ref_pinball = std::max(std::min(base_request.pinball, base_last2.pinball), 1e-9);
  const double ref_miss = std::max(1.0 - std::max(base_request.within2x, base_last2.within2x), 0.5 / n_cal);
  auto selection_loss = [&](const PointErr& e) {
    if (opt.blend == "within2x") return -e.within2x;
    if (opt.blend == "both") return std::max(e.pinball / ref_pinball, (1.0 - e.within2x) / ref_miss);
    return e.pinball;
  };
  // The point choices a candidate is scored over: w on a 0.05 grid (1 = the plain model; only
  // 1 with "none"), each with the shift q_tau(r) and (except "none", or a penalty other than 1,
  // which must move the point) without it: a shifted copy of the baseline is no longer the
  // baseline (w = 0 unshifted *is* last-two), and being within 2x rewards landing on one mode,
  // not the median. Ties keep the earlier (larger w, shifted).
  struct Choice { double w = 1.0; bool shifted = true; double loss = 0; };
  auto best_choice = [&](const std::vector<float>& mcal, nlohmann::json* trials) {
    Choice best;
    best.loss = std::numeric_limits<double>::infinity();
    for (int step = 20; step >= 0; --step) {
      const double w = step / 20.0;
      if (opt.blend == "none" && step != 20) break;
      const std::vector<double> r = residuals(mcal, w);
      for (const bool shifted : {true, false}) {
        // Unshifted only at the symmetric penalty: an asymmetric one acts through the shift.
        if (!shifted && (opt.blend == "none" || opt.underpredict_penalty != 1.0)) continue;
        const PointErr e = point_error(r, shifted ? quantile(r, tau) : 0.0);
        const double loss = selection_loss(e);
        if (trials != nullptr && opt.blend != "none")
          trials->push_back({{"w", w}, {"shifted", shifted}, {"calib_mae", e.mae},
                             {"calib_within_2x", e.within2x}, {"loss", loss}});
        if (loss < best.loss) best = {w, shifted, loss};
      }
    }
    return best;
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
  auto fit_regressor = [&](int max_depth, double min_child_weight) {
    RegFit f;
    f.max_depth = max_depth;
    f.min_child_weight = min_child_weight;
    Booster reg(&dfit);
    set_common(reg, opt, max_depth, min_child_weight);
    reg.set("objective", opt.objective);
    reg.set("base_score", num(base_score));
    double best = std::numeric_limits<double>::infinity();
    int best_it = opt.rounds - 1;
    for (int it = 0; it < opt.rounds; ++it) {
      XGB_CHECK(XGBoosterUpdateOneIter(reg.get(), it, dfit.get()));
      f.rounds_run = it + 1;
      if (!early_stop) continue;
      const std::vector<float> m = reg.predict(dcal, 1);
      double loss = 0;
      for (size_t k = 0; k < m.size(); ++k) {
        const double d = cal_log[k] - static_cast<double>(m[k]);
        loss += opt.objective == "reg:squarederror" ? d * d : std::abs(d);
      }
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

  // Modal continuation: more trees on top of a fitted candidate, each fitted by squared error
  // with weights exp(-r^2 / (2 s^2)) of the current residuals r (normalised to mean 1), i.e.
  // one mean-shift step per round towards the conditional *mode* of log run time (kernel mode
  // regression, Gaussian kernel). s = log(2) / sqrt(3): the standard deviation of the
  // within-2x window |r| <= log 2, so the kernel scores roughly what within-2x counts. Early
  // stopped by the calibration slice's kernel loss mean(1 - exp(-r^2 / (2 s^2))); at most
  // `rounds` trees in all.
  const double modal_s = std::log(2.0) / std::sqrt(3.0);
  auto kernel = [&](double r) { return std::exp(-r * r / (2 * modal_s * modal_s)); };
  // One modal round's weights on matrix d (labels y, current margins m), normalised to mean 1.
  auto set_modal_weights = [&](DMatrix& d, const std::vector<float>& y, const std::vector<float>& m) {
    std::vector<float> wts(y.size());
    double sum = 0;
    for (size_t k = 0; k < y.size(); ++k) {
      wts[k] = static_cast<float>(kernel(static_cast<double>(y[k]) - static_cast<double>(m[k])));
      sum += static_cast<double>(wts[k]);
    }
    const double scale = sum > 0 ? static_cast<double>(y.size()) / sum : 1.0;
    for (float& x : wts) x = static_cast<float>(static_cast<double>(x) * scale);
    d.set_weights(wts);
  };
  std::unique_ptr<DMatrix> dfit_modal;
  auto fit_modal = [&](const RegFit& base) {
    if (!dfit_modal) {
      dfit_modal = std::make_unique<DMatrix>(Xfit.data(), fit.size(), N_FEATURES);
      dfit_modal->set_labels(yfit);
      if (anchor != MarginAnchor::NONE) dfit_modal->set_base_margin(anchors(fit, Xfit));
    }
    RegFit f;
    f.max_depth = base.max_depth;
    f.min_child_weight = base.min_child_weight;
    f.modal = true;
    Booster reg(dfit_modal.get());
    reg.load_json(base.json);
    set_common(reg, opt, base.max_depth, base.min_child_weight);
    reg.set("objective", "reg:squarederror");
    double best = std::numeric_limits<double>::infinity();
    int best_it = -1;
    // `--rounds` bounds the whole ensemble (plain + modal trees): the deployed walker's cost.
    const int max_modal = opt.rounds - base.trees;
    for (int it = 0; it <= max_modal; ++it) {
      if (early_stop) {
        const std::vector<float> m = reg.predict(dcal, 1);
        double loss = 0;
        for (size_t k = 0; k < m.size(); ++k) loss += 1.0 - kernel(cal_log[k] - static_cast<double>(m[k]));
        if (loss < best) {
          best = loss;
          best_it = it;
        } else if (it - best_it >= opt.early_stopping_rounds) {
          break;
        }
      }
      if (it == max_modal) break;
      set_modal_weights(*dfit_modal, yfit, reg.predict(*dfit_modal, 1));
      XGB_CHECK(XGBoosterUpdateOneIter(reg.get(), base.trees + it, dfit_modal->get()));
      f.rounds_run = it + 1;
    }
    f.modal_trees = best_it;
    f.trees = base.trees + best_it;
    f.stop_loss = best;
    f.json = reg.save_json_rounds(f.trees);
    Booster kept;
    kept.load_json(f.json);
    f.mcal = kept.predict(dcal, 1);
    return f;
  };

  // Blend weight with the last-two baseline and the shift, chosen on the calibration slice only
  // (jobs before every test job) by the selection loss above.
  auto choose_blend = [&](RegFit& f) {
    const Choice c = best_choice(f.mcal, &f.trials);
    f.w = c.w;
    f.shifted = c.shifted;
    f.loss = c.loss;
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
    std::vector<RegFit> fits;
    if (opt.modal && early_stop && f.trees < opt.rounds) {
      RegFit g = fit_modal(f);
      choose_blend(g);
      fits.push_back(std::move(f));
      fits.push_back(std::move(g));
    } else {
      fits.push_back(std::move(f));
    }
    for (RegFit& h : fits) {
      candidates.push_back({{"max_depth", d}, {"min_child_weight", c}, {"modal", h.modal},
                            {"rounds_run", h.rounds_run}, {"trees", h.trees},
                            {"modal_trees", h.modal_trees}, {"blend_weight", h.w},
                            {"shifted", h.shifted}, {"calib_loss", h.loss}});
      if (h.loss < chosen.loss) chosen = std::move(h);
    }
  }

  const std::vector<double> resid = residuals(chosen.mcal, chosen.w);
  Calibration cal{chosen.shifted ? quantile(resid, tau) : 0.0, quantile(resid, opt.upper_quantile),
                  chosen.w, anchor};
  doc["calibration"] = {{"tau", tau},
                        {"underpredict_penalty", opt.underpredict_penalty},
                        {"point_shift", cal.point_shift},
                        {"upper_quantile", opt.upper_quantile},
                        {"upper_shift", cal.upper_shift},
                        {"blend", opt.blend},
                        {"blend_weight", cal.blend_weight},
                        {"margin_anchor", anchor_name(cal.anchor)},
                        {"blend_trials", chosen.trials},
                        {"n_calib", cal_idx.size()}};
  // Refit: the chosen configuration (depth, min_child_weight, tree counts, modal rounds) trained
  // again on the whole training slice, calibration slice included: the most recent jobs are the
  // most informative under drift (the failure classifier is refitted the same way). The
  // anchor, blend weight and shifts stay as calibrated; the trees see the same features.
  if (opt.refit && !calib.empty()) {
    const std::vector<float> Xall = gather(train);
    std::vector<float> yall;
    double ysum_all = 0;
    for (size_t i : train) {
      yall.push_back(static_cast<float>(log_run(i)));
      ysum_all += log_run(i);
    }
    const double base_all = ysum_all / static_cast<double>(train.size());
    DMatrix dall(Xall.data(), train.size(), N_FEATURES);
    dall.set_labels(yall);
    if (anchor != MarginAnchor::NONE) {
      std::vector<float> b(train.size());
      for (size_t k = 0; k < train.size(); ++k)
        b[k] = static_cast<float>(anchor_log(anchor, Xall.data() + k * N_FEATURES, jobs[train[k]].req_time, base_all));
      dall.set_base_margin(b);
    }
    Booster reg(&dall);
    set_common(reg, opt, chosen.max_depth, chosen.min_child_weight);
    reg.set("objective", opt.objective);
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
    chosen.json = reg.save_json();
  }
  doc["booster_runtime"] = base64_encode(chosen.json);
  const char* selection =
      opt.blend == "within2x" ? "calibration within-2x"
      : opt.blend == "both"   ? "calibration max(pinball / best baseline pinball, (1 - within-2x) / "
                                "(1 - best baseline within-2x))"
                              : "calibration pinball loss (MAE at penalty 1)";
  auto err_json = [](const PointErr& e) {
    return nlohmann::json{{"pinball", e.pinball}, {"mae", e.mae}, {"within_2x", e.within2x}};
  };
  training["tuning"] = {{"candidates", candidates},
                        {"selection", selection},
                        {"calib_request", err_json(base_request)},
                        {"calib_last2", err_json(base_last2)}};

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

  // Calibration-slice metrics, measured through the predictor that will be deployed (after a
  // refit its trees have seen the calibration slice: "refit" says so).
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
                        {"runtime_trees", chosen.trees}, {"modal_trees", chosen.modal_trees},
                        {"margin_anchor", opt.anchor}, {"modal", opt.modal},
                        {"refit", opt.refit && !calib.empty()}, {"eta", opt.eta},
                        {"seed", opt.seed}, {"nthread", opt.nthread}, {"objective", opt.objective + " on log(max(run,1))"}};
  training["n_fit"] = fit.size();
  doc["training"] = training;
  return doc;
}

}  // namespace mlprio::model
