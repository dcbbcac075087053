// The checks run in two steps: a fast one-shot pass that only says "fine",
// and, for a chunk that is not, the streaming pass whose wording the verify
// report has always used (it decides which problem a bad chunk shows).
#include "verify_chunk.h"

#include <zstd.h>

#include <cstdio>

#include "ckfmt/checksum.h"
#include "ckfmt/codec.h"
#include "ckfmt/file_layout.h"

namespace ckfmt {

ChunkChecker::ChunkChecker() : dctx_(ZSTD_createDCtx()) {}
ChunkChecker::~ChunkChecker() { ZSTD_freeDCtx(dctx_); }

namespace {

// Z1, and whether a reader knows the codec: "" when the stored bytes are
// the ones the writer checksummed, in a codec this build decodes.
std::string StoredBytesProblem(const ChunkRecord& c, const uint8_t* stored) {
  uint64_t sum = Checksum(stored, c.stored_size);
  if (sum != c.checksum) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "checksum mismatch (expected %016llx, computed %016llx)",
                  (unsigned long long)c.checksum, (unsigned long long)sum);
    return buf + SpecRule("D1");
  }
  if (!IsKnownCodec(c.codec)) return "unknown codec id " + std::to_string(c.codec) + SpecRule("D2");
  return "";
}

}  // namespace

std::string ChunkChecker::Check(const ChunkRecord& c, const uint8_t* stored, bool decode) {
  if (!decode) return StoredBytesProblem(c, stored);
  if (Fine(c, stored)) return "";
  std::string problem = Explain(c, stored);
  if (problem.empty()) {
    // What only the frame rules refuse, which a stream of the bytes can
    // decode (a skippable frame alone, say).
    problem = CheckChunkDecodes(c.codec, stored, c.stored_size, c.raw_size).message();
  }
  return problem;
}

// True only when Explain would find nothing.
bool ChunkChecker::Fine(const ChunkRecord& c, const uint8_t* stored) {
  if (Checksum(stored, c.stored_size) != c.checksum || !IsKnownCodec(c.codec)) return false;
  // Whether it decodes; the bytes themselves are not needed. For zstd,
  // DecodeChunk's rules hold: exactly one regular frame, with a window that
  // Explain's streaming decoder accepts too.
  return CheckChunkDecodes(c.codec, stored, c.stored_size, c.raw_size).ok();
}

// The problem of a chunk that is not Fine, worded as a stream of its bytes
// would find it.
std::string ChunkChecker::Explain(const ChunkRecord& c, const uint8_t* stored) {
  if (std::string p = StoredBytesProblem(c, stored); !p.empty()) return p;
  if (c.codec == uint8_t(Codec::kBytePlaneZstd)) {
    Status s = DecodeBytePlanes(stored, c.stored_size, nullptr, c.raw_size);
    return s.ok() ? "" : s.message();
  }
  if (c.codec != uint8_t(Codec::kZstd)) return "";
  std::string problem = ExplainZstd(c, stored);
  return problem.empty() ? "" : problem + SpecRule("D4");
}

std::string ChunkChecker::ExplainZstd(const ChunkRecord& c, const uint8_t* stored) {
  // A stream decoder would take a skippable frame for the frame and then
  // complain of what follows it.
  if (c.stored_size < 4 || GetU32(stored) != ZSTD_MAGICNUMBER) {
    return "zstd chunk does not start with a zstd frame's magic number";
  }
  sink_.resize(128 << 10);
  ZSTD_DCtx_reset(dctx_, ZSTD_reset_session_only);
  ZSTD_inBuffer in{stored, c.stored_size, 0};
  uint64_t decoded = 0;
  bool frame_done = false;
  while (in.pos < in.size) {
    if (frame_done) return "bytes follow the end of the zstd frame";
    ZSTD_outBuffer out{sink_.data(), sink_.size(), 0};
    size_t rc = ZSTD_decompressStream(dctx_, &out, &in);
    if (ZSTD_isError(rc)) return std::string("zstd: ") + ZSTD_getErrorName(rc);
    decoded += out.pos;
    if (rc == 0) frame_done = true;
    if (decoded > c.raw_size) return "decodes to more than its raw size";
  }
  if (!frame_done || decoded != c.raw_size) {
    return "zstd frame decodes to " + std::to_string(decoded) + " bytes, expected " +
           std::to_string(c.raw_size);
  }
  return "";
}

}  // namespace ckfmt
