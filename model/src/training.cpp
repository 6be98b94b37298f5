// `mlprio-model train`: builds causal features for a trace, splits it by time (the first F of
// jobs by submit time train; the tail of that slice calibrates), fits XGBoost on log run time
// and, when the trace has both outcomes, a failure classifier, and writes everything a
// predictor needs into one model document. Never shuffles across time; with nthread = 1 and a
// fixed seed the same trace gives the same bytes.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
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

void set_common(Booster& b, const TrainOptions& o) {
  b.set("tree_method", "hist");
  b.set("max_depth", std::to_string(o.max_depth));
  b.set("eta", num(o.eta));
  b.set("subsample", "0.8");
  b.set("colsample_bytree", "0.8");
  b.set("min_child_weight", "3");
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

  nlohmann::json doc;
  doc["format"] = MODEL_FORMAT;
  doc["version"] = MODEL_VERSION;
  doc["kind"] = opt.kind;
  doc["schema_version"] = SCHEMA_VERSION;
  doc["schema"] = schema_json();
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

  const std::vector<float> Xfit = gather(fit);
  std::vector<float> yfit;
  double ysum = 0;
  for (size_t i : fit) {
    yfit.push_back(static_cast<float>(log_run(i)));
    ysum += log_run(i);
  }
  DMatrix dfit(Xfit.data(), fit.size(), N_FEATURES);
  dfit.set_labels(yfit);
  Booster reg(&dfit);
  set_common(reg, opt);
  if (opt.objective != "reg:squarederror" && opt.objective != "reg:absoluteerror" &&
      opt.objective != "reg:pseudohubererror")
    throw std::invalid_argument("--objective must be reg:squarederror, reg:absoluteerror or reg:pseudohubererror");
  reg.set("objective", opt.objective);
  reg.set("base_score", num(ysum / static_cast<double>(fit.size())));
  for (int it = 0; it < opt.rounds; ++it) XGB_CHECK(XGBoosterUpdateOneIter(reg.get(), it, dfit.get()));

  // Calibration: residuals in log space on data the trees never saw. The point prediction is
  // the tau-quantile with tau = X/(1+X), which minimises the pinball loss that charges an
  // under-prediction X times an over-prediction of the same size.
  const double tau = opt.underpredict_penalty / (1.0 + opt.underpredict_penalty);
  const std::vector<size_t>& cal_idx = calib.empty() ? fit : calib;
  if (calib.empty()) notes.push_back("calibration slice empty; calibrated on the fitting data");
  const std::vector<float> Xcal = gather(cal_idx);
  DMatrix dcal(Xcal.data(), cal_idx.size(), N_FEATURES);
  const std::vector<float> mcal = reg.predict(dcal, 1);
  // Blend weight with the last-two baseline, chosen on the calibration slice only (jobs before
  // every test job): for each w on a grid the shift is re-fitted and the blended, capped point
  // prediction scored; w = 1 is the plain model. Ties keep the larger w (less baseline).
  auto residuals = [&](double w) {
    std::vector<double> r;
    for (size_t k = 0; k < cal_idx.size(); ++k) {
      const Job& j = jobs[cal_idx[k]];
      const double z = blend_log(static_cast<double>(mcal[k]),
                                 blend_baseline(Xcal.data() + k * N_FEATURES, j.req_time), w);
      r.push_back(log_run(cal_idx[k]) - z);
    }
    return r;
  };
  double best_w = 1.0;
  bool best_shifted = true;
  nlohmann::json blend_trials = nlohmann::json::array();
  if (opt.blend != "none") {
    if (opt.blend != "within2x" && opt.blend != "mae")
      throw std::invalid_argument("--blend must be none, within2x or mae, got " + opt.blend);
    double best = std::numeric_limits<double>::infinity();
    for (int step = 20; step >= 0; --step) {
     const double w = step / 20.0;
     const std::vector<double> r = residuals(w);
     // The within-2x objective may also drop the shift: a shifted copy of the baseline is no
     // longer the baseline, and being within 2x rewards landing on one mode, not the median.
     for (const bool shifted : {true, false}) {
      if (!shifted && opt.blend != "within2x") continue;
      const double shift = shifted ? quantile(r, tau) : 0.0;
      double abs_err = 0;
      size_t within = 0;
      for (size_t k = 0; k < cal_idx.size(); ++k) {
        const Job& j = jobs[cal_idx[k]];
        double p = std::exp(log_run(cal_idx[k]) - r[k] + shift);
        if (j.req_time > 0) p = std::min(p, j.req_time);
        const double a = std::max(j.run, 1.0), q = std::max(p, 1.0);
        within += (q <= 2 * a && a <= 2 * q) ? 1 : 0;
        abs_err += std::abs(p - j.run);
      }
      const double n_cal = static_cast<double>(cal_idx.size());
      const double loss = opt.blend == "mae" ? abs_err / n_cal : -static_cast<double>(within) / n_cal;
      blend_trials.push_back({{"w", w}, {"shifted", shifted}, {"calib_mae", abs_err / n_cal},
                              {"calib_within_2x", static_cast<double>(within) / n_cal}});
      if (loss < best) {
        best = loss;
        best_w = w;
        best_shifted = shifted;
      }
     }
    }
  }
  const std::vector<double> resid = residuals(best_w);
  Calibration cal{best_shifted ? quantile(resid, tau) : 0.0, quantile(resid, opt.upper_quantile), best_w};
  doc["calibration"] = {{"tau", tau},
                        {"underpredict_penalty", opt.underpredict_penalty},
                        {"point_shift", cal.point_shift},
                        {"upper_quantile", opt.upper_quantile},
                        {"upper_shift", cal.upper_shift},
                        {"blend", opt.blend},
                        {"blend_weight", cal.blend_weight},
                        {"blend_trials", blend_trials},
                        {"n_calib", cal_idx.size()}};
  doc["booster_runtime"] = base64_encode(reg.save_json());

  // Failure classifier on the whole training slice with a known final state.
  std::vector<size_t> cls;
  size_t n_fail = 0;
  for (size_t i = 0; i < n_train; ++i)
    if (final_status_known(jobs[i].status)) {
      cls.push_back(i);
      n_fail += is_failure(jobs[i].status) ? 1 : 0;
    }
  if (n_fail == 0 || n_fail == cls.size() || cls.size() < 20) {
    notes.push_back("failure classifier skipped: the training slice has " +
                    std::to_string(cls.size()) + " jobs with a known final state, " +
                    std::to_string(n_fail) + " of them failures (needs both classes)");
    doc["booster_fail"] = nullptr;
  } else {
    const std::vector<float> Xc = gather(cls);
    std::vector<float> yc;
    for (size_t i : cls) yc.push_back(is_failure(jobs[i].status) ? 1.0f : 0.0f);
    DMatrix dc(Xc.data(), cls.size(), N_FEATURES);
    dc.set_labels(yc);
    Booster clf(&dc);
    set_common(clf, opt);
    clf.set("objective", "binary:logistic");
    for (int it = 0; it < opt.rounds; ++it) XGB_CHECK(XGBoosterUpdateOneIter(clf.get(), it, dc.get()));
    doc["booster_fail"] = base64_encode(clf.save_json());
    training["n_fail_train"] = n_fail;
    training["n_status_known_train"] = cls.size();
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
  training["params"] = {{"rounds", opt.rounds}, {"max_depth", opt.max_depth}, {"eta", opt.eta},
                        {"seed", opt.seed}, {"nthread", opt.nthread}, {"objective", opt.objective + " on log(max(run,1))"}};
  training["n_fit"] = fit.size();
  doc["training"] = training;
  return doc;
}

}  // namespace mlprio::model
