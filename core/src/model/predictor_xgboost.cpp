// The "xgboost" predictor kind: gradient-boosted trees trained by `mlprio-model train` through
// XGBoost's C API, evaluated here by a flat, allocation-free tree walker read from XGBoost's own
// saved JSON model. Evaluating ourselves keeps libxgboost out of slurmctld, makes concurrent
// predict() calls safe (the trees are immutable) and costs a few hundred nanoseconds per job;
// tests and the benchmark check it against XGBoosterPredict. The regressor predicts
// log(max(run, 1 s)); calibration shifts from the training tail turn it into a point and an
// upper prediction (see model/README.md).
#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "mlprio/io/json_input.hpp"
#include "mlprio/model/model_file.hpp"

namespace mlprio::model {

namespace detail {
#if defined(__x86_64__) || defined(__i386__)
// tree_walk_avx2.cpp (compiled with -mavx2): the batch path's 8-rows-per-vector walk.
void tree_walk_avx2(const void* nodes, const uint32_t* roots, const int* depths, size_t n_trees,
                    const float* rows, size_t stride, size_t n_rows, float* sum);
#endif

// Which batch walker margins() uses: 0 = automatic, 1 = scalar, 2 = AVX2 (where the CPU has it).
// Internal switch for tests (declared there, not in a header); returns whether AVX2 is usable.
// The environment variable MLPRIO_TREE_WALK=scalar|avx2 sets the starting value (benchmarks).
bool set_tree_walk_mode(int mode);

namespace {
bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

int initial_walk_mode() {
  const char* e = std::getenv("MLPRIO_TREE_WALK");
  if (e != nullptr && std::strcmp(e, "scalar") == 0) return 1;
  if (e != nullptr && std::strcmp(e, "avx2") == 0) return 2;
  return 0;
}

std::atomic<int>& walk_mode() {
  static std::atomic<int> mode{initial_walk_mode()};
  return mode;
}
}  // namespace

bool set_tree_walk_mode(int mode) {
  walk_mode().store(mode, std::memory_order_relaxed);
  return cpu_has_avx2();
}
}  // namespace detail

namespace {

// Default of the automatic mode: AUTO_AVX2 picks the AVX2 walker on CPUs that have it.
constexpr bool AUTO_AVX2 = true;

bool use_avx2_walk() {
  const int mode = detail::walk_mode().load(std::memory_order_relaxed);
  const bool want = mode == 2 || (mode == 0 && AUTO_AVX2);
  return want && mode != 1 && detail::cpu_has_avx2();
}

// One node of the flattened ensemble, 8 bytes so that a depth-6 tree (<= 127 nodes) fits in
// 1 KiB and all 200 trees of a model stay in L2. Children are renumbered to be adjacent (right =
// left + 1), so a step computes the next index instead of choosing between two.
//
// Missing values without a branch: the walker reads a padded copy of each row holding every
// feature twice, once with NaN replaced by -inf ("low" columns) and once by +inf ("high"
// columns). A node whose default direction is left reads the low column, so a missing value
// gives -inf < threshold and goes left; a default-right node reads the high column (+inf <
// threshold is false: right). Present values are unchanged, and XGBoost's test is
// `fvalue < split_cond` in float32, so every step goes where XGBoost goes as long as every
// threshold is finite (checked at load). A leaf keeps its value in `value`, points to itself
// and reads the always -inf padding column, so further steps stay put: all walks of a tree take
// the same number of steps.
struct FlatNode {
  float value;    // split threshold, or the leaf value
  uint32_t meta;  // bits 0-23: absolute index of the left child (itself for a leaf); 24-31: column
};
static_assert(sizeof(FlatNode) == 8);

constexpr uint32_t INDEX_BITS = 24;
constexpr int MAX_TREE_DEPTH = MODEL_MAX_TREE_DEPTH;
constexpr uint32_t MAX_NODES = 1u << INDEX_BITS;
constexpr uint32_t HIGH_COLUMNS = N_FEATURES;      // first "NaN -> +inf" column
constexpr uint32_t PAD_COLUMN = 2 * N_FEATURES;    // always -inf, read by leaves
// Row stride of the padded copy, rounded up to a multiple of 16 floats (one cache line).
constexpr size_t STRIDE = (2 * static_cast<size_t>(N_FEATURES) + 1 + 15) / 16 * 16;
static_assert(PAD_COLUMN < 256, "column index must fit in 8 bits");

inline uint32_t step(const FlatNode& nd, const float* row) {
  const float v = row[nd.meta >> INDEX_BITS];
  return (nd.meta & (MAX_NODES - 1)) + static_cast<uint32_t>(!(v < nd.value));
}

// A learner_model_param value: XGBoost writes them as strings ("5E-1"); a JSON number is accepted
// too. Anything but a whole finite number (a "nan" or "inf" string, trailing text) is refused:
// a NaN base score would make every prediction NaN.
double param_number(const nlohmann::json& lmp, const char* key, const char* what) {
  const auto& v = lmp.at(key);
  double x = std::numeric_limits<double>::quiet_NaN();
  if (v.is_number()) {
    x = v.get<double>();
  } else if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
    if (ec != std::errc() || p != s.data() + s.size()) x = std::numeric_limits<double>::quiet_NaN();
  }
  if (!std::isfinite(x))
    throw ModelError(std::string(what) + " booster: learner_model_param." + key + " " +
                     io::describe_json_value(v) + " is not a finite number");
  return x;
}

class TreeEnsemble {
 public:
  TreeEnsemble() = default;
  TreeEnsemble(const std::string& saved_json, bool logistic, const char* what) {
    nlohmann::json m;
    try {
      m = io::parse_untrusted_json(saved_json);
    } catch (const io::JsonInputError& e) {
      throw ModelError(std::string(what) + " booster is " + e.what());
    }
    try {
      const auto& learner = m.at("learner");
      const std::string obj = learner.at("objective").at("name").get<std::string>();
      const bool is_logistic = obj == "binary:logistic";
      if (is_logistic != logistic)
        throw ModelError(std::string(what) + " booster has objective " + obj);
      const auto& lmp = learner.at("learner_model_param");
      const double base = param_number(lmp, "base_score", what);
      const double nfeat = param_number(lmp, "num_feature", what);
      if (nfeat != N_FEATURES)
        throw ModelError(std::string(what) + " booster has " + io::describe_json_value(lmp.at("num_feature")) +
                         " features, the schema " + std::to_string(N_FEATURES));
      if (logistic && !(base > 0.0 && base < 1.0))
        throw ModelError(std::string(what) + " booster: learner_model_param.base_score " +
                         std::to_string(base) + " is not a probability in (0, 1)");
      base_margin_ = logistic ? -std::log(1.0 / base - 1.0) : base;
      const auto& gb = learner.at("gradient_booster");
      if (gb.at("name") != "gbtree")
        throw ModelError(std::string(what) + " booster is not a gbtree");
      const auto& trees = gb.at("model").at("trees");
      for (size_t i = 0; i < trees.size(); ++i) add_tree(trees[i], what, i);
    } catch (const nlohmann::json::exception& e) {
      throw ModelError(std::string(what) + " booster is malformed: " + e.what());
    }
    // Trees in groups of GROUP for the one-row path: a group walks in lockstep, as deep as its
    // deepest tree (leaves absorb the extra steps).
    for (size_t g = 0; g < roots_.size(); g += GROUP) {
      int d = 0;
      for (size_t t = g; t < std::min(roots_.size(), g + GROUP); ++t) d = std::max(d, depth_[t]);
      group_depth_.push_back(d);
    }
  }

