// See byte_planes.h.
#include "byte_planes.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CKFMT_SPLIT_DISPATCH 1  // AVX2 and AVX-512 VBMI paths, chosen at run time
#endif

#include "uncached_store.h"

namespace ckfmt {
namespace {

// Each vector path splits elements from `i` on in blocks and returns where
// it stopped; the next narrower path, and at last SplitScalar, does the
// rest. REQUIRES: e is 2 or 4.

#if defined(__SSE2__)
// Byte k of each 2- or 4-byte lane, isolated then narrowed 32 -> 16 -> 8
// bits with saturating packs (exact: the values are at most 255).
size_t SplitSse2(const uint8_t* __restrict in, size_t e, size_t i, size_t n, uint8_t* const* dst) {
  if (e == 2) {
    uint8_t* __restrict d0 = dst[0];
    uint8_t* __restrict d1 = dst[1];
    const __m128i lo = _mm_set1_epi16(0x00ff);
    for (; i + 16 <= n; i += 16) {
      __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
      __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i + 16));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d0 + i),
                       _mm_packus_epi16(_mm_and_si128(a, lo), _mm_and_si128(b, lo)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d1 + i),
                       _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8)));
    }
    return i;
  }
  const __m128i lo = _mm_set1_epi32(0xff);
  for (; i + 16 <= n; i += 16) {
    const __m128i* s = reinterpret_cast<const __m128i*>(in + 4 * i);
    __m128i v0 = _mm_loadu_si128(s), v1 = _mm_loadu_si128(s + 1);
    __m128i v2 = _mm_loadu_si128(s + 2), v3 = _mm_loadu_si128(s + 3);
    auto plane = [&](__m128i a, __m128i b, __m128i c, __m128i d) {
      return _mm_packus_epi16(_mm_packs_epi32(_mm_and_si128(a, lo), _mm_and_si128(b, lo)),
                              _mm_packs_epi32(_mm_and_si128(c, lo), _mm_and_si128(d, lo)));
    };
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst[0] + i), plane(v0, v1, v2, v3));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst[1] + i),
                     plane(_mm_srli_epi32(v0, 8), _mm_srli_epi32(v1, 8), _mm_srli_epi32(v2, 8),
                           _mm_srli_epi32(v3, 8)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst[2] + i),
                     plane(_mm_srli_epi32(v0, 16), _mm_srli_epi32(v1, 16), _mm_srli_epi32(v2, 16),
                           _mm_srli_epi32(v3, 16)));
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(dst[3] + i),
        _mm_packus_epi16(_mm_packs_epi32(_mm_srli_epi32(v0, 24), _mm_srli_epi32(v1, 24)),
                         _mm_packs_epi32(_mm_srli_epi32(v2, 24), _mm_srli_epi32(v3, 24))));
  }
  return i;
}
#endif

#if defined(CKFMT_SPLIT_DISPATCH)
// Lambdas would not inherit the target attribute.
__attribute__((target("avx2"))) inline __m256i Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
__attribute__((target("avx2"))) inline void Store32(uint8_t* p, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
}

