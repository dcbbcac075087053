// CRC-32 (zip's polynomial), incremental: Crc32(Crc32(0, a), b) == Crc32(0, ab).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckfmt::convert {

uint32_t Crc32(uint32_t crc, const void* data, size_t size);

}  // namespace ckfmt::convert
