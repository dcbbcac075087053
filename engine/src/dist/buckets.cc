#include "buckets.h"

namespace ckfmt::dist {

std::vector<Region> SliceTensor(const Shape& shape, uint64_t elem_size, uint64_t cap) {
  uint64_t numel = 1;
  for (uint64_t d : shape) numel *= d;
  std::vector<Region> out;
  if (numel * elem_size <= cap || numel == 0) {
    out.push_back(Region::Whole(shape));
    return out;
  }
  uint64_t row = numel / shape[0];  // shape non-empty here: a 0-d tensor fits
  if (row * elem_size <= cap) {
    uint64_t rows = cap / (row * elem_size);
    for (uint64_t r = 0; r < shape[0]; r += rows) {
      std::vector<uint64_t> offsets(shape.size(), 0), lengths = shape;
      offsets[0] = r;
      lengths[0] = std::min(rows, shape[0] - r);
      out.push_back(Region::Box(std::move(offsets), std::move(lengths)));
    }
    return out;
  }
  uint64_t per = std::max<uint64_t>(1, cap / elem_size);
  for (uint64_t s = 0; s < numel; s += per) out.push_back(Region::Flat(s, std::min(per, numel - s)));
  return out;
}

std::vector<Bucket> MakeBuckets(const GlobalPlan& plan, uint64_t cap) {
  std::vector<Bucket> buckets(1);
  auto align = [](uint64_t n) { return (n + 63) & ~uint64_t{63}; };
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const PlanEntry& e = plan.entries[i];
    if (!e.HasData()) {
      buckets.back().ops.push_back({i, false, {}, 0, 0, false});
      continue;
    }
    const uint64_t es = e.ElementSize();
    std::vector<Region> slices = e.kind == EntryKind::kBytes
                                     ? std::vector<Region>{Region::Whole(e.shape)}
                                     : SliceTensor(e.shape, es, std::max(cap, es));
    for (size_t k = 0; k < slices.size(); ++k) {
      uint64_t bytes = slices[k].NumElements() * es;
      Bucket* b = &buckets.back();
      if (b->bytes > 0 && align(b->bytes) + bytes > cap) b = &buckets.emplace_back();
      WriteOp op{i, true, slices[k], align(b->bytes), bytes, k + 1 == slices.size()};
      b->bytes = op.offset + bytes;
      b->ops.push_back(std::move(op));
    }
  }
  return buckets;
}

}  // namespace ckfmt::dist