// AVX2: a byte shuffle inside each 128-bit lane groups the lane's bytes by
// plane, a permute across the two lanes makes each register 8 or 16 bytes
// of each plane, and a transpose over two or four registers makes 32 bytes
// of each: about a third of the SSE2 path's instructions. For CPUs without
// VBMI, as the 2-core Cascade Lake VM: there it took the byte-plane encoder
// of 4 MiB fp32 chunks, walking 512 MiB, from 2.10 to 2.24 GB/s per core
// (medians, four alternations); 2-byte elements about the same.
__attribute__((target("avx2"))) size_t SplitAvx2(const uint8_t* __restrict in, size_t e, size_t i,
                                                 size_t n, uint8_t* const* dst) {
  if (e == 2) {
    const __m256i bytes = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    for (; i + 32 <= n; i += 32) {
      // Qwords 0, 2, 1, 3: each register's even bytes low, odd ones high.
      const __m256i a =
          _mm256_permute4x64_epi64(_mm256_shuffle_epi8(Load32(in + 2 * i), bytes), 0xD8);
      const __m256i b =
          _mm256_permute4x64_epi64(_mm256_shuffle_epi8(Load32(in + 2 * i + 32), bytes), 0xD8);
      Store32(dst[0] + i, _mm256_permute2x128_si256(a, b, 0x20));
      Store32(dst[1] + i, _mm256_permute2x128_si256(a, b, 0x31));
    }
    return i;
  }
  const __m256i bytes = _mm256_broadcastsi128_si256(
      _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
  const __m256i dwords = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (; i + 32 <= n; i += 32) {
    __m256i v[4];  // qword p of each: 8 bytes of plane p
    for (int k = 0; k < 4; ++k) {
      const __m256i grouped = _mm256_shuffle_epi8(Load32(in + 4 * i + 32 * k), bytes);
      v[k] = _mm256_permutevar8x32_epi32(grouped, dwords);
    }
    const __m256i lo01 = _mm256_unpacklo_epi64(v[0], v[1]);  // planes 0 and 2
    const __m256i hi01 = _mm256_unpackhi_epi64(v[0], v[1]);  // planes 1 and 3
    const __m256i lo23 = _mm256_unpacklo_epi64(v[2], v[3]);
    const __m256i hi23 = _mm256_unpackhi_epi64(v[2], v[3]);
    Store32(dst[0] + i, _mm256_permute2x128_si256(lo01, lo23, 0x20));
    Store32(dst[1] + i, _mm256_permute2x128_si256(hi01, hi23, 0x20));
    Store32(dst[2] + i, _mm256_permute2x128_si256(lo01, lo23, 0x31));
    Store32(dst[3] + i, _mm256_permute2x128_si256(hi01, hi23, 0x31));
  }
  return i;
}

// AVX-512 VBMI, whose byte permute does a block's transpose in one
// instruction: 1.5x the SSE2 split on data coming from DRAM, as fast as
// memcpy there.
// GCC 12's intrinsics headers trip -Wmaybe-uninitialized on their own
// _mm512_undefined_* placeholders here.
#pragma GCC diagnostic push
#if !defined(__clang__)  // Clang has no such warning, and warns about the name
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) size_t SplitVbmi(
    const uint8_t* __restrict in, size_t e, size_t i, size_t n, uint8_t* const* dst) {
  if (e == 2) {
    // Even bytes of 128 input bytes, then odd ones: 64 bytes of each plane.
    alignas(64) uint8_t even[64], odd[64];
    for (int j = 0; j < 64; ++j) {
      even[j] = uint8_t(2 * j);
      odd[j] = uint8_t(2 * j + 1);
    }
    const __m512i pe = _mm512_load_si512(even), po = _mm512_load_si512(odd);
    for (; i + 64 <= n; i += 64) {
      __m512i a = _mm512_loadu_si512(in + 2 * i), b = _mm512_loadu_si512(in + 2 * i + 64);
      _mm512_storeu_si512(dst[0] + i, _mm512_permutex2var_epi8(a, pe, b));
      _mm512_storeu_si512(dst[1] + i, _mm512_permutex2var_epi8(a, po, b));
    }
    return i;
  }
  // e == 4: each 64-byte block becomes 16 bytes of each plane in its four
  // 128-bit lanes; a 4x4 transpose of lanes over four blocks makes 64
  // bytes of each plane.
  alignas(64) uint8_t idx[64];
  for (int p = 0; p < 4; ++p) {
    for (int j = 0; j < 16; ++j) idx[p * 16 + j] = uint8_t(j * 4 + p);
  }
  const __m512i perm = _mm512_load_si512(idx);
  for (; i + 64 <= n; i += 64) {
    const uint8_t* s = in + 4 * i;
    __m512i v0 = _mm512_permutexvar_epi8(perm, _mm512_loadu_si512(s));
    __m512i v1 = _mm512_permutexvar_epi8(perm, _mm512_loadu_si512(s + 64));
    __m512i v2 = _mm512_permutexvar_epi8(perm, _mm512_loadu_si512(s + 128));
    __m512i v3 = _mm512_permutexvar_epi8(perm, _mm512_loadu_si512(s + 192));
    __m512i lo01 = _mm512_shuffle_i64x2(v0, v1, 0x44), hi01 = _mm512_shuffle_i64x2(v0, v1, 0xEE);
    __m512i lo23 = _mm512_shuffle_i64x2(v2, v3, 0x44), hi23 = _mm512_shuffle_i64x2(v2, v3, 0xEE);
    _mm512_storeu_si512(dst[0] + i, _mm512_shuffle_i64x2(lo01, lo23, 0x88));
    _mm512_storeu_si512(dst[1] + i, _mm512_shuffle_i64x2(lo01, lo23, 0xDD));
    _mm512_storeu_si512(dst[2] + i, _mm512_shuffle_i64x2(hi01, hi23, 0x88));
    _mm512_storeu_si512(dst[3] + i, _mm512_shuffle_i64x2(hi01, hi23, 0xDD));
  }
  return i;
}
#pragma GCC diagnostic pop
#endif  // CKFMT_SPLIT_DISPATCH