  bool empty() const { return roots_.empty(); }
  size_t trees() const { return roots_.size(); }

  // Rows per block of the batch path: the per-row state (index, sum) and the block's padded
  // rows (BLOCK x STRIDE floats = 16 KiB) stay in L1 while the block walks every tree.
  static constexpr size_t BLOCK = 64;
  // Trees walked together by the one-row path (independent walks the CPU overlaps).
  static constexpr size_t GROUP = 8;
  // Rows walked together by the batch path.
  static constexpr size_t LANES = 8;

  // Margins of n <= BLOCK rows (padded layout, STRIDE floats each). Each row's leaves are summed
  // in float in tree order, then added to the base margin in double: the order and types of
  // XGBoost's CPU predictor and of the walker this replaced, so results are bit-identical.
  void margins(const float* rows, size_t n, double* out) const {
    if (n < 4) {
      for (size_t r = 0; r < n; ++r) out[r] = margin_one(rows + r * STRIDE);
      return;
    }
    float sum[BLOCK];
    for (size_t r = 0; r < n; ++r) sum[r] = 0.0f;
    const FlatNode* nodes = nodes_.data();
    const size_t n_lanes = n / LANES * LANES;
    // The AVX2 walker (tree_walk_avx2.cpp) takes the first n_lanes rows through every tree; each
    // row still gets its leaves in tree order, so the sums are the scalar walker's bit for bit.
    const bool avx2 = use_avx2_walk();
#if defined(__x86_64__) || defined(__i386__)
    if (avx2)
      detail::tree_walk_avx2(nodes, roots_.data(), depth_.data(), roots_.size(), rows, STRIDE,
                             n_lanes, sum);
#endif
    for (size_t t = 0; t < roots_.size(); ++t) {
      const uint32_t root = roots_[t];
      const int depth = depth_[t];
      // LANES rows walk the tree together, their positions in registers: independent chains
      // the CPU overlaps. The tree (<= 1 KiB) stays in L1 across the block.
      for (size_t r0 = 0; r0 < (avx2 ? 0 : n_lanes); r0 += LANES) {
        uint32_t at[LANES];
        for (size_t j = 0; j < LANES; ++j) at[j] = root;
        for (int d = 0; d < depth; ++d)
          for (size_t j = 0; j < LANES; ++j) at[j] = step(nodes[at[j]], rows + (r0 + j) * STRIDE);
        for (size_t j = 0; j < LANES; ++j) sum[r0 + j] += nodes[at[j]].value;
      }
      for (size_t r = n_lanes; r < n; ++r) {
        uint32_t at = root;
        for (int d = 0; d < depth; ++d) at = step(nodes[at], rows + r * STRIDE);
        sum[r] += nodes[at].value;
      }
    }
    for (size_t r = 0; r < n; ++r) out[r] = base_margin_ + static_cast<double>(sum[r]);
  }

