// Freed huge-page buffers, kept for the next operation of the process.
//
// A fresh staging buffer costs page faults, and in a VM the host backs new
// memory on first touch: 40 MiB of huge pages took 96-123 ms here, a tenth
// of a 2 GiB load, during which the disk sat idle. Trainers save and load
// again and again with the same options, so the buffers of one operation
// serve the next. At most kBufferCacheBytes are kept; ReleaseStagingCache()
// (ckfmt/io_options.h) frees them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckfmt {

inline constexpr size_t kBufferCacheBytes = size_t{256} << 20;

// A kept buffer of exactly `size` bytes, or nullptr. Its contents are
// whatever its last user left.
uint8_t* TakeCachedBuffer(size_t size);
// Keeps `p` (from std::aligned_alloc, `size` bytes) if there is room;
// otherwise frees it.
void GiveCachedBuffer(uint8_t* p, size_t size);

}  // namespace ckfmt
