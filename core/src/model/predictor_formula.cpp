// The "formula" predictor kind: a closed-form model that needs no XGBoost and no training beyond
// the user history. Run time is the user's last-two mean (Tsafrir, Etsion & Feitelson 2007),
// capped by the request; without history it is the request, and without a request the training
// median. The upper prediction is the request (the job cannot run longer); fail_prob is the
// user's past failure rate. It is the fallback a site can deploy on day one.
#include <algorithm>
#include <cmath>
#include <vector>

#include "mlprio/model/model_file.hpp"

namespace mlprio::model {
namespace {

class FormulaPredictor final : public Predictor {
 public:
  FormulaPredictor(UserHistory h, double default_runtime, std::string desc)
      : history_(std::move(h)), default_runtime_(default_runtime), description_(std::move(desc)) {}

  void predict(std::span<const Job> jobs, const TraceNames& names,
               std::span<Prediction> out) const override {
    thread_local std::vector<float> rows;
    if (rows.size() < jobs.size() * N_FEATURES) rows.resize(jobs.size() * N_FEATURES);
    encode_with_history(jobs, names, history_, 0.0, rows);
    predict_rows(std::span<const float>(rows.data(), jobs.size() * N_FEATURES), jobs, out);
  }

  void predict_rows(std::span<const float> rows, std::span<const Job> jobs,
                    std::span<Prediction> out) const override {
    if (out.size() != jobs.size() || rows.size() < jobs.size() * N_FEATURES)
      throw ModelError("predict: rows/jobs/out sizes disagree");
    for (size_t i = 0; i < jobs.size(); ++i) {
      const float* row = rows.data() + i * N_FEATURES;
      const double req = jobs[i].req_time;
      const double last2 = row[F_HIST_LAST2_MEAN];
      double rt = default_runtime_;
      if (!std::isnan(last2))
        rt = req > 0 ? std::min(last2, req) : last2;
      else if (req > 0)
        rt = req;
      out[i].runtime = std::max(rt, 1.0);
      out[i].runtime_upper = req > 0 ? std::max(req, out[i].runtime) : NOT_PREDICTED;
      out[i].fail_prob = row[F_HIST_FAIL_RATE];
    }
  }

  // fail_prob is the user's failure rate itself: all of it is that feature's contribution.
  bool explain_fail(const Job& job, const TraceNames& names, std::span<double> contrib,
                    std::span<float> row) const override {
    if (contrib.size() < N_FEATURES + 1 || row.size() < N_FEATURES) return false;
    encode_with_history({&job, 1}, names, history_, 0.0, row.first(N_FEATURES));
    return explain_fail_row(row.first(N_FEATURES), contrib);
  }
  bool explain_fail_row(std::span<const float> row, std::span<double> contrib) const override {
    if (contrib.size() < N_FEATURES + 1 || row.size() < N_FEATURES) return false;
    std::fill(contrib.begin(), contrib.end(), 0.0);
    contrib[F_HIST_FAIL_RATE] = row[F_HIST_FAIL_RATE];
    return !std::isnan(row[F_HIST_FAIL_RATE]);
  }
  const UserHistory* frozen_history() const override { return &history_; }

  std::string describe() const override { return description_; }
  std::string kind() const override { return "formula"; }

 private:
  UserHistory history_;
  double default_runtime_;
  std::string description_;
};

}  // namespace

std::unique_ptr<Predictor> make_formula_predictor(UserHistory history, double default_runtime,
                                                  std::string description) {
  return std::make_unique<FormulaPredictor>(std::move(history), default_runtime,
                                            std::move(description));
}

}  // namespace mlprio::model
