// The "xgboost" predictor kind: gradient-boosted trees trained by `mlprio-model train` through
// XGBoost's C API, evaluated here by a flat, allocation-free tree walker read from XGBoost's own
// saved JSON model. Evaluating ourselves keeps libxgboost out of slurmctld, makes concurrent
// predict() calls safe (the trees are immutable) and costs a few hundred nanoseconds per job;
// tests and the benchmark check it against XGBoosterPredict. The regressor predicts
// log(max(run, 1 s)); calibration shifts from the training tail turn it into a point and an
// upper prediction (see model/README.md).
#include <algorithm>
#include <cmath>
#include <vector>

#include "mlprio/model/model_file.hpp"

namespace mlprio::model {
namespace {

struct Node {
  float cond;       // split threshold, or the leaf value when left < 0
  int32_t left;     // absolute index into the ensemble's node array; -1 marks a leaf
  int32_t right;
  uint32_t feature;
  uint32_t default_left;
};

class TreeEnsemble {
 public:
  TreeEnsemble() = default;
  TreeEnsemble(const std::string& saved_json, bool logistic, const char* what) {
    const nlohmann::json m = nlohmann::json::parse(saved_json, nullptr, false);
    if (m.is_discarded()) throw ModelError(std::string(what) + " booster is not valid JSON");
    try {
      const auto& learner = m.at("learner");
      const std::string obj = learner.at("objective").at("name").get<std::string>();
      const bool is_logistic = obj == "binary:logistic";
      if (is_logistic != logistic)
        throw ModelError(std::string(what) + " booster has objective " + obj);
      const auto& lmp = learner.at("learner_model_param");
      const double base = std::stod(lmp.at("base_score").get<std::string>());
      const int nfeat = std::stoi(lmp.at("num_feature").get<std::string>());
      if (nfeat != N_FEATURES)
        throw ModelError(std::string(what) + " booster has " + std::to_string(nfeat) +
                         " features, the schema " + std::to_string(N_FEATURES));
      base_margin_ = logistic ? -std::log(1.0 / base - 1.0) : base;
      const auto& gb = learner.at("gradient_booster");
      if (gb.at("name") != "gbtree")
        throw ModelError(std::string(what) + " booster is not a gbtree");
      for (const auto& t : gb.at("model").at("trees")) {
        const auto& lc = t.at("left_children");
        const auto& rc = t.at("right_children");
        const auto& si = t.at("split_indices");
        const auto& sc = t.at("split_conditions");
        const auto& dl = t.at("default_left");
        const size_t n = lc.size();
        if (rc.size() != n || si.size() != n || sc.size() != n || dl.size() != n || n == 0)
          throw ModelError(std::string(what) + " booster has a malformed tree");
        const auto off = static_cast<int32_t>(nodes_.size());
        roots_.push_back(off);
        for (size_t k = 0; k < n; ++k) {
          Node nd{};
          nd.cond = sc[k].get<float>();
          const int l = lc[k].get<int>();
          const int r = rc[k].get<int>();
          const bool leaf = l < 0;
          if (!leaf && (l >= static_cast<int>(n) || r < 0 || r >= static_cast<int>(n)))
            throw ModelError(std::string(what) + " booster has a child index out of range");
          nd.left = leaf ? -1 : off + l;
          nd.right = leaf ? -1 : off + r;
          const auto f = si[k].get<int64_t>();
          if (!leaf && (f < 0 || f >= N_FEATURES))
            throw ModelError(std::string(what) + " booster splits on a feature outside the schema");
          nd.feature = leaf ? 0 : static_cast<uint32_t>(f);
          nd.default_left = dl[k].is_boolean() ? dl[k].get<bool>() : dl[k].get<int>() != 0;
          nodes_.push_back(nd);
        }
      }
    } catch (const nlohmann::json::exception& e) {
      throw ModelError(std::string(what) + " booster is malformed: " + e.what());
    }
    // A child must come after its parent, so every walk terminates.
    for (size_t t = 0; t < roots_.size(); ++t)
      for (int32_t k = roots_[t]; k < static_cast<int32_t>(nodes_.size()) &&
                                  (t + 1 == roots_.size() || k < roots_[t + 1]);
           ++k)
        if (nodes_[k].left >= 0 && (nodes_[k].left <= k || nodes_[k].right <= k))
          throw ModelError(std::string(what) + " booster has a cyclic tree");
    loop_.resize(nodes_.size());
    std::vector<int> node_depth(nodes_.size(), 0);
    for (size_t k = 0; k < nodes_.size(); ++k) {
      const Node& nd = nodes_[k];
      const bool leaf = nd.left < 0;
      const auto self = static_cast<int32_t>(k);
      loop_[k] = {nd.cond, leaf ? self : nd.left, leaf ? self : nd.right, nd.feature, nd.default_left};
    }
    for (size_t t = 0; t < roots_.size(); ++t) {
      const size_t end = t + 1 < roots_.size() ? static_cast<size_t>(roots_[t + 1]) : nodes_.size();
      int deepest = 0;
      node_depth[static_cast<size_t>(roots_[t])] = 0;
      for (size_t k = static_cast<size_t>(roots_[t]); k < end; ++k) {  // parents precede children
        const Node& nd = nodes_[k];
        if (nd.left >= 0) {
          node_depth[static_cast<size_t>(nd.left)] = node_depth[k] + 1;
          node_depth[static_cast<size_t>(nd.right)] = node_depth[k] + 1;
        } else {
          deepest = std::max(deepest, node_depth[k]);
        }
      }
      depth_.push_back(deepest);
    }
  }

