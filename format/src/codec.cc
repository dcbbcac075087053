#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_getFrameHeader
#include "ckfmt/codec.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ckfmt/file_layout.h"
#include "zstd_context.h"
#include "zstd_encode.h"
#include "zstd_frame.h"
#include "zstd_literals_check.h"

namespace ckfmt {

bool IsKnownCodec(uint8_t id) { return id <= static_cast<uint8_t>(Codec::kBytePlaneZstd); }

std::string_view CodecName(uint8_t id) {
  switch (id) {
    case 0: return "none";
    case 1: return "zstd";
    case 2: return "byteplane-zstd";
    default: return "unknown";
  }
}

Result<Codec> CodecFromName(std::string_view name) {
  for (uint8_t id = 0; IsKnownCodec(id); ++id) {
    if (CodecName(id) == name) return static_cast<Codec>(id);
  }
  return Status::InvalidArgument("unknown codec \"" + std::string(name) +
                                 "\" (known: none, zstd, byteplane-zstd)");
}

size_t MaxEncodedSize(Codec codec, size_t raw_size) {
  switch (codec) {
    case Codec::kNone: return raw_size;
    case Codec::kZstd: return ZSTD_compressBound(raw_size);
    // The writer falls back to plain zstd for 1-byte elements.
    case Codec::kBytePlaneZstd:
      return std::max(MaxBytePlaneSize(raw_size), ZSTD_compressBound(raw_size));
  }
  return raw_size;
}

Result<size_t> EncodeChunk(Codec codec, int level, size_t element_size, const void* raw,
                           size_t raw_size, void* out, size_t out_cap) {
  switch (codec) {
    case Codec::kNone:
      if (out_cap < raw_size) return Status::Internal("EncodeChunk: output too small");
      if (raw_size) std::memcpy(out, raw, raw_size);  // empty buffers may be null
      return raw_size;
    case Codec::kZstd: {
      size_t n = CompressZstdChunk(level, static_cast<const uint8_t*>(raw), raw_size,
                                   static_cast<uint8_t*>(out), out_cap);
      if (ZSTD_isError(n)) {
        return Status::Internal(std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
      }
      return n;
    }
    case Codec::kBytePlaneZstd:
      return EncodeBytePlanes(level, element_size, static_cast<const uint8_t*>(raw), raw_size,
                              static_cast<uint8_t*>(out), out_cap);
  }
  return Status::InvalidArgument("unknown codec " + std::to_string(int(codec)));
}

std::string DecodeOneZstdFrame(const uint8_t* in, size_t len, uint8_t* out, size_t n) {
  // RFC 8878 §3.1.1: a regular frame starts with this magic number; a
  // skippable one with 0x184D2A5?.
  if (len < 4 || GetU32(in) != ZSTD_MAGICNUMBER) return "is not a zstd frame";
  ZSTD_frameHeader header;
  const size_t rc = ZSTD_getFrameHeader(&header, in, len);
  if (rc != 0) {
    return ZSTD_isError(rc) ? std::string("does not decode: ") + ZSTD_getErrorName(rc)
                            : std::string("ends inside its zstd frame header");
  }
  if (header.windowSize > kMaxZstdWindow) {
    return "declares a zstd window of " + std::to_string(header.windowSize) +
           " bytes, more than the " + std::to_string(kMaxZstdWindow) + " allowed";
  }
  const size_t frame = ZSTD_findFrameCompressedSize(in, len);
  if (ZSTD_isError(frame)) return std::string("does not decode: ") + ZSTD_getErrorName(frame);
  if (frame != len) {
    return "has " + std::to_string(len - frame) + " bytes after the end of its zstd frame";
  }
  const size_t got = ZSTD_decompressDCtx(ThreadDecompressContext(), out, n, in, len);
  if (ZSTD_isError(got)) return std::string("does not decode: ") + ZSTD_getErrorName(got);
  if (got != n) {
    return "decodes to " + std::to_string(got) + " bytes, expected " + std::to_string(n);
  }
  return "";
}

Status DecodeChunk(uint8_t codec, const void* stored, size_t stored_size, void* out,
                   size_t raw_size) {
  switch (codec) {
    case 0:
      if (stored_size != raw_size) {
        return Status::Corruption("uncompressed chunk stores " + std::to_string(stored_size) +
                                  " bytes but its raw size is " + std::to_string(raw_size) +
                                  SpecRule("C2"));
      }
      if (raw_size) std::memcpy(out, stored, raw_size);
      return Status::OK();
    case 1: {
      std::string problem = DecodeOneZstdFrame(static_cast<const uint8_t*>(stored), stored_size,
                                               static_cast<uint8_t*>(out), raw_size);
      if (!problem.empty()) return Status::Corruption("zstd chunk " + problem + SpecRule("D4"));
      return Status::OK();
    }
    case 2:
      return DecodeBytePlanes(static_cast<const uint8_t*>(stored), stored_size,
                              static_cast<uint8_t*>(out), raw_size);
    default:
      return Status::Unsupported("chunk codec id " + std::to_string(codec) +
                                 " is unknown to this reader (known: 0 none, 1 zstd, "
                                 "2 byteplane-zstd)" + SpecRule("D2"));
  }
}

Status CheckChunkDecodes(uint8_t codec, const void* stored, size_t stored_size, size_t raw_size) {
  const auto* in = static_cast<const uint8_t*>(stored);
  switch (codec) {
    case uint8_t(Codec::kNone):
      if (stored_size == raw_size) return Status::OK();
      break;  // DecodeChunk words the mismatch, copying nothing
    case uint8_t(Codec::kZstd): {
      if (LiteralsOnlyFrameDecodes(in, stored_size, raw_size)) return Status::OK();
      // A frame that check cannot tell about: decoding decides, and words
      // the error.
      thread_local std::vector<uint8_t> scratch;
      if (scratch.size() < raw_size) scratch.resize(raw_size);
      return DecodeChunk(codec, stored, stored_size, scratch.data(), raw_size);
    }
    case uint8_t(Codec::kBytePlaneZstd):
      return DecodeBytePlanes(in, stored_size, nullptr, raw_size);
  }
  return DecodeChunk(codec, stored, stored_size, nullptr, raw_size);
}

}  // namespace ckfmt
