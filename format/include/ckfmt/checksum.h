// The one checksum of the format: XXH3 64-bit, seed 0.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckfmt {

uint64_t Checksum(const void* data, size_t size);

}  // namespace ckfmt
