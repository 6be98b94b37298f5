// `mlprio-model evaluate`, `predict --job` parsing and `explain`: the model is scored on the
// last test_fraction of a trace (features built causally over the whole trace, so the test jobs
// see exactly the history a deployed model would) against two baselines, the user's request and
// the last-two formula. --plot writes per-method relative errors and has Debian's python3 with
// matplotlib draw their CDFs.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "mlprio/model/model_file.hpp"
#include "mlprio/util/checked_cast.hpp"
#include "mlprio/util/errors.hpp"
#include "model_tool.hpp"
#include "xgb.hpp"

namespace mlprio::model {
namespace {

struct MethodStats {
  std::vector<double> rel;  // |pred - actual| / max(actual, 1)
  double abs_sum = 0;
  size_t n = 0, within2 = 0, under = 0;
  void add(double pred, double actual) {
    const double a = std::max(actual, 1.0), p = std::max(pred, 1.0);
    abs_sum += std::abs(pred - actual);
    ++n;
    within2 += (p <= 2 * a && a <= 2 * p) ? 1 : 0;
    under += pred < actual ? 1 : 0;
    rel.push_back(std::abs(pred - actual) / a);
  }
  double mae() const {
    return n ? abs_sum / static_cast<double>(n) : std::numeric_limits<double>::quiet_NaN();
  }
  double frac(size_t k) const {
    return n ? static_cast<double>(k) / static_cast<double>(n)
             : std::numeric_limits<double>::quiet_NaN();
  }
};

nlohmann::json num_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

constexpr const char* PLOT_SCRIPT =
    R"PY(# Written by mlprio-model evaluate --plot: CDF of relative error per method.
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = {}
with open(sys.argv[1]) as f:
    for r in csv.DictReader(f):
        rows.setdefault(r["method"], []).append(float(r["rel_err"]))
fig, ax = plt.subplots(figsize=(6, 4))
for m, v in sorted(rows.items()):
    v.sort()
    n = len(v)
    ax.plot([max(x, 1e-3) for x in v], [(i + 1) / n for i in range(n)], label=f"{m} (n={n})")
ax.set_xscale("log")
ax.set_xlabel("relative error |pred - actual| / actual")
ax.set_ylabel("fraction of test jobs")
ax.set_title(sys.argv[3])
ax.grid(True, which="both", alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=120)
)PY";

// Writes the relative errors of the three methods as CSV beside a plotting script into `dir`, runs
// it and returns the PNG's path.
std::string write_error_plot(const std::string& dir, const MethodStats& model,
                             const MethodStats& request, const MethodStats& last2,
                             const std::string& trace_name) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const fs::path csv = fs::path(dir) / "relative_errors.csv";
  const fs::path script = fs::path(dir) / "plot_cdf.py";
  const fs::path png = fs::path(dir) / "relative_error_cdf.png";
  {
    std::ofstream f(csv);
    f << "method,rel_err\n";
    auto dump = [&](const char* name, const MethodStats& s) {
      for (double v : s.rel) f << name << ',' << v << '\n';
    };
    dump("model", model);
    dump("request", request);
    dump("last2", last2);
    std::ofstream(script) << PLOT_SCRIPT;
    if (!f)
      throw ::mlprio::RuntimeError("cannot write " + csv.string() + ": " + std::strerror(errno));
  }
  auto quote = [](const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  // Debian's interpreter on purpose: it is the one with matplotlib (pyenv's has none).
  const std::string cmd = "/usr/bin/python3 " + quote(script.string()) + " " + quote(csv.string()) +
                          " " + quote(png.string()) + " " + quote(trace_name);
  if (std::system(cmd.c_str()) != 0)
    throw ::mlprio::RuntimeError("plotting failed: " + cmd +
                                 " (needs /usr/bin/python3 with matplotlib)");
  return png.string();
}

}  // namespace

