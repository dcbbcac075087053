// Codec 2, byte planes + zstd (spec/FORMAT.md §5.3).
//
// Floating-point training state compresses poorly as it lies in memory:
// the sign/exponent bytes, which repeat a lot, are interleaved with
// mantissa bytes that are close to random. Grouping byte p of every
// element into plane p puts the exponents together; each plane is then
// zstd-coded if that pays, else stored raw (mantissa planes usually are).
//
// Stored layout: u8 element_size E, u8 reserved (0), then E descriptors
// {u8 mode (0 raw, 1 zstd), u32le length}, then the E plane payloads.
#include <zstd.h>

#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ckfmt/codec.h"
#include "ckfmt/file_layout.h"
#include "zstd_context.h"

namespace ckfmt {
namespace {

constexpr size_t kMaxElement = 16;
constexpr size_t kDescriptor = 5;
size_t HeaderSize(size_t e) { return 2 + e * kDescriptor; }

// Splits n elements of size e into e planes (plane p at out + p * n).
void Split(const uint8_t* in, size_t e, size_t n, uint8_t* out) {
  if (e == 2) {
    for (size_t i = 0; i < n; ++i) {
      out[i] = in[2 * i];
      out[n + i] = in[2 * i + 1];
    }
    return;
  }
  if (e == 4) {
    for (size_t i = 0; i < n; ++i) {
      out[i] = in[4 * i];
      out[n + i] = in[4 * i + 1];
      out[2 * n + i] = in[4 * i + 2];
      out[3 * n + i] = in[4 * i + 3];
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t p = 0; p < e; ++p) out[p * n + i] = in[e * i + p];
  }
}

void Join(const uint8_t* planes, size_t e, size_t n, uint8_t* out) {
  if (e == 2) {
    for (size_t i = 0; i < n; ++i) {
      out[2 * i] = planes[i];
      out[2 * i + 1] = planes[n + i];
    }
    return;
  }
  if (e == 4) {
    for (size_t i = 0; i < n; ++i) {
      out[4 * i] = planes[i];
      out[4 * i + 1] = planes[n + i];
      out[4 * i + 2] = planes[2 * n + i];
      out[4 * i + 3] = planes[3 * n + i];
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t p = 0; p < e; ++p) out[e * i + p] = planes[p * n + i];
  }
}

// Order-0 entropy of a sample, in bits per byte: a plane near 8 is noise
// that zstd would spend time on for nothing.
double SampleEntropy(const uint8_t* p, size_t n) {
  std::array<uint32_t, 256> hist{};
  size_t step = n > 16384 ? n / 16384 : 1, count = 0;
  for (size_t i = 0; i < n; i += step, ++count) ++hist[p[i]];
  double h = 0;
  for (uint32_t c : hist) {
    if (c) {
      double f = double(c) / double(count);
      h -= f * std::log2(f);
    }
  }
  return h;
}

constexpr double kMaxUsefulEntropy = 7.6;  // bits/byte; above this, store raw

// Exponent planes are mostly literals with few long matches: a small hash
// table and long minimum match make level 1 both faster and tighter there
// (measured on bf16/fp32 training-state planes).
size_t CompressPlane(ZSTD_CCtx* cctx, int level, const uint8_t* in, size_t n, uint8_t* out,
                     size_t cap) {
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  if (level <= 1) {
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_strategy, ZSTD_fast);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_hashLog, 12);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_minMatch, 7);
  }
  return ZSTD_compress2(cctx, out, cap, in, n);
}

}  // namespace

// A plane is kept zstd-coded only when that is smaller than the raw plane,
// so the output never exceeds the header plus the raw bytes.
size_t MaxBytePlaneSize(size_t raw_size) { return HeaderSize(kMaxElement) + raw_size; }

Result<size_t> EncodeBytePlanes(int level, size_t e, const uint8_t* raw, size_t raw_size,
                                uint8_t* out, size_t out_cap) {
  if (e < 1 || e > kMaxElement || raw_size % e != 0) {
    return Status::InvalidArgument("byte planes need 1..16-byte elements dividing the chunk");
  }
  const size_t n = raw_size / e;
  thread_local std::vector<uint8_t> planes;
  ZSTD_CCtx* cctx = ThreadCompressContext();
  planes.resize(raw_size);
  Split(raw, e, n, planes.data());
  size_t pos = HeaderSize(e);
  if (out_cap < pos) return Status::Internal("byte-plane output too small");
  out[0] = static_cast<uint8_t>(e);
  out[1] = 0;
  for (size_t p = 0; p < e; ++p) {
    const uint8_t* plane = planes.data() + p * n;
    uint8_t mode = 0;
    size_t len = n;
    if (SampleEntropy(plane, n) < kMaxUsefulEntropy) {
      size_t z = CompressPlane(cctx, level, plane, n, out + pos, out_cap - pos);
      if (!ZSTD_isError(z) && z < n) {
        mode = 1;
        len = z;
      }
    }
    if (mode == 0) {
      if (out_cap - pos < n) return Status::Internal("byte-plane output too small");
      std::memcpy(out + pos, plane, n);
    }
    uint8_t* d = out + 2 + p * kDescriptor;
    d[0] = mode;
    PutU32(d + 1, static_cast<uint32_t>(len));
    pos += len;
  }
  return pos;
}

Status DecodeBytePlanes(const uint8_t* in, size_t stored_size, uint8_t* out, size_t raw_size) {
  auto bad = [](const std::string& m) { return Status::Corruption("byte-plane chunk: " + m); };
  if (stored_size < 2) return bad("shorter than its header");
  const size_t e = in[0];
  if (e < 1 || e > kMaxElement || in[1] != 0) {
    return bad("element size " + std::to_string(e) + " or reserved byte invalid");
  }
  if (raw_size % e != 0) {
    return bad("raw size " + std::to_string(raw_size) + " is not a multiple of element size " +
               std::to_string(e));
  }
  if (stored_size < HeaderSize(e)) return bad("shorter than its header");
  const size_t n = raw_size / e;
  thread_local std::vector<uint8_t> planes;
  ZSTD_DCtx* dctx = ThreadDecompressContext();
  planes.resize(raw_size);
  size_t pos = HeaderSize(e);
  for (size_t p = 0; p < e; ++p) {
    const uint8_t* d = in + 2 + p * kDescriptor;
    uint8_t mode = d[0];
    size_t len = GetU32(d + 1);
    if (len > stored_size - pos) return bad("plane " + std::to_string(p) + " overruns the chunk");
    uint8_t* plane = planes.data() + p * n;
    if (mode == 0) {
      if (len != n) return bad("raw plane " + std::to_string(p) + " has " + std::to_string(len) +
                               " bytes, expected " + std::to_string(n));
      std::memcpy(plane, in + pos, n);
    } else if (mode == 1) {
      size_t got = ZSTD_decompressDCtx(dctx, plane, n, in + pos, len);
      if (ZSTD_isError(got) || got != n) {
        return bad("plane " + std::to_string(p) + " does not decode to " + std::to_string(n) +
                   " bytes");
      }
    } else {
      return bad("plane " + std::to_string(p) + " has unknown mode " + std::to_string(mode));
    }
    pos += len;
  }
  if (pos != stored_size) {
    return bad(std::to_string(stored_size - pos) + " bytes follow the last plane");
  }
  Join(planes.data(), e, n, out);
  return Status::OK();
}

}  // namespace ckfmt
