// Flattened save: cutting the plan into buckets of bounded size.
//
// Every rank computes the same buckets from the same plan and capacity.
// A data entry larger than the capacity is cut into slices - blocks of
// whole rows (dim 0) when a row fits, else flat ranges - each written as
// one piece; byte blobs are never cut (a larger blob gets a bucket of its
// own size).
#pragma once

#include <vector>

#include "plan.h"

namespace ckfmt::dist {

struct WriteOp {
  size_t entry = 0;     // index into GlobalPlan::entries
  bool data = false;    // a slice of a data entry (else: a container or scalar)
  Region region;        // data: the slice of the global tensor
  uint64_t offset = 0;  // data: where the slice's stream sits in the bucket buffer
  uint64_t bytes = 0;   // data: stream length
  bool last = false;    // data: the entry's last slice
};

struct Bucket {
  std::vector<WriteOp> ops;  // in file order
  uint64_t bytes = 0;        // buffer bytes the bucket needs
};

// Regions of at most `cap` bytes (at least one element each) that cut the
// whole tensor of `shape` in stream order. REQUIRES: cap >= elem_size.
std::vector<Region> SliceTensor(const Shape& shape, uint64_t elem_size, uint64_t cap);

// The buckets of `plan`. Slice offsets in a bucket are 64-byte aligned.
std::vector<Bucket> MakeBuckets(const GlobalPlan& plan, uint64_t cap);

}  // namespace ckfmt::dist
