// AVX-512 scan of one SWF line (see swf_scan.hpp): the line in two 512-bit registers, its
// white space and digits as 64-bit masks, the fields' bounds by compressing byte positions with
// those masks, and the last 8 digits of each of the first 18 fields gathered right-aligned into
// 8-byte slots (vpermb) and converted eight fields per register by multiply-adds (10, 100, 10^4);
// the few fields with 9-15 digits get their leading digits added after. No branch depends on
// how long a field is, which is what the byte loop pays for: its digit loop's exit mispredicts on
// nearly every field, since lengths change from line to line.
//
// Compiled with AVX-512 (F, BW, DQ, VBMI, VBMI2), BMI, BMI2 and POPCNT for this file only (sources
// in core/CMakeLists.txt) and called only when the CPU has them. It includes only the intrinsics
// and the integer-type headers (no inline library functions), so nothing compiled here can be
// merged into code that runs on a CPU without AVX-512.
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics fill unused lanes from _mm512_undefined_*(), a self-initialised
// variable that -Wmaybe-uninitialized reports where they are inlined. Nothing here reads it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cstddef>
#include <cstdint>

#include "jobs/swf_scan.hpp"

namespace mlprio::detail {

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) &&  \
    defined(__AVX512VBMI__) && defined(__AVX512VBMI2__) && defined(__BMI__) && \
    defined(__BMI2__) && defined(__POPCNT__)

namespace {

// The constant vectors, built at compile time.
struct Tables {
  alignas(64) uint8_t iota[64];           // 0..63
  alignas(64) uint8_t slot_field[3][64];  // byte b of register r reads field 8r + b / 8
  alignas(64) int8_t slot_back[64];       // (b mod 8) - 8: from a field's end back to byte b
  alignas(64) uint8_t even[64], odd[64];  // 2k, 2k + 1: de-interleaving field bounds
};

constexpr Tables make_tables() {
  Tables t{};
  for (int i = 0; i < 64; ++i) {
    t.iota[i] = static_cast<uint8_t>(i);
    t.slot_back[i] = static_cast<int8_t>(i % 8 - 8);
    t.even[i] = static_cast<uint8_t>((2 * i) % 64);
    t.odd[i] = static_cast<uint8_t>((2 * i + 1) % 64);
    for (int r = 0; r < 3; ++r) t.slot_field[r][i] = static_cast<uint8_t>(8 * r + i / 8);
  }
  return t;
}

constexpr Tables TABLES = make_tables();

__extension__ typedef unsigned __int128 u128;  // a GCC/Clang extension, hence __extension__

// One 64-byte half of the line: where it has white space, digits and '-'.
struct Classes {
  uint64_t space, digit, minus;
};

Classes classify(__m512i x, uint64_t in_line) {
  // util::is_space: ' ' and '\t'..'\r' (9..13).
  const uint64_t space =
      _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8(' ')) |
      _mm512_cmple_epu8_mask(_mm512_sub_epi8(x, _mm512_set1_epi8(9)), _mm512_set1_epi8(4));
  const uint64_t digit =
      _mm512_cmple_epu8_mask(_mm512_sub_epi8(x, _mm512_set1_epi8('0')), _mm512_set1_epi8(9));
  return {space & in_line, digit & in_line, _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8('-'))};
}

u128 join(uint64_t lo, uint64_t hi) {
  return (static_cast<u128>(hi) << 64) | lo;
}

// The positions (bytes) of the set bits of a 128-bit mask, in order: each half compressed, the
// high half's entries moved up behind the low half's.
__m512i positions(u128 mask, __m512i iota) {
  const auto lo = static_cast<uint64_t>(mask);
  const auto hi = static_cast<uint64_t>(mask >> 64);
  const __m512i from_lo = _mm512_maskz_compress_epi8(lo, iota);
  const __m512i from_hi =
      _mm512_maskz_compress_epi8(hi, _mm512_add_epi8(iota, _mm512_set1_epi8(64)));
  // Entry i comes from from_lo[i] below the low half's count c, else from from_hi[i - c]
  // (index bit 6 picks the second table of vpermt2b).
  const auto c = static_cast<char>(_mm_popcnt_u64(lo));
  const __m512i pick = _mm512_mask_add_epi8(iota, _mm512_cmpge_epu8_mask(iota, _mm512_set1_epi8(c)),
                                            iota, _mm512_set1_epi8(static_cast<char>(64 - c)));
  return _mm512_permutex2var_epi8(from_lo, pick, from_hi);
}

