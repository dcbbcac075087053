// The one checksum of the format: XXH3 64-bit, seed 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ckfmt {

uint64_t Checksum(const void* data, size_t size);

// Checksum() of bytes given in pieces, in order: data that arrives piece
// by piece (a read into place) is hashed while each piece is in cache.
class ChecksumStream {
 public:
  ChecksumStream();
  ~ChecksumStream();
  ChecksumStream(const ChecksumStream&) = delete;
  ChecksumStream& operator=(const ChecksumStream&) = delete;
  void Update(const void* data, size_t size);
  // Update() with `src`'s bytes, copying them to `dst` in the same pass, as
  // CopyAndChecksum() does. REQUIRES: as CopyAndChecksum().
  void CopyAndUpdate(void* dst, const void* src, size_t size);
  uint64_t Digest() const;  // of everything given so far

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Copies `size` bytes from `src` to `dst` and returns Checksum() of them, in
// one pass: each cache-sized block is hashed while it is still in cache,
// so staging copies do not read memory twice. Large copies store around
// the cache, as CopyUncached() does, and hash the source block just read.
// REQUIRES: the ranges do not overlap, and `src` does not change meanwhile.
uint64_t CopyAndChecksum(void* dst, const void* src, size_t size);

// memcpy for bulk transfers between staging and tensors, whose destination
// is not read again soon: from 256 KiB up it uses non-temporal stores,
// which do not read each destination line before overwriting it (a third
// of a cached copy's memory traffic, which a VM's disk I/O competes for)
// and do not evict what the cache holds. REQUIRES: no overlap.
void CopyUncached(void* dst, const void* src, size_t size);

}  // namespace ckfmt
