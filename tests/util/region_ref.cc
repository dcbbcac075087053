#include "util/region_ref.h"

#include <cstring>
#include <stdexcept>
#include <unordered_map>

namespace ckfmt_test {

using ckfmt::Region;
using ckfmt::Run;
using ckfmt::Shape;

uint64_t RefNumElements(const Shape& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

std::vector<uint64_t> RefGlobalIndices(const Shape& shape, const Region& region) {
  std::vector<uint64_t> out;
  if (region.kind == Region::Kind::kFlat) {
    for (uint64_t i = 0; i < region.length; ++i) out.push_back(region.start + i);
    return out;
  }
  const size_t nd = shape.size();
  if (region.offsets.size() != nd || region.lengths.size() != nd) {
    throw std::logic_error("RefGlobalIndices: rank mismatch");
  }
  for (uint64_t l : region.lengths) {
    if (l == 0) return out;
  }
  std::vector<uint64_t> idx(nd, 0);  // position within the box
  while (true) {
    uint64_t g = 0;
    for (size_t d = 0; d < nd; ++d) g = g * shape[d] + region.offsets[d] + idx[d];
    out.push_back(g);
    size_t d = nd;
    while (d > 0) {
      --d;
      if (++idx[d] < region.lengths[d]) break;
      idx[d] = 0;
      if (d == 0) return out;
    }
    if (nd == 0) return out;
  }
}

std::vector<Run> RefRuns(const Shape& shape, const Region& src, const Region& dst) {
  std::vector<uint64_t> s = RefGlobalIndices(shape, src), t = RefGlobalIndices(shape, dst);
  std::unordered_map<uint64_t, uint64_t> dst_pos;
  for (uint64_t j = 0; j < t.size(); ++j) dst_pos[t[j]] = j;
  std::vector<Run> runs;
  for (uint64_t i = 0; i < s.size(); ++i) {
    auto it = dst_pos.find(s[i]);
    if (it == dst_pos.end()) continue;
    uint64_t j = it->second;
    if (!runs.empty()) {
      Run& r = runs.back();
      if (r.src_offset + r.count == i && r.dst_offset + r.count == j) {
        ++r.count;
        continue;
      }
    }
    runs.push_back(Run{i, j, 1});
  }
  return runs;
}

std::string RefExtract(const Shape& shape, const Region& region, const std::string& whole,
                       size_t elem_size) {
  std::string out;
  for (uint64_t g : RefGlobalIndices(shape, region)) {
    out.append(whole, g * elem_size, elem_size);
  }
  return out;
}

Shape RandomShape(std::mt19937_64& rng, size_t max_rank, uint64_t max_dim) {
  size_t rank = rng() % (max_rank + 1);
  Shape s(rank);
  for (auto& d : s) {
    // Zero-size dims are rare but present.
    d = (rng() % 10 == 0) ? 0 : 1 + rng() % max_dim;
  }
  return s;
}

Region RandomBox(std::mt19937_64& rng, const Shape& shape) {
  std::vector<uint64_t> off(shape.size()), len(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    off[d] = rng() % (shape[d] + 1);
    uint64_t room = shape[d] - off[d];
    len[d] = room == 0 ? 0 : (rng() % 8 == 0 ? 0 : 1 + rng() % room);
  }
  return Region::Box(off, len);
}

Region RandomFlat(std::mt19937_64& rng, const Shape& shape) {
  uint64_t n = RefNumElements(shape);
  uint64_t start = rng() % (n + 1);
  uint64_t room = n - start;
  uint64_t len = room == 0 ? 0 : (rng() % 8 == 0 ? 0 : 1 + rng() % room);
  return Region::Flat(start, len);
}

std::string RunsToString(const std::vector<Run>& runs) {
  std::string s = "{";
  for (const auto& r : runs) {
    s += " (src " + std::to_string(r.src_offset) + ", dst " + std::to_string(r.dst_offset) +
         ", n " + std::to_string(r.count) + ")";
  }
  return s + " }";
}

}  // namespace ckfmt_test
