#include "ckfmt/dtype.h"

#include <array>

namespace ckfmt {
namespace {

struct DTypeInfo {
  DType type;
  size_t size;
  std::string_view name;
  std::string_view safetensors_name;
};

constexpr std::array<DTypeInfo, 17> kInfo = {{
    {DType::kF64, 8, "float64", "F64"},
    {DType::kF32, 4, "float32", "F32"},
    {DType::kF16, 2, "float16", "F16"},
    {DType::kBF16, 2, "bfloat16", "BF16"},
    {DType::kF8E4M3FN, 1, "float8_e4m3fn", "F8_E4M3"},
    {DType::kF8E5M2, 1, "float8_e5m2", "F8_E5M2"},
    {DType::kI64, 8, "int64", "I64"},
    {DType::kI32, 4, "int32", "I32"},
    {DType::kI16, 2, "int16", "I16"},
    {DType::kI8, 1, "int8", "I8"},
    {DType::kU8, 1, "uint8", "U8"},
    {DType::kBool, 1, "bool", "BOOL"},
    {DType::kC64, 8, "complex64", "C64"},
    {DType::kC128, 16, "complex128", "C128"},
    {DType::kU16, 2, "uint16", "U16"},
    {DType::kU32, 4, "uint32", "U32"},
    {DType::kU64, 8, "uint64", "U64"},
}};

const DTypeInfo& Info(DType t) {
  // Ids are 1..17 in table order.
  return kInfo[static_cast<uint8_t>(t) - 1];
}

}  // namespace

size_t DTypeSize(DType t) { return Info(t).size; }
std::string_view DTypeName(DType t) { return Info(t).name; }

std::optional<DType> DTypeFromName(std::string_view name) {
  for (const auto& i : kInfo) {
    if (i.name == name || i.safetensors_name == name) return i.type;
  }
  return std::nullopt;
}

std::optional<DType> DTypeFromId(uint8_t id) {
  if (id < 1 || id > kMaxDTypeId) return std::nullopt;
  return kInfo[id - 1].type;
}

}  // namespace ckfmt