nlohmann::json evaluate_model(const nlohmann::json& doc, const Trace& trace,
                              const EvalOptions& opt) {
  if (!(opt.test_fraction > 0 && opt.test_fraction <= 1))
    throw ::mlprio::UsageError("--test-fraction must be in (0, 1]");
  const auto pred = make_predictor(doc);
  const auto& jobs = trace.jobs;
  const FeatureMatrix X = build_features(jobs, trace.names, trace_epoch_offset(trace));
  const auto n_test =
      static_cast<size_t>(std::floor(opt.test_fraction * static_cast<double>(jobs.size())));
  const size_t first = jobs.size() - n_test;
  std::vector<Prediction> out(n_test);
  pred->predict_rows(
      std::span<const float>(X.values.data() + first * N_FEATURES, n_test * N_FEATURES),
      std::span<const Job>(jobs.data() + first, n_test), out);

  bool any_request = false;
  for (size_t i = first; i < jobs.size(); ++i) any_request = any_request || jobs[i].req_time > 0;
  // Every method is measured on the same jobs: known run time, and a request when the trace has
  // requests at all.
  const double default_runtime = doc.contains("formula")
                                     ? doc["formula"].value("default_runtime", 3600.0)
                                     : std::numeric_limits<double>::quiet_NaN();
  MethodStats model, upper, request, last2;
  size_t tp = 0, fp = 0, fn = 0, n_status = 0, n_failed = 0, n_no_hist = 0;
  std::ofstream per_job;
  if (!opt.per_job_csv.empty()) {
    per_job.open(opt.per_job_csv);
    if (!per_job)
      throw ::mlprio::RuntimeError("cannot write " + opt.per_job_csv + ": " + std::strerror(errno));
    per_job << "id,user,submit,end,run,model,last2,request\n";
    per_job.precision(17);
  }
  bool have_fail = false;
  for (size_t k = 0; k < n_test; ++k) {
    const Job& j = jobs[first + k];
    if (!(j.run >= 0) || (any_request && !(j.req_time > 0))) continue;
    model.add(out[k].runtime, j.run);
    if (std::isfinite(out[k].runtime_upper)) upper.add(out[k].runtime_upper, j.run);
    if (any_request) request.add(j.req_time, j.run);
    const double l2 = X.row(first + k)[F_HIST_LAST2_MEAN];
    double b = std::isnan(l2) ? (any_request ? j.req_time : default_runtime)
                              : (any_request ? std::min(l2, j.req_time) : l2);
    if (std::isnan(l2)) ++n_no_hist;
    if (std::isfinite(b)) last2.add(b, j.run);
    if (per_job.is_open())
      per_job << j.id << ',' << j.user << ',' << j.submit << ','
              << (j.wait >= 0 ? j.submit + j.wait + j.run : j.submit + j.run) << ',' << j.run << ','
              << out[k].runtime << ',' << b << ',' << j.req_time << '\n';
    if (std::isfinite(out[k].fail_prob) && j.status != JobStatus::UNKNOWN_STATE &&
        j.status != JobStatus::RUNNING && j.status != JobStatus::PENDING) {
      have_fail = true;
      ++n_status;
      const bool actual = is_failure(j.status), said = out[k].fail_prob >= 0.5;
      n_failed += actual ? 1 : 0;
      tp += (actual && said) ? 1 : 0;
      fp += (!actual && said) ? 1 : 0;
      fn += (actual && !said) ? 1 : 0;
    }
  }
  if (model.n == 0) throw ::mlprio::UsageError("no test job has a known run time");
  if (per_job.is_open()) {
    per_job.flush();
    if (!per_job)
      throw ::mlprio::RuntimeError("cannot write " + opt.per_job_csv + ": " + std::strerror(errno));
  }

  nlohmann::json r;
  r["trace"] = std::filesystem::path(trace.path).filename().string();
  r["model_kind"] = pred->kind();
  r["n_test"] = model.n;
  r["test_fraction"] = opt.test_fraction;
  r["test_window"] = {jobs[first].submit, jobs.back().submit};
  r["has_requests"] = any_request;
  r["jobs_without_user_history"] = n_no_hist;
  r["mae_model"] = num_or_null(model.mae());
  r["mae_request"] = any_request ? num_or_null(request.mae()) : nlohmann::json(nullptr);
  r["mae_last2"] = num_or_null(last2.mae());
  r["within_2x_model"] = num_or_null(model.frac(model.within2));
  r["within_2x_request"] =
      any_request ? num_or_null(request.frac(request.within2)) : nlohmann::json(nullptr);
  r["within_2x_last2"] = num_or_null(last2.frac(last2.within2));
  r["underpredict_rate"] = num_or_null(model.frac(model.under));
  r["underpredict_rate_upper"] = num_or_null(upper.frac(upper.under));
  r["underpredict_rate_last2"] = num_or_null(last2.frac(last2.under));
  r["underpredict_rate_request"] =
      any_request ? num_or_null(request.frac(request.under)) : nlohmann::json(nullptr);
  if (have_fail) {
    r["fail_precision"] = (tp + fp)
                              ? num_or_null(static_cast<double>(tp) / static_cast<double>(tp + fp))
                              : nlohmann::json(nullptr);
    r["fail_recall"] = (tp + fn)
                           ? num_or_null(static_cast<double>(tp) / static_cast<double>(tp + fn))
                           : nlohmann::json(nullptr);
    r["fail_base_rate"] = static_cast<double>(n_failed) / static_cast<double>(n_status);
  } else {
    r["fail_precision"] = nullptr;
    r["fail_recall"] = nullptr;
    r["fail_note"] = "model has no failure classifier or the test jobs have no final state";
  }

  if (!opt.plot_dir.empty())
    r["plot"] =
        write_error_plot(opt.plot_dir, model, request, last2, r["trace"].get<std::string>());
  return r;
}

