// AVX2 version of the batch tree walker's inner loop (see predictor_xgboost.cpp, FlatNode): eight
// rows per 256-bit vector walk one tree together; each step gathers the eight rows' node words
// (threshold and packed left-child/column), gathers each row's feature from the padded block,
// compares `v < threshold` in float32 (_CMP_LT_OQ: the same test as the scalar `v < t`; the
// padded rows hold no NaN) and moves to left + 1 - (v < t). Several vectors are in flight at once
// so that the gathers' latency overlaps. Compiled with -mavx2 (this file only, see sources.cmake)
// and called only when the CPU has AVX2. It includes only the intrinsics and the integer-type
// headers (no inline library functions), so nothing compiled here with AVX2 can be merged into
// code that runs on a CPU without it.
//
// Results are bit-identical to the scalar walker: the same node is reached for every row, and
// each row's leaf values are added to its float sum one tree at a time, in tree order, with
// plain (unfused) float adds.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace mlprio::model::detail {

void tree_walk_avx2(const void* nodes, const uint32_t* roots, const int* depths, size_t n_trees,
                    const float* rows, size_t stride, size_t n_rows, float* sum);

namespace {

constexpr int INDEX_BITS = 24;
constexpr int MAX_VECTORS = 4;  // 32 rows in flight per tree

// K vectors of 8 rows (rows [0, 8K) of `rows`) through one tree, leaves added to sum[0, 8K).
template <int K>
inline void walk_tree(const float* node_f, const int* node_i, uint32_t root, int depth,
                      const float* rows, const __m256i* row_off, float* sum) {
  const __m256i index_mask = _mm256_set1_epi32((1 << INDEX_BITS) - 1);
  const __m256i one = _mm256_set1_epi32(1);
  __m256i at[K];
  if (depth == 0) {  // a single leaf
    const __m256 leaf = _mm256_set1_ps(node_f[2 * static_cast<size_t>(root)]);
    for (int k = 0; k < K; ++k)
      _mm256_storeu_ps(sum + 8 * k, _mm256_add_ps(_mm256_loadu_ps(sum + 8 * k), leaf));
    return;
  }
  {  // first step: every row is at the root, so its words are broadcast, not gathered
    const __m256 thr = _mm256_set1_ps(node_f[2 * static_cast<size_t>(root)]);
    const auto meta = static_cast<uint32_t>(node_i[2 * static_cast<size_t>(root) + 1]);
    const __m256i col = _mm256_set1_epi32(static_cast<int>(meta >> INDEX_BITS));
    const __m256i right =
        _mm256_set1_epi32(static_cast<int>((meta & ((1u << INDEX_BITS) - 1)) + 1));
    for (int k = 0; k < K; ++k) {
      const __m256 v = _mm256_i32gather_ps(rows, _mm256_add_epi32(row_off[k], col), 4);
      const __m256i lt = _mm256_castps_si256(_mm256_cmp_ps(v, thr, _CMP_LT_OQ));  // -1 or 0
      at[k] = _mm256_add_epi32(right, lt);
    }
  }
  for (int d = 1; d < depth; ++d) {
    __m256 thr[K];
    __m256i meta[K];
    for (int k = 0; k < K; ++k) {
      thr[k] = _mm256_i32gather_ps(node_f, at[k], 8);
      meta[k] = _mm256_i32gather_epi32(node_i + 1, at[k], 8);
    }
    for (int k = 0; k < K; ++k) {
      const __m256i col = _mm256_srli_epi32(meta[k], INDEX_BITS);
      const __m256 v = _mm256_i32gather_ps(rows, _mm256_add_epi32(row_off[k], col), 4);
      const __m256i lt = _mm256_castps_si256(_mm256_cmp_ps(v, thr[k], _CMP_LT_OQ));
      const __m256i right = _mm256_add_epi32(_mm256_and_si256(meta[k], index_mask), one);
      at[k] = _mm256_add_epi32(right, lt);
    }
  }
  for (int k = 0; k < K; ++k) {
    const __m256 leaf = _mm256_i32gather_ps(node_f, at[k], 8);
    _mm256_storeu_ps(sum + 8 * k, _mm256_add_ps(_mm256_loadu_ps(sum + 8 * k), leaf));
  }
}

}  // namespace

// Adds every tree's leaf, in tree order, to sum[r] for the n_rows (a multiple of 8, at most 64)
// padded rows at `rows` (stride floats apart). `nodes` is the FlatNode array: 8 bytes a node,
// the float threshold/leaf value first, then the packed meta word.
void tree_walk_avx2(const void* nodes, const uint32_t* roots, const int* depths, size_t n_trees,
                    const float* rows, size_t stride, size_t n_rows, float* sum) {
  const auto* node_f = static_cast<const float*>(nodes);
  const auto* node_i = static_cast<const int*>(nodes);
  const __m256i lane = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                          _mm256_set1_epi32(static_cast<int>(stride)));
  __m256i row_off[MAX_VECTORS];  // element offsets of the rows of each vector of a group
  for (int k = 0; k < MAX_VECTORS; ++k)
    row_off[k] = _mm256_add_epi32(lane, _mm256_set1_epi32(static_cast<int>(8 * k * stride)));
  constexpr size_t GROUP_ROWS = 8 * MAX_VECTORS;
  const size_t n_groups = n_rows / GROUP_ROWS * GROUP_ROWS;
  for (size_t t = 0; t < n_trees; ++t) {
    const uint32_t root = roots[t];
    const int depth = depths[t];
    size_t r0 = 0;
    for (; r0 < n_groups; r0 += GROUP_ROWS)
      walk_tree<MAX_VECTORS>(node_f, node_i, root, depth, rows + r0 * stride, row_off, sum + r0);
    for (; r0 < n_rows; r0 += 8)
      walk_tree<1>(node_f, node_i, root, depth, rows + r0 * stride, row_off, sum + r0);
  }
}

}  // namespace mlprio::model::detail
