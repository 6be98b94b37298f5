// AVX2 scan of one SWF line (see swf_scan.hpp), for CPUs with AVX2 but not the AVX-512 subset of
// swf_scan_avx512.cpp (AMD Zen 1-3, Intel client cores). The line's first 128 bytes in four
// 256-bit registers give its white space, digits and '-' as 128-bit masks; the fields' bounds
// come from those masks eight bits at a time through a table of bit positions; each field's
// length, sign and digit count are then formed for 32 fields at once, a byte each; the first 18
// fields are read four per register, each as the 8-byte word that ends at its last byte (the
// digits right-aligned) and converted by multiply-adds (10, 100, 10^4), with a second word for
// the few fields of 9-15 digits. No branch depends on how long a field is, which is what the
// byte loop pays for: its digit loop's exit mispredicts on nearly every field.
//
// Compiled with AVX2, BMI, BMI2 and POPCNT for this file only (core/CMakeLists.txt) and called
// only where the CPU has them. Like the AVX-512 file it includes only the intrinsics and the
// integer-type headers, so nothing compiled here can be merged into code that runs elsewhere.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "jobs/swf_scan.hpp"

namespace mlprio::detail {

#if defined(__AVX2__) && defined(__BMI__) && defined(__BMI2__) && defined(__POPCNT__)

namespace {

__extension__ typedef unsigned __int128 u128;  // a GCC/Clang extension, hence __extension__

u128 join(uint64_t lo, uint64_t hi) {
  return (static_cast<u128>(hi) << 64) | lo;
}

// Bytes of x that are at most `top` after subtracting `from` (unsigned), as a 32-bit mask.
uint32_t in_range_mask(__m256i x, char from, char top) {
  const __m256i t = _mm256_sub_epi8(x, _mm256_set1_epi8(from));
  const __m256i ok = _mm256_cmpeq_epi8(_mm256_min_epu8(t, _mm256_set1_epi8(top)), t);
  return static_cast<uint32_t>(_mm256_movemask_epi8(ok));
}
uint32_t equal_mask(__m256i x, char c) {
  return static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(x, _mm256_set1_epi8(c))));
}

// One 64-byte half of the line (two registers): where it has white space, digits and '-'.
struct Classes {
  uint64_t space, digit, minus;
};

inline __attribute__((always_inline)) Classes classify(__m256i a, __m256i b, uint64_t in_line) {
  const auto both = [](uint32_t lo, uint32_t hi) { return (uint64_t{hi} << 32) | lo; };
  // util::is_space: ' ' and '\t'..'\r' (9..13).
  const uint64_t space = both(equal_mask(a, ' ') | in_range_mask(a, 9, 4),
                              equal_mask(b, ' ') | in_range_mask(b, 9, 4));
  const uint64_t digit = both(in_range_mask(a, '0', 9), in_range_mask(b, '0', 9));
  return {space & in_line, digit & in_line, both(equal_mask(a, '-'), equal_mask(b, '-'))};
}

// Bit positions 0..7 of each byte value, packed into a word lowest first (unused bytes 0).
struct BitTable {
  uint64_t pos[256];
};
constexpr BitTable make_bit_table() {
  BitTable t{};
  for (int b = 0; b < 256; ++b) {
    int k = 0;
    for (int i = 0; i < 8; ++i)
      if ((b >> i) & 1) t.pos[b] |= static_cast<uint64_t>(i) << (8 * k++);
  }
  return t;
}
constexpr BitTable BITS = make_bit_table();

// The positions of the set bits of a mask in the line's first `bytes` bytes (bytes / 8 + 1 mask
// bytes, at most 16), in order, into pos: eight at a time, so pos needs 8 bytes of room past the
// count. Returns the count.
inline __attribute__((always_inline)) int positions(u128 mask, size_t bytes, uint8_t* pos) {
  uint8_t b[16];
  __builtin_memcpy(b, &mask, sizeof b);  // little-endian: b[i] holds bits 8i..8i+7
  const size_t n = bytes / 8 + 1 < 16 ? bytes / 8 + 1 : 16;
  int k = 0;
  uint64_t offset = 0;  // 8i in every byte
  for (size_t i = 0; i < n; ++i, offset += 0x0808080808080808u) {
    const uint64_t at = BITS.pos[b[i]] + offset;
    __builtin_memcpy(pos + k, &at, sizeof at);
    k += static_cast<int>(_mm_popcnt_u32(b[i]));
  }
  return k;
}