 private:
  // One row: GROUP trees at a time in lockstep, leaves summed in tree order afterwards.
  double margin_one(const float* row) const {
    const FlatNode* nodes = nodes_.data();
    float sum = 0.0f;
    uint32_t at[GROUP];
    for (size_t g = 0, gi = 0; g < roots_.size(); g += GROUP, ++gi) {
      const size_t k = std::min(GROUP, roots_.size() - g);
      if (k == GROUP) {
        for (size_t j = 0; j < GROUP; ++j) at[j] = roots_[g + j];
        for (int d = 0; d < group_depth_[gi]; ++d)
          for (size_t j = 0; j < GROUP; ++j) at[j] = step(nodes[at[j]], row);
      } else {
        for (size_t j = 0; j < k; ++j) at[j] = roots_[g + j];
        for (int d = 0; d < group_depth_[gi]; ++d)
          for (size_t j = 0; j < k; ++j) at[j] = step(nodes[at[j]], row);
      }
      for (size_t j = 0; j < k; ++j) sum += nodes[at[j]].value;
    }
    return base_margin_ + static_cast<double>(sum);
  }

  // Appends one tree of XGBoost's JSON, renumbered breadth-first so siblings are adjacent.
  //
  // The structure is checked exactly as XGBoost reads it, because `mlprio-model explain` hands
  // the same booster to libxgboost, which trusts it: a node is a leaf if and only if its left
  // child is -1 (any other negative index is not a leaf to XGBoost, it is an index it follows);
  // an inner node's children are node indices in range; every node is reached at most once from
  // the root (no cycle, no shared subtree); and no leaf is deeper than MAX_TREE_DEPTH.
  void add_tree(const nlohmann::json& t, const char* what, size_t tree) {
    const auto& lc = t.at("left_children");
    const auto& rc = t.at("right_children");
    const auto& si = t.at("split_indices");
    const auto& sc = t.at("split_conditions");
    const auto& dl = t.at("default_left");
    const size_t n = lc.size();
    const std::string where = std::string(what) + " booster, tree " + std::to_string(tree);
    if (rc.size() != n || si.size() != n || sc.size() != n || dl.size() != n || n == 0)
      throw ModelError(where + ": left_children, right_children, split_indices, "
                       "split_conditions and default_left must be non-empty lists of one length");
    if (nodes_.size() + n > MAX_NODES)
      throw ModelError(std::string(what) + " booster has more than " + std::to_string(MAX_NODES) +
                       " nodes, more than the evaluator's 24-bit node index holds");
    const auto off = static_cast<uint32_t>(nodes_.size());
    std::vector<uint32_t> order{0};  // original index of each new node, breadth-first
    std::vector<int> node_depth{0};
    std::vector<uint8_t> seen(n, 0);
    seen[0] = 1;
    nodes_.resize(off + n);
    int deepest = 0;
    for (size_t k = 0; k < order.size(); ++k) {
      const size_t o = order[k];
      const std::string node = where + ", node " + std::to_string(o);
      const int64_t l = lc[o].get<int64_t>();
      const int64_t r = rc[o].get<int64_t>();
      FlatNode& nd = nodes_[off + k];
      nd.value = sc[o].get<float>();
      if (l == -1) {  // leaf: loops to itself through the padding column
        if (!std::isfinite(nd.value))
          throw ModelError(node + ": the leaf value is not finite (as float32)");
        nd.meta = (off + static_cast<uint32_t>(k)) | (PAD_COLUMN << INDEX_BITS);
        deepest = std::max(deepest, node_depth[k]);
        continue;
      }
      const auto n64 = static_cast<int64_t>(n);
      if (l < 0 || l >= n64 || r < 0 || r >= n64)
        throw ModelError(node + ": children " + std::to_string(l) + ", " + std::to_string(r) +
                         " are not node indices in [0, " + std::to_string(n) +
                         ") (a leaf has left child -1)");
      // A node reached twice (a cycle or shared subtree) would make the walk wrong or endless.
      if (seen[static_cast<size_t>(l)] || seen[static_cast<size_t>(r)] || l == r)
        throw ModelError(node + ": child " +
                         std::to_string(seen[static_cast<size_t>(l)] ? l : r) +
                         " is reached twice from the root (a cycle or a shared subtree)");
      if (node_depth[k] + 1 > MAX_TREE_DEPTH)
        throw ModelError(node + ": the tree is deeper than " + std::to_string(MAX_TREE_DEPTH) +
                         " levels");
      seen[static_cast<size_t>(l)] = seen[static_cast<size_t>(r)] = 1;
      const auto f = si[o].get<int64_t>();
      if (f < 0 || f >= N_FEATURES)
        throw ModelError(node + ": splits on feature " + std::to_string(f) +
                         ", outside the schema's " + std::to_string(N_FEATURES));
      const bool def_left = dl[o].is_boolean() ? dl[o].get<bool>() : dl[o].get<int>() != 0;
      if (!std::isfinite(nd.value))
        throw ModelError(node + ": the split condition is not finite (as float32)");
      const uint32_t column = static_cast<uint32_t>(f) + (def_left ? 0 : HIGH_COLUMNS);
      nd.meta = (off + static_cast<uint32_t>(order.size())) | (column << INDEX_BITS);
      order.push_back(static_cast<uint32_t>(l));
      order.push_back(static_cast<uint32_t>(r));
      node_depth.push_back(node_depth[k] + 1);
      node_depth.push_back(node_depth[k] + 1);
    }
    nodes_.resize(off + order.size());  // nodes unreachable from the root are dropped
    roots_.push_back(off);
    depth_.push_back(deepest);
  }

