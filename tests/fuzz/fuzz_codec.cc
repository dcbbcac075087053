// Fuzz target: the chunk codecs. Input: a mode byte, three parameter
// bytes, then data.
//   mode bit 7 clear: the data are stored bytes of codec (mode & 3), the
//     parameters a raw size (up to 16 MiB). Decoding must fail cleanly or
//     produce exactly that many bytes, and CheckChunkDecodes must agree.
//   mode bit 7 set, bit 6 clear: the data are raw bytes of elements of 1, 2, 4 or 8
//     bytes (bits 2-3; a partial last element is dropped). They are encoded with codec (mode & 3),
//     which must decode back to them bit for bit; then one stored byte (parameters 0-1 pick it) is
//     xored with parameter 2 and decoded again, which must not crash and CheckChunkDecodes must
//     agree with it (the stored checksum, not the decoder, catches that change).
//   mode bits 7 and 6 set: the same, but the data are coded by ckfmt's literals writer as a
//     codec 1 frame of 1 to 4 KiB blocks (bits 4-5) that share one Huffman code, as a
//     checkpoint's 4 MiB chunks share it over 128 KiB blocks: a few KiB of input make the
//     sixteen and eight blocks the AVX-512 walk of the check takes at once.
// Where the CPU has that walk, the check must answer alike with it and without it. Codec 1
// frames also go through the byte-plane codec's block decoder, which must pass only what
// libzstd decodes the same, and exactly what the walk passes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "ckfmt/codec.h"
#include "zstd_block_decoder.h"   // LiteralsOnlyBlockDecoder
#include "zstd_literals.h"        // WriteLiteralsFrameInBlocks
#include "zstd_literals_check.h"  // LiteralsOnlyFrameDecodes
#include "zstd_literals_walk.h"   // LimitWalk

