// A writer of zstd frames that hold only Huffman-coded literals, with one
// Huffman code for the whole frame, built from a sample (RFC 8878).
//
// Why not libzstd: the exponent planes of codec 2 are coded without
// matches, and for them libzstd spends about a third of its time counting
// every byte of every 128 KiB block to build that block's code. Planes of
// trained values are stationary, so a code built from a sample the caller
// already has does as well. This writer counts nothing per byte: one pass
// finds the range of byte values present (so that every byte has a code),
// and the bytes are then coded in four interleaved streams.
//
// The output is an ordinary frame that any zstd decoder reads: a single
// segment frame with its content size; its first Huffman-coded block
// carries the code, later ones reuse it (Treeless_Literals_Block); a block
// that coding would not shrink is stored as a Raw_Block.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckfmt {

// Codes `in[0, n)` as one zstd frame into `out` (`cap` bytes) and returns
// the frame's size, or 0 where this writer declines: fewer than
// kLiteralsBlockMin bytes, fewer than two distinct bytes, a plane of more
// than 2^27 bytes (the largest window a ckfmt reader takes), a code whose
// description does not fit its header byte, or `cap` too small. Then the
// caller uses libzstd instead.
// `sample_counts[b]` counts byte value b in a sample of `in`: it shapes the
// code; any byte value of `in` still gets one, whether sampled or not.
// REQUIRES: `sample_counts` has 256 entries.
size_t WriteLiteralsFrame(const uint32_t* sample_counts, const uint8_t* in, size_t n,
                          uint8_t* out, size_t cap);

// Blocks of `in` each hold at most this many bytes: zstd's largest block.
constexpr size_t kLiteralsBlockMax = size_t{128} << 10;
// A frame's last block, where it holds fewer bytes, is stored raw
// (Raw_Block). Smaller inputs are declined: this writer codes only 4-stream
// blocks, and libzstd codes small ones (biases, norms) as one stream.
constexpr size_t kLiteralsBlockMin = 1024;

// The same, in blocks of `block_max` bytes (the last one shorter). Writers
// use kLiteralsBlockMax; smaller blocks let tests and fuzzers make frames of
// many blocks, as a checkpoint's chunks have, from a few KiB of input. A
// `block_max` outside [kLiteralsBlockMin, kLiteralsBlockMax] is declined (0).
size_t WriteLiteralsFrameInBlocks(const uint32_t* sample_counts, const uint8_t* in, size_t n,
                                  size_t block_max, uint8_t* out, size_t cap);

}  // namespace ckfmt
