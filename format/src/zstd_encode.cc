#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_registerSequenceProducer, literal mode
#include "zstd_encode.h"

#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "byte_planes.h"
#include "zstd_context.h"
#include "zstd_literals.h"

namespace ckfmt {
namespace {

// Order-0 entropy in bits per byte: a run near 8 is noise that zstd would
// spend time on for nothing.
double Entropy(const std::array<uint32_t, 256>& counts, size_t len) {
  double h = 0;
  for (uint32_t c : counts) {
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

// Fraction of the bytes in 4-byte words (at multiples of 4) equal to an
// earlier word, each looked up in a hash table that keeps the last word of
// each hash: the share of 4-byte values (or pairs of 2-byte ones) seen
// before. Near 0 for trained values. Every slot starts at word 0, a real
// earlier word, so that the loop has no branch a sparse table would make
// mispredict. REQUIRES: len <= kSampleMax (positions fit in 16 bits).
double RecurringWordCoverage(const uint8_t* s, size_t len) {
  static_assert(kSampleMax <= 0xffff);
  constexpr int kTableLog = 12;
  std::array<uint16_t, size_t{1} << kTableLog> last{};
  size_t hits = 0;
  for (size_t i = 4; i + 4 <= len; i += 4) {
    uint32_t v, w;
    std::memcpy(&v, s + i, 4);
    const uint32_t h = (v * 0x9e3779b1u) >> (32 - kTableLog);
    std::memcpy(&w, s + last[h], 4);
    last[h] = uint16_t(i);
    hits += w == v;
  }
  return len ? double(4 * hits) / double(len) : 0;
}

constexpr double kMaxUsefulEntropy = 7.6;  // bits/byte; above this, store raw

// Levels up to this one code runs as literal-only frames unless the sample
// shows repeats worth matching (kMinRepeatCoverage); higher levels always
// run zstd's match finder, as asked.
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
// 1.5-1.9x faster without it). Such a context makes standard frames of
// Huffman-coded literals only (or RLE/raw literal blocks where those are
// smaller).
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

// The thread's context, reset to `level`; given a minimum match, with
// zstd's fast strategy, that minimum and a table of 2^hash_log entries.
ZSTD_CCtx* MatchContext(int level, int hash_log = 0, int min_match = 0) {
  ZSTD_CCtx* cctx = ThreadCompressContext();
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  if (min_match != 0) {
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_strategy, ZSTD_fast);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_hashLog, hash_log);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_minMatch, min_match);
  }
  return cctx;
}

}  // namespace

// All of a run of up to kMinSample elements, else runs of 256 elements
// spread evenly over it, an eighth of it but at least kMinSample and at most
// kSampleMax elements. Runs cost a few hundred cache lines instead of one
// miss per sampled element, and keep neighbouring bytes together for
// RepeatCoverage. Sampling a byte costs more than coding it, so small
// tensors sampled whole encoded at 1.5-1.8 GiB/s at 64 KiB against 4-7
// GiB/s at 4 MiB; from an eighth, 2.9-3.0 GiB/s, and the sizes moved by
// under 0.1% (BM_EncodeSmallChunk).
size_t GatherSample(const uint8_t* raw, size_t e, size_t n, uint8_t* out) {
  constexpr size_t kMinSample = 4096;
  std::array<uint8_t*, kMaxElement> dst{};
  auto run = [&](size_t begin, size_t count, size_t at) {
    for (size_t p = 0; p < e; ++p) dst[p] = out + p * kSampleMax + at;
    SplitPlanes(raw + begin * e, e, count, dst.data());
  };
  if (n <= kMinSample) {
    run(0, n, 0);
    return n;
  }
  constexpr size_t kRun = 256;
  const size_t runs = std::clamp(n / 8, kMinSample, kSampleMax) / kRun;
  // Runs start at multiples of 8 elements, so that codec 1's single-byte
  // "elements" keep the alignment of the values its sample compares.
  const size_t stride = (n / runs) & ~size_t{7};
  for (size_t r = 0; r < runs; ++r) run(r * stride, kRun, r * kRun);
  return runs * kRun;
}

