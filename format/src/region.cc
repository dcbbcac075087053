#include "ckfmt/region.h"

#include <algorithm>

namespace ckfmt {

Region Region::Box(std::vector<uint64_t> offsets, std::vector<uint64_t> lengths) {
  Region r;
  r.kind = Kind::kBox;
  r.offsets = std::move(offsets);
  r.lengths = std::move(lengths);
  return r;
}

Region Region::Flat(uint64_t start, uint64_t length) {
  Region r;
  r.kind = Kind::kFlat;
  r.start = start;
  r.length = length;
  return r;
}

Region Region::Whole(const Shape& shape) {
  return Box(std::vector<uint64_t>(shape.size(), 0), shape);
}

uint64_t Region::NumElements() const {
  if (kind == Kind::kFlat) return length;
  uint64_t n = 1;
  for (uint64_t l : lengths) n *= l;
  return n;
}

std::string Region::ToString() const {
  if (kind == Kind::kFlat) {
    return "flat[" + std::to_string(start) + ", " + std::to_string(start + length) + ")";
  }
  std::string s = "box[";
  for (size_t d = 0; d < offsets.size(); ++d) {
    if (d) s += ", ";
    s += std::to_string(offsets[d]) + ":" + std::to_string(offsets[d] + lengths[d]);
  }
  return s + "]";
}

namespace {

// The product of the non-zero dimensions of `shape` (1 for none).
Result<uint64_t> NonZeroExtent(const Shape& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (d == 0) continue;
    if (n > UINT64_MAX / d) return Status::Corruption("shape element count overflows 64 bits");
    n *= d;
  }
  return n;
}

bool HasZeroDimension(const Shape& shape) {
  return std::find(shape.begin(), shape.end(), uint64_t{0}) != shape.end();
}

}  // namespace

Result<uint64_t> NumElements(const Shape& shape) {
  CKFMT_ASSIGN_OR_RETURN(uint64_t extent, NonZeroExtent(shape));
  return HasZeroDimension(shape) ? 0 : extent;
}

Result<uint64_t> ShapeBytes(const Shape& shape, uint64_t elem_size) {
  CKFMT_ASSIGN_OR_RETURN(uint64_t extent, NonZeroExtent(shape));
  CKFMT_ASSIGN_OR_RETURN(uint64_t bytes, CheckedBytes(extent, elem_size));
  return HasZeroDimension(shape) ? 0 : bytes;
}

Result<uint64_t> CheckedBytes(uint64_t num_elements, uint64_t elem_size) {
  if (elem_size != 0 && num_elements > UINT64_MAX / elem_size) {
    return Status::Corruption("byte size overflows 64 bits");
  }
  return num_elements * elem_size;
}

Status ValidateRegion(const Region& region, const Shape& shape) {
  if (region.kind == Region::Kind::kFlat) {
    CKFMT_ASSIGN_OR_RETURN(uint64_t numel, NumElements(shape));
    if (region.start > numel || region.length > numel - region.start) {
      return Status::Corruption("region " + region.ToString() + " exceeds the tensor's " +
                                std::to_string(numel) + " elements");
    }
    return Status::OK();
  }
  if (region.offsets.size() != shape.size() || region.lengths.size() != shape.size()) {
    return Status::Corruption("box region has rank " + std::to_string(region.offsets.size()) +
                              "/" + std::to_string(region.lengths.size()) +
                              " but the tensor has rank " + std::to_string(shape.size()));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (region.offsets[d] > shape[d] || region.lengths[d] > shape[d] - region.offsets[d]) {
      return Status::Corruption("region " + region.ToString() + " exceeds extent " +
                                std::to_string(shape[d]) + " of dimension " + std::to_string(d));
    }
  }
  return Status::OK();
}

