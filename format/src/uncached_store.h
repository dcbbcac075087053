// Stores that go around the cache, for bulk output that is not read again
// soon (a staging copy, a decoded chunk written into a caller's tensor).
// Non-temporal stores do not read each destination line before
// overwriting it, a third of a cached copy's memory traffic, which a VM's
// disk I/O competes for, and they leave the cache to the next blocks.
#pragma once

#include <cstddef>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ckfmt {

// Below this, output may well be read again soon and stays cached.
constexpr size_t kMinUncachedBytes = 256 << 10;

// Orders non-temporal stores (weakly ordered) before what follows.
inline void StoreFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace ckfmt