FramePlan PlanFrame(int level, const uint8_t* sample, size_t len) {
  FramePlan plan;
  for (size_t i = 0; i < len; ++i) ++plan.counts[sample[i]];
  const bool repeats = RepeatCoverage(sample, len) >= kMinRepeatCoverage;
  plan.worth_coding = repeats || Entropy(plan.counts, len) < kMaxUsefulEntropy;
  plan.literal_only = !repeats && level <= kMaxLiteralOnlyLevel;
  return plan;
}

size_t CompressFrame(int level, const FramePlan& plan, const uint8_t* in, size_t n, uint8_t* out,
                     size_t cap) {
  if (plan.literal_only) {
    const size_t z = WriteLiteralsFrame(plan.counts.data(), in, n, out, cap);
    if (z != 0) return z;
    return ZSTD_compress2(LiteralOnlyContext(), out, cap, in, n);
  }
  // Repetitive runs at fast levels: a small table and long minimum match
  // keep level 1 fast there.
  ZSTD_CCtx* cctx = level <= 1 ? MatchContext(level, 12, 7) : MatchContext(level);
  return ZSTD_compress2(cctx, out, cap, in, n);
}

namespace {

// Codec 1 only: interleaved values that recur, such as a fixed basis or
// weights dequantized from a small grid, with few 8-byte repeats. zstd's
// fast match finder at its shortest match (4 bytes) finds them: silero-vad's
// STFT basis (10,925 distinct floats among 66,048) codes to 121 KB this
// way, against 248 KB as literals and 211 KB at plain level 1, in 5-7x the
// literals' time. A match costs some 16-24 bits, so only
// words that cost more as literals gain: small integers (4-5 bits a byte)
// coded as well as literals, 15x slower. Byte planes are not checked for
// this: the 4-byte runs of an exponent plane recur without matches paying.
constexpr double kMinRecurringWordCoverage = 0.125;
constexpr double kMinRecurringWordEntropy = 6.0;  // bits/byte of the sample

// Codes a run whose values recur: with matches, or as literals only where
// that frame is smaller (a sample can overstate what matches save). The
// literals go first: they are fast to code, and the matched frame, given
// no more room than they took, stops early where it would not be smaller.
size_t CompressRecurringValues(int level, const FramePlan& plan, const uint8_t* raw, size_t n,
                               uint8_t* out, size_t cap) {
  size_t literals = plan.worth_coding ? CompressFrame(level, plan, raw, n, out, cap) : 0;
  if (ZSTD_isError(literals)) literals = 0;  // none to keep
  thread_local std::vector<uint8_t> matched;
  matched.resize(literals != 0 ? literals - 1 : cap);
  ZSTD_CCtx* cctx = MatchContext(level, 14, 4);  // 2^14 entries: room for ~16K distinct values
  const size_t z = ZSTD_compress2(cctx, matched.data(), matched.size(), raw, n);
  if (ZSTD_isError(z)) return literals != 0 ? literals : z;  // too big, or an error to report
  std::memcpy(out, matched.data(), z);
  return z;
}

}  // namespace

size_t CompressZstdChunk(int level, const uint8_t* raw, size_t n, uint8_t* out, size_t cap) {
  if (level <= kMaxLiteralOnlyLevel) {
    thread_local std::vector<uint8_t> sample(kSampleMax);
    const size_t sampled = GatherSample(raw, 1, n, sample.data());
    const FramePlan plan = PlanFrame(level, sample.data(), sampled);
    if (plan.literal_only) {
      if (RecurringWordCoverage(sample.data(), sampled) >= kMinRecurringWordCoverage &&
          Entropy(plan.counts, sampled) >= kMinRecurringWordEntropy) {
        return CompressRecurringValues(level, plan, raw, n, out, cap);
      }
      if (plan.worth_coding) return CompressFrame(level, plan, raw, n, out, cap);
      // Noise: no code pays; libzstd stores it raw without looking for matches.
      return ZSTD_compress2(LiteralOnlyContext(), out, cap, raw, n);
    }
  }
  // Repeats, or a level that asks for the match search: zstd as asked.
  return ZSTD_compressCCtx(ThreadCompressContext(), out, cap, raw, n, level);
}

}  // namespace ckfmt
