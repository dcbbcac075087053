#include "io/staging_ring.h"

#include "ckfmt/file_layout.h"

namespace ckfmt {

StagingRing::StagingRing(size_t capacity) { buffer_.emplace_back(capacity); }

size_t StagingRing::Find(size_t n) const {
  n = AlignUp(n);
  if (n == 0 || n > capacity()) return kNone;
  if (extents_.empty()) return 0;
  const Extent& head = extents_.front();
  const Extent& tail = extents_.back();
  const size_t end = tail.begin + tail.size;
  if (tail.begin >= head.begin) {
    // Taken space is [head, end): free is [end, capacity) then [0, head).
    if (n <= capacity() - end) return end;
    if (n <= head.begin) return 0;
    return kNone;
  }
  // Wrapped: free is [end, head).
  return n <= head.begin - end ? end : kNone;
}

uint8_t* StagingRing::Take(size_t n) {
  const size_t at = Find(n);
  if (at == kNone) return nullptr;
  extents_.push_back({at, AlignUp(n), false});
  return buffer_[0].data() + at;
}

void StagingRing::Release(const uint8_t* p) {
  const size_t at = static_cast<size_t>(p - buffer_[0].data());
  for (Extent& e : extents_) {
    if (e.begin == at && !e.released) {
      e.released = true;
      break;
    }
  }
  while (!extents_.empty() && extents_.front().released) extents_.pop_front();
}

}  // namespace ckfmt
