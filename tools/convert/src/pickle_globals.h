// Which pickle globals the unpickler accepts, and torch's names for dtypes
// and legacy storage classes.
#pragma once

#include <optional>
#include <string>

#include "ckfmt/dtype.h"

namespace ckfmt::convert {

// True if module.name is on the whitelist.
bool IsAllowedGlobal(const std::string& module, const std::string& name);

// The dtype of a legacy typed storage class ("FloatStorage" -> F32).
std::optional<DType> DTypeOfStorageClass(const std::string& name);
// The dtype a torch.<name> global stands for ("float32", "float", "half" ...).
std::optional<DType> DTypeOfTorchName(const std::string& name);
// The legacy storage class name for a dtype, or "" if it has none.
std::string StorageClassOf(DType t);
// True for the DCP metadata classes that NEWOBJ or copyreg._reconstructor
// may instantiate (as inert kInstance records); `full` is "module.name".
bool IsDataclass(const std::string& full);
// True for TensorProperties' memory format enum (its class before and
// since torch 2.3), whose call yields its argument.
bool IsMemoryFormatEnum(const std::string& full);

}  // namespace ckfmt::convert
