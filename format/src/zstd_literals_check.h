// Whether a zstd frame that holds only literals (RFC 8878) decodes to
// exactly n bytes, found without decoding it: `ckfmt verify`'s check of
// codec 1 chunks of bf16 and fp32 values, in which libzstd finds no
// matches and ckfmt's writer (zstd_literals.h) looks for none. (The
// exponent planes of codec 2, whose codes are short, are checked by
// decoding them a block at a time, several codes a lookup, which is
// faster there: zstd_huffman_decode.h.)
//
// Why: to decode such a frame is a Huffman pass over every byte, and a
// verify that decodes every chunk (FORMAT.md Z2) is bound by it on a
// machine of few cores. Whether a Huffman stream decodes to a given number
// of symbols with every bit read depends only on the lengths of its codes,
// so this walks the codes by length alone: no symbol is looked up or
// stored, and eight streams (two blocks' four) are walked at once, or 64
// or 32 (sixteen or eight blocks of one code) with AVX-512 VBMI or AVX2
// where the CPU has it (zstd_literals_walk.h).
//
// It answers only what it can tell with certainty, and otherwise says it
// cannot, for libzstd to decide: a frame it passes decodes, with libzstd,
// to exactly n bytes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckfmt {

// True when `in[0, len)` is certain to decode to exactly `n` bytes: it is
// exactly one regular zstd frame, without dictionary id or content
// checksum, whose Frame_Content_Size is `n` and window at most
// kMaxZstdWindow; every block is raw, RLE, or compressed with no
// sequences, and regenerates at most min(window, 128 KiB) bytes; every
// Huffman code is at most 11 bits long; and every stream walks to its
// count of symbols with exactly all of its bits read. False when it cannot
// tell (a frame of another kind) or the frame breaks the format: then
// decode it to find out which.
bool LiteralsOnlyFrameDecodes(const uint8_t* in, size_t len, size_t n);

}  // namespace ckfmt
