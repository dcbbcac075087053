// See zstd_huffman_decode.h. Streams are read as the literals check walks
// them (zstd_literals_check.cc): in rounds of five lookups from one 8-byte
// load, a 1 set below the loaded bits to tell, after the shifts, how many
// bits the round read.
#include "zstd_huffman_decode.h"

#include <algorithm>
#include <cstring>

namespace ckfmt {
namespace {

constexpr int kLookupsPerRound = 5;  // at most 8 + 5 * 11 = 63 bits a round
// The bytes one round may write past its start: its last store, of 8 bytes,
// begins at most (kLookupsPerRound - 1) * kMaxSymbolsPerLookup bytes in.
constexpr size_t kRoundReach = (kLookupsPerRound - 1) * kMaxSymbolsPerLookup + 8;
constexpr size_t kRoundAdvance = kLookupsPerRound * kMaxSymbolsPerLookup;

// Where a stream's decoding stands: the 8 bytes at `ip` hold its next bits,
// `used` (at most 8) of them already read from the top; symbols go to `out`.
struct Cursor {
  const uint8_t* ip;
  uint32_t used;
  uint8_t* out;
};

// Bits of a stream's last byte above its first code: zeros and the start
// mark. REQUIRES: the last byte is not 0 (CutHuffmanStreams).
uint32_t MarkBits(const HuffmanStream& s) { return 8 - uint32_t(HighBit(s.src[s.size - 1])); }

// Rounds that keep the stream's loads inside it (each moves `ip` down by at
// most 7 bytes, and `ip` stays at or above src) and its stores below `end`.
size_t SafeRounds(const HuffmanStream& s, const Cursor& c, const uint8_t* end) {
  const size_t room = size_t(end - c.out);
  if (c.ip < s.src + 7 || room < kRoundReach) return 0;
  return std::min(size_t(c.ip - s.src - 7) / 7 + 1, (room - kRoundReach) / kRoundAdvance + 1);
}

// Runs `rounds` rounds on each of kWays streams, interleaved so that their
// lookups overlap. An entry's low byte is the shift past its codes: a shift
// by the whole entry takes its low 6 bits. Each lookup stores 8 bytes, of
// which the next lookup's store overwrites what is not the entry's symbols.
template <int kWays>
__attribute__((always_inline)) inline void DecodeRounds(const uint64_t* multi, Cursor* c,
                                                        size_t rounds) {
  const uint8_t* ip[kWays];
  uint32_t used[kWays];
  uint8_t* out[kWays];
  for (int g = 0; g < kWays; ++g) ip[g] = c[g].ip, used[g] = c[g].used, out[g] = c[g].out;
  for (size_t r = 0; r < rounds; ++r) {
    uint64_t bits[kWays];
#pragma GCC unroll 4
    for (int g = 0; g < kWays; ++g) bits[g] = (LoadLE64(ip[g]) | 1) << used[g];
#pragma GCC unroll 5
    for (int k = 0; k < kLookupsPerRound; ++k) {
#pragma GCC unroll 4
      for (int g = 0; g < kWays; ++g) {
        const uint64_t e = multi[bits[g] >> (64 - kMaxCodeBits)];
        bits[g] <<= e & 63;
        StoreLE64(out[g], e >> 16);
        out[g] += (e >> 8) & 0xff;
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < kWays; ++g) {
      const uint32_t u = uint32_t(__builtin_ctzll(bits[g]));
      ip[g] -= u >> 3;
      used[g] = u & 7;
    }
  }
  for (int g = 0; g < kWays; ++g) c[g] = {ip[g], used[g], out[g]};
}

template <int kWays>
void Rounds(const uint64_t* multi, Cursor* c, size_t rounds) {
  RunWithBmi2<DecodeRounds<kWays>>(multi, c, rounds);
}

// Decodes the rest of stream `s` into [out, end) one symbol at a time,
// exactly: `top` bytes of it, [src, src + top), hold the unread bits, the
// first `used` bits from the top of them already read.
bool FinishStream(const uint16_t* single, const HuffmanStream& s, size_t top, uint32_t used,
                  uint8_t* out, uint8_t* end) {
  while (top >= 8 && out < end) {  // 8 whole bytes hold the next bits
    const uint16_t e = single[(LoadLE64(s.src + top - 8) << used) >> (64 - kMaxCodeBits)];
    *out++ = uint8_t(e);
    used += e >> 8;
    top -= used >> 3;
    used &= 7;
  }
  if (top >= 8) return false;  // every symbol decoded, and 56 or more bits unread
  // The last bytes, zeros below them (§4.2.2), and a count of bits left.
  uint64_t bits = 0;
  for (size_t i = 0; i < top; ++i) bits |= uint64_t(s.src[i]) << (8 * (8 - top + i));
  bits <<= used;
  uint64_t left = 8 * uint64_t(top) - used;
  for (; out < end; ++out) {
    const uint16_t e = single[bits >> (64 - kMaxCodeBits)];
    if ((e >> 8) > left) return false;  // the code runs past the stream's first bit
    *out = uint8_t(e);
    bits <<= e >> 8;
    left -= e >> 8;
  }
  return left == 0;
}

// Stream `s` from `c` on: rounds while they are safe, then exactly.
bool ContinueStream(const HuffmanDecodeTable& t, const HuffmanStream& s, Cursor c, uint8_t* end) {
  for (size_t r; (r = SafeRounds(s, c, end)) > 0;) Rounds<1>(t.multi.data(), &c, r);
  return FinishStream(t.single.data(), s, size_t(c.ip + 8 - s.src), c.used, c.out, end);
}

bool DecodeStream(const HuffmanDecodeTable& t, const HuffmanStream& s, uint8_t* out) {
  if (s.size < 8) return FinishStream(t.single.data(), s, s.size, MarkBits(s), out, out + s.count);
  return ContinueStream(t, s, {s.src + s.size - 8, MarkBits(s), out}, out + s.count);
}

}  // namespace

void FillDecodeTable(const HuffmanCode& code, HuffmanDecodeTable& t) {
  ForEachCode(code, [&](int symbol, int length, uint32_t first, uint32_t count) {
    std::fill_n(t.single.begin() + first, count, uint16_t(symbol | length << 8));
  });
  constexpr uint32_t kMask = (1u << kMaxCodeBits) - 1;
  for (uint32_t v = 0; v <= kMask; ++v) {
    uint64_t bits = 0, n = 0, symbols = 0;
    for (; n < kMaxSymbolsPerLookup; ++n) {
      // The next code lies in the bits of v left after `bits`, zeros below
      // them: where it is no longer than those bits, they alone decide it.
      const uint16_t e = t.single[(v << bits) & kMask];
      if (bits + (e >> 8) > kMaxCodeBits) break;
      symbols |= uint64_t(e & 0xff) << (8 * n);
      bits += e >> 8;
    }
    t.multi[v] = bits | n << 8 | symbols << 16;
  }
}

bool DecodeHuffmanStreams(const HuffmanDecodeTable& t, const HuffmanStream* s, int streams,
                          uint8_t* out) {
  if (streams == 1) return DecodeStream(t, s[0], out);
  uint8_t* end[4];
  Cursor c[4];
  for (int k = 0; k < 4; ++k) {
    c[k].out = out;
    end[k] = out += s[k].count;
  }
  if (std::any_of(s, s + 4, [](const HuffmanStream& x) { return x.size < 8; })) {
    for (int k = 0; k < 4; ++k) {
      if (!DecodeStream(t, s[k], c[k].out)) return false;
    }
    return true;
  }
  for (int k = 0; k < 4; ++k) {
    c[k].ip = s[k].src + s[k].size - 8;
    c[k].used = MarkBits(s[k]);
  }
  // The four side by side while all can go fast, then each alone.
  for (;;) {
    size_t r = SafeRounds(s[0], c[0], end[0]);
    for (int k = 1; k < 4; ++k) r = std::min(r, SafeRounds(s[k], c[k], end[k]));
    if (r == 0) break;
    Rounds<4>(t.multi.data(), c, r);
  }
  for (int k = 0; k < 4; ++k) {
    if (!ContinueStream(t, s[k], c[k], end[k])) return false;
  }
  return true;
}

}  // namespace ckfmt
