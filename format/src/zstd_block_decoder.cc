// See zstd_block_decoder.h. Section numbers are RFC 8878's.
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_getFrameHeader, the bufferless decoder
#include "zstd_block_decoder.h"

#include <algorithm>

#include "zstd_frame.h"  // kMaxZstdWindow

namespace ckfmt {

bool ReadLiteralsOnlyBlock(const uint8_t* b, size_t size, LiteralsHeader& h) {
  if (size < 1) return false;
  h.type = b[0] & 3;
  const int format = (b[0] >> 2) & 3;
  if (h.type < 2) {  // Raw_Literals_Block or RLE_Literals_Block
    h.streams = 1;
    h.header = format == 1 ? 2 : format == 3 ? 3 : 1;
    if (size < h.header) return false;
    h.regenerated = h.header == 1 ? size_t(b[0] >> 3)
                    : h.header == 2
                        ? size_t(b[0] >> 4) + (size_t(b[1]) << 4)
                        : size_t(b[0] >> 4) + (size_t(b[1]) << 4) + (size_t(b[2]) << 12);
    h.content = h.type == 0 ? h.regenerated : 1;
  } else {  // Compressed_Literals_Block or Treeless_Literals_Block
    h.streams = format == 0 ? 1 : 4;
    h.header = format < 2 ? 3 : format == 2 ? 4 : 5;
    if (size < h.header) return false;
    uint64_t v = 0;
    for (size_t i = h.header; i-- > 0;) v = v << 8 | b[i];
    const int field = format < 2 ? 10 : format == 2 ? 14 : 18;
    h.regenerated = size_t(v >> 4) & ((size_t{1} << field) - 1);
    h.content = size_t(v >> (4 + field)) & ((size_t{1} << field) - 1);
  }
  // Sizes are at most 20 bits wide: the sum cannot overflow.
  return h.header + h.content + 1 == size && b[size - 1] == 0;
}

bool ReadBlockHeader(const uint8_t* in, size_t len, size_t& pos, size_t block_max, BlockHeader& b) {
  if (len - pos < 3) return false;
  const uint32_t bh = uint32_t(in[pos]) | uint32_t(in[pos + 1]) << 8 | uint32_t(in[pos + 2]) << 16;
  pos += 3;
  b.last = bh & 1;
  b.type = (bh >> 1) & 3;
  b.size = bh >> 3;
  b.stored = b.type == 1 ? 1 : b.size;
  return b.type != 3 && b.size <= block_max && len - pos >= b.stored;
}

LiteralsOnlyBlockDecoder::LiteralsOnlyBlockDecoder() : ctx_(ZSTD_createDCtx()) {}
LiteralsOnlyBlockDecoder::~LiteralsOnlyBlockDecoder() { ZSTD_freeDCtx(ctx_); }

bool LiteralsOnlyBlockDecoder::Start(const uint8_t* in, size_t len, size_t n) {
  ZSTD_frameHeader f;
  if (!ctx_ || ZSTD_getFrameHeader(&f, in, len) != 0) return false;
  if (f.frameType != ZSTD_frame || f.dictID != 0 || f.windowSize > kMaxZstdWindow) return false;
  if (f.frameContentSize != ZSTD_CONTENTSIZE_UNKNOWN && f.frameContentSize != n) return false;
  const size_t block_max = size_t(std::min<uint64_t>(f.windowSize, kZstdBlockMax));

  // Walk the block headers (§3.1.1.2) before decoding any.
  size_t pos = f.headerSize, regenerated = 0;
  for (BlockHeader b; !b.last;) {
    if (!ReadBlockHeader(in, len, pos, block_max, b)) return false;
    size_t out = b.size;
    if (b.type == 2) {
      LiteralsHeader h;
      if (!ReadLiteralsOnlyBlock(in + pos, b.size, h) || h.regenerated > block_max) return false;
      out = h.regenerated;
    }
    if (out > n - regenerated) return false;
    regenerated += out;
    pos += b.stored;
  }
  if (f.checksumFlag) pos += 4;  // Content_Checksum (§3.1.1)
  if (pos != len || regenerated != n) return false;
  if (ZSTD_isError(ZSTD_decompressBegin(ctx_))) return false;
  in_ = in;
  left_ = len;
  return true;
}

int64_t LiteralsOnlyBlockDecoder::Next(uint8_t* out) {
  for (;;) {
    const size_t need = ZSTD_nextSrcSizeToDecompress(ctx_);
    if (need == 0) return 0;
    if (need > left_) return -1;
    // Each block goes to the start of `out`: libzstd takes the move as a
    // new segment, which is sound because no block refers back (Start).
    const size_t got = ZSTD_decompressContinue(ctx_, out, kZstdBlockMax, in_, need);
    if (ZSTD_isError(got)) return -1;
    in_ += need;
    left_ -= need;
    if (got > 0) return int64_t(got);
  }
}

}  // namespace ckfmt
