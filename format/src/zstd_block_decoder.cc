// See zstd_block_decoder.h. Section numbers are RFC 8878's.
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_getFrameHeader
#include "zstd_block_decoder.h"

#define XXH_INLINE_ALL  // XXH64_state_t by value
#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "ckfmt/file_layout.h"  // GetU32
#include "zstd_frame.h"         // kMaxZstdWindow
#include "zstd_huffman.h"
#include "zstd_huffman_decode.h"

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
  // libzstd also refuses a compressed block of kZstdBlockMax bytes or more.
  if (b.type == 3 || (b.type == 2 && b.size >= kZstdBlockMax)) return false;
  return b.size <= block_max && len - pos >= b.stored;
}

struct LiteralsOnlyBlockDecoder::State {
  const uint8_t* in = nullptr;
  size_t len = 0, pos = 0, block_max = 0;
  bool last = false;      // the last block is decoded
  bool checksum = false;  // a Content_Checksum is still to check
  XXH64_state_t hash;     // of the bytes decoded, for that checksum
  bool have_table = false;
  HuffmanDecodeTable table;  // the last Huffman code read (§3.1.1.3.1.1)

  // Decodes the literals of the compressed block b[0, size) into `out`;
  // returns their count, or -1.
  int64_t DecodeLiterals(const uint8_t* b, size_t size, uint8_t* out);
};

LiteralsOnlyBlockDecoder::LiteralsOnlyBlockDecoder() : s_(std::make_unique<State>()) {}
LiteralsOnlyBlockDecoder::~LiteralsOnlyBlockDecoder() = default;

bool LiteralsOnlyBlockDecoder::Start(const uint8_t* in, size_t len, size_t n) {
  ZSTD_frameHeader f;
  if (ZSTD_getFrameHeader(&f, in, len) != 0) return false;
  if (f.frameType != ZSTD_frame || f.dictID != 0 || f.windowSize > kMaxZstdWindow) return false;
  if (f.frameContentSize != n) return false;  // unknown, too
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

  State& s = *s_;
  s.in = in;
  s.len = len;
  s.pos = f.headerSize;
  s.block_max = block_max;
  s.last = false;
  s.checksum = f.checksumFlag;
  XXH64_reset(&s.hash, 0);
  s.have_table = false;
  return true;
}

int64_t LiteralsOnlyBlockDecoder::State::DecodeLiterals(const uint8_t* b, size_t size,
                                                        uint8_t* out) {
  LiteralsHeader h;
  if (!ReadLiteralsOnlyBlock(b, size, h) || h.regenerated > block_max) return -1;
  const uint8_t* p = b + h.header;
  if (h.type == 0) {
    std::memcpy(out, p, h.regenerated);
    return int64_t(h.regenerated);
  }
  if (h.type == 1) {
    std::memset(out, p[0], h.regenerated);
    return int64_t(h.regenerated);
  }
  size_t coded = h.content;
  if (h.type == 2) {  // Compressed_Literals_Block: a new code
    HuffmanCode code;
    const size_t tree = ReadHuffmanCode(p, coded, code);
    if (tree == 0 || tree >= coded) return -1;
    FillDecodeTable(code, table);
    have_table = true;
    p += tree;
    coded -= tree;
  } else if (!have_table) {  // Treeless_Literals_Block: the last code
    return -1;
  }
  HuffmanStream streams[4];
  if (!CutHuffmanStreams(p, coded, h.regenerated, h.streams, streams) ||
      !DecodeHuffmanStreams(table, streams, h.streams, out)) {
    return -1;
  }
  return int64_t(h.regenerated);
}

int64_t LiteralsOnlyBlockDecoder::Next(uint8_t* out) {
  State& s = *s_;
  while (!s.last) {
    BlockHeader b;
    if (!ReadBlockHeader(s.in, s.len, s.pos, s.block_max, b)) return -1;
    const uint8_t* block = s.in + s.pos;
    s.pos += b.stored;
    s.last = b.last;
    int64_t got = int64_t(b.size);
    if (b.type == 0) {
      std::memcpy(out, block, b.size);
    } else if (b.type == 1) {
      std::memset(out, block[0], b.size);
    } else {
      got = s.DecodeLiterals(block, b.size, out);
      if (got < 0) return -1;
    }
    if (s.checksum) XXH64_update(&s.hash, out, size_t(got));
    if (got > 0) return got;
  }
  if (s.checksum) {  // the low 4 bytes of the content's XXH64 (§3.1.1)
    s.checksum = false;
    if (s.len - s.pos != 4 || GetU32(s.in + s.pos) != uint32_t(XXH64_digest(&s.hash))) return -1;
  }
  return 0;
}

}  // namespace ckfmt
