#include "ckfmt/checksum.h"

#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ckfmt {

uint64_t Checksum(const void* data, size_t size) { return XXH3_64bits(data, size); }

uint64_t CopyAndChecksum(void* dst, const void* src, size_t size) {
  // Small enough to stay in L2 between the copy and the hash, large enough
  // that the per-block overhead of the streaming state is noise.
  constexpr size_t kBlock = 64 << 10;
  if (size <= kBlock) {
    std::memcpy(dst, src, size);
    return XXH3_64bits(dst, size);
  }
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  for (size_t off = 0; off < size; off += kBlock) {
    size_t n = size - off < kBlock ? size - off : kBlock;
    std::memcpy(d + off, s + off, n);
    XXH3_64bits_update(&state, d + off, n);
  }
  return XXH3_64bits_digest(&state);
}

}  // namespace ckfmt
