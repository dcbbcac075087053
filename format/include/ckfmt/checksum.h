// The one checksum of the format: XXH3 64-bit, seed 0.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckfmt {

uint64_t Checksum(const void* data, size_t size);

// Copies `size` bytes from `src` to `dst` and returns Checksum() of them, in
// one pass: each cache-sized block is hashed while it is still in cache,
// so staging copies do not read memory twice.
// REQUIRES: the ranges do not overlap.
uint64_t CopyAndChecksum(void* dst, const void* src, size_t size);

}  // namespace ckfmt