// The value of the digits that `is_digit` marks in each 8-byte slot, gathered from the line
// (x_lo, x_hi) at byte positions `pos`: right-aligned, so unmarked bytes are leading zeros.
__m512i eight_digits(__mmask64 is_digit, __m512i pos, __m512i x_lo, __m512i x_hi) {
  const __m512i d = _mm512_maskz_sub_epi8(is_digit, _mm512_permutex2var_epi8(x_lo, pos, x_hi),
                                          _mm512_set1_epi8('0'));
  const __m512i pairs = _mm512_maddubs_epi16(d, _mm512_set1_epi16(0x010a));       // bytes 10, 1
  const __m512i quads = _mm512_madd_epi16(pairs, _mm512_set1_epi32(0x00010064));  // 100, 1
  return _mm512_add_epi64(_mm512_mul_epu32(quads, _mm512_set1_epi64(10000)),
                          _mm512_srli_epi64(quads, 32));
}

// The scan of a line already loaded (x_lo, x_hi: its first 128 bytes), 0 < len < 128.
__attribute__((always_inline)) inline bool scan_loaded(__m512i x_lo, __m512i x_hi, size_t len,
                                                       const SwfBounds (&bounds)[2],
                                                       SwfLineScan& out) {
  const size_t n_lo = len < 64 ? len : 64;
  const uint64_t in_lo = _bzhi_u64(~uint64_t{0}, static_cast<unsigned>(n_lo));
  const uint64_t in_hi = _bzhi_u64(~uint64_t{0}, static_cast<unsigned>(len - n_lo));
  const Classes c_lo = classify(x_lo, in_lo), c_hi = classify(x_hi, in_hi);
  const u128 in_line = join(in_lo, in_hi);
  const u128 space = join(c_lo.space, c_hi.space) | ~in_line;  // past the end counts as space
  const u128 word = ~space;
  const u128 starts = word & ((space << 1) | 1);
  const u128 ends = space & (word << 1);  // one past each field; len < 128 keeps it a bit
  const auto starts_lo = static_cast<uint64_t>(starts);
  const auto starts_hi = static_cast<uint64_t>(starts >> 64);
  const auto fields = static_cast<int>(_mm_popcnt_u64(starts_lo) + _mm_popcnt_u64(starts_hi));
  if (fields < 18) return false;
  // Every byte of the first 18 fields must be a digit or a field's leading '-': the first byte
  // that is neither must lie in field 18 or later (the fields whose start is at or before it).
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
      return false;
  }

  const __m512i iota = _mm512_load_si512(TABLES.iota);
  // Field bounds in order, start and end alternating (a position is never both: a start is a
  // field's byte, an end the white space after one), then split: start[k] is field k's first
  // byte, end[k] one past its last (k < 32, more than the 21 used).
  const __m512i bounds_in_order = positions(starts | ends, iota);
  const __m512i start = _mm512_permutexvar_epi8(_mm512_load_si512(TABLES.even), bounds_in_order);
  const __m512i end = _mm512_permutexvar_epi8(_mm512_load_si512(TABLES.odd), bounds_in_order);
  // Bit k: field k starts with '-' (starts_lo has at most 32 bits: the shift is defined).
  const uint64_t negative =
      _pext_u64(static_cast<uint64_t>(lead_minus), starts_lo) |
      (_pext_u64(static_cast<uint64_t>(lead_minus >> 64), starts_hi) << _mm_popcnt_u64(starts_lo));
  const __m512i one = _mm512_set1_epi8(1);
  // Digits per field: 1..15 for each of the first 18 (a lone '-' or 16+ digits: not plain).
  const __m512i length = _mm512_sub_epi8(end, start);
  const __m512i digits = _mm512_mask_sub_epi8(length, negative, length, one);
  const __mmask64 first18_fields = (uint64_t{1} << 18) - 1;
  if (_mm512_mask_cmple_epu8_mask(first18_fields, _mm512_sub_epi8(digits, one),
                                  _mm512_set1_epi8(14)) != first18_fields)
    return false;

  const __m512i back = _mm512_load_si512(TABLES.slot_back);
  const __m512i zero = _mm512_setzero_si512();
  const __m512i e8 = _mm512_set1_epi64(100000000);
  const __m512i eight = _mm512_set1_epi8(8);
  // Fields of 9..15 digits: the digits before the last 8 too, converted the same way and added
  // as 10^8 x them (only in the registers that hold such a field).
  const auto long_fields =
      static_cast<uint32_t>(_mm512_mask_cmpgt_epu8_mask(first18_fields, digits, eight));
  const SwfBounds& bound = bounds[fields == 21 ? 1 : 0];
  // Fields 8r..8r+7, one per 64-bit lane: read, signed, range-checked and stored. Returns the
  // lanes within their bounds. Straight-line code for each r (no arrays on the stack).
  const auto fields8 = [&](const int r) __attribute__((always_inline))->__mmask8 {
    const __m512i slot_field = _mm512_load_si512(TABLES.slot_field[r]);
    const __m512i field_end = _mm512_permutexvar_epi8(slot_field, end);
    const __m512i field_digits = _mm512_permutexvar_epi8(slot_field, digits);
    // Byte b of a slot takes the byte 8 - b before the field's end when that is one of its
    // digits (b >= 8 - digits), else 0: the last 8 digits end up right-aligned, zeros before.
    const __m512i pos = _mm512_add_epi8(field_end, back);
    const __m512i from_end = _mm512_add_epi8(field_digits, back);  // >= 0: a digit
    __m512i magnitude = eight_digits(_mm512_cmpge_epi8_mask(from_end, zero), pos, x_lo, x_hi);
    if (((long_fields >> (8 * r)) & 0xff) != 0) {
      const __m512i high =
          eight_digits(_mm512_cmpge_epi8_mask(_mm512_sub_epi8(from_end, eight), zero),
                       _mm512_sub_epi8(pos, eight), x_lo, x_hi);
      magnitude = _mm512_add_epi64(_mm512_mul_epu32(high, e8), magnitude);
    }
    // Signs applied: the integer negated. A whole-vector store (slots 18..23 are scratch): the
    // caller reads the values at once, and a masked store cannot forward to those loads.
    const auto neg = static_cast<__mmask8>((negative >> (8 * r)) & 0xff);
    const __m512i as_int = _mm512_mask_sub_epi64(magnitude, neg, zero, magnitude);
    _mm512_storeu_si512(out.iv + 8 * r, as_int);
    return _mm512_cmpge_epi64_mask(as_int, _mm512_loadu_si512(bound.lo + 8 * r)) &
           _mm512_cmple_epi64_mask(as_int, _mm512_loadu_si512(bound.hi + 8 * r));
  };
  const __mmask8 in0 = fields8(0), in1 = fields8(1), in2 = fields8(2);
  const bool in_range = (in0 & in1) == 0xff && (in2 & 0x03) == 0x03;  // 18..23: no bound
  _mm512_storeu_si512(out.start, start);
  _mm512_storeu_si512(out.end, end);
  out.fields = fields;
  out.in_range = in_range;
  return true;
}

}  // namespace

