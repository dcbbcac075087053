#include "ckfmt/checksum.h"

#include <cstring>

#include "uncached_store.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define XXH_INLINE_ALL
#include <xxhash.h>

#if defined(CKFMT_HAVE_XXH_DISPATCH)
#include <immintrin.h>
// libxxhash's XXH3 with the widest vectors the CPU has (AVX-512, AVX2 or
// SSE2, chosen at run time): the same hash, over twice as fast as the
// SSE2-only inline build on AVX-512 machines. Declared here rather than
// through xxh_x86dispatch.h, whose types clash with XXH_INLINE_ALL's.
extern "C" unsigned long long XXH3_64bits_dispatch(const void* input, size_t len);
extern "C" int XXH3_64bits_update_dispatch(void* state, const void* input, size_t len);
#endif

namespace ckfmt {
namespace {

#if defined(CKFMT_HAVE_XXH_DISPATCH)
// The dispatched code leaves the upper halves of the vector registers
// dirty; SSE code running afterwards (ours, zstd's) then pays a false
// dependency on every instruction, measured at 3.6x slower. vzeroupper
// clears them; it needs AVX, which any CPU dirtying them has.
__attribute__((target("avx"))) void ClearUpperVectors() { _mm256_zeroupper(); }
bool HasAvx() {
  static const bool has = __builtin_cpu_supports("avx");
  return has;
}

uint64_t Hash(const void* data, size_t size) {
  uint64_t h = XXH3_64bits_dispatch(data, size);
  if (HasAvx()) ClearUpperVectors();
  return h;
}

void HashUpdate(XXH3_state_t* state, const void* data, size_t size) {
  (void)XXH3_64bits_update_dispatch(state, data, size);
  if (HasAvx()) ClearUpperVectors();
}
#else
uint64_t Hash(const void* data, size_t size) { return XXH3_64bits(data, size); }
void HashUpdate(XXH3_state_t* state, const void* data, size_t size) {
  (void)XXH3_64bits_update(state, data, size);
}
#endif

// Small enough to stay in L1/L2 between the copy and the hash, large enough
// that the per-block overhead of the streaming state is noise.
constexpr size_t kBlock = 64 << 10;

// memcpy with non-temporal stores, ordered by a fence at the end.
void StreamBlock(uint8_t* __restrict d, const uint8_t* __restrict s, size_t n) {
#if defined(__SSE2__)
  const size_t head = BytesToUncachedStart(d);
  if (n < head + 64) {
    std::memcpy(d, s, n);
    return;
  }
  std::memcpy(d, s, head);
  size_t i = head;
  for (; i + 64 <= n; i += 64) {
    const auto* in = reinterpret_cast<const __m128i*>(s + i);
    auto* out = reinterpret_cast<__m128i*>(d + i);
    __m128i a = _mm_loadu_si128(in), b = _mm_loadu_si128(in + 1);
    __m128i c = _mm_loadu_si128(in + 2), e = _mm_loadu_si128(in + 3);
    _mm_stream_si128(out, a);
    _mm_stream_si128(out + 1, b);
    _mm_stream_si128(out + 2, c);
    _mm_stream_si128(out + 3, e);
  }
  std::memcpy(d + i, s + i, n - i);
#else
  std::memcpy(d, s, n);
#endif
}

}  // namespace

uint64_t Checksum(const void* data, size_t size) { return Hash(data, size); }

struct ChecksumStream::State {
  XXH3_state_t xxh;
};
ChecksumStream::ChecksumStream() : state_(new State) { XXH3_64bits_reset(&state_->xxh); }
ChecksumStream::~ChecksumStream() = default;
void ChecksumStream::Update(const void* data, size_t size) { HashUpdate(&state_->xxh, data, size); }
uint64_t ChecksumStream::Digest() const { return XXH3_64bits_digest(&state_->xxh); }

void CopyUncached(void* dst, const void* src, size_t size) {
  if (size < kMinUncachedBytes) {
    std::memcpy(dst, src, size);
    return;
  }
  StreamBlock(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), size);
  StoreFence();
}

namespace {

// Copies and hashes into `state` block by block, each block hashed while it
// is in cache.
void CopyAndHash(XXH3_state_t* state, void* dst, const void* src, size_t size) {
  const bool stream = size >= kMinUncachedBytes;
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  for (size_t off = 0; off < size; off += kBlock) {
    size_t n = size - off < kBlock ? size - off : kBlock;
    if (stream) {
      // The source block is in cache after the copy; the destination is not.
      StreamBlock(d + off, s + off, n);
      HashUpdate(state, s + off, n);
    } else {
      std::memcpy(d + off, s + off, n);
      HashUpdate(state, d + off, n);
    }
  }
  if (stream) StoreFence();
}

}  // namespace

void ChecksumStream::CopyAndUpdate(void* dst, const void* src, size_t size) {
  CopyAndHash(&state_->xxh, dst, src, size);
}

uint64_t CopyAndChecksum(void* dst, const void* src, size_t size) {
  if (size <= kBlock) {
    std::memcpy(dst, src, size);
    return Hash(dst, size);
  }
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  CopyAndHash(&state, dst, src, size);
  return XXH3_64bits_digest(&state);
}

}  // namespace ckfmt