namespace {

// A box whose row-major stream starts at element `base` of its region's stream.
struct BasedBox {
  std::vector<uint64_t> offsets;
  std::vector<uint64_t> lengths;
  uint64_t base;
};

// Splits the flat range [a, b) of the sub-tensor shape[dim:] (whose leading
// indices are fixed by `prefix`) into boxes that are contiguous in global
// order. Each box fixes a prefix, spans a range of one dim, and covers the
// remaining dims fully, so its row-major order equals global order.
void DecomposeFlat(const Shape& shape, size_t dim, std::vector<uint64_t>& prefix, uint64_t a,
                   uint64_t b, uint64_t& base, std::vector<BasedBox>& out) {
  if (a >= b) return;
  const size_t nd = shape.size();
  auto emit = [&](uint64_t lo, uint64_t hi) {  // dims[dim] in [lo, hi), rest full
    BasedBox box;
    box.offsets = prefix;
    box.lengths.assign(prefix.size(), 1);
    if (dim < nd) {
      box.offsets.push_back(lo);
      box.lengths.push_back(hi - lo);
      for (size_t d = dim + 1; d < nd; ++d) {
        box.offsets.push_back(0);
        box.lengths.push_back(shape[d]);
      }
    }
    box.base = base;
    uint64_t n = 1;
    for (uint64_t l : box.lengths) n *= l;
    base += n;
    out.push_back(std::move(box));
  };
  if (dim == nd) {  // a single element
    emit(0, 1);
    return;
  }
  uint64_t inner = 1;
  for (size_t d = dim + 1; d < nd; ++d) inner *= shape[d];
  uint64_t i0 = a / inner, i1 = (b - 1) / inner;
  auto recurse = [&](uint64_t i, uint64_t lo, uint64_t hi) {
    prefix.push_back(i);
    DecomposeFlat(shape, dim + 1, prefix, lo, hi, base, out);
    prefix.pop_back();
  };
  if (i0 == i1) {
    if (a % inner == 0 && b - a == inner) {
      emit(i0, i0 + 1);
    } else {
      recurse(i0, a - i0 * inner, b - i0 * inner);
    }
    return;
  }
  uint64_t full_lo = i0, full_hi = i1 + 1;
  if (a % inner != 0) {
    recurse(i0, a % inner, inner);
    full_lo = i0 + 1;
  }
  bool tail = b % inner != 0;
  if (tail) full_hi = i1;
  if (full_lo < full_hi) emit(full_lo, full_hi);
  if (tail) recurse(i1, 0, b - i1 * inner);
}

std::vector<BasedBox> ToBoxes(const Shape& shape, const Region& r) {
  std::vector<BasedBox> out;
  if (r.kind == Region::Kind::kBox) {
    out.push_back({r.offsets, r.lengths, 0});
    return out;
  }
  std::vector<uint64_t> prefix;
  uint64_t base = 0;
  DecomposeFlat(shape, 0, prefix, r.start, r.start + r.length, base, out);
  return out;
}

// Emits the runs shared by two based boxes.
void OverlapBoxes(const BasedBox& s, const BasedBox& t, const std::function<void(const Run&)>& fn) {
  const size_t nd = s.offsets.size();
  std::vector<uint64_t> lo(nd), hi(nd);
  for (size_t d = 0; d < nd; ++d) {
    lo[d] = std::max(s.offsets[d], t.offsets[d]);
    hi[d] = std::min(s.offsets[d] + s.lengths[d], t.offsets[d] + t.lengths[d]);
    if (lo[d] >= hi[d]) return;
  }
  // Trailing dims that the intersection spans fully in both boxes form one
  // contiguous block; `inner` is that block's length.
  size_t split = nd;  // dims [split, nd) are merged into each run
  uint64_t inner = 1;
  while (split > 0) {
    size_t d = split - 1;
    inner *= hi[d] - lo[d];
    --split;
    bool full = lo[d] == s.offsets[d] && hi[d] - lo[d] == s.lengths[d] &&
                lo[d] == t.offsets[d] && hi[d] - lo[d] == t.lengths[d];
    if (!full) break;
  }
  std::vector<uint64_t> idx(lo.begin(), lo.begin() + split);
  auto linear = [&](const BasedBox& b) {
    uint64_t off = 0;
    for (size_t d = 0; d < nd; ++d) {
      uint64_t i = d < split ? idx[d] : lo[d];
      off = off * b.lengths[d] + (i - b.offsets[d]);
    }
    return b.base + off;
  };
  while (true) {
    fn(Run{linear(s), linear(t), inner});
    size_t d = split;
    while (d > 0) {
      --d;
      if (++idx[d] < hi[d]) break;
      idx[d] = lo[d];
      if (d == 0) return;
    }
    if (split == 0) return;
  }
}

}  // namespace

