// Regions of a global tensor, and the arithmetic between them.
//
// A region is either an n-d box (offsets and lengths per dimension, as
// DTensor/ShardedTensor chunks) or a range of the row-major flattened tensor
// (as FSDP flat-parameter shards). A region's elements form a stream in
// row-major order of the region: for a box, row-major order within the box;
// for a flat range, global flat order. Stored pieces and caller buffers both
// hold their region's stream contiguously.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckfmt/status.h"

namespace ckfmt {

using Shape = std::vector<uint64_t>;

struct Region {
  enum class Kind : uint8_t { kBox, kFlat };

  Kind kind = Kind::kBox;
  std::vector<uint64_t> offsets;  // kBox
  std::vector<uint64_t> lengths;  // kBox
  uint64_t start = 0;             // kFlat
  uint64_t length = 0;            // kFlat

  static Region Box(std::vector<uint64_t> offsets, std::vector<uint64_t> lengths);
  static Region Flat(uint64_t start, uint64_t length);
  // The box covering the whole tensor.
  static Region Whole(const Shape& shape);

  // REQUIRES: Validate(shape) succeeded for some shape (no overflow).
  uint64_t NumElements() const;

  bool operator==(const Region&) const = default;
  std::string ToString() const;
};

// Element count of `shape`. Fails (kCorruption) when the product of its
// non-zero dimensions overflows 64 bits (FORMAT.md T1): every stride of the
// shape is at most that product, so none can overflow, and whether a shape
// is valid does not depend on the order of its dimensions.
Result<uint64_t> NumElements(const Shape& shape);

// NumElements(shape) * elem_size. Fails (kCorruption) as NumElements does,
// and when the product of the non-zero dimensions times elem_size
// overflows (T1), so that byte strides cannot overflow either.
Result<uint64_t> ShapeBytes(const Shape& shape, uint64_t elem_size);

// Bytes of `num_elements` elements of size `elem_size`, checked for overflow.
Result<uint64_t> CheckedBytes(uint64_t num_elements, uint64_t elem_size);

// OK if `region` lies within a tensor of `shape`: rank matches for a box,
// no offset+length overflows or exceeds the extent.
Status ValidateRegion(const Region& region, const Shape& shape);

// A contiguous run shared by two regions: `count` elements that sit at
// element `src_offset` of the source stream and `dst_offset` of the
// destination stream.
struct Run {
  uint64_t src_offset;
  uint64_t dst_offset;
  uint64_t count;
};

// Calls `fn` for every run of elements that both regions cover, in
// increasing source order; adjacent runs are merged.
// REQUIRES: both regions validated against `shape`.
void ForEachOverlap(const Shape& shape, const Region& src, const Region& dst,
                    const std::function<void(const Run&)>& fn);

// Number of elements both regions cover. Its cost grows with the number
// of runs the overlap falls into; to ask only whether there is one, call
// RegionsIntersect.
uint64_t OverlapElements(const Shape& shape, const Region& a, const Region& b);

// True if some element lies in both regions. O(rank^2) time and memory
// whatever the regions' sizes: safe on untrusted regions.
// REQUIRES: both regions validated against `shape`.
bool RegionsIntersect(const Shape& shape, const Region& a, const Region& b);

// The smallest range [begin, end) of row-major flat indices that holds
// every element of `region`: regions whose spans are disjoint share no
// element. REQUIRES: `region` validated against `shape`, NumElements() > 0.
struct FlatSpan {
  uint64_t begin, end;
};
FlatSpan FlatSpanOf(const Shape& shape, const Region& region);

// Boxes that hold exactly the flat range [start, start + length) of a
// tensor of `shape`: a partial row, whole rows and a partial row at each
// level, in increasing flat order, each a contiguous run of the range, so
// their streams joined in order are the range's stream. None when length
// is 0. For formats whose shards must be boxes (DCP's chunks).
// REQUIRES: ValidateRegion(Region::Flat(start, length), shape) succeeded.
std::vector<Region> FlatRangeBoxes(const Shape& shape, uint64_t start, uint64_t length);

}  // namespace ckfmt
