// Chunk codecs: how a chunk's stored bytes encode its raw bytes.
// Ids are on-disk values (spec/FORMAT.md §5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ckfmt/status.h"

namespace ckfmt {

enum class Codec : uint8_t {
  kNone = 0,
  kZstd = 1,
  // Bytes of each element grouped into planes by significance, each plane
  // zstd-coded or stored raw (spec/FORMAT.md §5.3).
  kBytePlaneZstd = 2,
};

bool IsKnownCodec(uint8_t id);
std::string_view CodecName(uint8_t id);
// The codec named "none", "zstd" or "byteplane-zstd".
Result<Codec> CodecFromName(std::string_view name);

// Upper bound of EncodeChunk's output for `raw_size` input bytes.
size_t MaxEncodedSize(Codec codec, size_t raw_size);

// Encodes `raw` into `out` (capacity `out_cap` >= MaxEncodedSize); returns the
// stored size. `level` applies to zstd; `element_size` to byte planes.
// REQUIRES: raw_size % element_size == 0.
Result<size_t> EncodeChunk(Codec codec, int level, size_t element_size, const void* raw,
                           size_t raw_size, void* out, size_t out_cap);

// Decodes exactly `raw_size` bytes into `out`. Any other outcome - an
// unknown codec, malformed input, a different decoded size - is an error.
Status DecodeChunk(uint8_t codec, const void* stored, size_t stored_size, void* out,
                   size_t raw_size);

// Whether the chunk decodes to exactly `raw_size` bytes, as DecodeChunk
// finds, without keeping them: what `ckfmt verify` needs (FORMAT.md Z2).
// Returns DecodeChunk's error where the chunk does not. zstd frames of
// literals alone, the frames of bf16 and fp32 values, are checked by their
// codes' lengths without being decoded, at about 1.7 times the speed
// (2.8 with AVX-512 VBMI);
// other chunks are decoded into scratch.
Status CheckChunkDecodes(uint8_t codec, const void* stored, size_t stored_size, size_t raw_size);

// The byte-plane codec's halves (codec_byteplane.cc).
Result<size_t> EncodeBytePlanes(int level, size_t element_size, const uint8_t* raw,
                                size_t raw_size, uint8_t* out, size_t out_cap);
// `out` may be nullptr: then only whether the chunk decodes is checked
// (every plane is checked, as CheckChunkDecodes does; none is joined).
Status DecodeBytePlanes(const uint8_t* stored, size_t stored_size, uint8_t* out,
                        size_t raw_size);
size_t MaxBytePlaneSize(size_t raw_size);

}  // namespace ckfmt