  bool empty() const { return roots_.empty(); }
  size_t trees() const { return roots_.size(); }

  // Margins of up to BLOCK rows at once, tree by tree: the walks of different rows are
  // independent, so the CPU overlaps their cache misses and mispredictions, and each tree's nodes
  // stay in cache for the whole block. Same float summation order as margin().
  static constexpr size_t BLOCK = 32;
  void margins(const float* rows, size_t n, double* out) const {
    float sum[BLOCK];
    int32_t at[BLOCK];
    for (size_t r = 0; r < n; ++r) sum[r] = 0.0f;
    for (size_t t = 0; t < roots_.size(); ++t) {
      // Lockstep walk: every row takes `depth` steps; leaves loop to themselves (loop_), so the
      // inner loop has no data-dependent branch and the rows' walks overlap.
      for (size_t r = 0; r < n; ++r) at[r] = roots_[t];
      for (int d = 0; d < depth_[t]; ++d) {
        for (size_t r = 0; r < n; ++r) {
          const Loop& nd = loop_[static_cast<size_t>(at[r])];
          const float v = rows[r * N_FEATURES + nd.feature];
          const bool go_left = std::isnan(v) ? nd.default_left != 0 : v < nd.cond;
          at[r] = go_left ? nd.left : nd.right;
        }
      }
      for (size_t r = 0; r < n; ++r) sum[r] += loop_[static_cast<size_t>(at[r])].cond;
    }
    for (size_t r = 0; r < n; ++r) out[r] = base_margin_ + static_cast<double>(sum[r]);
  }

  double margin(const float* row) const {
    // Accumulated in float, the order XGBoost's CPU predictor uses, so results match it.
    float sum = 0.0f;
    for (const int32_t root : roots_) {
      const Node* nd = &nodes_[root];
      while (nd->left >= 0) {
        const float v = row[nd->feature];
        const int32_t next = std::isnan(v) ? (nd->default_left ? nd->left : nd->right)
                                           : (v < nd->cond ? nd->left : nd->right);
        nd = &nodes_[next];
      }
      sum += nd->cond;
    }
    return base_margin_ + static_cast<double>(sum);
  }

