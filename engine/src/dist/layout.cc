#include "ckfmt/dist/layout.h"

#include <algorithm>

namespace ckfmt::dist {
namespace {

uint64_t Numel(const Shape& s) {
  uint64_t n = 1;
  for (uint64_t d : s) n *= d;
  return n;
}

}  // namespace

uint64_t Fsdp1ShardElements(const std::vector<ParamInfo>& params, int world_size) {
  uint64_t total = 0;
  for (const auto& p : params) total += Numel(p.shape);
  const uint64_t n = static_cast<uint64_t>(world_size);
  return (total + n - 1) / n;
}

std::vector<FlatSlice> Fsdp1RankSlices(const std::vector<ParamInfo>& params, int world_size,
                                       int rank) {
  const uint64_t per = Fsdp1ShardElements(params, world_size);
  const uint64_t lo = per * static_cast<uint64_t>(rank), hi = lo + per;
  std::vector<FlatSlice> out;
  uint64_t offset = 0;  // the parameter's start in the flat buffer
  for (const auto& p : params) {
    const uint64_t n = Numel(p.shape);
    const uint64_t a = std::clamp(lo, offset, offset + n), b = std::clamp(hi, offset, offset + n);
    out.push_back({p.path, p.shape, Region::Flat(a - offset, b - a),
                   std::min(a > lo ? a - lo : 0, per)});
    offset += n;
  }
  return out;
}

Region Fsdp2ChunkRegion(const Shape& shape, int world_size, int rank) {
  const uint64_t d0 = shape[0], n = static_cast<uint64_t>(world_size);
  const uint64_t chunk = (d0 + n - 1) / n;
  const uint64_t a = std::min(chunk * static_cast<uint64_t>(rank), d0);
  const uint64_t b = std::min(a + chunk, d0);
  std::vector<uint64_t> offsets(shape.size(), 0), lengths = shape;
  offsets[0] = a;
  lengths[0] = b - a;
  return Region::Box(std::move(offsets), std::move(lengths));
}

LayoutFn Fsdp1Layout(const std::vector<ParamInfo>& params, int world_size, int rank,
                     ParamOf param_of) {
  std::map<KeyPath, FlatSlice> table;
  for (auto& s : Fsdp1RankSlices(params, world_size, rank)) table.emplace(s.path, s);
  return [table = std::move(table), param_of = std::move(param_of)](
             const KeyPath& path, const Shape& shape) -> std::optional<Region> {
    std::optional<KeyPath> param = param_of ? param_of(path) : std::optional<KeyPath>(path);
    if (!param) return std::nullopt;
    auto it = table.find(*param);
    if (it == table.end() || it->second.shape != shape) return std::nullopt;
    return it->second.region;
  };
}

LayoutFn Fsdp2Layout(int world_size, int rank, std::function<bool(const KeyPath&)> filter) {
  return [=](const KeyPath& path, const Shape& shape) -> std::optional<Region> {
    if (shape.empty() || (filter && !filter(path))) return std::nullopt;
    return Fsdp2ChunkRegion(shape, world_size, rank);
  };
}

LayoutFn TableLayout(std::map<KeyPath, Region> table) {
  return [table = std::move(table)](const KeyPath& path, const Shape&) -> std::optional<Region> {
    auto it = table.find(path);
    if (it == table.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace ckfmt::dist
