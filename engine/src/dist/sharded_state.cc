#include "ckfmt/dist/sharded_state.h"

#include <cstring>

namespace ckfmt::dist {

Shape LocalShape(const Region& region) {
  if (region.kind == Region::Kind::kFlat) return {region.length};
  return region.lengths;
}

Result<Tensor> ExtractRegion(const Tensor& whole, const Region& region) {
  if (whole.shard()) {
    return Status::InvalidArgument("ExtractRegion needs an unsharded tensor, got a shard " +
                                   whole.region().ToString());
  }
  if (whole.device().type != DeviceType::kCPU) {
    return Status::InvalidArgument("ExtractRegion needs a host tensor");
  }
  if (Status s = ValidateRegion(region, whole.shape()); !s.ok()) {
    return Status::InvalidArgument("ExtractRegion: " + s.message());
  }
  Tensor out;
  try {
    out = Tensor::Zeros(whole.dtype(), LocalShape(region));
  } catch (const std::bad_alloc&) {
    return Status::IOError("ExtractRegion: cannot allocate " + region.ToString());
  }
  const uint64_t es = DTypeSize(whole.dtype());
  const auto* src = static_cast<const uint8_t*>(whole.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  ForEachOverlap(whole.shape(), Region::Whole(whole.shape()), region, [&](const Run& r) {
    std::memcpy(dst + r.dst_offset * es, src + r.src_offset * es, r.count * es);
  });
  out.SetShard(ShardSpec{whole.shape(), region});
  return out;
}

Result<Value> ShardStateDict(const Value& full, const LayoutFn& layout) {
  if (!full.is_dict()) return Status::InvalidArgument("ShardStateDict needs a dict");
  Value out{Dict{}};
  Status status;
  VisitValues(full, [&](const KeyPath& path, const Value& v) {
    if (!status.ok()) return;
    Value copy;
    if (v.is_dict()) {
      copy = Value(Dict{});
    } else if (v.is_list()) {
      copy = Value(List{});
    } else if (v.is_tensor() && layout && !v.as_tensor().shard()) {
      Result<std::optional<Region>> region = layout(path, v.as_tensor().shape());
      if (!region.ok()) {
        status = region.status();
        return;
      }
      if (*region) {
        auto t = ExtractRegion(v.as_tensor(), **region);
        if (!t.ok()) {
          status = t.status().WithContext(FormatKeyPath(path));
          return;
        }
        copy = Value(std::move(*t));
      } else {
        copy = v;
      }
    } else {
      copy = v;
    }
    status = InsertAtPath(&out, path, std::move(copy));
  });
  CKFMT_RETURN_IF_ERROR(status);
  return out;
}

}  // namespace ckfmt::dist
