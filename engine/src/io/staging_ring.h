// Read staging as one buffer carved into extents of uneven sizes.
//
// Reads of whole chunks come in uneven sizes (a tensor's last chunk is
// short). In fixed slots each short read would leave the rest of its slot
// idle, so fewer bytes would be in flight than the staging budget allows,
// and a disk's throughput follows the bytes in flight. The ring packs the
// extents back to back instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "io/file.h"

namespace ckfmt {

class StagingRing {
 public:
  // One buffer of `capacity` bytes (a multiple of 4096). Throws
  // std::bad_alloc.
  explicit StagingRing(size_t capacity);
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  // `n` contiguous bytes (4096-aligned) after every extent still taken, or
  // nullptr if they are not free now. REQUIRES: 0 < n <= capacity().
  uint8_t* Take(size_t n);
  // Whether Take(n) would succeed now.
  bool CanTake(size_t n) const { return Find(n) != kNone; }
  // Gives back an extent from Take(), in any order. Its space is reused
  // once every extent taken before it has been given back too.
  // REQUIRES: `p` was returned by Take() and not yet released.
  void Release(const uint8_t* p);
  // Gives back every extent. REQUIRES: no transfer uses them.
  void Clear() { extents_.clear(); }

  bool empty() const { return extents_.empty(); }
  size_t capacity() const { return buffer_[0].size(); }
  // The single buffer, to register with BlockIo or pin for device copies.
  const std::vector<AlignedBuffer>& buffers() const { return buffer_; }

 private:
  static constexpr size_t kNone = SIZE_MAX;
  size_t Find(size_t n) const;  // where Take(n) would put it, or kNone

  struct Extent {
    size_t begin, size;
    bool released;
  };
  std::vector<AlignedBuffer> buffer_;  // exactly one
  std::deque<Extent> extents_;         // taken, oldest first
};

}  // namespace ckfmt