Trace job_from_spec(const std::string& spec) {
  Trace t;
  t.path = "--job";
  Job j;
  j.id = 0;
  j.submit = 0;
  std::stringstream ss(spec);
  std::string item;
  auto number = [&](const std::string& key, const std::string& v) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    std::string rest = end != nullptr ? std::string(end) : "";
    double mult = 1;
    if (key == "req_mem" && rest.size() == 1) {
      const std::string units = "KMGT";
      const auto p =
          units.find(static_cast<char>(std::toupper(static_cast<unsigned char>(rest[0]))));
      if (p != std::string::npos) {
        mult = std::pow(1024.0, static_cast<double>(p + 1));
        rest.clear();
      }
    }
    if (v.empty() || !rest.empty() || !std::isfinite(x))
      throw ::mlprio::UsageError("--job: " + key + "=" + v + " is not a number (e.g. " + key +
                                 "=3600" + (key == "req_mem" ? " or req_mem=64G" : "") + ")");
    return x * mult;
  };
  static const char* llm_keys[] = {"model_size", "seq_len", "batch_size",
                                   "lora_rank",  "epochs",  "dataset_size"};
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw ::mlprio::UsageError("--job: '" + item +
                                 "' is not key=value (e.g. user=alice,req_time=3600)");
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (k == "user")
      j.user = t.names.users.intern(v);
    else if (k == "group")
      j.group = t.names.groups.intern(v);
    else if (k == "account")
      j.account = t.names.accounts.intern(v);
    else if (k == "partition")
      j.partition = t.names.partitions.intern(v);
    else if (k == "qos")
      j.qos = t.names.qos.intern(v);
    else if (k == "queue")
      j.queue = t.names.queues.intern(v);
    else if (k == "name")
      j.name = t.names.job_names.intern(v);
    else if (k == "submit")
      j.submit = number(k, v);
    else if (k == "req_procs")
      j.req_procs = checked_cast<int64_t>(number(k, v), "--job req_procs", 0, JOB_MAX_COUNT);
    else if (k == "req_nodes")
      j.req_nodes = checked_cast<int64_t>(number(k, v), "--job req_nodes", 0, JOB_MAX_COUNT);
    else if (k == "req_gpus") {
      j.req_gpus = number(k, v);  // fractional (shared GPUs), bounded like the counts
      checked_cast<int64_t>(std::ceil(j.req_gpus), "--job req_gpus", 0, JOB_MAX_COUNT);
    } else if (k == "req_mem")
      j.req_mem = checked_cast<int64_t>(number(k, v), "--job req_mem (bytes)", 0, JOB_MAX_BYTES);
    else if (k == "req_time")
      j.req_time = number(k, v);
    else if (std::find(std::begin(llm_keys), std::end(llm_keys), k) != std::end(llm_keys))
      j.features.emplace_back(t.names.features.intern(k), number(k, v));
    else
      throw ::mlprio::UsageError(
          "--job: unknown key '" + k +
          "' (known: user, group, account, partition, qos, queue, name, submit, "
          "req_procs, req_nodes, req_gpus, req_mem, req_time, model_size, seq_len, "
          "batch_size, lora_rank, epochs, dataset_size)");
  }
  t.jobs.push_back(j);
  return t;
}