// The 8-byte words that end at bytes end[0..3] of the line (each -8..127; the 16 bytes before
// the line are readable, LineReader's LINE_PAD_BEFORE), as the lanes of a register: a word's
// last byte in bits 56..63 of its lane.
inline __attribute__((always_inline)) __m256i words_ending_at(const char* s, const int* end) {
  const auto word = [s](int e) {
    int64_t x;
    __builtin_memcpy(&x, s + e - 8, sizeof x);
    return x;
  };
  return _mm256_setr_epi64x(word(end[0]), word(end[1]), word(end[2]), word(end[3]));
}

// The value of the last n bytes of each lane's word (n: 0..8 per lane; 0 gives 0), each a digit
// or a field's leading '-' (read as 0: '-' is below '0', and the subtraction saturates): the
// other bytes masked off, then pairs, fours and eights of digits combined by multiply-adds. The
// mask depends on n alone, so the word's chain is a subtraction, an and and the multiply-adds.
// Here shift is 8 * (8 - n) per lane, the bits below the n top bytes (64 or more gives 0).
inline __attribute__((always_inline)) __m256i eight_digits_below(__m256i w, __m256i shift) {
  const __m256i keep = _mm256_sllv_epi64(_mm256_set1_epi64x(-1), shift);
  const __m256i d = _mm256_and_si256(_mm256_subs_epu8(w, _mm256_set1_epi8('0')), keep);
  const __m256i pairs = _mm256_maddubs_epi16(d, _mm256_set1_epi16(0x010a));       // bytes 10, 1
  const __m256i quads = _mm256_madd_epi16(pairs, _mm256_set1_epi32(0x00010064));  // 100, 1
  return _mm256_add_epi64(_mm256_mul_epu32(quads, _mm256_set1_epi64x(10000)),
                          _mm256_srli_epi64(quads, 32));
}
inline __attribute__((always_inline)) __m256i eight_digits(__m256i w, __m256i n) {
  return eight_digits_below(w, _mm256_slli_epi64(_mm256_sub_epi64(_mm256_set1_epi64x(8), n), 3));
}

}  // namespace