 private:
  struct Loop {
    float cond;
    int32_t left, right;
    uint32_t feature;
    uint32_t default_left;
  };
  std::vector<Node> nodes_;
  std::vector<Loop> loop_;    // nodes_ with leaves pointing to themselves
  std::vector<int> depth_;    // per tree: longest root-to-leaf path
  std::vector<int32_t> roots_;
  double base_margin_ = 0.0;
};

class TreePredictor final : public Predictor {
 public:
  TreePredictor(const std::string& rt_json, const std::string& fail_json, Calibration cal,
                UserHistory history, double epoch_offset, std::string description)
      : runtime_(rt_json, false, "run-time"),
        cal_(cal),
        history_(std::move(history)),
        epoch_offset_(epoch_offset),
        description_(std::move(description)) {
    if (!fail_json.empty()) fail_ = TreeEnsemble(fail_json, true, "failure");
    description_ += ", " + std::to_string(runtime_.trees()) + " run-time trees";
    if (!fail_.empty()) description_ += ", " + std::to_string(fail_.trees()) + " failure trees";
  }

  void predict(std::span<const Job> jobs, const TraceNames& names,
               std::span<Prediction> out) const override {
    // One buffer per thread, grown to the largest batch seen: no allocation in steady state.
    thread_local std::vector<float> rows;
    if (rows.size() < jobs.size() * N_FEATURES) rows.resize(jobs.size() * N_FEATURES);
    encode_with_history(jobs, names, history_, epoch_offset_, rows);
    predict_rows(std::span<const float>(rows.data(), jobs.size() * N_FEATURES), jobs, out);
  }

  void predict_rows(std::span<const float> rows, std::span<const Job> jobs,
                    std::span<Prediction> out) const override {
    if (out.size() != jobs.size() || rows.size() < jobs.size() * N_FEATURES)
      throw ModelError("predict: rows/jobs/out sizes disagree");
    double m_rt[TreeEnsemble::BLOCK], m_fail[TreeEnsemble::BLOCK];
    for (size_t b = 0; b < jobs.size(); b += TreeEnsemble::BLOCK) {
      const size_t n = std::min(TreeEnsemble::BLOCK, jobs.size() - b);
      runtime_.margins(rows.data() + b * N_FEATURES, n, m_rt);
      if (!fail_.empty()) fail_.margins(rows.data() + b * N_FEATURES, n, m_fail);
      for (size_t r = 0; r < n; ++r) finish(jobs[b + r], m_rt[r], fail_.empty() ? NOT_PREDICTED : m_fail[r], out[b + r]);
    }
  }

  void finish(const Job& job, double m, double fail_margin, Prediction& out) const {
    {
      const Job* jobs_i = &job;
      double point = std::exp(m + cal_.point_shift);
      double upper = std::exp(m + cal_.upper_shift);
      // A job is killed at its limit, so it never runs longer than it asked for.
      if (jobs_i->req_time > 0) {
        point = std::min(point, jobs_i->req_time);
        upper = std::min(upper, jobs_i->req_time);
      }
      out.runtime = point;
      out.runtime_upper = std::max(upper, point);
      out.fail_prob = std::isnan(fail_margin) ? NOT_PREDICTED : 1.0 / (1.0 + std::exp(-fail_margin));
    }
  }

  std::string describe() const override { return description_; }
  std::string kind() const override { return "xgboost"; }

 private:
  TreeEnsemble runtime_;
  TreeEnsemble fail_;
  Calibration cal_;
  UserHistory history_;
  double epoch_offset_;
  std::string description_;
};

}  // namespace

std::unique_ptr<Predictor> make_tree_predictor(const std::string& runtime_json,
                                               const std::string& fail_json, Calibration cal,
                                               UserHistory history, double epoch_offset,
                                               std::string description) {
  return std::make_unique<TreePredictor>(runtime_json, fail_json, cal, std::move(history),
                                         epoch_offset, std::move(description));
}

}  // namespace mlprio::model