void ForEachOverlap(const Shape& shape, const Region& src, const Region& dst,
                    const std::function<void(const Run&)>& fn) {
  if (src.NumElements() == 0 || dst.NumElements() == 0) return;
  std::vector<BasedBox> sb = ToBoxes(shape, src), db = ToBoxes(shape, dst);
  std::vector<Run> runs;
  for (const auto& s : sb) {
    for (const auto& d : db) OverlapBoxes(s, d, [&](const Run& r) { runs.push_back(r); });
  }
  std::sort(runs.begin(), runs.end(),
            [](const Run& a, const Run& b) { return a.src_offset < b.src_offset; });
  Run cur{0, 0, 0};
  for (const Run& r : runs) {
    if (cur.count && cur.src_offset + cur.count == r.src_offset &&
        cur.dst_offset + cur.count == r.dst_offset) {
      cur.count += r.count;
      continue;
    }
    if (cur.count) fn(cur);
    cur = r;
  }
  if (cur.count) fn(cur);
}

uint64_t OverlapElements(const Shape& shape, const Region& a, const Region& b) {
  uint64_t n = 0;
  ForEachOverlap(shape, a, b, [&](const Run& r) { n += r.count; });
  return n;
}

bool RegionsIntersect(const Shape& shape, const Region& a, const Region& b) {
  if (a.NumElements() == 0 || b.NumElements() == 0) return false;
  // A flat range is a handful of boxes (at most two per dimension).
  const std::vector<BasedBox> as = ToBoxes(shape, a), bs = ToBoxes(shape, b);
  for (const BasedBox& s : as) {
    for (const BasedBox& t : bs) {
      bool meet = true;
      for (size_t d = 0; d < s.offsets.size() && meet; ++d) {
        meet = std::max(s.offsets[d], t.offsets[d]) <
               std::min(s.offsets[d] + s.lengths[d], t.offsets[d] + t.lengths[d]);
      }
      if (meet) return true;
    }
  }
  return false;
}

FlatSpan FlatSpanOf(const Shape& shape, const Region& region) {
  if (region.kind == Region::Kind::kFlat) return {region.start, region.start + region.length};
  // Row-major index of the box's first and last corners. Both are below
  // the tensor's element count, which fits 64 bits (T1).
  uint64_t first = 0, last = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    first = first * shape[d] + region.offsets[d];
    last = last * shape[d] + region.offsets[d] + region.lengths[d] - 1;
  }
  return {first, last + 1};
}

namespace {

// [a, b) of the sub-tensor shape[dim:] at leading indices `prefix`.
void AppendRangeBoxes(const Shape& shape, std::vector<uint64_t>& prefix, uint64_t a, uint64_t b,
                      std::vector<Region>* out) {
  if (a == b) return;
  const size_t dim = prefix.size();
  auto box = [&](uint64_t row, uint64_t rows) {
    Region r = Region::Box(prefix, std::vector<uint64_t>(dim, 1));
    if (dim == shape.size()) return r;  // a single element
    r.offsets.push_back(row);
    r.lengths.push_back(rows);
    for (size_t d = dim + 1; d < shape.size(); ++d) {
      r.offsets.push_back(0);
      r.lengths.push_back(shape[d]);
    }
    return r;
  };
  if (dim == shape.size()) {
    out->push_back(box(0, 0));
    return;
  }
  uint64_t row_size = 1;  // elements per index of dimension `dim`
  for (size_t d = dim + 1; d < shape.size(); ++d) row_size *= shape[d];
  auto partial_row = [&](uint64_t row, uint64_t from, uint64_t to) {
    prefix.push_back(row);
    AppendRangeBoxes(shape, prefix, from - row * row_size, to - row * row_size, out);
    prefix.pop_back();
  };
  if (a % row_size != 0) {  // the head, inside one row
    const uint64_t row = a / row_size;
    const uint64_t end = std::min(b, (row + 1) * row_size);
    partial_row(row, a, end);
    a = end;
  }
  if (b / row_size > a / row_size && a % row_size == 0) {  // whole rows
    out->push_back(box(a / row_size, b / row_size - a / row_size));
    a = b / row_size * row_size;
  }
  if (a < b) partial_row(a / row_size, a, b);  // the tail
}

}  // namespace

std::vector<Region> FlatRangeBoxes(const Shape& shape, uint64_t start, uint64_t length) {
  std::vector<Region> out;
  std::vector<uint64_t> prefix;
  AppendRangeBoxes(shape, prefix, start, start + length, &out);
  return out;
}

}  // namespace ckfmt
