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
//
// Speed matters as much as size here: a compressed save must outrun the
// disk. So raw planes are split straight into the output and joined
// straight from the input (byte_planes.h, vectorized), and at fast
// levels exponent planes are coded as literal-only zstd frames, by
// ckfmt's own writer (zstd_literals.h) with a code built from the plane's
// sample, or by libzstd where that writer declines (zstd_encode.h).
// Every plane is still one standard zstd frame. Decoding, such frames go
// a block at a time, each block joined while it is in cache
// (zstd_block_decoder.h): a decode then needs 128 KiB of scratch per coded
// plane, where decoding whole planes needed the chunk's size.
#include <zstd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "byte_planes.h"
#include "ckfmt/codec.h"
#include "ckfmt/file_layout.h"
#include "zstd_block_decoder.h"
#include "zstd_encode.h"
#include "zstd_frame.h"

namespace ckfmt {
namespace {

constexpr size_t kDescriptor = 5;
size_t HeaderSize(size_t e) { return 2 + e * kDescriptor; }

// Joins the planes of a chunk whose descriptors have been checked into
// `out`, decoding its zstd planes a block at a time so that each block is
// joined while still in cache (zstd_block_decoder.h). False where a zstd
// plane is not a literals-only frame or does not decode: then the caller
// decodes the chunk plane by plane, which words what is wrong.
bool JoinBlockByBlock(const uint8_t* in, const std::array<size_t, kMaxElement>& offset, size_t e,
                      size_t n, uint8_t* out) {
  struct Coded {
    size_t plane;
    uint8_t* block;
    size_t have = 0, used = 0;  // bytes of `block` decoded, and joined
  };
  thread_local std::vector<std::unique_ptr<LiteralsOnlyBlockDecoder>> decoders;
  thread_local std::vector<uint8_t> blocks;
  std::array<Coded, kMaxElement> coded;
  size_t c = 0;
  for (size_t p = 0; p < e; ++p) {
    const uint8_t* d = in + 2 + p * kDescriptor;
    if (d[0] == 0) continue;
    if (decoders.size() <= c) decoders.push_back(std::make_unique<LiteralsOnlyBlockDecoder>());
    if (!decoders[c]->Start(in + offset[p], GetU32(d + 1), n)) return false;
    coded[c++].plane = p;
  }
  if (c == 0) return false;  // nothing to decode: a plain join does it
  if (blocks.size() < c * kZstdBlockMax) blocks.resize(c * kZstdBlockMax);
  for (size_t k = 0; k < c; ++k) coded[k].block = blocks.data() + k * kZstdBlockMax;

  std::array<const uint8_t*, kMaxElement> src{};
  for (size_t done = 0; done < n;) {
    // Join as many elements as every coded plane has decoded: a block of
    // each, as a rule, since writers cut every plane's blocks alike.
    size_t step = n - done;
    for (size_t k = 0; k < c; ++k) {
      Coded& z = coded[k];
      if (z.used == z.have) {
        const int64_t got = decoders[k]->Next(z.block);
        if (got <= 0) return false;
        z.have = size_t(got);
        z.used = 0;
      }
      step = std::min(step, z.have - z.used);
    }
    for (size_t p = 0; p < e; ++p) {
      if (in[2 + p * kDescriptor] == 0) src[p] = in + offset[p] + done;  // a raw plane
    }
    for (size_t k = 0; k < c; ++k) {
      src[coded[k].plane] = coded[k].block + coded[k].used;
      coded[k].used += step;
    }
    JoinPlanes(src.data(), e, step, out + done * e);
    done += step;
  }
  // Start() counted n bytes in all; the frames' ends (checksums) remain.
  for (size_t k = 0; k < c; ++k) {
    if (coded[k].used != coded[k].have || decoders[k]->Next(coded[k].block) != 0) return false;
  }
  return true;
}

// Whether the zstd plane in[0, len) decodes to `n` bytes, found by
// decoding it a block at a time into scratch that stays in cache. Where the
// plane's codes are short, as in exponent planes, this takes fewer cycles
// than walking the codes by length (zstd_literals_check.h), which reads one
// code a lookup where the decoder reads up to four.
bool DecodesBlockByBlock(const uint8_t* in, size_t len, size_t n) {
  thread_local LiteralsOnlyBlockDecoder decoder;
  thread_local std::vector<uint8_t> block(kZstdBlockMax);
  if (!decoder.Start(in, len, n)) return false;
  for (int64_t got; (got = decoder.Next(block.data())) != 0;) {
    if (got < 0) return false;
  }
  return true;
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
  const size_t header = HeaderSize(e);
  if (out_cap < header) return Status::Internal("byte-plane output too small");
  out[0] = static_cast<uint8_t>(e);
  out[1] = 0;

  // Decide from a sample how to code each plane. The raw planes before the
  // first zstd candidate have fixed places in the output and are split
  // straight there; the others go through a scratch buffer.
  thread_local std::vector<uint8_t> sample, scratch;
  sample.resize(e * kSampleMax);
  const size_t sampled = GatherSample(raw, e, n, sample.data());
  std::array<FramePlan, kMaxElement> plan;
  std::array<uint8_t*, kMaxElement> dst{};
  bool direct = true;
  for (size_t p = 0; p < e; ++p) {
    plan[p] = PlanFrame(level, sample.data() + p * kSampleMax, sampled);
    direct = direct && !plan[p].worth_coding && header + (p + 1) * n <= out_cap;
    if (direct) {
      dst[p] = out + header + p * n;
    } else {
      if (scratch.size() < raw_size) scratch.resize(raw_size);
      dst[p] = scratch.data() + p * n;
    }
  }
  SplitPlanes(raw, e, n, dst.data());

  size_t pos = header;
  for (size_t p = 0; p < e; ++p) {
    uint8_t mode = 0;
    size_t len = n;
    if (plan[p].worth_coding) {
      size_t z = CompressFrame(level, plan[p], dst[p], n, out + pos, out_cap - pos);
      if (!ZSTD_isError(z) && z < n) {
        mode = 1;
        len = z;
      }
    }
    if (mode == 0 && n != 0 && dst[p] != out + pos) {  // empty planes may be null
      if (out_cap - pos < n) return Status::Internal("byte-plane output too small");
      std::memcpy(out + pos, dst[p], n);
    }
    uint8_t* d = out + 2 + p * kDescriptor;
    d[0] = mode;
    PutU32(d + 1, static_cast<uint32_t>(len));
    pos += len;
  }
  return pos;
}

Status DecodeBytePlanes(const uint8_t* in, size_t stored_size, uint8_t* out, size_t raw_size) {
  auto bad = [](const std::string& m) {
    return Status::Corruption("byte-plane chunk: " + m + SpecRule("D5"));
  };
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

  // Check every descriptor before decoding anything.
  std::array<size_t, kMaxElement> offset{};
  size_t pos = HeaderSize(e);
  for (size_t p = 0; p < e; ++p) {
    const uint8_t* d = in + 2 + p * kDescriptor;
    uint8_t mode = d[0];
    size_t len = GetU32(d + 1);
    if (mode > 1) {
      return bad("plane " + std::to_string(p) + " has unknown mode " + std::to_string(mode));
    }
    if (len > stored_size - pos) return bad("plane " + std::to_string(p) + " overruns the chunk");
    if (mode == 0 && len != n) {
      return bad("raw plane " + std::to_string(p) + " has " + std::to_string(len) +
                 " bytes, expected " + std::to_string(n));
    }
    offset[p] = pos;
    pos += len;
  }
  if (pos != stored_size) {
    return bad(std::to_string(stored_size - pos) + " bytes follow the last plane");
  }

  if (out && JoinBlockByBlock(in, offset, e, n, out)) return Status::OK();

  // Raw planes are joined straight from the input; zstd planes are decoded
  // into scratch first, or, where nothing is joined, checked a block at a
  // time where that can tell.
  std::array<const uint8_t*, kMaxElement> src{};
  thread_local std::vector<uint8_t> scratch;
  for (size_t p = 0; p < e; ++p) {
    const uint8_t* d = in + 2 + p * kDescriptor;
    if (d[0] == 0) {
      src[p] = in + offset[p];
      continue;
    }
    if (!out && DecodesBlockByBlock(in + offset[p], GetU32(d + 1), n)) continue;
    if (scratch.size() < raw_size) scratch.resize(raw_size);
    uint8_t* plane = scratch.data() + p * n;
    std::string problem = DecodeOneZstdFrame(in + offset[p], GetU32(d + 1), plane, n);
    if (!problem.empty()) return bad("plane " + std::to_string(p) + " " + problem);
    src[p] = plane;
  }
  if (out) JoinPlanes(src.data(), e, n, out);
  return Status::OK();
}

}  // namespace ckfmt