// One function of about 135 lines on purpose: the whole line is scanned with its vectors live in
// registers, and the reading benchmark (bench_readers) measures this loop; split into calls, the
// compiler spills them between the parts.
size_t swf_scan_avx2_next(const char* s, size_t avail, const SwfBounds (&bounds)[2],
                          SwfLineScan& out) {
  const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
  const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
  const __m256i x2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64));
  const __m256i x3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 96));
  const uint64_t nl_lo = (uint64_t{equal_mask(x1, '\n')} << 32) | equal_mask(x0, '\n');
  const uint64_t nl_hi = (uint64_t{equal_mask(x3, '\n')} << 32) | equal_mask(x2, '\n');
  const size_t len = nl_lo != 0 ? _tzcnt_u64(nl_lo) : 64 + _tzcnt_u64(nl_hi);  // 128: none
  if (len == 0 || len >= 128 || len >= avail) return 0;

  const size_t n_lo = len < 64 ? len : 64;
  const uint64_t in_lo = _bzhi_u64(~uint64_t{0}, static_cast<unsigned>(n_lo));
  const uint64_t in_hi = _bzhi_u64(~uint64_t{0}, static_cast<unsigned>(len - n_lo));
  const Classes c_lo = classify(x0, x1, in_lo), c_hi = classify(x2, x3, in_hi);
  const u128 in_line = join(in_lo, in_hi);
  const u128 space = join(c_lo.space, c_hi.space) | ~in_line;  // past the end counts as space
  const u128 word = ~space;
  const u128 starts = word & ((space << 1) | 1);
  const u128 ends = space & (word << 1);  // one past each field; len < 128 keeps it a bit
  const auto starts_lo = static_cast<uint64_t>(starts);
  const auto starts_hi = static_cast<uint64_t>(starts >> 64);
  const auto fields = static_cast<int>(_mm_popcnt_u64(starts_lo) + _mm_popcnt_u64(starts_hi));
  if (fields < 18) return 0;
  // Every byte of the first 18 fields must be a digit or a field's leading '-': the first byte
  // that is neither must lie in field 18 or later.
  const u128 lead_minus = join(c_lo.minus, c_hi.minus) & starts;
  const u128 bad = word & ~join(c_lo.digit, c_hi.digit) & ~lead_minus;
  if (bad != 0) {
    const auto bad_lo = static_cast<uint64_t>(bad);
    const unsigned first_bad =
        bad_lo != 0 ? static_cast<unsigned>(_tzcnt_u64(bad_lo))
                    : 64 + static_cast<unsigned>(_tzcnt_u64(static_cast<uint64_t>(bad >> 64)));
    const u128 upto = starts & ((u128{2} << first_bad) - 1);  // first_bad < 128
    if (_mm_popcnt_u64(static_cast<uint64_t>(upto)) +
            _mm_popcnt_u64(static_cast<uint64_t>(upto >> 64)) <=
        18)
      return 0;
  }
  // Field bounds in order, start and end alternating (a position is never both: a start is a
  // field's byte, an end the white space after one), then split: start[k] is field k's first
  // byte, end[k] one past its last (k < 32). One pass over both masks costs half of two.
  alignas(32) uint8_t in_order[144] = {};  // up to 128 bounds, and 8 bytes of room
  positions(starts | ends, len, in_order);
  // Within each 128-bit lane: the 8 starts, then the 8 ends.
  const __m256i split_lane = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                              0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  // Starts of fields 0..15 in the low half, their ends in the high half; then fields 16..31.
  const __m256i b0 = _mm256_permute4x64_epi64(
      _mm256_shuffle_epi8(_mm256_load_si256(reinterpret_cast<const __m256i*>(in_order)),
                          split_lane),
      0xd8);
  const __m256i b1 = _mm256_permute4x64_epi64(
      _mm256_shuffle_epi8(_mm256_load_si256(reinterpret_cast<const __m256i*>(in_order + 32)),
                          split_lane),
      0xd8);
  const __m256i start_v = _mm256_permute2x128_si256(b0, b1, 0x20);
  const __m256i end_v = _mm256_permute2x128_si256(b0, b1, 0x31);
  // Per field, in bytes: its length, and 0xff where it starts with '-' (bit start[k] of
  // lead_minus: the mask's byte start[k] / 8 looked up, then its bit start[k] % 8). Positions past
  // the last field are below 128 too, so every lookup index is in range.
  const __m256i length_v = _mm256_sub_epi8(end_v, start_v);
  const __m256i minus_bytes = _mm256_broadcastsi128_si256(
      _mm_set_epi64x(static_cast<int64_t>(lead_minus >> 64), static_cast<int64_t>(lead_minus)));
  const __m256i bit_of =
      _mm256_shuffle_epi8(_mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 0, 0, 0, 0, 0, 0, 0, 0,  //
                                           1, 2, 4, 8, 16, 32, 64, -128, 0, 0, 0, 0, 0, 0, 0, 0),
                          _mm256_and_si256(start_v, _mm256_set1_epi8(7)));
  const __m256i byte_of = _mm256_shuffle_epi8(
      minus_bytes, _mm256_and_si256(_mm256_srli_epi16(start_v, 3), _mm256_set1_epi8(0x0f)));
  const __m256i neg_v = _mm256_cmpeq_epi8(_mm256_and_si256(byte_of, bit_of), bit_of);
  // Plain: 1..15 digits in each of fields 0..17 (digits - 1 at most 14, unsigned).
  const __m256i digits_less_one =
      _mm256_sub_epi8(_mm256_add_epi8(length_v, neg_v), _mm256_set1_epi8(1));
  const auto plain = static_cast<uint32_t>(_mm256_movemask_epi8(
      _mm256_cmpeq_epi8(_mm256_min_epu8(digits_less_one, _mm256_set1_epi8(14)), digits_less_one)));
  if ((plain & 0x3ffff) != 0x3ffff) return 0;
  // The shift of each field's last word that leaves its bytes, 8 * (8 - min(length, 8)) (at most
  // 64: the 16-bit shift carries nothing into the next byte), and the fields longer than 8 bytes.
  const __m256i eight_b = _mm256_set1_epi8(8);
  const __m256i shift_v =
      _mm256_slli_epi16(_mm256_sub_epi8(eight_b, _mm256_min_epu8(length_v, eight_b)), 3);
  const uint32_t long_fields =
      static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpgt_epi8(length_v, eight_b))) & 0x3ffff;
  alignas(32) uint8_t end[32], length[32], shift[32];
  alignas(32) int8_t negative[32];
  _mm256_store_si256(reinterpret_cast<__m256i*>(end), end_v);
  _mm256_store_si256(reinterpret_cast<__m256i*>(length), length_v);
  _mm256_store_si256(reinterpret_cast<__m256i*>(shift), shift_v);
  _mm256_store_si256(reinterpret_cast<__m256i*>(negative), neg_v);
  const SwfBounds& bound = bounds[fields == 21 ? 1 : 0];
  const __m256i eight = _mm256_set1_epi64x(8);
  __m256i out_of_range = _mm256_setzero_si256();
  // Fields 4r..4r+3, one per 64-bit lane (r = 4: fields 16, 17 and two lanes not read).
  for (int r = 0; r < 5; ++r) {
    uint32_t s4, n4;
    __builtin_memcpy(&s4, shift + 4 * r, 4);
    __builtin_memcpy(&n4, negative + 4 * r, 4);
    const __m256i low_shift = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(static_cast<int>(s4)));
    const __m256i neg_lanes = _mm256_cvtepi8_epi64(_mm_cvtsi32_si128(static_cast<int>(n4)));
    alignas(32) int ends4[4];
    for (int i = 0; i < 4; ++i) ends4[i] = end[4 * r + i];
    if (r == 4) ends4[2] = ends4[3] = 0;  // fields 18, 19 (maybe none): not read
    const __m256i w = words_ending_at(s, ends4);
    // The bytes of the field, its '-' included (read as 0).
    __m256i magnitude = eight_digits_below(w, low_shift);
    if (((long_fields >> (4 * r)) & 0xf) != 0) {
      // Fields of 9..15 digits, or 8 and a '-': the 8 bytes before the last 8, 0 elsewhere.
      uint32_t l4;
      __builtin_memcpy(&l4, length + 4 * r, 4);
      const __m256i field_length = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(static_cast<int>(l4)));
      const __m256i long_lanes = _mm256_cmpgt_epi64(field_length, eight);
      for (int i = 0; i < 4; ++i) ends4[i] -= 8;
      const __m256i more = _mm256_sub_epi64(field_length, eight);
      const __m256i high =
          eight_digits(words_ending_at(s, ends4), _mm256_and_si256(long_lanes, more));
      magnitude =
          _mm256_add_epi64(_mm256_mul_epu32(high, _mm256_set1_epi64x(100000000)), magnitude);
    }
    // Signed: the integer negated where '-' led ((x ^ -1) + 1).
    const __m256i value = _mm256_sub_epi64(_mm256_xor_si256(magnitude, neg_lanes), neg_lanes);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.iv + 4 * r), value);
    __m256i outside = _mm256_or_si256(
        _mm256_cmpgt_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bound.lo + 4 * r)),
                           value),
        _mm256_cmpgt_epi64(value,
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bound.hi + 4 * r))));
    if (r == 4)  // lanes 2, 3 hold fields 18, 19: not bounded
      outside = _mm256_and_si256(outside, _mm256_setr_epi64x(-1, -1, 0, 0));
    out_of_range = _mm256_or_si256(out_of_range, outside);
  }
  const bool in_range = _mm256_testz_si256(out_of_range, out_of_range);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.start), start_v);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.end), end_v);
  out.fields = fields;
  out.in_range = in_range;
  return len + 1;
}

bool swf_scan_avx2_built() {
  return true;
}

#else

size_t swf_scan_avx2_next(const char*, size_t, const SwfBounds (&)[2], SwfLineScan&) {
  return 0;
}
bool swf_scan_avx2_built() {
  return false;
}

#endif

}  // namespace mlprio::detail
