#include "crc32.h"

#include <zlib.h>

#include <thread>
#include <vector>

namespace ckfmt::convert {
namespace {

uint32_t Serial(uint32_t crc, const uint8_t* p, size_t size) {
  uLong c = crc;
  while (size > 0) {
    uInt n = size > (1u << 30) ? (1u << 30) : static_cast<uInt>(size);
    c = ::crc32(c, p, n);
    p += n;
    size -= n;
  }
  return static_cast<uint32_t>(c);
}

}  // namespace

uint32_t Crc32(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (size < (16u << 20)) return Serial(crc, p, size);
  // Asked once: glibc reads /sys for it on every call, and small records
  // (a DCP item's zip entries) come by the ten thousand.
  static const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (cores < 2) return Serial(crc, p, size);
  // Large buffers: CRC the parts in parallel and combine.
  const size_t parts = std::min<size_t>(cores, 8);
  const size_t step = size / parts;
  std::vector<uint32_t> crcs(parts);
  std::vector<std::thread> threads;
  for (size_t i = 1; i < parts; ++i) {
    size_t len = i + 1 == parts ? size - i * step : step;
    threads.emplace_back([&, i, len] { crcs[i] = Serial(0, p + i * step, len); });
  }
  crcs[0] = Serial(0, p, step);
  for (auto& t : threads) t.join();
  uLong c = crc;
  for (size_t i = 0; i < parts; ++i) {
    size_t len = i + 1 == parts ? size - i * step : step;
    c = ::crc32_combine(c, crcs[i], static_cast<z_off_t>(len));
  }
  return static_cast<uint32_t>(c);
}

}  // namespace ckfmt::convert