nlohmann::json explain_job(const nlohmann::json& doc, const Trace& one) {
  const UserHistory hist =
      doc.contains("user_history") ? history_from_json(doc["user_history"]) : UserHistory{};
  std::vector<float> row(N_FEATURES);
  encode_with_history(one.jobs, one.names, hist, 0.0, row);
  const auto pred = make_predictor(doc);
  Prediction p;
  pred->predict(one.jobs, one.names, std::span<Prediction>(&p, 1));
  nlohmann::json r;
  r["kind"] = pred->kind();
  r["runtime"] = num_or_null(p.runtime);
  r["runtime_upper"] = num_or_null(p.runtime_upper);
  r["fail_prob"] = num_or_null(p.fail_prob);
  nlohmann::json feats = nlohmann::json::array();
  if (pred->kind() == "xgboost") {
    Booster b;
    const std::string rt_json = base64_decode(doc["booster_runtime"].get<std::string>());
    b.load_json(rt_json);
    DMatrix d(row.data(), 1, N_FEATURES);
    // An anchored model's trees start from log(anchor), XGBoost's base_margin: the bias is then
    // the anchor (plus the trees' mean) instead of the base score.
    const Calibration cal = calibration_from_json(doc);
    DMatrix drt(row.data(), 1, N_FEATURES);
    if (cal.anchor != MarginAnchor::NONE) {
      const auto saved = nlohmann::json::parse(rt_json);
      const double base = std::stod(
          saved.at("learner").at("learner_model_param").at("base_score").get<std::string>());
      const double a = anchor_log(cal.anchor, row.data(), one.jobs[0].req_time, base);
      drt.set_base_margin({static_cast<float>(a)});
      r["margin_anchor"] = anchor_name(cal.anchor);
      r["anchor_log"] = a;
    }
    const std::vector<float> c = b.predict(drt, 4);
    if (c.size() != static_cast<size_t>(N_FEATURES) + 1)
      throw XgbError("pred_contribs returned " + std::to_string(c.size()) + " values");
    std::vector<int> order(N_FEATURES);
    for (int f = 0; f < N_FEATURES; ++f) order[f] = f;
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b2) { return std::abs(c[a]) > std::abs(c[b2]); });
    for (int f : order)
      feats.push_back({{"feature", std::string(feature_names()[f])},
                       {"value", num_or_null(row[f])},
                       {"log_contribution", c[f]},
                       {"factor", std::exp(c[f])}});
    r["bias_log"] = c[N_FEATURES];
    r["calibration_point_shift"] = cal.point_shift;
    r["blend_weight"] = cal.blend_weight;
    r["blend_baseline"] = num_or_null(blend_baseline(row.data(), one.jobs[0].req_time));
    r["note"] =
        "runtime = exp(w * (bias + sum(log_contribution)) + (1 - w) * log(last-two baseline) "
        "+ point_shift), capped by req_time (w = blend_weight, the baseline blend_baseline)";
    // The failure model's contributions (log-odds), what job_submit/mlprio names when it refuses
    // (it computes the same TreeSHAP values without libxgboost: Predictor::explain_fail).
    if (doc.contains("booster_fail") && doc["booster_fail"].is_string()) {
      Booster bf;
      bf.load_json(base64_decode(doc["booster_fail"].get<std::string>()));
      const std::vector<float> cf = bf.predict(d, 4);
      if (cf.size() != static_cast<size_t>(N_FEATURES) + 1)
        throw XgbError("pred_contribs (failure) returned " + std::to_string(cf.size()) + " values");
      std::vector<int> by(N_FEATURES);
      for (int f = 0; f < N_FEATURES; ++f) by[f] = f;
      std::stable_sort(by.begin(), by.end(), [&](int a, int b2) { return cf[a] > cf[b2]; });
      nlohmann::json ff = nlohmann::json::array();
      for (int f : by)
        ff.push_back({{"feature", std::string(feature_names()[f])},
                      {"value", num_or_null(row[f])},
                      {"logodds_contribution", cf[f]}});
      r["fail_features"] = ff;
      r["fail_bias_logodds"] = cf[N_FEATURES];
      r["fail_note"] =
          "fail_prob = 1 / (1 + exp(-(fail_bias_logodds + sum(logodds_contribution))))";
    }
  } else {
    const float l2 = row[F_HIST_LAST2_MEAN];
    r["note"] = std::isnan(l2)
                    ? (one.jobs[0].req_time > 0 ? "no user history: the request"
                                                : "no user history and no request: training median")
                    : "user's last-two mean, capped by the request";
    for (int f : {F_HIST_LAST2_MEAN, F_REQ_TIME, F_HIST_FAIL_RATE})
      feats.push_back(
          {{"feature", std::string(feature_names()[f])}, {"value", num_or_null(row[f])}});
    r["fail_features"] =
        nlohmann::json::array({{{"feature", std::string(feature_names()[F_HIST_FAIL_RATE])},
                                {"value", num_or_null(row[F_HIST_FAIL_RATE])},
                                {"contribution", num_or_null(row[F_HIST_FAIL_RATE])}}});
    r["fail_note"] = "fail_prob = the user's past failure rate";
  }
  r["features"] = feats;
  return r;
}

}  // namespace mlprio::model
