#include "c_api_state.h"

#include <map>

namespace ckfmt {

Result<SaveOptions> SaveOptionsFromAbi(const char* codec, const ckfmt_metadata* metadata,
                                       size_t n_metadata) {
  SaveOptions options;
  if (codec) {
    auto c = CodecFromName(codec);
    if (!c.ok()) return c.status();
    options.codec = *c;
  }
  if (n_metadata > 0 && !metadata) {
    return Status::InvalidArgument("metadata is NULL for " + std::to_string(n_metadata));
  }
  for (size_t i = 0; i < n_metadata; ++i) {
    if (!metadata[i].key || !metadata[i].value) {
      return Status::InvalidArgument("metadata " + std::to_string(i) + ": key or value is NULL");
    }
    options.metadata.emplace_back(metadata[i].key, metadata[i].value);
  }
  return options;
}

Result<Device> DeviceFromAbi(int32_t device, const std::string& named) {
  if (device == -1) return Device{};
  if (device < -1) {
    return Status::InvalidArgument(named + ": device " + std::to_string(device) +
                                   ", expected -1 (host memory) or a CUDA device index");
  }
  return Device{DeviceType::kCUDA, device};
}

int32_t DeviceToAbi(Device device) {
  return device.type == DeviceType::kCPU ? -1 : static_cast<int32_t>(device.index);
}

namespace {

// The part of a global tensor that a shard entry holds, checked: the
// region must lie inside the global shape and hold the tensor's elements.
Result<ShardSpec> ShardOf(const ckfmt_entry& e, const Shape& shape, const std::string& named) {
  if (!e.global_shape) return Status::InvalidArgument(named + ": global_shape is NULL");
  ShardSpec spec;
  spec.global_shape.assign(e.global_shape, e.global_shape + e.global_ndim);
  if (!NumElements(spec.global_shape).ok()) {
    return Status::InvalidArgument(named + ": the global shape's element count overflows 64 bits");
  }
  if (e.offsets) {
    if (e.ndim != e.global_ndim) {
      return Status::InvalidArgument(named + ": a box shard of a " + std::to_string(e.global_ndim) +
                                     "-d tensor has " + std::to_string(e.ndim) +
                                     " dimensions, expected as many");
    }
    spec.region = Region::Box(std::vector<uint64_t>(e.offsets, e.offsets + e.global_ndim), shape);
  } else {
    spec.region = Region::Flat(e.flat_start, *NumElements(shape));
  }
  if (Status s = ValidateRegion(spec.region, spec.global_shape); !s.ok()) {
    return Status::InvalidArgument(named + ": shard " + spec.region.ToString() + ": " +
                                   s.message());
  }
  return spec;
}

Result<Value> TensorOf(const ckfmt_entry& e, const std::string& named) {
  auto dtype = DTypeFromId(e.dtype);
  if (!dtype)
    return Status::InvalidArgument(named + ": unknown dtype id " + std::to_string(e.dtype));
  if (e.ndim > 0 && !e.shape) return Status::InvalidArgument(named + ": shape is NULL");
  Shape shape(e.shape, e.shape + e.ndim);
  auto bytes = ShapeBytes(shape, DTypeSize(*dtype));
  if (!bytes.ok()) return bytes.status().WithContext(named);
  if (*bytes > 0 && !e.data) return Status::InvalidArgument(named + ": data is NULL");
  CKFMT_ASSIGN_OR_RETURN(Device device, DeviceFromAbi(e.device, named));
  Tensor t = Tensor::View(*dtype, shape, e.data, device);
  if (e.global_ndim > 0) {
    CKFMT_ASSIGN_OR_RETURN(ShardSpec spec, ShardOf(e, shape, named));
    t.SetShard(std::move(spec));
  }
  return Value(std::move(t));
}

// The caller's string or bytes, which `declarations_only` leaves empty.
Result<std::string> TextOf(const ckfmt_entry& e, const std::string& named, bool declarations_only) {
  if (declarations_only) return std::string();
  if (e.size > 0 && !e.bytes) return Status::InvalidArgument(named + ": bytes is NULL");
  return std::string(static_cast<const char*>(e.bytes), e.size);
}

Result<Value> ValueOf(const ckfmt_entry& e, const std::string& named, bool declarations_only) {
  switch (e.kind) {
    case CKFMT_KIND_TENSOR:
      return TensorOf(e, named);
    case CKFMT_KIND_INT:
      return Value(e.int_value);
    case CKFMT_KIND_BOOL:
      return Value(e.int_value != 0);
    case CKFMT_KIND_FLOAT:
      return Value(e.float_value);
    case CKFMT_KIND_NONE:
      return Value();
    case CKFMT_KIND_DICT:
      return Value(Dict{});
    case CKFMT_KIND_LIST:
      return Value(List{});
    case CKFMT_KIND_STRING: {
      CKFMT_ASSIGN_OR_RETURN(std::string s, TextOf(e, named, declarations_only));
      return Value(std::move(s));
    }
    case CKFMT_KIND_BYTES: {
      CKFMT_ASSIGN_OR_RETURN(std::string s, TextOf(e, named, declarations_only));
      return Value(Bytes{e.content_type ? e.content_type : "", std::move(s)});
    }
    default:
      return Status::InvalidArgument(named + ": unknown kind " + std::to_string(e.kind) +
                                     ", expected 1 to 9 (CKFMT_KIND_*)");
  }
}

}  // namespace

Result<Value> EntriesToStateDict(const ckfmt_entry* entries, size_t n, const Noun& noun,
                                 bool declarations_only) {
  if (n > 0 && !entries) {
    return Status::InvalidArgument(noun.plural + std::string(" is NULL for ") + std::to_string(n));
  }
  Value root{Dict{}};
  std::map<KeyPath, size_t> seen;
  for (size_t i = 0; i < n; ++i) {
    const ckfmt_entry& e = entries[i];
    const std::string which = noun.one + (" " + std::to_string(i));
    if (!e.key) return Status::InvalidArgument(which + ": no key");
    const std::string named = which + " (\"" + e.key + "\")";
    CKFMT_ASSIGN_OR_RETURN(Value value, ValueOf(e, named, declarations_only));
    KeyPath path = ParseKeyPath(e.key);
    if (path.empty()) return Status::InvalidArgument(named + ": the empty key path (the root)");
    // InsertAtPath would replace what is there: an earlier entry of the
    // same key, or a container holding earlier entries.
    if (root.Find(path)) {
      const auto at = seen.find(path);
      return Status::InvalidArgument(
          named +
          (at != seen.end()
               ? ": the same key as " + std::string(noun.one) + " " + std::to_string(at->second)
               : ": a key that earlier " + std::string(noun.plural) + " are under"));
    }
    seen.emplace(path, i);
    // A parent of the wrong kind, or a list index out of order: the
    // caller's descriptors are at fault, not a file.
    if (Status s = InsertAtPath(&root, path, std::move(value)); !s.ok()) {
      return Status::InvalidArgument(named + ": " + s.message());
    }
  }
  return root;
}

ckfmt_entry EntryOf(const std::string& key, const Value& value, EntryArrays* arrays) {
  ckfmt_entry e{};
  e.key = key.c_str();
  e.device = -1;
  switch (value.kind()) {
    case Value::Kind::kTensor: {
      const Tensor& t = value.as_tensor();
      arrays->shape.assign(t.shape().begin(), t.shape().end());
      e.kind = CKFMT_KIND_TENSOR;
      e.dtype = static_cast<uint8_t>(t.dtype());
      e.device = DeviceToAbi(t.device());
      e.ndim = static_cast<uint32_t>(arrays->shape.size());
      e.shape = arrays->shape.data();
      e.data = t.data();
      if (const auto& shard = t.shard()) {
        arrays->global_shape = shard->global_shape;
        e.global_ndim = static_cast<uint32_t>(arrays->global_shape.size());
        e.global_shape = arrays->global_shape.data();
        if (shard->region.kind == Region::Kind::kBox) {
          arrays->offsets = shard->region.offsets;
          e.offsets = arrays->offsets.data();
        } else {
          e.flat_start = shard->region.start;
        }
      }
      break;
    }
    case Value::Kind::kInt:
      e.kind = CKFMT_KIND_INT;
      e.int_value = value.as_int();
      break;
    case Value::Kind::kBool:
      e.kind = CKFMT_KIND_BOOL;
      e.int_value = value.as_bool();
      break;
    case Value::Kind::kFloat:
      e.kind = CKFMT_KIND_FLOAT;
      e.float_value = value.as_float();
      break;
    case Value::Kind::kString:
      e.kind = CKFMT_KIND_STRING;
      e.bytes = value.as_string().data();
      e.size = value.as_string().size();
      break;
    case Value::Kind::kBytes:
      e.kind = CKFMT_KIND_BYTES;
      e.bytes = value.as_bytes().data.data();
      e.size = value.as_bytes().data.size();
      e.content_type = value.as_bytes().content_type.c_str();
      break;
    case Value::Kind::kNone:
      e.kind = CKFMT_KIND_NONE;
      break;
    case Value::Kind::kDict:
      e.kind = CKFMT_KIND_DICT;
      break;
    case Value::Kind::kList:
      e.kind = CKFMT_KIND_LIST;
      break;
  }
  return e;
}

}  // namespace ckfmt
