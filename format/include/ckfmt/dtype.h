// Element types. The numeric values are the on-disk ids (spec/FORMAT.md §4).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ckfmt {

enum class DType : uint8_t {
  kF64 = 1, kF32 = 2, kF16 = 3, kBF16 = 4,
  kF8E4M3FN = 5, kF8E5M2 = 6,
  kI64 = 7, kI32 = 8, kI16 = 9, kI8 = 10,
  kU8 = 11, kBool = 12,
  kC64 = 13, kC128 = 14,
  kU16 = 15, kU32 = 16, kU64 = 17,
};

inline constexpr uint8_t kMaxDTypeId = 17;

// Bytes per element.
size_t DTypeSize(DType t);
// Canonical lower-case name as torch spells it ("float32", "bfloat16", ...).
std::string_view DTypeName(DType t);
// Inverse of DTypeName; also accepts safetensors spellings ("F32", "BF16").
std::optional<DType> DTypeFromName(std::string_view name);
// The DType with this on-disk id, if known.
std::optional<DType> DTypeFromId(uint8_t id);

}  // namespace ckfmt
