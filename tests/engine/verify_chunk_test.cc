// ChunkChecker on chunks whose checksum matches but whose codec stream is
// wrong (a writer bug, not bit rot): verify must still say what is wrong.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ckfmt/checksum.h"
#include "ckfmt/codec.h"
#include "ckfmt/file_layout.h"
#include "verify_chunk.h"

namespace ckfmt {
namespace {

// A byte-plane chunk of 4-byte elements: low-entropy top bytes (zstd
// planes) and varied low bytes (raw planes), so both kinds are present.
std::vector<uint8_t> BytePlaneChunk(size_t n, size_t* raw_size) {
  std::vector<uint8_t> raw(4 * n);
  for (size_t i = 0; i < n; ++i) {
    raw[4 * i] = uint8_t(i * 2654435761u >> 7);
    raw[4 * i + 1] = uint8_t(i * 40503u >> 3);
    raw[4 * i + 2] = uint8_t(i % 3);
    raw[4 * i + 3] = 0x3c;
  }
  std::vector<uint8_t> out(MaxEncodedSize(Codec::kBytePlaneZstd, raw.size()));
  auto got = EncodeChunk(Codec::kBytePlaneZstd, 1, 4, raw.data(), raw.size(), out.data(), out.size());
  EXPECT_TRUE(got.ok());
  out.resize(*got);
  *raw_size = raw.size();
  return out;
}

ChunkRecord Record(const std::vector<uint8_t>& stored, size_t raw_size) {
  return {4096, stored.size(), raw_size, Checksum(stored.data(), stored.size()),
          uint8_t(Codec::kBytePlaneZstd)};
}

TEST(ChunkCheckerTest, BytePlaneChunkThatDecodesIsFine) {
  size_t raw_size = 0;
  std::vector<uint8_t> stored = BytePlaneChunk(10000, &raw_size);
  ASSERT_EQ(stored[2 + 5 * 3], 1) << "the top plane should be zstd-coded";
  ChunkChecker checker;
  EXPECT_EQ(checker.Check(Record(stored, raw_size), stored.data()), "");
}

TEST(ChunkCheckerTest, BytePlaneStreamErrorsBehindAGoodChecksum) {
  size_t raw_size = 0;
  const std::vector<uint8_t> good = BytePlaneChunk(10000, &raw_size);
  ChunkChecker checker;
  struct Case {
    const char* what;
    void (*spoil)(std::vector<uint8_t>&);
    std::string expect;
  };
  const Case cases[] = {
      {"unknown plane mode", [](std::vector<uint8_t>& b) { b[2] = 7; },
       "byte-plane chunk: plane 0 has unknown mode 7 [FORMAT.md D5]"},
      {"zstd plane garbled",
       [](std::vector<uint8_t>& b) {
         size_t off = 2 + 5 * 4;  // past the header: planes 0-2, then plane 3's frame
         for (int p = 0; p < 3; ++p) off += GetU32(&b[2 + 5 * p + 1]);
         for (size_t i = off; i < off + 8; ++i) b[i] ^= 0xff;  // the zstd frame's header
       },
       "byte-plane chunk: plane 3 is not a zstd frame [FORMAT.md D5]"},
      {"trailing byte", [](std::vector<uint8_t>& b) { b.push_back(0); },
       "byte-plane chunk: 1 bytes follow the last plane [FORMAT.md D5]"},
      {"wrong raw size", nullptr,
       "byte-plane chunk: raw size 40001 is not a multiple of element size 4 [FORMAT.md D5]"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> bad = good;
    size_t raw = raw_size;
    if (c.spoil) {
      c.spoil(bad);
    } else {
      raw += 1;
    }
    EXPECT_EQ(checker.Check(Record(bad, raw), bad.data()), c.expect) << c.what;
    // Their checksums match: a pass that does not decode takes them.
    EXPECT_EQ(checker.Check(Record(bad, raw), bad.data(), /*decode=*/false), "") << c.what;
  }
}

TEST(ChunkCheckerTest, WithoutDecodingChecksumAndCodecAreStillChecked) {
  size_t raw_size = 0;
  std::vector<uint8_t> stored = BytePlaneChunk(1000, &raw_size);
  ChunkChecker checker;
  ChunkRecord r = Record(stored, raw_size);
  EXPECT_EQ(checker.Check(r, stored.data(), /*decode=*/false), "");
  r.codec = 9;
  EXPECT_EQ(checker.Check(r, stored.data(), /*decode=*/false), "unknown codec id 9 [FORMAT.md D2]");
  r = Record(stored, raw_size);
  stored[100] ^= 1;
  EXPECT_TRUE(checker.Check(r, stored.data(), /*decode=*/false).starts_with("checksum mismatch ("))
      << checker.Check(r, stored.data(), false);
}

// zstd chunks that only the frame rules refuse are named for what they are.
TEST(ChunkCheckerTest, ZstdChunkThatIsNotOneFrame) {
  std::vector<uint8_t> raw(4096);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = uint8_t(i % 16);
  std::vector<uint8_t> frame(MaxEncodedSize(Codec::kZstd, raw.size()));
  auto got = EncodeChunk(Codec::kZstd, 3, 1, raw.data(), raw.size(), frame.data(), frame.size());
  ASSERT_TRUE(got.ok());
  frame.resize(*got);
  const std::vector<uint8_t> skippable = {0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 's', 'k', 'i', 'p'};
  struct Case {
    const char* what;
    std::vector<uint8_t> stored;
    std::string expect;
  };
  std::vector<Case> cases = {
      {"skippable frame first", skippable,
       "zstd chunk does not start with a zstd frame's magic number [FORMAT.md D4]"},
      {"raw bytes", raw, "zstd chunk does not start with a zstd frame's magic number [FORMAT.md D4]"},
      {"second frame", frame, "bytes follow the end of the zstd frame [FORMAT.md D4]"},
  };
  cases[0].stored.insert(cases[0].stored.end(), frame.begin(), frame.end());
  cases[2].stored.insert(cases[2].stored.end(), frame.begin(), frame.end());
  ChunkChecker checker;
  for (const Case& c : cases) {
    ChunkRecord r{4096, c.stored.size(), raw.size(), Checksum(c.stored.data(), c.stored.size()),
                  uint8_t(Codec::kZstd)};
    EXPECT_EQ(checker.Check(r, c.stored.data()), c.expect) << c.what;
  }
  ChunkRecord good{4096, frame.size(), raw.size(), Checksum(frame.data(), frame.size()),
                   uint8_t(Codec::kZstd)};
  EXPECT_EQ(checker.Check(good, frame.data()), "");
}

}  // namespace
}  // namespace ckfmt
