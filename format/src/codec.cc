#include "ckfmt/codec.h"

#include <zstd.h>

#include <cstring>
#include <string>

namespace ckfmt {

bool IsKnownCodec(uint8_t id) { return id <= static_cast<uint8_t>(Codec::kZstd); }

std::string_view CodecName(uint8_t id) {
  switch (id) {
    case 0: return "none";
    case 1: return "zstd";
    default: return "unknown";
  }
}

size_t MaxEncodedSize(Codec codec, size_t raw_size) {
  return codec == Codec::kZstd ? ZSTD_compressBound(raw_size) : raw_size;
}

Result<size_t> EncodeChunk(Codec codec, int level, const void* raw, size_t raw_size, void* out,
                           size_t out_cap) {
  switch (codec) {
    case Codec::kNone:
      if (out_cap < raw_size) return Status::Internal("EncodeChunk: output too small");
      std::memcpy(out, raw, raw_size);
      return raw_size;
    case Codec::kZstd: {
      // One context per thread: creating one per chunk costs more than
      // compressing a small chunk.
      thread_local ZSTD_CCtx* cctx = ZSTD_createCCtx();
      size_t n = ZSTD_compressCCtx(cctx, out, out_cap, raw, raw_size, level);
      if (ZSTD_isError(n)) {
        return Status::Internal(std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
      }
      return n;
    }
  }
  return Status::InvalidArgument("unknown codec " + std::to_string(int(codec)));
}

Status DecodeChunk(uint8_t codec, const void* stored, size_t stored_size, void* out,
                   size_t raw_size) {
  switch (codec) {
    case 0:
      if (stored_size != raw_size) {
        return Status::Corruption("uncompressed chunk stores " + std::to_string(stored_size) +
                                  " bytes but its raw size is " + std::to_string(raw_size));
      }
      std::memcpy(out, stored, raw_size);
      return Status::OK();
    case 1: {
      thread_local ZSTD_DCtx* dctx = ZSTD_createDCtx();
      size_t n = ZSTD_decompressDCtx(dctx, out, raw_size, stored, stored_size);
      if (ZSTD_isError(n)) {
        return Status::Corruption(std::string("zstd chunk does not decode: ") +
                                  ZSTD_getErrorName(n));
      }
      if (n != raw_size) {
        return Status::Corruption("zstd chunk decodes to " + std::to_string(n) +
                                  " bytes, expected " + std::to_string(raw_size));
      }
      return Status::OK();
    }
    default:
      return Status::Unsupported("chunk codec id " + std::to_string(codec) +
                                 " is unknown to this reader (known: 0 none, 1 zstd)");
  }
}

}  // namespace ckfmt
