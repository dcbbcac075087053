// Stores that go around the cache, for bulk output that is not read again
// soon (a staging copy, a decoded chunk written into a caller's tensor).
// Non-temporal stores do not read each destination line before
// overwriting it, a third of a cached copy's memory traffic, which a VM's
// disk I/O competes for, and they leave the cache to the next blocks.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ckfmt {

// Below this, output may well be read again soon and stays cached.
constexpr size_t kMinUncachedBytes = 256 << 10;

// Bytes from `p` to the next 16-byte boundary, where 16-byte non-temporal
// stores can start.
inline size_t BytesToUncachedStart(const void* p) {
  return (16 - reinterpret_cast<uintptr_t>(p) % 16) % 16;
}

// Orders non-temporal stores (weakly ordered) before what follows.
inline void StoreFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace ckfmt
