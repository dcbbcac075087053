// Decoding a literals-only zstd frame one block at a time (RFC 8878
// §3.1.1.2), for the byte-plane codec (codec_byteplane.cc).
//
// Why: decoded whole, a chunk's coded plane (1-2 MiB) leaves the cache
// before it is joined with the others, so every byte of it crosses the
// memory bus twice more than it need. Decoded a block (at most 128 KiB) at
// a time into a buffer that is reused, the plane is joined while it is
// still in cache. That is only sound for blocks that hold literals alone:
// a block with sequences may copy from the frame's earlier output, which
// the reused buffer no longer holds. The frames ckfmt writes for bf16 and
// fp32 planes are of that kind (zstd_literals.h); any other frame is
// decoded whole. Their Huffman-coded literals are decoded here, not by
// libzstd, several symbols a lookup (zstd_huffman_decode.h).
#pragma once

#include <zstd.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ckfmt {

// Block_Maximum_Size (§3.1.1.2.4): the most one block regenerates.
constexpr size_t kZstdBlockMax = ZSTD_BLOCKSIZE_MAX;

// A Literals_Section_Header (§3.1.1.3.1.1).
struct LiteralsHeader {
  int type = 0;            // Literals_Block_Type: 0 raw, 1 RLE, 2 compressed, 3 treeless
  int streams = 1;         // Huffman streams: 1 or 4 (types 2 and 3)
  size_t header = 0;       // bytes of this header
  size_t regenerated = 0;  // Regenerated_Size
  size_t content = 0;      // bytes after the header: the literals, 1 (RLE) or Compressed_Size
};

// Reads the literals section of the compressed block `b[0, size)` and says
// whether the block holds literals alone: the section is followed by one
// byte, Number_of_Sequences = 0, that ends the block. False where it does
// not, or where the header does not fit.
bool ReadLiteralsOnlyBlock(const uint8_t* b, size_t size, LiteralsHeader& h);

// A Block_Header (§3.1.1.2).
struct BlockHeader {
  bool last = false;  // Last_Block
  int type = 0;       // Block_Type: 0 raw, 1 RLE, 2 compressed
  size_t size = 0;    // Block_Size
  size_t stored = 0;  // the block's bytes after its header: 1 (RLE) or Block_Size
};

// Reads the block header at in[pos, len) into `b` and moves `pos` past it.
// False where it does not fit, its type is the reserved one, its size is
// over `block_max` (or, compressed, kZstdBlockMax or more), or the block's
// bytes run past `len`.
// REQUIRES: pos <= len.
bool ReadBlockHeader(const uint8_t* in, size_t len, size_t& pos, size_t block_max, BlockHeader& b);

// Decodes one frame block by block: raw and RLE blocks and literals as
// they are, Huffman-coded literals with zstd_huffman_decode.h.
// Not thread-safe; one per frame decoded at a time.
class LiteralsOnlyBlockDecoder {
 public:
  LiteralsOnlyBlockDecoder();
  ~LiteralsOnlyBlockDecoder();
  LiteralsOnlyBlockDecoder(const LiteralsOnlyBlockDecoder&) = delete;
  LiteralsOnlyBlockDecoder& operator=(const LiteralsOnlyBlockDecoder&) = delete;

  // Prepares to decode `in[0, len)`. True only where it is exactly one
  // regular zstd frame with a window of at most kMaxZstdWindow, no
  // dictionary id and a Frame_Content_Size of `n`, whose blocks are raw,
  // RLE, or compressed with literals alone, regenerate `n` bytes in all,
  // and end where the frame does (before its Content_Checksum, if it has
  // one). Else false: decode the frame whole (DecodeOneZstdFrame), which
  // words what is wrong with it.
  // REQUIRES: `in` stays valid until the last Next().
  bool Start(const uint8_t* in, size_t len, size_t n);

  // Decodes the next block that regenerates any bytes into
  // out[0, kZstdBlockMax). Returns the bytes written, 0 once the frame is
  // done and its checksum, if any, matches, or -1 where a block or the
  // checksum breaks the format (as libzstd reads it).
  // REQUIRES: Start() returned true.
  int64_t Next(uint8_t* out);

 private:
  struct State;  // the frame, where decoding stands, the last Huffman code
  std::unique_ptr<State> s_;
};

}  // namespace ckfmt