size_t swf_scan_avx512_next(const char* s, size_t avail, const SwfBounds (&bounds)[2],
                            SwfLineScan& out) {
  // Two 64-byte halves; the last field's end must be a bit of the 128-bit masks. Plain loads:
  // masked ones cost several times as much on some CPUs (this AMD EPYC, family 26), and the
  // caller guarantees the 128 bytes; bytes past the line are masked off.
  const __m512i x_lo = _mm512_loadu_si512(s);
  const __m512i x_hi = _mm512_loadu_si512(s + 64);
  const __m512i nl = _mm512_set1_epi8('\n');
  const uint64_t nl_lo = _mm512_cmpeq_epi8_mask(x_lo, nl);
  const uint64_t nl_hi = _mm512_cmpeq_epi8_mask(x_hi, nl);
  const size_t len = nl_lo != 0 ? _tzcnt_u64(nl_lo) : 64 + _tzcnt_u64(nl_hi);  // 128: none
  if (len == 0 || len >= 128 || len >= avail) return 0;
  return scan_loaded(x_lo, x_hi, len, bounds, out) ? len + 1 : 0;
}

bool swf_scan_avx512_built() {
  return true;
}

#else

size_t swf_scan_avx512_next(const char*, size_t, const SwfBounds (&)[2], SwfLineScan&) {
  return 0;
}
bool swf_scan_avx512_built() {
  return false;
}

#endif

}  // namespace mlprio::detail
