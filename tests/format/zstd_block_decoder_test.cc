// Decoding literals-only zstd frames a block at a time
// (format/src/zstd_block_decoder.h), and the byte-plane decode built on it:
// it must take the frames ckfmt and libzstd write of training values,
// refuse every frame it cannot decode that way (so that the whole-frame
// decoder words what is wrong), and decode chunks bit for bit as the
// whole-frame path does, whatever the planes' block boundaries.
#include "zstd_block_decoder.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "byte_planes.h"
#include "ckfmt/codec.h"
#include "ckfmt/file_layout.h"
#include "zstd_frame.h"
#include "zstd_literals.h"
#include "zstd_test_frames.h"

namespace ckfmt {
namespace {

using test::Bytes;
using test::Compress;
using test::HandMadeFrame;
using test::TrainingBytes;

// What LiteralsOnlyBlockDecoder makes of `frame`: Start's answer, then the
// blocks' bytes in turn. `ok` is false where a Next() failed.
struct BlockDecode {
  bool started = false, ok = false;
  Bytes out;
  std::vector<size_t> blocks;
};

BlockDecode DecodeByBlock(const Bytes& frame, size_t n) {
  BlockDecode r;
  LiteralsOnlyBlockDecoder decoder;
  r.started = decoder.Start(frame.data(), frame.size(), n);
  if (!r.started) return r;
  Bytes block(kZstdBlockMax);
  for (int64_t got; (got = decoder.Next(block.data())) != 0;) {
    if (got < 0) return r;
    r.blocks.push_back(size_t(got));
    r.out.insert(r.out.end(), block.begin(), block.begin() + got);
  }
  r.ok = true;
  return r;
}

// The plane of sign and exponent bytes of bf16 or fp32 values: what the
// byte-plane codec codes.
Bytes HighBytes(const Bytes& values, bool bf16) {
  const size_t e = bf16 ? 2 : 4;
  Bytes plane(values.size() / e);
  for (size_t i = 0; i < plane.size(); ++i) plane[i] = values[i * e + e - 1];
  return plane;
}

Bytes WriterFrame(const Bytes& in) {
  std::array<uint32_t, 256> counts{};
  for (size_t i = 0; i < in.size(); i += 16) ++counts[in[i]];
  Bytes frame(in.size() + in.size() / 8 + 1024);
  frame.resize(WriteLiteralsFrame(counts.data(), in.data(), in.size(), frame.data(), frame.size()));
  return frame;
}

// ckfmt's writer codes exponent planes; libzstd at level 1 finds no
// matches in whole values either (at higher levels, in exponent planes,
// it does, and those frames are decoded whole).
TEST(ZstdBlockDecoderTest, DecodesFramesOfTrainingValuesBlockByBlock) {
  for (bool bf16 : {true, false}) {
    for (size_t n :
         {size_t{2} << 20, size_t{300} << 10, (size_t{128} << 10) + 4, size_t{5000}, size_t{4}}) {
      for (bool ours : {true, false}) {
        if (ours && n < kLiteralsBlockMin) continue;  // the writer declines; libzstd codes it
        SCOPED_TRACE(testing::Message()
                     << (bf16 ? "bf16 " : "fp32 ") << n
                     << (ours ? " exponents, ckfmt's writer" : " values, libzstd level 1"));
        const Bytes values = TrainingBytes(ours ? n * (bf16 ? 2 : 4) : n, bf16, uint32_t(n));
        const Bytes in = ours ? HighBytes(values, bf16) : values;
        const Bytes frame = ours ? WriterFrame(in) : Compress(in, 1);
        ASSERT_FALSE(frame.empty());
        const BlockDecode d = DecodeByBlock(frame, n);
        ASSERT_TRUE(d.started);
        ASSERT_TRUE(d.ok);
        EXPECT_TRUE(d.out == in);
        EXPECT_EQ(d.blocks.size(), (n + kZstdBlockMax - 1) / kZstdBlockMax);
      }
    }
  }
}

TEST(ZstdBlockDecoderTest, ChecksAContentChecksumAtTheEnd) {
  const Bytes in = TrainingBytes(200 << 10, false, 3);
  Bytes frame = Compress(in, 1, true);
  BlockDecode d = DecodeByBlock(frame, in.size());
  ASSERT_TRUE(d.started);
  EXPECT_TRUE(d.ok && d.out == in);
  frame.back() ^= 1;  // the checksum's last byte
  d = DecodeByBlock(frame, in.size());
  ASSERT_TRUE(d.started);
  EXPECT_FALSE(d.ok);
  EXPECT_EQ(d.out, in);  // every block decoded; only the end failed
}

// Frames it cannot decode block by block, or that break the format: the
// whole-frame decoder has the last word on them.
TEST(ZstdBlockDecoderTest, RefusesWhatItCannotDecodeByBlock) {
  Bytes text;
  for (int i = 0; text.size() < (200 << 10); ++i) {
    const std::string line = "step " + std::to_string(i % 97) + " loss 0.25 lr 3e-4\n";
    text.insert(text.end(), line.begin(), line.end());
  }
  const Bytes matches = Compress(text, 1);
  ASSERT_FALSE(matches.empty());
  EXPECT_FALSE(DecodeByBlock(matches, text.size()).started) << "a frame with sequences";

  const Bytes in = HighBytes(TrainingBytes(600 << 10, true, 7), true);
  const Bytes frame = WriterFrame(in);
  ASSERT_TRUE(DecodeByBlock(frame, in.size()).started);
  EXPECT_FALSE(DecodeByBlock(frame, in.size() - 1).started);
  EXPECT_FALSE(DecodeByBlock(frame, in.size() + 1).started);
  Bytes trailing = frame;
  trailing.push_back(0);
  EXPECT_FALSE(DecodeByBlock(trailing, in.size()).started);
  for (size_t cut : {size_t{1}, size_t{100}, frame.size() - 6, frame.size()}) {
    EXPECT_FALSE(DecodeByBlock(Bytes(frame.begin(), frame.end() - long(cut)), in.size()).started)
        << "cut " << cut;
  }
  Bytes dict_id = frame;
  dict_id[4] |= 1;  // Dictionary_ID_Flag: a 1-byte id follows the descriptor
  dict_id.insert(dict_id.begin() + 5, 7);
  EXPECT_FALSE(DecodeByBlock(dict_id, in.size()).started);
  Bytes skippable = {0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 1, 2, 3, 4};
  EXPECT_FALSE(DecodeByBlock(skippable, 4).started);
  Bytes reserved_block = HandMadeFrame(Bytes(10, 1), {10});
  reserved_block[13] |= 6;  // Block_Type 3, reserved
  EXPECT_FALSE(DecodeByBlock(reserved_block, 10).started);
}

// Every single-byte change to a frame: whatever Start and Next say, an
// output they pass is what libzstd decodes whole, and a frame libzstd
// refuses never passes.
TEST(ZstdBlockDecoderTest, PassesOnlyWhatLibzstdDecodesTheSame) {
  const Bytes in = HighBytes(TrainingBytes((256 << 10) + 6000, true, 11), true);
  const Bytes frame = WriterFrame(in);
  std::mt19937 rng(5);
  size_t passed = 0;
  for (int k = 0; k < 600; ++k) {
    Bytes changed = frame;
    const size_t at = k < 200 ? size_t(k) : rng() % changed.size();
    changed[at] ^= uint8_t(1 + rng() % 255);
    const BlockDecode d = DecodeByBlock(changed, in.size());
    Bytes whole(in.size());
    const bool decodes =
        DecodeOneZstdFrame(changed.data(), changed.size(), whole.data(), whole.size()).empty();
    if (d.started && d.ok) {
      ASSERT_TRUE(decodes) << "byte " << at;
      ASSERT_TRUE(d.out == whole) << "byte " << at;
      ++passed;
    }
  }
  EXPECT_GT(passed, 10u);
}

// A byte-plane chunk (FORMAT.md §5.3.1) put together by hand: each plane
// of `in` (e-byte elements) raw, or, where frames[p] is not empty, coded
// as that frame.
Bytes BytePlaneChunk(const Bytes& in, size_t e, const std::vector<Bytes>& frames) {
  const size_t n = in.size() / e;
  std::vector<Bytes> planes(e, Bytes(n));
  std::vector<uint8_t*> dst;
  for (auto& p : planes) dst.push_back(p.data());
  SplitPlanes(in.data(), e, n, dst.data());
  Bytes chunk = {uint8_t(e), 0};
  for (size_t p = 0; p < e; ++p) {
    const bool coded = !frames[p].empty();
    chunk.push_back(coded ? 1 : 0);
    uint8_t len[4];
    PutU32(len, uint32_t(coded ? frames[p].size() : n));
    chunk.insert(chunk.end(), len, len + 4);
  }
  for (size_t p = 0; p < e; ++p) {
    const Bytes& payload = frames[p].empty() ? planes[p] : frames[p];
    chunk.insert(chunk.end(), payload.begin(), payload.end());
  }
  return chunk;
}

void ExpectDecodesTo(const Bytes& chunk, const Bytes& in) {
  Bytes out(in.size());
  const Status s = DecodeChunk(uint8_t(Codec::kBytePlaneZstd), chunk.data(), chunk.size(),
                               out.data(), out.size());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(out == in);
}

// Planes whose blocks end in different places, some blocks empty, raw and
// RLE, beside raw planes: the join must still put every byte in its place.
TEST(ZstdBlockDecoderTest, BytePlaneDecodeJoinsPlanesWhoseBlocksDiffer) {
  const size_t e = 4, n = 300000;
  Bytes in = TrainingBytes(e * n, false, 21);
  for (size_t i = 0; i < n; ++i) in[i * e + 2] = uint8_t(i / 1000);  // runs for RLE blocks
  std::vector<Bytes> planes(e, Bytes(n));
  for (size_t i = 0; i < n; ++i) {
    for (size_t p = 0; p < e; ++p) planes[p][i] = in[i * e + p];
  }
  std::vector<Bytes> frames(e);
  frames[3] = HandMadeFrame(planes[3], {1, 131071, 0, 100000, 5, 68923});
  frames[2] = HandMadeFrame(planes[2], std::vector<size_t>(300, 1000), true);
  frames[1] = WriterFrame(planes[1]);
  ExpectDecodesTo(BytePlaneChunk(in, e, frames), in);
}

// A plane whose frame has sequences cannot be decoded block by block; the
// chunk decodes all the same, whole.
TEST(ZstdBlockDecoderTest, BytePlaneDecodeTakesFramesWithSequences) {
  const size_t e = 2, n = 200000;
  Bytes in(e * n);
  for (size_t i = 0; i < n; ++i) {
    in[2 * i] = uint8_t(i * 7);
    in[2 * i + 1] = uint8_t("ckfmt"[i % 5]);
  }
  Bytes odd(n);
  for (size_t i = 0; i < n; ++i) odd[i] = in[2 * i + 1];
  std::vector<Bytes> frames(e);
  frames[1] = Compress(odd, 3);
  ASSERT_FALSE(DecodeByBlock(frames[1], n).started);
  ExpectDecodesTo(BytePlaneChunk(in, e, frames), in);
}

// Damaged byte-plane chunks decode to what decoding every plane whole and
// joining them gives, or fail with what that says.
TEST(ZstdBlockDecoderTest, DamagedBytePlaneChunksFailAsWholeFramesDo) {
  const Bytes in = TrainingBytes(4 * 150000, false, 31);
  Bytes stored(MaxEncodedSize(Codec::kBytePlaneZstd, in.size()));
  auto len =
      EncodeChunk(Codec::kBytePlaneZstd, 1, 4, in.data(), in.size(), stored.data(), stored.size());
  ASSERT_TRUE(len.ok()) << len.status().ToString();
  stored.resize(*len);
  // The reference: every zstd plane decoded whole, then joined.
  auto reference = [&](const Bytes& chunk, Bytes& out) -> std::string {
    std::array<const uint8_t*, 4> src{};
    std::vector<Bytes> planes(4, Bytes(150000));
    size_t pos = 2 + 4 * 5;
    for (size_t p = 0; p < 4; ++p) {
      const uint8_t* d = chunk.data() + 2 + p * 5;
      const size_t plen = GetU32(d + 1);
      if (d[0] == 0) {
        src[p] = chunk.data() + pos;
      } else {
        const std::string problem =
            DecodeOneZstdFrame(chunk.data() + pos, plen, planes[p].data(), planes[p].size());
        if (!problem.empty()) return "plane " + std::to_string(p) + " " + problem;
        src[p] = planes[p].data();
      }
      pos += plen;
    }
    JoinPlanes(src.data(), 4, 150000, out.data());
    return "";
  };
  // Changes go to the coded planes, where the block-by-block decoder runs.
  std::vector<size_t> coded_bytes;
  for (size_t p = 0, pos = 2 + 4 * 5; p < 4; ++p) {
    const size_t plen = GetU32(stored.data() + 2 + p * 5 + 1);
    if (stored[2 + p * 5] == 1) {
      for (size_t i = pos; i < pos + plen; ++i) coded_bytes.push_back(i);
    }
    pos += plen;
  }
  ASSERT_FALSE(coded_bytes.empty());
  std::mt19937 rng(9);
  size_t failed = 0, decoded = 0;
  for (int k = 0; k < 400; ++k) {
    Bytes changed = stored;
    const size_t at = coded_bytes[k < 100 ? size_t(k) : rng() % coded_bytes.size()];
    changed[at] ^= uint8_t(1 + rng() % 255);
    Bytes got(in.size()), want(in.size());
    const Status s = DecodeChunk(uint8_t(Codec::kBytePlaneZstd), changed.data(), changed.size(),
                                 got.data(), got.size());
    const std::string problem = reference(changed, want);
    ASSERT_EQ(s.ok(), problem.empty()) << "byte " << at << ": " << s.ToString();
    if (s.ok()) {
      ASSERT_TRUE(got == want) << "byte " << at;
      ++decoded;
    } else {
      EXPECT_NE(s.ToString().find(problem), std::string::npos) << s.ToString();
      ++failed;
    }
  }
  EXPECT_GT(failed, 10u);
  EXPECT_GT(decoded, 10u);
}

}  // namespace
}  // namespace ckfmt
