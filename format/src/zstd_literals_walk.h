// The fast walk of Huffman streams by code length alone: what the
// literals check (zstd_literals_check.cc) shares with its vector kernels,
// AVX-512 (zstd_literals_walk.cc) and AVX2 (zstd_literals_walk_avx2.cc).
// Internal to the format library.
#pragma once

#include <cstddef>
#include <cstdint>

#include "zstd_huffman.h"  // kMaxCodeBits

namespace ckfmt {

// Where a fast walk of a stream stands: the 8 bytes at `ip` hold the next
// bits, `used` (at most 7) of them already read from the top.
struct Position {
  const uint8_t* ip;
  uint32_t used;
};

// How far below a stream's next bytes the vector kernels ask for its bytes
// ahead of use, every 8th round (a round reads at most 7 bytes, so no
// 64-byte line is skipped): a check reads chunks fresh from the disk, and
// 32 or 64 streams read backward are more than the hardware prefetcher
// follows.
constexpr int kPrefetchAhead = 256;
constexpr size_t kPrefetchEvery = 8;

// A code's length by its next 11 bits, as two tables small enough for
// vector registers: `top[p]` is the length of every code whose first 7 bits
// are p, where all 16 windows of that prefix give one length; else it is
// 0x80 | slot << 4, and `low[slot * 16 + q]` is the length of the code
// whose 11 bits are p << 4 | q. A canonical code of at most 11 bits has at
// most three such prefixes (those where codes of 8 to 11 bits meet), so
// four slots always do; a table that needs more is not a Huffman code's.
struct SplitLengths {
  uint8_t top[128];
  uint8_t low[64];
};

// Splits `lengths` (2^11 entries, one per 11-bit window) into `out`.
// False where it needs more than four slots.
bool SplitLengthTable(const uint8_t* lengths, SplitLengths& out);

// The same lengths as thresholds, which AVX2 compares sixteen at a time: a
// canonical code gives its longest codes the lowest windows (§4.2.1.3), so
// a code's length falls stepwise as its window x grows. Where it falls at
// a multiple of 128, a 16-entry table by x's top four bits (vpshufb) takes
// the step; elsewhere a compare does:
//   length(x) = coarse[x >> 7] - (the count of i < fines with fine[i] <= x)
// A fall of d lengths is d equal thresholds. At most kMax: codes run from
// 11 bits to 1. fine[fines, kMax) are kWindows, which no window reaches, so
// a kernel may compare with more thresholds than there are.
constexpr uint32_t kWindows = 1u << kMaxCodeBits;
struct LengthThresholds {
  static constexpr int kMax = kMaxCodeBits - 1;
  uint8_t coarse[16];
  uint16_t fine[kMax];
  int fines;
};

// Turns `lengths` (kWindows entries) into `out`. False where a length
// rises from one window to the next (no canonical code's table).
bool ThresholdsOf(const uint8_t* lengths, LengthThresholds& out);

// The walks there are, slowest first: the scalar loop, WalkRoundsAvx2 and
// WalkRoundsAvx512.
enum class WalkKind { kScalar, kAvx2, kAvx512 };

// Whether this build and this CPU run WalkRoundsAvx512 (AVX-512 F, BW,
// VBMI and VPOPCNTDQ), and WalkRoundsAvx2.
bool Avx512WalkAvailable();
bool Avx2WalkAvailable();
inline bool WalkAvailable(WalkKind walk) {
  return walk == WalkKind::kScalar ||
         (walk == WalkKind::kAvx2 ? Avx2WalkAvailable() : Avx512WalkAvailable());
}

// The walk the literals check uses: the fastest this CPU runs, or none
// faster than `widest`, which a test sets to compare the walks.
void LimitWalk(WalkKind widest);
WalkKind CurrentWalk();

// Runs `rounds` rounds of five codes on each of 8 * kVectors streams
// (2 * kVectors blocks' four) that share the code `t`, exactly as the
// scalar walk does (see RunRounds in zstd_literals_check.cc): per round,
// the 8 bytes at `ip` with a 1 set below them, shifted past `used`, then
// past five codes, and `ip` and `used` moved past the bits read. kVectors
// is 8 (every stream's bits in a register, the fastest) or 4 (for frames'
// last blocks); fewer cannot hide the lookups' latency.
// REQUIRES: Avx512WalkAvailable(); every 8-byte load of the rounds lies
// inside its stream (SafeRounds).
template <int kVectors>
void WalkRoundsAvx512(const SplitLengths& t, Position* pos, size_t rounds);

// The same rounds on each of 16 * kGroups streams (4 * kGroups blocks' four)
// that share the code `t`; kGroups is 4, or 2 for frames' last blocks
// (fewer cannot hide the latency of a code's compares).
// REQUIRES: Avx2WalkAvailable(); every 8-byte load of the rounds lies
// inside its stream (SafeRounds).
template <int kGroups>
void WalkRoundsAvx2(const LengthThresholds& t, Position* pos, size_t rounds);

}  // namespace ckfmt
