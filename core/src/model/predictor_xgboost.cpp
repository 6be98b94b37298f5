// The "xgboost" predictor kind: gradient-boosted trees trained by `mlprio-model train` through
// XGBoost's C API, evaluated here by a flat, allocation-free tree walker read from XGBoost's own
// saved JSON model. Evaluating ourselves keeps libxgboost out of slurmctld, makes concurrent
// predict() calls safe (the trees are immutable) and costs a few hundred nanoseconds per job;
// tests and the benchmark check it against XGBoosterPredict. The regressor predicts
// log(max(run, 1 s)); calibration shifts from the training tail turn it into a point and an
// upper prediction (see model/README.md). explain_fail() computes per-feature contributions to
// the failure model's log-odds with TreeSHAP (Lundberg et al., the algorithm behind XGBoost's
// pred_contribs, re-implemented here on the saved trees and their covers), so slurmctld can say
// why a job was refused without libxgboost; tests check it against XGBoost's own numbers.
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
constexpr uint32_t HIGH_COLUMNS = N_FEATURES;    // first "NaN -> +inf" column
constexpr uint32_t PAD_COLUMN = 2 * N_FEATURES;  // always -inf, read by leaves
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
      if (nfeat != static_cast<double>(N_FEATURES))
        throw ModelError(std::string(what) + " booster has " +
                         io::describe_json_value(lmp.at("num_feature")) + " features, the schema " +
                         std::to_string(N_FEATURES));
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
  double base_margin() const { return base_margin_; }
  size_t trees() const { return roots_.size(); }
  // Whether every tree came with usable covers (XGBoost's "sum_hessian"), which TreeSHAP needs.
  bool explainable() const { return explainable_ && !explain_.empty(); }

  // TreeSHAP contributions of one row (N_FEATURES floats, NaN = missing) to the margin:
  // out[f] for each feature, out[N_FEATURES] the bias (base margin + every tree's mean). Summed
  // per tree in float and added in tree order, as XGBoost's CPU predictor does.
  void explain(const float* row, double* out) const {
    std::vector<float> total(N_FEATURES + 1, 0.0f), tree(N_FEATURES + 1);
    std::vector<PathElement> path;
    for (const ExplainTree& t : explain_) {
      std::fill(tree.begin(), tree.end(), 0.0f);
      tree[N_FEATURES] += t.mean[0];
      const size_t maxd = static_cast<size_t>(t.depth) + 2;
      path.assign(maxd * (maxd + 1) / 2, PathElement{});
      tree_shap(t, row, tree.data(), 0, 0, path.data(), 1.0f, 1.0f, -1);
      for (size_t c = 0; c < total.size(); ++c) total[c] += tree[c];
    }
    total[N_FEATURES] += static_cast<float>(base_margin_);
    for (size_t c = 0; c < total.size(); ++c) out[c] = total[c];
  }

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
      throw ModelError(where +
                       ": left_children, right_children, split_indices, "
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
        throw ModelError(node + ": child " + std::to_string(seen[static_cast<size_t>(l)] ? l : r) +
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
    add_explain_tree(t, order, deepest);
  }

  // One tree as XGBoost saved it (original numbering), with covers, for explain(): the flat
  // walker's layout keeps neither.
  struct ExplainTree {
    std::vector<int32_t> left, right, feature;
    std::vector<float> cond, cover;
    std::vector<float> mean;  // cover-weighted mean of the leaves below each node
    std::vector<uint8_t> default_left;
    int depth = 0;
  };

  // Keeps tree `t` for explain(); `order` lists its reachable nodes breadth-first.
  void add_explain_tree(const nlohmann::json& t, const std::vector<uint32_t>& order, int depth) {
    if (!t.contains("sum_hessian") || t.at("sum_hessian").size() != t.at("left_children").size()) {
      explainable_ = false;  // the model still predicts; only explanations are unavailable
      return;
    }
    const size_t n = t.at("left_children").size();
    ExplainTree e;
    e.depth = depth;
    e.left.resize(n);
    e.right.resize(n);
    e.feature.resize(n);
    e.cond.resize(n);
    e.cover.resize(n);
    e.mean.assign(n, 0.0f);
    e.default_left.resize(n);
    for (size_t k = 0; k < n; ++k) {
      e.left[k] = t["left_children"][k].get<int32_t>();
      e.right[k] = t["right_children"][k].get<int32_t>();
      e.feature[k] = t["split_indices"][k].get<int32_t>();
      e.cond[k] = t["split_conditions"][k].get<float>();
      e.cover[k] = t["sum_hessian"][k].get<float>();
      const auto& dl = t["default_left"][k];
      e.default_left[k] = dl.is_boolean() ? dl.get<bool>() : dl.get<int>() != 0;
    }
    // Children come after their parent breadth-first, so the reverse order has them ready.
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const uint32_t k = *it;
      if (e.left[k] < 0) {
        e.mean[k] = e.cond[k];
        continue;
      }
      if (!(e.cover[k] > 0.0f) || !std::isfinite(e.cover[k])) {
        explainable_ = false;  // TreeSHAP divides by it
        return;
      }
      const auto l = static_cast<size_t>(e.left[k]), r = static_cast<size_t>(e.right[k]);
      e.mean[k] = (e.mean[l] * e.cover[l] + e.mean[r] * e.cover[r]) / e.cover[k];
    }
    explain_.push_back(std::move(e));
  }

  // TreeSHAP's path bookkeeping (Lundberg, Erion & Lee 2018, algorithm 2), in float like
  // XGBoost: the fraction of "feature off" (zero) and "feature on" (one) paths through each
  // unique feature on the way down, and the permutation weights of subsets of them.
  struct PathElement {
    int feature = -1;
    float zero = 0, one = 0, weight = 0;
  };

  static void extend_path(PathElement* p, uint32_t depth, float zero, float one, int feature) {
    p[depth] = {feature, zero, one, depth == 0 ? 1.0f : 0.0f};
    for (int i = static_cast<int>(depth) - 1; i >= 0; --i) {
      p[i + 1].weight +=
          one * p[i].weight * static_cast<float>(i + 1) / static_cast<float>(depth + 1);
      p[i].weight = zero * p[i].weight * static_cast<float>(depth - static_cast<uint32_t>(i)) /
                    static_cast<float>(depth + 1);
    }
  }

  static void unwind_path(PathElement* p, uint32_t depth, uint32_t at) {
    const float one = p[at].one, zero = p[at].zero;
    float next = p[depth].weight;
    for (int i = static_cast<int>(depth) - 1; i >= 0; --i) {
      const float span = static_cast<float>(depth - static_cast<uint32_t>(i));
      if (one != 0) {
        const float tmp = p[i].weight;
        p[i].weight = next * static_cast<float>(depth + 1) / (static_cast<float>(i + 1) * one);
        next = tmp - p[i].weight * zero * span / static_cast<float>(depth + 1);
      } else {
        p[i].weight = p[i].weight * static_cast<float>(depth + 1) / (zero * span);
      }
    }
    for (uint32_t i = at; i < depth; ++i) {
      p[i].feature = p[i + 1].feature;
      p[i].zero = p[i + 1].zero;
      p[i].one = p[i + 1].one;
    }
  }

  static float unwound_sum(const PathElement* p, uint32_t depth, uint32_t at) {
    const float one = p[at].one, zero = p[at].zero;
    float next = p[depth].weight, total = 0;
    for (int i = static_cast<int>(depth) - 1; i >= 0; --i) {
      const float span = static_cast<float>(depth - static_cast<uint32_t>(i));
      if (one != 0) {
        const float tmp = next * static_cast<float>(depth + 1) / (static_cast<float>(i + 1) * one);
        total += tmp;
        next = p[i].weight - tmp * zero * (span / static_cast<float>(depth + 1));
      } else if (zero != 0) {
        total += (p[i].weight / zero) / (span / static_cast<float>(depth + 1));
      }
    }
    return total;
  }

  // One node of the recursive walk: the row's own path is "hot", the other branch "cold".
  static void tree_shap(const ExplainTree& t, const float* row, float* phi, int32_t node,
                        uint32_t depth, PathElement* parent_path, float parent_zero,
                        float parent_one, int parent_feature) {
    PathElement* path = parent_path + depth + 1;
    std::copy(parent_path, parent_path + depth + 1, path);
    extend_path(path, depth, parent_zero, parent_one, parent_feature);
    const auto k = static_cast<size_t>(node);
    if (t.left[k] < 0) {
      for (uint32_t i = 1; i <= depth; ++i) {
        const float w = unwound_sum(path, depth, i);
        phi[path[i].feature] += w * (path[i].one - path[i].zero) * t.cond[k];
      }
      return;
    }
    const int f = t.feature[k];
    const float v = row[f];
    const int32_t hot = std::isnan(v) ? (t.default_left[k] ? t.left[k] : t.right[k])
                                      : (v < t.cond[k] ? t.left[k] : t.right[k]);
    const int32_t cold = hot == t.left[k] ? t.right[k] : t.left[k];
    const float w = t.cover[k];
    const float hot_zero = t.cover[static_cast<size_t>(hot)] / w;
    const float cold_zero = t.cover[static_cast<size_t>(cold)] / w;
    float in_zero = 1, in_one = 1;
    // A feature already split on above: undo that split so this node redoes it.
    uint32_t at = 0;
    while (at <= depth && path[at].feature != f) ++at;
    if (at != depth + 1) {
      in_zero = path[at].zero;
      in_one = path[at].one;
      unwind_path(path, depth, at);
      depth -= 1;
    }
    tree_shap(t, row, phi, hot, depth + 1, path, hot_zero * in_zero, in_one, f);
    tree_shap(t, row, phi, cold, depth + 1, path, cold_zero * in_zero, 0, f);
  }

  std::vector<FlatNode> nodes_;  // every tree, breadth-first, one after another
  std::vector<uint32_t> roots_;
  std::vector<int> depth_;        // per tree: longest root-to-leaf path
  std::vector<int> group_depth_;  // per GROUP of trees: the deepest of them
  double base_margin_ = 0.0;
  std::vector<ExplainTree> explain_;
  bool explainable_ = true;
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
    predict_rows_with(std::span<const float>(rows.data(), jobs.size() * N_FEATURES), jobs, out,
                      opt);
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
    // An anchored model's trees correct log(anchor) instead of the base score.
    const double m = calibrated_log(margin, runtime_.base_margin(), row, job.req_time, cal_);
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

  bool explain_fail(const Job& job, const TraceNames& names, std::span<double> contrib,
                    std::span<float> row) const override {
    if (fail_.empty() || !fail_.explainable() || contrib.size() < N_FEATURES + 1 ||
        row.size() < N_FEATURES)
      return false;
    encode_with_history({&job, 1}, names, history_, epoch_offset_, row.first(N_FEATURES));
    return explain_fail_row(row.first(N_FEATURES), contrib);
  }
  bool explain_fail_row(std::span<const float> row, std::span<double> contrib) const override {
    if (fail_.empty() || !fail_.explainable() || contrib.size() < N_FEATURES + 1 ||
        row.size() < N_FEATURES)
      return false;
    fail_.explain(row.data(), contrib.data());
    return true;
  }
  const UserHistory* frozen_history() const override { return &history_; }
  double epoch_offset() const override { return epoch_offset_; }

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