// Elements [i, n) a byte at a time. 2- and 4-byte elements go all planes
// at once, which compilers vectorize where there is no path above.
void SplitScalar(const uint8_t* __restrict in, size_t e, size_t i, size_t n, uint8_t* const* dst) {
  if (e == 2) {
    uint8_t* __restrict d0 = dst[0];
    uint8_t* __restrict d1 = dst[1];
    for (; i < n; ++i) {
      d0[i] = in[2 * i];
      d1[i] = in[2 * i + 1];
    }
    return;
  }
  if (e == 4) {
    uint8_t* __restrict d0 = dst[0];
    uint8_t* __restrict d1 = dst[1];
    uint8_t* __restrict d2 = dst[2];
    uint8_t* __restrict d3 = dst[3];
    for (; i < n; ++i) {
      d0[i] = in[4 * i];
      d1[i] = in[4 * i + 1];
      d2[i] = in[4 * i + 2];
      d3[i] = in[4 * i + 3];
    }
    return;
  }
  for (size_t p = 0; p < e; ++p) {
    uint8_t* __restrict d = dst[p];
    for (size_t k = i; k < n; ++k) d[k] = in[e * k + p];
  }
}

SplitPath BestSplitPath() {
  static const SplitPath best = SplitPathAvailable(SplitPath::kAvx512Vbmi) ? SplitPath::kAvx512Vbmi
                                : SplitPathAvailable(SplitPath::kAvx2)     ? SplitPath::kAvx2
                                : SplitPathAvailable(SplitPath::kSse2)     ? SplitPath::kSse2
                                                                           : SplitPath::kScalar;
  return best;
}

#if defined(__SSE2__)
template <bool kUncached>
inline void Store16(uint8_t* p, __m128i v) {
  if constexpr (kUncached) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), v);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
  }
}
#endif

// The inverse of SplitPlanes for elements [begin, end): out[i * e + p] =
// src[p][i]. kUncached stores around the cache. REQUIRES for kUncached:
// out + begin * e is 16-byte aligned.
template <bool kUncached>
void JoinRange(const uint8_t* const* src, size_t e, size_t begin, size_t end,
               uint8_t* __restrict out) {
  size_t i = begin;
  if (e == 2) {
    const uint8_t* __restrict s0 = src[0];
    const uint8_t* __restrict s1 = src[1];
#if defined(__SSE2__)
    for (; i + 16 <= end; i += 16) {
      __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s0 + i));
      __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s1 + i));
      Store16<kUncached>(out + 2 * i, _mm_unpacklo_epi8(a, b));
      Store16<kUncached>(out + 2 * i + 16, _mm_unpackhi_epi8(a, b));
    }
