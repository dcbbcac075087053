// See zstd_literals_walk.h. The AVX2 kernel walks 64 (or 32) streams of
// one code in groups of 16 (four blocks' four): four vectors of four 64-bit
// lanes, each lane one stream's next bits. AVX2 has no byte permute wide
// enough for a length table, and its gathers, one a code, are slower on
// Zen 3 than the scalar loop's loads. But a canonical code's length falls
// stepwise as its window grows (LengthThresholds), so a group's sixteen
// windows, packed into 16-bit lanes, get their lengths from one 16-entry
// table lookup and a compare per threshold that the table cannot take.
// Each round loads every stream's next 8 bytes with a load of its own.
// On Zen 3 the kernel checks codec 1 chunks 1.7 times as fast as the
// scalar loop (bench/HISTORY.md).
#include "zstd_literals_walk.h"

#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CKFMT_WALK_AVX2 1
#endif

namespace ckfmt {

bool ThresholdsOf(const uint8_t* lengths, LengthThresholds& out) {
  out.fines = 0;
  for (uint32_t b = 0; b < 16; ++b) out.coarse[b] = lengths[b << 7];
  for (uint32_t x = 1; x < kWindows; ++x) {
    if (lengths[x] > lengths[x - 1]) return false;  // a length that rises
    if (x % 128 == 0) continue;                     // coarse[] has it
    for (int d = lengths[x - 1] - lengths[x]; d > 0; --d) {
      if (out.fines == LengthThresholds::kMax) return false;
      out.fine[out.fines++] = uint16_t(x);
    }
  }
  // coarse[b] counts the falls before 128 * b that compares count too.
  for (uint32_t b = 0; b < 16; ++b) {
    for (int i = 0; i < out.fines; ++i) out.coarse[b] += out.fine[i] <= b << 7;
  }
  for (int i = out.fines; i < LengthThresholds::kMax; ++i) out.fine[i] = uint16_t(kWindows);
  return true;
}

#if defined(CKFMT_WALK_AVX2)

bool Avx2WalkAvailable() {
  static const bool have = __builtin_cpu_supports("avx2");
  return have;
}

namespace {

constexpr int kMax = LengthThresholds::kMax;

// vpshufb controls: byte 0 of each 64-bit lane gets the low byte of its
// 16-bit lane j (a length, which fits a byte), every other byte 0.
template <int j>
__attribute__((target("avx2"))) inline __m256i PickWord() {
  constexpr char z = char(0x80), lo = char(2 * j), hi = char(8 + 2 * j);
  return _mm256_setr_epi8(lo, z, z, z, z, z, z, z, hi, z, z, z, z, z, z, z, lo, z, z, z, z, z, z, z,
                          hi, z, z, z, z, z, z, z);
}

// The 11-bit windows of four vectors' lanes, packed: 16-bit lane j of each
// 64-bit lane is the window of vector j's. Each shift leaves the window
// alone in its 16-bit lane, zeros above it.
__attribute__((target("avx2"))) inline __m256i PackWindows(__m256i a, __m256i b, __m256i c,
                                                           __m256i d) {
  const __m256i wa = _mm256_srli_epi64(a, 64 - kMaxCodeBits - 48);  // lane 3
  const __m256i wb = _mm256_srli_epi64(b, 64 - kMaxCodeBits - 32);  // lane 2
  const __m256i wc = _mm256_srli_epi64(c, 64 - kMaxCodeBits - 16);  // lane 1
  const __m256i wd = _mm256_srli_epi64(d, 64 - kMaxCodeBits);       // lane 0
  const __m256i low = _mm256_blend_epi16(wd, wc, 0x22);
  const __m256i high = _mm256_blend_epi16(wb, wa, 0x88);
  return _mm256_blend_epi32(low, high, 0xaa);
}

// The 8 bytes at each of four addresses: loads of their own, which on
// Zen 3 run faster than a gather; with kPrefetch, and a prefetch of the
// bytes kPrefetchAhead below each.
template <bool kPrefetch>
__attribute__((target("avx2"))) inline __m256i LoadWords(__m256i at) {
  const __m128i lo = _mm256_castsi256_si128(at), hi = _mm256_extracti128_si256(at, 1);
  auto word = [](int64_t a) {
    if constexpr (kPrefetch) {  // an address as a number: it may lie below the stream
      _mm_prefetch(reinterpret_cast<const char*>(a - kPrefetchAhead), _MM_HINT_T0);
    }
    return int64_t(LoadLE64(reinterpret_cast<const uint8_t*>(a)));
  };
  return _mm256_set_epi64x(word(_mm_extract_epi64(hi, 1)), word(_mm_cvtsi128_si64(hi)),
                           word(_mm_extract_epi64(lo, 1)), word(_mm_cvtsi128_si64(lo)));
}

// Each packed window's code length, in the low byte of its 16-bit lane:
// coarse[] by its top four bits plus the kCompares compares (-1 where the
// window is past a threshold), added as a tree so that the adds do not
// wait on each other in turn. The high byte holds whatever coarse[0] and
// the borrows leave there; only low bytes are used, and every sum of them
// stays below 256.
template <int kCompares>
__attribute__((target("avx2"))) inline __m256i Lengths(__m256i w, const __m256i* below,
                                                       __m256i coarse) {
  __m256i c[kCompares + 1];
  for (int i = 0; i < kCompares; ++i) c[i] = _mm256_cmpgt_epi16(w, below[i]);
  c[kCompares] = _mm256_shuffle_epi8(coarse, _mm256_srli_epi16(w, kMaxCodeBits - 4));
  for (int n = kCompares + 1; n > 1; n = (n + 1) / 2) {
    for (int i = 0; i < n / 2; ++i) c[i] = _mm256_add_epi16(c[2 * i], c[2 * i + 1]);
    if (n % 2) c[n / 2] = c[n - 1];
  }
  return c[0];
}

template <int kGroups, int kCompares>
__attribute__((target("avx2"))) void WalkRounds(const LengthThresholds& t, Position* pos,
                                                size_t rounds) {
  constexpr int kVectors = 4 * kGroups;
  // A window past threshold x is one greater than x - 1 (signed 16-bit
  // compares; windows and thresholds are at most 2^11).
  alignas(32) __m256i below[kCompares + 1];  // + 1: GCC warns of a zero-length array
  for (int i = 0; i < kCompares; ++i) below[i] = _mm256_set1_epi16(int16_t(t.fine[i] - 1));
  const __m256i coarse =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t.coarse)));
  const __m256i seven = _mm256_set1_epi64x(7);
  const __m256i pick[4] = {PickWord<3>(), PickWord<2>(), PickWord<1>(), PickWord<0>()};

  // Each stream's place as one number, 8 * ip - used, which falls by one
  // with each bit read: a round moves it down by the bits it read, and
  // gives back ip = (place + 7) >> 3 and used = -place & 7.
  __m256i place[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    alignas(32) uint64_t a[4];
    for (int l = 0; l < 4; ++l) {
      const Position& q = pos[4 * v + l];
      a[l] = 8 * uint64_t(reinterpret_cast<uintptr_t>(q.ip)) - q.used;
    }
    place[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(a));
  }
  for (size_t r = 0; r < rounds; ++r) {
    __m256i bits[kVectors], read[kGroups];
    const bool prefetch = r % kPrefetchEvery == 0;
    for (int v = 0; v < kVectors; ++v) {
      const __m256i ip = _mm256_srli_epi64(_mm256_add_epi64(place[v], seven), 3);
      const __m256i used =
          _mm256_and_si256(_mm256_sub_epi64(_mm256_setzero_si256(), place[v]), seven);
      bits[v] = _mm256_sllv_epi64(prefetch ? LoadWords<true>(ip) : LoadWords<false>(ip), used);
    }
    for (int g = 0; g < kGroups; ++g) read[g] = _mm256_setzero_si256();
#pragma GCC unroll 5
    for (int k = 0; k < 5; ++k) {
#pragma GCC unroll 4
      for (int g = 0; g < kGroups; ++g) {
        __m256i* b = bits + 4 * g;
        const __m256i length =
            Lengths<kCompares>(PackWindows(b[0], b[1], b[2], b[3]), below, coarse);
        read[g] = _mm256_add_epi16(read[g], length);
        for (int j = 0; j < 4; ++j) {
          b[j] = _mm256_sllv_epi64(b[j], _mm256_shuffle_epi8(length, pick[j]));
        }
      }
    }
    // Bits read this round: the five lengths' sum, which fits a byte.
    for (int v = 0; v < kVectors; ++v) {
      place[v] = _mm256_sub_epi64(place[v], _mm256_shuffle_epi8(read[v / 4], pick[v % 4]));
    }
  }
  for (int v = 0; v < kVectors; ++v) {
    alignas(32) uint64_t a[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(a), place[v]);
    for (int l = 0; l < 4; ++l) {
      pos[4 * v + l] = {reinterpret_cast<const uint8_t*>(uintptr_t((a[l] + 7) >> 3)),
                        uint32_t(-a[l] & 7)};
    }
  }
}

// The fewest compares that cover t's thresholds.
template <int kGroups>
void WalkFor(const LengthThresholds& t, Position* pos, size_t rounds) {
  if (t.fines <= 2) return WalkRounds<kGroups, 2>(t, pos, rounds);
  if (t.fines <= 4) return WalkRounds<kGroups, 4>(t, pos, rounds);
  if (t.fines <= 6) return WalkRounds<kGroups, 6>(t, pos, rounds);
  WalkRounds<kGroups, kMax>(t, pos, rounds);
}

}  // namespace

template <>
void WalkRoundsAvx2<2>(const LengthThresholds& t, Position* pos, size_t rounds) {
  WalkFor<2>(t, pos, rounds);
}
template <>
void WalkRoundsAvx2<4>(const LengthThresholds& t, Position* pos, size_t rounds) {
  WalkFor<4>(t, pos, rounds);
}

#else

bool Avx2WalkAvailable() { return false; }
template <>
void WalkRoundsAvx2<2>(const LengthThresholds&, Position*, size_t) {
  __builtin_unreachable();
}
template <>
void WalkRoundsAvx2<4>(const LengthThresholds&, Position*, size_t) {
  __builtin_unreachable();
}

#endif

}  // namespace ckfmt