namespace {

// CheckChunkDecodes with the walk `widest` allows on this CPU.
ckfmt::Status CheckWith(ckfmt::WalkKind widest, uint8_t codec, const uint8_t* stored,
                        size_t stored_size, size_t raw_size) {
  ckfmt::LimitWalk(widest);
  const ckfmt::Status checked = ckfmt::CheckChunkDecodes(codec, stored, stored_size, raw_size);
  ckfmt::LimitWalk(ckfmt::WalkKind::kAvx512);
  return checked;
}

// CheckChunkDecodes with each walk this CPU has (AVX-512, AVX2, scalar):
// all must agree, since a lane that moved differently from the scalar walk
// would pass or refuse other frames.
ckfmt::Status Check(uint8_t codec, const uint8_t* stored, size_t stored_size, size_t raw_size) {
  using ckfmt::WalkKind;
  const ckfmt::Status scalar = CheckWith(WalkKind::kScalar, codec, stored, stored_size, raw_size);
  for (WalkKind walk : {WalkKind::kAvx2, WalkKind::kAvx512}) {
    if (!ckfmt::WalkAvailable(walk)) continue;
    const ckfmt::Status vector = CheckWith(walk, codec, stored, stored_size, raw_size);
    if (vector.ToString() != scalar.ToString()) {
      std::fprintf(stderr,
                   "codec %d, %zu stored bytes, raw size %zu: the %s walk says %s, the "
                   "scalar walk %s\n",
                   int(codec), stored_size, raw_size, walk == WalkKind::kAvx2 ? "AVX2" : "AVX-512",
                   vector.ToString().c_str(), scalar.ToString().c_str());
      std::abort();
    }
  }
  return scalar;
}

// The block-by-block decoder of the byte-plane codec (zstd_block_decoder.h)
// on a codec 1 frame, which libzstd decoded to `decoded` (and `out`): what
// it passes, libzstd decodes to the same bytes; and it passes exactly the
// frames the walk of the check passes, but for those with a content
// checksum, which the walk leaves to libzstd.
void CompareBlockDecoder(const uint8_t* frame, size_t size, size_t raw_size,
                         const ckfmt::Status& decoded, const uint8_t* out) {
  ckfmt::LiteralsOnlyBlockDecoder decoder;
  std::vector<uint8_t> block(ckfmt::kZstdBlockMax), all;
  bool passed = decoder.Start(frame, size, raw_size);
  for (int64_t got; passed && (got = decoder.Next(block.data())) != 0;) {
    passed = got > 0;
    if (passed) all.insert(all.end(), block.begin(), block.begin() + got);
  }
  const bool walked = ckfmt::LiteralsOnlyFrameDecodes(frame, size, raw_size);
  const bool checksummed = size > 4 && (frame[4] & 4);
  if ((passed && (!decoded.ok() || all.size() != raw_size ||
                  (raw_size && std::memcmp(all.data(), out, raw_size) != 0))) ||
      (walked && !passed) || (passed && !checksummed && !walked)) {
    std::fprintf(stderr,
                 "zstd frame of %zu bytes, raw size %zu: the block decoder says %d, the walk %d, "
                 "libzstd %s\n",
                 size, raw_size, int(passed), int(walked), decoded.ToString().c_str());
    std::abort();
  }
}

void DecodeStored(uint8_t codec, const uint8_t* stored, size_t stored_size, size_t raw_size) {
  // Not zeroed: an iteration should cost the decoder's work, not a memset.
  std::unique_ptr<uint8_t[]> out(new uint8_t[raw_size]);
  const ckfmt::Status decoded = ckfmt::DecodeChunk(codec, stored, stored_size, out.get(), raw_size);
  if (codec == uint8_t(ckfmt::Codec::kZstd)) {
    CompareBlockDecoder(stored, stored_size, raw_size, decoded, out.get());
  }
  // The verifier's check, which walks literals-only zstd frames without
  // decoding them, must find what decoding finds.
  const ckfmt::Status checked = Check(codec, stored, stored_size, raw_size);
  if (checked.ok() != decoded.ok()) {
    std::fprintf(
        stderr, "codec %d, %zu stored bytes, raw size %zu: decoding says %s, the check %s\n",
        int(codec), stored_size, raw_size, decoded.ToString().c_str(), checked.ToString().c_str());
    std::abort();
  }
}

// Codec 1's stored bytes for `raw` as the literals writer makes them in
// blocks of `block` bytes, into `out`; 0 where that writer declines (e.g.
// fewer than two distinct bytes). ZSTD_compressBound, which `out` holds,
// covers a frame of 1 KiB blocks all stored raw.
size_t LiteralsFrame(const uint8_t* raw, size_t raw_size, size_t block, std::vector<uint8_t>& out) {
  uint32_t counts[256] = {};
  for (size_t i = 0; i < raw_size; ++i) ++counts[raw[i]];
  return ckfmt::WriteLiteralsFrameInBlocks(counts, raw, raw_size, block, out.data(), out.size());
}

void RoundTrip(uint8_t mode, const uint8_t* param, const uint8_t* raw, size_t raw_size) {
  const bool small_blocks = mode & 0x40;
  const auto codec = small_blocks ? ckfmt::Codec::kZstd : ckfmt::Codec(mode & 3);
  if (!ckfmt::IsKnownCodec(uint8_t(codec))) return;
  const size_t element_size = small_blocks ? 1 : size_t(1) << ((mode >> 2) & 3);
  raw_size -= raw_size % element_size;  // writers chunk whole elements
  std::vector<uint8_t> stored(ckfmt::MaxEncodedSize(codec, raw_size));
  ckfmt::Result<size_t> n = size_t{0};
  if (small_blocks) {
    n = LiteralsFrame(raw, raw_size, ckfmt::kLiteralsBlockMin * (1 + ((mode >> 4) & 3)), stored);
    if (*n == 0) return;
  } else {
    n = ckfmt::EncodeChunk(codec, 1, element_size, raw, raw_size, stored.data(), stored.size());
  }
  if (!n.ok()) {
    std::fprintf(stderr, "encoding %zu bytes failed: %s\n", raw_size, n.status().ToString().c_str());
    std::abort();
  }
  std::vector<uint8_t> back(raw_size);
  auto s = ckfmt::DecodeChunk(uint8_t(codec), stored.data(), *n, back.data(), raw_size);
  if (!s.ok() || (raw_size && std::memcmp(back.data(), raw, raw_size) != 0)) {
    std::fprintf(stderr, "codec %d round trip of %zu bytes differs: %s\n", int(codec), raw_size,
                 s.ToString().c_str());
    std::abort();
  }
  const ckfmt::Status checked = Check(uint8_t(codec), stored.data(), *n, raw_size);
  if (!checked.ok()) {
    std::fprintf(stderr, "codec %d chunk of %zu bytes decodes but its check says %s\n", int(codec),
                 raw_size, checked.ToString().c_str());
    std::abort();
  }
  if (*n == 0) return;
  stored[(size_t(param[0]) | size_t(param[1]) << 8) % *n] ^= param[2];
  DecodeStored(uint8_t(codec), stored.data(), *n, raw_size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const uint8_t mode = data[0];
  if (mode & 0x80) {
    RoundTrip(mode, data + 1, data + 4, size - 4);
  } else {
    const size_t raw_size = size_t(data[1]) | size_t(data[2]) << 8 | size_t(data[3]) << 16;
    DecodeStored(mode & 3, data + 4, size - 4, raw_size);
  }
  return 0;
}
