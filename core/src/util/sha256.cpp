// SHA-256 (FIPS 180-4) of a file, streamed in 1 MiB blocks. It gives HDF5 result files a
// checksum of the trace they came from, without a crypto library dependency. Where the CPU has
// the x86 SHA extensions (AMD since Zen, Intel since Ice Lake / Goldmont) the blocks go through
// them, several times faster than the portable rounds; both give the same digest (the test
// compares them on every length up to a few blocks and on large random inputs).
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mlprio/jobs/trace.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define MLPRIO_SHA_NI 1
#endif

namespace mlprio {
namespace {

constexpr std::array<uint32_t, 64> K = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}

class Sha256 {
 public:
  void update(const uint8_t* p, size_t n) {
    total_ += n;
    if (fill_ > 0) {  // complete the pending block first
      const size_t take = std::min(n, size_t{64} - fill_);
      std::memcpy(block_ + fill_, p, take);
      fill_ += take;
      p += take;
      n -= take;
      if (fill_ < 64) return;
      blocks(block_, 1);
      fill_ = 0;
    }
    if (n >= 64) {  // whole blocks straight from the input
      blocks(p, n / 64);
      p += n / 64 * 64;
      n %= 64;
    }
    std::memcpy(block_, p, n);
    fill_ = n;
  }
  std::string hex() {
    const uint64_t bits = total_ * 8;
    const uint8_t one = 0x80, zero = 0;
    update(&one, 1);
    while (fill_ != 56) update(&zero, 1);
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
    update(len, 8);
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (uint32_t v : h_)
      for (int s = 28; s >= 0; s -= 4) out += digits[(v >> s) & 0xf];
    return out;
  }

 private:
  void blocks(const uint8_t* b, size_t count);
  void compress(const uint8_t* b) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = (uint32_t{b[4 * i]} << 24) | (uint32_t{b[4 * i + 1]} << 16) |
             (uint32_t{b[4 * i + 2]} << 8) | uint32_t{b[4 * i + 3]};
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], bb = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6],
             h = h_[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                          K[static_cast<size_t>(i)] + w[i];
      const uint32_t t2 =
          (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & bb) ^ (a & c) ^ (bb & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = bb;
      bb = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += bb;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }
  std::array<uint32_t, 8> h_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t block_[64] = {};
  size_t fill_ = 0;
  uint64_t total_ = 0;
};

#ifdef MLPRIO_SHA_NI
// The compression function on the SHA extensions. SHA256RNDS2 keeps the eight working variables
// in two registers, {A,B,E,F} and {C,D,G,H} (A in the highest lane), does two rounds per
// instruction with the round-constant-plus-message sums in the low 64 bits of its third operand,
// and returns the new {A,B,E,F}; the old {A,B,E,F} is then the new {C,D,G,H}. SHA256MSG1/MSG2
// compute the message schedule four words at a time.
[[gnu::target("sha,ssse3,sse4.1")]] void blocks_sha_ni(std::array<uint32_t, 8>& h, const uint8_t* p,
                                                       size_t count) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
  // {a,b,c,d}, {e,f,g,h} -> {f,e,b,a} (ABEF) and {h,g,d,c} (CDGH), lane 0 first.
  __m128i abcd = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h.data()));
  __m128i efgh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h.data() + 4));
  abcd = _mm_shuffle_epi32(abcd, 0xB1);  // b a d c
  efgh = _mm_shuffle_epi32(efgh, 0x1B);  // h g f e
  __m128i abef = _mm_alignr_epi8(abcd, efgh, 8);
  __m128i cdgh = _mm_blend_epi16(efgh, abcd, 0xF0);
  for (; count > 0; --count, p += 64) {
    const __m128i abef_in = abef, cdgh_in = cdgh;
    __m128i w[4];
    for (int i = 0; i < 4; ++i)
      w[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)),
                              byte_swap);
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) {
      if (g >= 4) {  // W[4g..4g+3] from W[4g-16..4g-1], replacing W[4g-16..4g-13]
        __m128i& oldest = w[g % 4];
        const __m128i& next = w[(g + 1) % 4];
        const __m128i& third = w[(g + 2) % 4];
        const __m128i& newest = w[(g + 3) % 4];
        const __m128i t = _mm_add_epi32(_mm_sha256msg1_epu32(oldest, next),
                                        _mm_alignr_epi8(newest, third, 4));  // + W[t-7]
        oldest = _mm_sha256msg2_epu32(t, newest);
      }
      __m128i wk = _mm_add_epi32(
          w[g % 4], _mm_loadu_si128(reinterpret_cast<const __m128i*>(K.data() + 4 * g)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);  // rounds 4g, 4g+1: cdgh holds the new ABEF
      wk = _mm_shuffle_epi32(wk, 0x0E);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, wk);  // rounds 4g+2, 4g+3
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }
  // Back to {a,b,c,d}, {e,f,g,h}.
  const __m128i abef_r = _mm_shuffle_epi32(abef, 0x1B);  // a b e f
  const __m128i cdgh_r = _mm_shuffle_epi32(cdgh, 0xB1);  // g h c d
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h.data()), _mm_blend_epi16(abef_r, cdgh_r, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h.data() + 4), _mm_alignr_epi8(cdgh_r, abef_r, 8));
}

bool cpu_has_sha_ni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool ssse3 = (c >> 9) & 1, sse41 = (c >> 19) & 1;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return ssse3 && sse41 && ((b >> 29) & 1);
}
#else
bool cpu_has_sha_ni() {
  return false;
}
#endif

// 0: the extensions where the CPU has them; 1: the portable rounds (set by tests).
std::atomic<int> g_mode{0};

void Sha256::blocks(const uint8_t* b, size_t count) {
#ifdef MLPRIO_SHA_NI
  static const bool hw = cpu_has_sha_ni();
  if (hw && g_mode.load(std::memory_order_relaxed) == 0) {
    blocks_sha_ni(h_, b, count);
    return;
  }
#endif
  for (; count > 0; --count, b += 64) compress(b);
}

}  // namespace

namespace detail {
// For tests: 0 = automatic, 1 = the portable rounds only. Returns whether the CPU has the SHA
// extensions (automatic mode uses them then).
bool set_sha256_mode(int mode) {
  g_mode.store(mode);
  return cpu_has_sha_ni();
}
}  // namespace detail

std::string file_sha256(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw InputError(path, std::string("cannot open to checksum: ") + std::strerror(errno));
  Sha256 sha;
  std::vector<uint8_t> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) sha.update(buf.data(), n);
  return sha.hex();
}

std::string bytes_sha256(std::string_view bytes) {
  Sha256 sha;
  sha.update(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return sha.hex();
}

}  // namespace mlprio
