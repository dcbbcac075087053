// Decoding the Huffman-coded literals of zstd frames (RFC 8878 §4.2.2),
// several symbols a table lookup. Internal to the format library.
//
// Why not libzstd's decoder: the planes of sign and exponent bytes that
// the byte-plane codec codes have codes of 2.5-3 bits on average, so the
// 11 bits a lookup peeks hold three or four whole codes, and libzstd takes
// at most two a lookup. A table that gives up to four decodes these planes
// 1.7x as fast; on planes of long codes (7-8 bits) it is about as fast as
// libzstd (bench/HISTORY.md, "Huffman decoding of our own").
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "zstd_huffman.h"

namespace ckfmt {

// Most symbols one lookup of HuffmanDecodeTable::multi gives.
constexpr int kMaxSymbolsPerLookup = 4;

// A code's decoding tables, indexed by the next 11 bits of a stream (the
// first read in the highest bit).
struct HuffmanDecodeTable {
  // The first code's symbol | its length << 8.
  std::array<uint16_t, 1 << kMaxCodeBits> single;
  // The whole codes among the 11 bits, at most kMaxSymbolsPerLookup of
  // them: their total length | their count << 8 | their symbols << 16,
  // the first in the lowest byte. Every entry holds at least one code.
  std::array<uint64_t, 1 << kMaxCodeBits> multi;
};

// Fills `t` for `code`. REQUIRES: ReadHuffmanCode filled `code`.
void FillDecodeTable(const HuffmanCode& code, HuffmanDecodeTable& t);

// Decodes `streams` streams (1 or 4, as CutHuffmanStreams cut them) into
// `out`, the symbols of each after those of the one before. True when each
// decodes to exactly its count of symbols with every one of its bits read,
// as libzstd requires; else false, and `out` holds garbage. Writes only
// out[0, the counts' sum).
bool DecodeHuffmanStreams(const HuffmanDecodeTable& t, const HuffmanStream* s, int streams,
                          uint8_t* out);

}  // namespace ckfmt
