// AVX-512 scan of one SWF line (see swf_scan.hpp): the line in two 512-bit registers, its
// white space and digits as 64-bit masks, the fields' bounds by compressing byte positions with
// those masks, and the first 18 fields' digits gathered right-aligned into 16-byte slots (vpermb)
// and converted four fields per register by multiply-adds (10, 100, 10^4, 10^8). No branch
// depends on how long a field is, which is what the byte loop pays for: its digit loop's exit
// mispredicts on nearly every field, since lengths change from line to line.
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
  alignas(64) uint8_t slot_field[5][64];  // byte b of register r reads field 4r + b / 16
  alignas(64) int8_t slot_back[64];       // (b mod 16) - 16: from a field's end back to byte b
};

constexpr Tables make_tables() {
  Tables t{};
  for (int i = 0; i < 64; ++i) {
    t.iota[i] = static_cast<uint8_t>(i);
    t.slot_back[i] = static_cast<int8_t>(i % 16 - 16);
    for (int r = 0; r < 5; ++r) t.slot_field[r][i] = static_cast<uint8_t>(4 * r + i / 16);
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

}  // namespace

bool swf_scan_avx512(const char* s, size_t len, SwfLineScan& out) {
  // Two 64-byte halves; the last field's end must be a bit of the 128-bit masks.
  if (len == 0 || len >= 128) return false;
  const size_t n_lo = len < 64 ? len : 64;
  const uint64_t in_lo = _bzhi_u64(~uint64_t{0}, static_cast<unsigned>(n_lo));
  const uint64_t in_hi = _bzhi_u64(~uint64_t{0}, static_cast<unsigned>(len - n_lo));
  const __m512i x_lo = _mm512_maskz_loadu_epi8(in_lo, s);
  const __m512i x_hi = _mm512_maskz_loadu_epi8(in_hi, s + n_lo);  // reads nothing if len < 64
  const Classes c_lo = classify(x_lo, in_lo), c_hi = classify(x_hi, in_hi);
  const u128 in_line = join(in_lo, in_hi);
  const u128 space = join(c_lo.space, c_hi.space) | ~in_line;  // past the end counts as space
  const u128 word = ~space;
  const u128 starts = word & ((space << 1) | 1);
  const u128 ends = space & (word << 1);  // one past each field; len < 128 keeps it a bit
  const auto starts_lo = static_cast<uint64_t>(starts);
  const auto starts_hi = static_cast<uint64_t>(starts >> 64);
  const auto ends_lo = static_cast<uint64_t>(ends);
  const auto ends_hi = static_cast<uint64_t>(ends >> 64);
  const auto fields = static_cast<int>(_mm_popcnt_u64(starts_lo) + _mm_popcnt_u64(starts_hi));
  if (fields < 18) return false;
  // Bytes up to the end of field 17 must be digits, white space or a field's leading '-'.
  const auto ends_in_lo = static_cast<unsigned>(_mm_popcnt_u64(ends_lo));
  const unsigned end17 =
      ends_in_lo > 17 ? static_cast<unsigned>(_tzcnt_u64(_pdep_u64(uint64_t{1} << 17, ends_lo)))
                      : 64 + static_cast<unsigned>(
                                 _tzcnt_u64(_pdep_u64(uint64_t{1} << (17 - ends_in_lo), ends_hi)));
  const u128 first18 = (u128{1} << end17) - 1;  // end17 < 128
  const u128 lead_minus = join(c_lo.minus, c_hi.minus) & starts;
  if ((word & ~join(c_lo.digit, c_hi.digit) & ~lead_minus & first18) != 0) return false;

  const __m512i iota = _mm512_load_si512(TABLES.iota);
  const __m512i start = positions(starts, iota);  // start[k]: field k's first byte
  const __m512i end = positions(ends, iota);      // end[k]: one past its last
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
  const __m512i zero_char = _mm512_set1_epi8('0');
  const __m512i sixteen = _mm512_set1_epi8(16);
  const __m512i tens = _mm512_set1_epi16(0x010a);          // bytes 10, 1: pairs of digits
  const __m512i hundreds = _mm512_set1_epi32(0x00010064);  // int16 100, 1: groups of four
  const __m512i e4 = _mm512_set1_epi64(10000);
  const __m512i e8 = _mm512_set1_epi64(100000000);
  const __m512i zero = _mm512_setzero_si512();
  const __m512i sign_bit = _mm512_set1_epi64(INT64_MIN);
  for (int r = 0; r < 5; ++r) {
    const __m512i slot_field = _mm512_load_si512(TABLES.slot_field[r]);
    const __m512i field_end = _mm512_permutexvar_epi8(slot_field, end);
    const __m512i field_digits = _mm512_permutexvar_epi8(slot_field, digits);
    // Byte b of a slot takes the byte 16 - b before the field's end when that is one of its
    // digits (b >= 16 - digits), else 0: the digits end up right-aligned, zeros before them.
    const __m512i pos = _mm512_add_epi8(field_end, back);
    const __mmask64 is_digit = _mm512_cmpge_epu8_mask(
        _mm512_add_epi8(field_digits, _mm512_add_epi8(back, sixteen)), sixteen);
    const __m512i d =
        _mm512_maskz_sub_epi8(is_digit, _mm512_permutex2var_epi8(x_lo, pos, x_hi), zero_char);
    const __m512i pairs = _mm512_maddubs_epi16(d, tens);       // 8 x 2-digit per slot
    const __m512i quads = _mm512_madd_epi16(pairs, hundreds);  // 4 x 4-digit
    const __m512i octs =                                       // 2 x 8-digit
        _mm512_add_epi64(_mm512_mul_epu32(quads, e4), _mm512_srli_epi64(quads, 32));
    const __m512i whole =  // in the even lanes
        _mm512_add_epi64(_mm512_mul_epu32(octs, e8), _mm512_bsrli_epi128(octs, 8));
    // Fields 4r..4r+3 in lanes 0..3, their signs applied: the integer negated, the double's
    // sign bit set (so that -0 stays -0.0, as the byte loop has it).
    const __m512i magnitude = _mm512_maskz_compress_epi64(0x55, whole);
    const auto neg = static_cast<__mmask8>((negative >> (4 * r)) & 0xf);
    const __m512i as_int = _mm512_mask_sub_epi64(magnitude, neg, zero, magnitude);
    const __m512i bits = _mm512_castpd_si512(_mm512_cvtepu64_pd(magnitude));
    const __m512i as_double = _mm512_mask_xor_epi64(bits, neg, bits, sign_bit);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.iv + 4 * r), _mm512_castsi512_si256(as_int));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.v + 4 * r),
                        _mm512_castsi512_si256(as_double));
  }
  _mm512_storeu_si512(out.start, start);
  _mm512_storeu_si512(out.end, end);
  out.fields = fields;
  return true;
}

bool swf_scan_avx512_built() {
  return true;
}

#else

bool swf_scan_avx512(const char*, size_t, SwfLineScan&) {
  return false;
}
bool swf_scan_avx512_built() {
  return false;
}

#endif

}  // namespace mlprio::detail
