// The fast walk of Huffman streams by code length alone: what the
// literals check (zstd_literals_check.cc) shares with its AVX-512 kernel
// (zstd_literals_walk.cc). Internal to the format library.
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

// Whether this build and this CPU run WalkRoundsAvx512 (AVX-512 F, BW,
// VBMI and VPOPCNTDQ).
bool Avx512WalkAvailable();

// Whether the literals check uses WalkRoundsAvx512: where available,
// unless a test has turned it off to compare it with the scalar walk.
void SetAvx512WalkEnabled(bool enabled);
bool UseAvx512Walk();

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

}  // namespace ckfmt
