// Fuzz target: the chunk codecs. Input: a mode byte, three parameter
// bytes, then data.
//   mode bit 7 clear: the data are stored bytes of codec (mode & 3), the
//     parameters a raw size (up to 16 MiB). Decoding must fail cleanly or
//     produce exactly that many bytes, and CheckChunkDecodes must agree.
//   mode bit 7 set: the data are raw bytes of elements of 1, 2, 4 or 8
//     bytes (bits 2-3; a partial last element is dropped). They are encoded with codec (mode & 3),
//     which must decode back to them bit for bit; then one stored byte (parameters 0-1 pick it) is
//     xored with parameter 2 and decoded again, which must not crash and CheckChunkDecodes must
//     agree with it (the stored checksum, not the decoder, catches that change).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "ckfmt/codec.h"

namespace {

void DecodeStored(uint8_t codec, const uint8_t* stored, size_t stored_size, size_t raw_size) {
  // Not zeroed: an iteration should cost the decoder's work, not a memset.
  std::unique_ptr<uint8_t[]> out(new uint8_t[raw_size]);
  const ckfmt::Status decoded = ckfmt::DecodeChunk(codec, stored, stored_size, out.get(), raw_size);
  // The verifier's check, which walks literals-only zstd frames without
  // decoding them, must find what decoding finds.
  const ckfmt::Status checked = ckfmt::CheckChunkDecodes(codec, stored, stored_size, raw_size);
  if (checked.ok() != decoded.ok()) {
    std::fprintf(
        stderr, "codec %d, %zu stored bytes, raw size %zu: decoding says %s, the check %s\n",
        int(codec), stored_size, raw_size, decoded.ToString().c_str(), checked.ToString().c_str());
    std::abort();
  }
}

void RoundTrip(uint8_t mode, const uint8_t* param, const uint8_t* raw, size_t raw_size) {
  const auto codec = ckfmt::Codec(mode & 3);
  if (!ckfmt::IsKnownCodec(uint8_t(codec))) return;
  const size_t element_size = size_t(1) << ((mode >> 2) & 3);
  raw_size -= raw_size % element_size;  // writers chunk whole elements
  std::vector<uint8_t> stored(ckfmt::MaxEncodedSize(codec, raw_size));
  auto n = ckfmt::EncodeChunk(codec, 1, element_size, raw, raw_size, stored.data(), stored.size());
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
  const ckfmt::Status checked =
      ckfmt::CheckChunkDecodes(uint8_t(codec), stored.data(), *n, raw_size);
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
