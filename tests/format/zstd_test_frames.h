// Inputs and frames that the zstd tests of format/ share: training-like
// values as bytes, and frames made by libzstd or by hand.
#pragma once

#include <zstd.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace ckfmt::test {

using Bytes = std::vector<uint8_t>;

// bf16 weights ~N(0, 0.02) or fp32 moments ~N(0, 1e-3), as bytes.
inline Bytes TrainingBytes(size_t n, bool bf16, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, bf16 ? 0.02f : 1e-3f);
  Bytes b(n);
  for (size_t i = 0; i + 4 <= n; i += 4) {
    const float v = dist(rng), w = dist(rng);
    uint32_t x, y;
    std::memcpy(&x, &v, 4);
    std::memcpy(&y, &w, 4);
    const uint32_t word = bf16 ? (x >> 16) | (y & 0xffff0000u) : x;
    std::memcpy(&b[i], &word, 4);
  }
  return b;
}

// One frame of `in` by libzstd at `level`; `checksum` adds a
// Content_Checksum. Empty where libzstd fails.
inline Bytes Compress(const Bytes& in, int level, bool checksum = false) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, checksum ? 1 : 0);
  Bytes out(ZSTD_compressBound(in.size()));
  const size_t n = ZSTD_compress2(cctx, out.data(), out.size(), in.data(), in.size());
  ZSTD_freeCCtx(cctx);
  out.resize(ZSTD_isError(n) ? 0 : n);
  return out;
}

// A single-segment frame of `in` (RFC 8878 §3.1.1) cut into raw blocks of
// the sizes given, in turn, then RLE blocks where `rle` (each of its
// block's size, repeating its first byte; the caller makes `in` fit).
// REQUIRES: the sizes sum to in.size(); each is at most 128 KiB.
inline Bytes HandMadeFrame(const Bytes& in, const std::vector<size_t>& sizes, bool rle = false) {
  Bytes f = {0x28, 0xb5, 0x2f, 0xfd, 0xe0};  // magic; single segment, 8-byte content size
  for (int i = 0; i < 8; ++i) f.push_back(uint8_t(uint64_t(in.size()) >> (8 * i)));
  size_t pos = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const uint32_t header =
        uint32_t(k + 1 == sizes.size()) | uint32_t(rle ? 1 : 0) << 1 | uint32_t(sizes[k]) << 3;
    for (int i = 0; i < 3; ++i) f.push_back(uint8_t(header >> (8 * i)));
    if (rle) {
      f.push_back(in[pos]);
    } else {
      f.insert(f.end(), in.begin() + long(pos), in.begin() + long(pos + sizes[k]));
    }
    pos += sizes[k];
  }
  return f;
}

}  // namespace ckfmt::test
