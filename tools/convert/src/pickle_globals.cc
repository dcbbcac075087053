// The whitelist of pickle globals and torch's names for dtypes and storage
// classes.
#include "pickle_globals.h"

#include <set>

namespace ckfmt::convert {

namespace {

const std::set<std::string>& AllowedGlobals() {
  static const std::set<std::string> s = {
      "collections.OrderedDict", "collections.Counter", "builtins.set", "builtins.frozenset",
      "builtins.bytearray", "builtins.complex", "builtins.slice", "builtins.object",
      "builtins.dict", "builtins.list", "builtins.tuple", "builtins.bytes",
      "_codecs.encode", "copyreg._reconstructor",
      "torch._utils._rebuild_tensor", "torch._utils._rebuild_tensor_v2",
      "torch._utils._rebuild_tensor_v3", "torch._utils._rebuild_parameter",
      "torch._utils._rebuild_parameter_with_state", "torch._tensor._rebuild_from_type_v2",
      "torch.Tensor", "torch.nn.parameter.Parameter", "torch.Size", "torch.device",
      "torch.serialization._get_layout", "torch.storage.UntypedStorage", "torch.UntypedStorage",
      "torch.storage.TypedStorage",
      "pathlib.PosixPath", "pathlib.PurePosixPath", "pathlib.WindowsPath",
      "pathlib.PureWindowsPath", "pathlib.Path",
  };
  return s;
}

// The classes of a DCP .metadata, built field by field. torch before 2.3
// pickled TensorProperties from its sharded-tensor module.
const std::set<std::string>& DcpDataclasses() {
  static const std::set<std::string> s = {
      "torch.distributed.checkpoint.metadata.Metadata",
      "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
      "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
      "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
      "torch.distributed.checkpoint.metadata.TensorProperties",
      "torch.distributed.checkpoint.metadata.MetadataIndex",
      "torch.distributed.checkpoint.metadata.StorageMeta",
      "torch.distributed.checkpoint.filesystem._StorageInfo",
      "torch.distributed._shard.sharded_tensor.metadata.TensorProperties",
  };
  return s;
}

// TensorProperties' memory format enum, before and since torch 2.3.
const std::set<std::string>& MemoryFormatEnums() {
  static const std::set<std::string> s = {
      "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
      "torch.distributed._shard.sharded_tensor.metadata.MEM_FORMAT_ENCODING",
  };
  return s;
}

struct TorchName {
  const char* name;
  DType dtype;
};
constexpr TorchName kTorchDTypes[] = {
    {"float64", DType::kF64}, {"double", DType::kF64}, {"float32", DType::kF32},
    {"float", DType::kF32}, {"float16", DType::kF16}, {"half", DType::kF16},
    {"bfloat16", DType::kBF16}, {"float8_e4m3fn", DType::kF8E4M3FN},
    {"float8_e5m2", DType::kF8E5M2}, {"int64", DType::kI64}, {"long", DType::kI64},
    {"int32", DType::kI32}, {"int", DType::kI32}, {"int16", DType::kI16},
    {"short", DType::kI16}, {"int8", DType::kI8}, {"uint8", DType::kU8},
    {"bool", DType::kBool}, {"complex64", DType::kC64}, {"cfloat", DType::kC64},
    {"complex128", DType::kC128}, {"cdouble", DType::kC128}, {"uint16", DType::kU16},
    {"uint32", DType::kU32}, {"uint64", DType::kU64},
};
constexpr TorchName kStorageClasses[] = {
    {"DoubleStorage", DType::kF64}, {"FloatStorage", DType::kF32},
    {"HalfStorage", DType::kF16}, {"BFloat16Storage", DType::kBF16},
    {"LongStorage", DType::kI64}, {"IntStorage", DType::kI32}, {"ShortStorage", DType::kI16},
    {"CharStorage", DType::kI8}, {"ByteStorage", DType::kU8}, {"BoolStorage", DType::kBool},
    {"ComplexFloatStorage", DType::kC64}, {"ComplexDoubleStorage", DType::kC128},
};
// torch.<name> globals that are constants, not dtypes we can store.
const std::set<std::string> kTorchConstants = {
    "strided", "sparse_coo", "sparse_csr", "contiguous_format", "channels_last",
    "preserve_format", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "complex32",
    "qint8", "quint8", "qint32", "per_tensor_affine", "per_channel_affine",
};

bool IsTorchStorageClassName(const std::string& n) {
  if (DTypeOfStorageClass(n)) return true;
  return n == "QInt8Storage" || n == "QInt32Storage" || n == "QUInt8Storage" ||
         n == "QUInt4x2Storage" || n == "QUInt2x4Storage";
}

}  // namespace

std::optional<DType> DTypeOfStorageClass(const std::string& name) {
  for (const auto& s : kStorageClasses) {
    if (name == s.name) return s.dtype;
  }
  return std::nullopt;
}

std::optional<DType> DTypeOfTorchName(const std::string& name) {
  for (const auto& s : kTorchDTypes) {
    if (name == s.name) return s.dtype;
  }
  return std::nullopt;
}

std::string StorageClassOf(DType t) {
  for (const auto& s : kStorageClasses) {
    if (s.dtype == t) return s.name;
  }
  return "";
}

bool IsAllowedGlobal(const std::string& module, const std::string& name) {
  const std::string full = module + "." + name;
  if (AllowedGlobals().count(full) || IsDataclass(full) || IsMemoryFormatEnum(full)) return true;
  if (module == "torch") {
    return DTypeOfTorchName(name).has_value() || IsTorchStorageClassName(name) ||
           kTorchConstants.count(name) > 0;
  }
  return false;
}

bool IsDataclass(const std::string& full) { return DcpDataclasses().count(full) > 0; }

bool IsMemoryFormatEnum(const std::string& full) { return MemoryFormatEnums().count(full) > 0; }

}  // namespace ckfmt::convert
