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
// sample, or by libzstd where that writer declines (LiteralOnlyContext).
// Every plane is still one standard zstd frame.
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_registerSequenceProducer, literal mode
#include <zstd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "byte_planes.h"
#include "ckfmt/codec.h"
#include "ckfmt/file_layout.h"
#include "zstd_context.h"
#include "zstd_frame.h"
#include "zstd_literals.h"
#include "zstd_literals_check.h"

namespace ckfmt {
namespace {

constexpr size_t kMaxElement = 16;
constexpr size_t kDescriptor = 5;
size_t HeaderSize(size_t e) { return 2 + e * kDescriptor; }

// A sample of each plane, to decide how to code each plane and to shape
// the Huffman codes: all of a chunk of up to kMinSample elements, else runs
// of 256 elements spread evenly over the chunk, an eighth of it but at
// least kMinSample and at most kSample elements. Runs cost a few hundred
// cache lines instead of one miss per sampled element, and keep
// neighbouring bytes together for RepeatCoverage. Sampling a byte costs
// more than coding it, so small tensors sampled whole encoded at 1.5-1.8
// GiB/s at 64 KiB against 4-7 GiB/s at 4 MiB; from an eighth, 2.9-3.0
// GiB/s, and the sizes moved by under 0.1% (BM_EncodeSmallChunk).
// Returns the sample's length per plane; plane p's sample is at
// out + p * kSample.
constexpr size_t kSample = 16384, kMinSample = 4096;
size_t GatherSample(const uint8_t* raw, size_t e, size_t n, uint8_t* out) {
  std::array<uint8_t*, kMaxElement> dst{};
  auto run = [&](size_t begin, size_t count, size_t at) {
    for (size_t p = 0; p < e; ++p) dst[p] = out + p * kSample + at;
    SplitPlanes(raw + begin * e, e, count, dst.data());
  };
  if (n <= kMinSample) {
    run(0, n, 0);
    return n;
  }
  constexpr size_t kRun = 256;
  const size_t runs = std::clamp(n / 8, kMinSample, kSample) / kRun;
  for (size_t r = 0; r < runs; ++r) run(r * (n / runs), kRun, r * kRun);
  return runs * kRun;
}

using Histogram = std::array<uint32_t, 256>;

Histogram Count(const uint8_t* s, size_t len) {
  Histogram hist{};
  for (size_t i = 0; i < len; ++i) ++hist[s[i]];
  return hist;
}

// Order-0 entropy in bits per byte: a plane near 8 is noise that zstd
// would spend time on for nothing.
double Entropy(const Histogram& hist, size_t len) {
  double h = 0;
  for (uint32_t c : hist) {
    if (c) {
      double f = double(c) / double(len);
      h -= f * std::log2(f);
    }
  }
  return h;
}

// Fraction of the bytes that 8-byte repeats cover, found the way a fast LZ
// match finder would (one candidate per position from a hash table), at
// every 4th position to keep it cheap. Near 0 for trained values; high for
// patterned tensors (aranges, masks, repeated rows), where matches gain far
// more than Huffman coding alone.
double RepeatCoverage(const uint8_t* s, size_t len) {
  constexpr uint32_t kNone = ~0u;
  constexpr size_t kStep = 4;
  std::array<uint32_t, 2048> last;
  last.fill(kNone);
  size_t covered = 0;
  for (size_t i = 0; i + 8 <= len;) {
    uint64_t v, w;
    std::memcpy(&v, s + i, 8);
    const uint32_t h = uint32_t((v * 0x9e3779b97f4a7c15ull) >> 53);
    const uint32_t c = last[h];
    last[h] = uint32_t(i);
    if (c != kNone && (std::memcpy(&w, s + c, 8), w == v)) {
      covered += 8;
      i += 8;
    } else {
      i += kStep;
    }
  }
  return len ? double(covered) / double(len) : 0;
}

constexpr double kMaxUsefulEntropy = 7.6;  // bits/byte; above this, store raw

// Levels up to this one code planes as literal-only frames unless the
// sample shows repeats worth matching (kMinRepeatCoverage); higher levels
// always run zstd's match finder, as asked.
constexpr int kMaxLiteralOnlyLevel = 2;
constexpr double kMinRepeatCoverage = 0.125;

#if ZSTD_VERSION_NUMBER >= 10504
// A sequence producer that finds no matches: the whole block is literals.
size_t NoMatches(void*, ZSTD_Sequence* seqs, size_t cap, const void*, size_t size, const void*,
                 size_t, int, size_t) {
  if (size == 0) return 0;
  if (cap < 1) return ZSTD_SEQUENCE_PRODUCER_ERROR;
  seqs[0] = ZSTD_Sequence{0, static_cast<unsigned>(size), 0, 0};
  return 1;
}
#endif

// Exponent planes of trained values are close to i.i.d. bytes: matches are
// rare and short, so zstd's match search costs most of the time and buys
// nothing (measured on the exponent planes of bf16 weights and fp32 AdamW
// moments against level 1: 4-6% smaller, coded 2.6-3.2x and decoded
// 1.5-1.9x faster without it). Such a context makes standard frames of Huffman-coded
// literals only (or RLE/raw literal blocks where those are smaller).
ZSTD_CCtx* LiteralOnlyContext() {
  struct Free {
    void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
  };
  thread_local std::unique_ptr<ZSTD_CCtx, Free> ctx([] {
    ZSTD_CCtx* c = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 1);
    ZSTD_CCtx_setParameter(c, ZSTD_c_literalCompressionMode, ZSTD_ps_enable);
    ZSTD_CCtx_setParameter(c, ZSTD_c_enableLongDistanceMatching, ZSTD_ps_disable);
#if ZSTD_VERSION_NUMBER >= 10504
    ZSTD_registerSequenceProducer(c, nullptr, NoMatches);
#else
    // Without a sequence producer: a tiny hash table probed sparsely.
    ZSTD_CCtx_setParameter(c, ZSTD_c_strategy, ZSTD_fast);
    ZSTD_CCtx_setParameter(c, ZSTD_c_hashLog, 8);
    ZSTD_CCtx_setParameter(c, ZSTD_c_minMatch, 7);
    ZSTD_CCtx_setParameter(c, ZSTD_c_targetLength, 64);
#endif
    return c;
  }());
  return ctx.get();
}

// Codes a plane as one zstd frame. `sample` is the histogram of the
// plane's sample, which shapes the code of a literal-only frame; libzstd
// codes those only where ckfmt's own writer declines.
size_t CompressPlane(int level, bool literal_only, const Histogram& sample, const uint8_t* in,
                     size_t n, uint8_t* out, size_t cap) {
  if (literal_only) {
    const size_t z = WriteLiteralsFrame(sample.data(), in, n, out, cap);
    if (z != 0) return z;
    return ZSTD_compress2(LiteralOnlyContext(), out, cap, in, n);
  }
  ZSTD_CCtx* cctx = ThreadCompressContext();
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  if (level <= 1) {
    // Repetitive planes at fast levels: a small table and long minimum
    // match keep level 1 fast there.
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
  const size_t header = HeaderSize(e);
  if (out_cap < header) return Status::Internal("byte-plane output too small");
  out[0] = static_cast<uint8_t>(e);
  out[1] = 0;

  // Decide from a sample how to code each plane. The raw planes before the
  // first zstd candidate have fixed places in the output and are split
  // straight there; the others go through a scratch buffer.
  thread_local std::vector<uint8_t> sample, scratch;
  sample.resize(e * kSample);
  const size_t sampled = GatherSample(raw, e, n, sample.data());
  std::array<bool, kMaxElement> try_zstd{}, literal_only{};
  std::array<Histogram, kMaxElement> hist;
  std::array<uint8_t*, kMaxElement> dst{};
  bool direct = true;
  for (size_t p = 0; p < e; ++p) {
    const uint8_t* s = sample.data() + p * kSample;
    const bool repeats = RepeatCoverage(s, sampled) >= kMinRepeatCoverage;
    hist[p] = Count(s, sampled);
    try_zstd[p] = repeats || Entropy(hist[p], sampled) < kMaxUsefulEntropy;
    literal_only[p] = !repeats && level <= kMaxLiteralOnlyLevel;
    direct = direct && !try_zstd[p] && header + (p + 1) * n <= out_cap;
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
    if (try_zstd[p]) {
      size_t z = CompressPlane(level, literal_only[p], hist[p], dst[p], n, out + pos,
                               out_cap - pos);
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

  // Raw planes are joined straight from the input; zstd planes are decoded
  // into scratch first, or, where nothing is joined, checked without
  // decoding where that can tell.
  std::array<const uint8_t*, kMaxElement> src{};
  thread_local std::vector<uint8_t> scratch;
  for (size_t p = 0; p < e; ++p) {
    const uint8_t* d = in + 2 + p * kDescriptor;
    if (d[0] == 0) {
      src[p] = in + offset[p];
      continue;
    }
    if (!out && LiteralsOnlyFrameDecodes(in + offset[p], GetU32(d + 1), n)) continue;
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