#endif
    for (; i < end; ++i) {
      out[2 * i] = s0[i];
      out[2 * i + 1] = s1[i];
    }
    return;
  }
  if (e == 4) {
    const uint8_t* __restrict s0 = src[0];
    const uint8_t* __restrict s1 = src[1];
    const uint8_t* __restrict s2 = src[2];
    const uint8_t* __restrict s3 = src[3];
#if defined(__SSE2__)
    for (; i + 16 <= end; i += 16) {
      __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s0 + i));
      __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s1 + i));
      __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s2 + i));
      __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s3 + i));
      __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b);
      __m128i cd_lo = _mm_unpacklo_epi8(c, d), cd_hi = _mm_unpackhi_epi8(c, d);
      uint8_t* o = out + 4 * i;
      Store16<kUncached>(o, _mm_unpacklo_epi16(ab_lo, cd_lo));
      Store16<kUncached>(o + 16, _mm_unpackhi_epi16(ab_lo, cd_lo));
      Store16<kUncached>(o + 32, _mm_unpacklo_epi16(ab_hi, cd_hi));
      Store16<kUncached>(o + 48, _mm_unpackhi_epi16(ab_hi, cd_hi));
    }
#endif
    for (; i < end; ++i) {
      out[4 * i] = s0[i];
      out[4 * i + 1] = s1[i];
      out[4 * i + 2] = s2[i];
      out[4 * i + 3] = s3[i];
    }
    return;
  }
  for (size_t p = 0; p < e; ++p) {
    const uint8_t* __restrict s = src[p];
    for (i = begin; i < end; ++i) out[e * i + p] = s[i];
  }
}

}  // namespace

bool SplitPathAvailable(SplitPath path) {
  switch (path) {
    case SplitPath::kScalar:
    case SplitPath::kBest:
      return true;
    case SplitPath::kSse2:
#if defined(__SSE2__)
      return true;
#else
      return false;
#endif
    case SplitPath::kAvx2:
#if defined(CKFMT_SPLIT_DISPATCH)
      return __builtin_cpu_supports("avx2");
#else
      return false;
#endif
    case SplitPath::kAvx512Vbmi:
#if defined(CKFMT_SPLIT_DISPATCH)
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vbmi");
#else
      return false;
#endif
  }
  return false;
}

void SplitPlanes(const uint8_t* in, size_t e, size_t n, uint8_t* const* dst, SplitPath path) {
  if (path == SplitPath::kBest) path = BestSplitPath();
  size_t i = 0;
  if (e == 2 || e == 4) {
#if defined(CKFMT_SPLIT_DISPATCH)
    if (path == SplitPath::kAvx512Vbmi) i = SplitVbmi(in, e, i, n, dst);
    if (path == SplitPath::kAvx2) i = SplitAvx2(in, e, i, n, dst);
#endif
#if defined(__SSE2__)
    if (path != SplitPath::kScalar) i = SplitSse2(in, e, i, n, dst);
#endif
  }
  SplitScalar(in, e, i, n, dst);
}

// Joins the planes into `out`. A large output of 2- or 4-byte elements
// (a chunk decoded into a caller's tensor, not read again soon) is stored
// around the cache from its first 16-byte boundary on: measured on cold
// buffers here, 1.4-1.6x the speed of cached stores.
void JoinPlanes(const uint8_t* const* src, size_t e, size_t n, uint8_t* out) {
#if defined(__SSE2__)
  const size_t to_boundary = BytesToUncachedStart(out);
  if ((e == 2 || e == 4) && n * e >= kMinUncachedBytes && to_boundary % e == 0) {
    const size_t head = to_boundary / e;
    JoinRange<false>(src, e, 0, head, out);
    JoinRange<true>(src, e, head, n, out);
    StoreFence();
    return;
  }
#endif
  JoinRange<false>(src, e, 0, n, out);
}

}  // namespace ckfmt