  std::vector<FlatNode> nodes_;   // every tree, breadth-first, one after another
  std::vector<uint32_t> roots_;
  std::vector<int> depth_;        // per tree: longest root-to-leaf path
  std::vector<int> group_depth_;  // per GROUP of trees: the deepest of them
  double base_margin_ = 0.0;
};

// Copies up to BLOCK rows into the padded layout the walker reads (see FlatNode).
void pad_rows(const float* rows, size_t n, float* padded) {
  constexpr float INF = std::numeric_limits<float>::infinity();
  for (size_t r = 0; r < n; ++r) {
    const float* in = rows + r * N_FEATURES;
    float* o = padded + r * STRIDE;
    for (size_t f = 0; f < static_cast<size_t>(N_FEATURES); ++f) {
      const bool missing = std::isnan(in[f]);
      o[f] = missing ? -INF : in[f];
      o[HIGH_COLUMNS + f] = missing ? INF : in[f];
    }
    for (size_t c = PAD_COLUMN; c < STRIDE; ++c) o[c] = -INF;
  }
}

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
    predict_with(jobs, names, out, Options{});
  }
  void predict_rows(std::span<const float> rows, std::span<const Job> jobs,
                    std::span<Prediction> out) const override {
    predict_rows_with(rows, jobs, out, Options{});
  }

  void predict_with(std::span<const Job> jobs, const TraceNames& names, std::span<Prediction> out,
                    const Options& opt) const override {
    // One buffer per thread, grown to the largest batch seen: no allocation in steady state.
    thread_local std::vector<float> rows;
    if (rows.size() < jobs.size() * N_FEATURES) rows.resize(jobs.size() * N_FEATURES);
    encode_with_history(jobs, names, history_, epoch_offset_, rows);
    predict_rows_with(std::span<const float>(rows.data(), jobs.size() * N_FEATURES), jobs, out, opt);
  }

  void predict_rows_with(std::span<const float> rows, std::span<const Job> jobs,
                         std::span<Prediction> out, const Options& opt) const override {
    if (out.size() != jobs.size() || rows.size() < jobs.size() * N_FEATURES)
      throw ModelError("predict: rows/jobs/out sizes disagree");
    constexpr size_t B = TreeEnsemble::BLOCK;
    alignas(64) float padded[B * STRIDE];
    double m_rt[B], m_fail[B];
    const bool want_fail = opt.fail_prob && !fail_.empty();
    for (size_t b = 0; b < jobs.size(); b += B) {
      const size_t n = std::min(B, jobs.size() - b);
      pad_rows(rows.data() + b * N_FEATURES, n, padded);
      runtime_.margins(padded, n, m_rt);
      if (want_fail) fail_.margins(padded, n, m_fail);
      for (size_t r = 0; r < n; ++r)
        finish(jobs[b + r], rows.data() + (b + r) * N_FEATURES, m_rt[r],
               want_fail ? m_fail[r] : NOT_PREDICTED, out[b + r]);
    }
  }

  void finish(const Job& job, const float* row, double margin, double fail_margin,
              Prediction& out) const {
    const double m = blend_log(margin, blend_baseline(row, job.req_time), cal_.blend_weight);
    double point = std::exp(m + cal_.point_shift);
    double upper = std::exp(m + cal_.upper_shift);
    // A job is killed at its limit, so it never runs longer than it asked for.
    if (job.req_time > 0) {
      point = std::min(point, job.req_time);
      upper = std::min(upper, job.req_time);
    }
    out.runtime = point;
    out.runtime_upper = std::max(upper, point);
    out.fail_prob = std::isnan(fail_margin) ? NOT_PREDICTED : 1.0 / (1.0 + std::exp(-fail_margin));
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
