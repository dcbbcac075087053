// The check that a literals-only zstd frame decodes without decoding it
// (format/src/zstd_literals_check.h), and CheckChunkDecodes over it: it
// must pass the frames libzstd and ckfmt's writers make of training data,
// tell nothing it is unsure of, and never pass a frame that does not decode
// to exactly the size asked, however the frame was damaged.
#include "zstd_literals_check.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ckfmt/codec.h"
#include "zstd_frame.h"
#include "zstd_literals.h"
#include "zstd_literals_walk.h"
#include "zstd_test_frames.h"

namespace ckfmt {
namespace {

using test::Bytes;
using test::Compress;
using test::TrainingBytes;

bool Passes(const Bytes& frame, size_t n) {
  return LiteralsOnlyFrameDecodes(frame.data(), frame.size(), n);
}

// libzstd's answer, as a ckfmt reader asks it: exactly one frame, exactly n.
bool Decodes(const Bytes& frame, size_t n) {
  Bytes out(n);
  return DecodeOneZstdFrame(frame.data(), frame.size(), out.data(), n).empty();
}

TEST(ZstdLiteralsCheckTest, PassesLibzstdFramesOfTrainingValues) {
  for (bool bf16 : {true, false}) {
    for (size_t n : {size_t{4} << 20, size_t{300} << 10, size_t{5000}, size_t{700}}) {
      for (int level : {1, 3}) {
        SCOPED_TRACE(testing::Message() << (bf16 ? "bf16 " : "fp32 ") << n << " level " << level);
        const Bytes in = TrainingBytes(n, bf16, uint32_t(n));
        const Bytes frame = Compress(in, level);
        ASSERT_TRUE(Decodes(frame, n));
        // Level 3 finds a few matches in bf16 values, which the check
        // cannot tell about; CheckChunkDecodes then decodes.
        if (level == 1) {
          EXPECT_TRUE(Passes(frame, n));
        }
        EXPECT_TRUE(CheckChunkDecodes(1, frame.data(), frame.size(), n).ok());
        EXPECT_FALSE(Passes(frame, n - 1));
        EXPECT_FALSE(Passes(frame, n + 1));
      }
    }
  }
}

TEST(ZstdLiteralsCheckTest, PassesFramesOfTheByteplaneWriter) {
  // Direct (4-bit) and FSE-coded weights, one code for the whole frame.
  for (bool narrow : {true, false}) {
    Bytes in = TrainingBytes(3 * (128 << 10) + 777, true, 5);
    if (narrow) {
      for (auto& b : in) b &= 0x3f;  // at most 64 symbols: weights written directly
    }
    std::array<uint32_t, 256> counts{};
    for (size_t i = 0; i < in.size(); i += 16) ++counts[in[i]];
    Bytes frame(in.size() + in.size() / 8 + 1024);
    frame.resize(
        WriteLiteralsFrame(counts.data(), in.data(), in.size(), frame.data(), frame.size()));
    ASSERT_FALSE(frame.empty());
    ASSERT_TRUE(Decodes(frame, in.size()));
    EXPECT_TRUE(Passes(frame, in.size())) << (narrow ? "narrow" : "wide");
  }
}

TEST(ZstdLiteralsCheckTest, CannotTellAboutFramesWithMatchesAndSaysSo) {
  Bytes text;
  for (int i = 0; text.size() < (200 << 10); ++i) {
    const std::string line = "step " + std::to_string(i % 97) + " loss 0.25 lr 3e-4\n";
    text.insert(text.end(), line.begin(), line.end());
  }
  const Bytes frame = Compress(text, 1);
  ASSERT_TRUE(Decodes(frame, text.size()));
  EXPECT_FALSE(Passes(frame, text.size()));
  // CheckChunkDecodes then decodes it.
  EXPECT_TRUE(CheckChunkDecodes(1, frame.data(), frame.size(), text.size()).ok());
}

TEST(ZstdLiteralsCheckTest, CannotTellAboutChecksumsDictionariesTrailingBytesOrUnmarkedStreams) {
  const Bytes in = TrainingBytes(64 << 10, false, 9);
  const Bytes with_sum = Compress(in, 3, true);
  ASSERT_TRUE(Decodes(with_sum, in.size()));
  EXPECT_FALSE(Passes(with_sum, in.size()));

  Bytes frame = Compress(in, 1);
  Bytes dict_id = frame;
  dict_id[4] |= 1;  // Dictionary_ID_Flag: a 1-byte id follows the descriptor
  dict_id.insert(dict_id.begin() + 5, 7);
  EXPECT_FALSE(Passes(dict_id, in.size()));

  // The last stream's last byte, before the block's Number_of_Sequences:
  // without its start mark the stream is malformed (RFC 8878 §4.2.2; found
  // by fuzzing, when the fast walk read the mark of such a stream
  // regardless). libzstd 1.5.4 decodes it all the same, so CheckChunkDecodes
  // does too, by decoding.
  Bytes unmarked = frame;
  unmarked[unmarked.size() - 2] = 0;
  EXPECT_FALSE(Passes(unmarked, in.size()));
  EXPECT_EQ(CheckChunkDecodes(1, unmarked.data(), unmarked.size(), in.size()).ok(),
            Decodes(unmarked, in.size()));

  Bytes trailing = frame;
  trailing.push_back(0);
  EXPECT_FALSE(Passes(trailing, in.size()));
  for (size_t cut : {size_t{1}, size_t{100}, frame.size() - 6}) {
    EXPECT_FALSE(Passes(Bytes(frame.begin(), frame.end() - cut), in.size())) << cut;
  }
  EXPECT_FALSE(LiteralsOnlyFrameDecodes(frame.data(), 0, in.size()));
}

// Single-bit changes of a frame of two blocks (every bit of its first and
// last 300 bytes, which hold the frame's header, the first block's headers,
// code and jump table, and the last stream's end; bits spread over the
// rest): whenever the
// check passes the changed frame, libzstd decodes it to exactly the size
// asked. (Most changes inside a Huffman stream leave a valid stream of
// other symbols, which the chunk's checksum, not the codec, catches.)
TEST(ZstdLiteralsCheckTest, NeverPassesAFrameThatDoesNotDecode) {
  for (bool bf16 : {true, false}) {
    const Bytes in = TrainingBytes((128 << 10) + 3000, bf16, 11);
    const Bytes frame = Compress(in, 1);
    ASSERT_TRUE(Passes(frame, in.size()));
    size_t passed = 0, refused = 0;
    Bytes changed = frame;
    for (size_t i = 0; i < frame.size(); i += (i < 300 || i + 300 > frame.size()) ? 1 : 499) {
      for (int bit = 0; bit < 8; ++bit) {
        changed[i] ^= uint8_t(1 << bit);
        if (Passes(changed, in.size())) {
          ++passed;
          ASSERT_TRUE(Decodes(changed, in.size())) << "byte " << i << " bit " << bit;
        } else {
          ++refused;
        }
        changed[i] = frame[i];
      }
    }
    EXPECT_GT(passed, 100u);
    EXPECT_GT(refused, 100u);
  }
}

// Blocks of a single-segment frame whose literals reuse the code before
// them (Treeless_Literals_Block, RFC 8878 §3.1.1.3.1.1).
size_t TreelessBlocks(const Bytes& frame) {
  const int fcs_flag = frame[4] >> 6;  // Frame_Content_Size: 1, 2, 4 or 8 bytes
  size_t pos = 5 + (fcs_flag == 0 ? 1 : size_t{1} << fcs_flag), n = 0;
  for (bool last = false; !last && pos + 3 <= frame.size();) {
    const uint32_t bh = frame[pos] | frame[pos + 1] << 8 | frame[pos + 2] << 16;
    last = bh & 1;
    const size_t size = bh >> 3;
    pos += 3;
    if (((bh >> 1) & 3) == 2 && pos < frame.size() && (frame[pos] & 3) == 3) ++n;
    pos += ((bh >> 1) & 3) == 1 ? 1 : size;
  }
  return n;
}

// The vector walk's two-level length table: a canonical code's lengths
// split into it exactly; lengths that change inside more than four 7-bit
// prefixes (no Huffman code's) do not.
TEST(ZstdLiteralsCheckTest, SplitsACanonicalCodesLengths) {
  // Codes of 11, 10, 9, 8 and then 7 bits, longest first (§4.2.1.3):
  // 3 + 2 * 3 + 4 * 5 + 8 * 5 = 69 windows of 8-bit and longer codes, so
  // the first two prefixes mix lengths; 7-bit codes fill the rest.
  std::array<uint8_t, 2048> lengths{};
  size_t w = 0;
  for (auto [bits, codes] : {std::pair{11, 3}, {10, 3}, {9, 5}, {8, 5}}) {
    for (int c = 0; c < codes; ++c) {
      for (int k = 0; k < 1 << (11 - bits); ++k) lengths[w++] = uint8_t(bits);
    }
  }
  w = (w + 15) / 16 * 16;  // the next code of 7 bits starts on its own 16 windows
  for (size_t i = 69; i < w; ++i) lengths[i] = 8;
  for (size_t i = w; i < lengths.size(); ++i) lengths[i] = 7;
  SplitLengths split;
  ASSERT_TRUE(SplitLengthTable(lengths.data(), split));
  for (size_t x = 0; x < lengths.size(); ++x) {
    const uint8_t top = split.top[x >> 4];
    const uint8_t got = top & 0x80 ? split.low[(top & 0x30) | (x & 15)] : top;
    ASSERT_EQ(got, lengths[x]) << "window " << x;
  }
  for (size_t p = 0; p < 5; ++p) lengths[16 * p + 3] = 9;  // five mixed prefixes
  EXPECT_FALSE(SplitLengthTable(lengths.data(), split));
}

// Lengths that fall as a canonical code's do, window by window, as a
// 16-entry table and thresholds: exactly the lengths. Falls at multiples of
// 128 go to the table, the rest to thresholds, a fall of two as two equal
// ones. A table whose lengths rise somewhere is no canonical code's.
TEST(ZstdLiteralsCheckTest, ThresholdsGiveACanonicalCodesLengths) {
  std::array<uint8_t, 2048> lengths{};
  const std::pair<uint32_t, uint8_t> runs[] = {{0, 11},  {6, 9},   {18, 8},   {74, 7},
                                               {128, 5}, {384, 4}, {1000, 2}, {2047, 1}};
  for (const auto& [from, length] : runs) {
    std::fill(lengths.begin() + from, lengths.end(), length);
  }
  LengthThresholds t;
  ASSERT_TRUE(ThresholdsOf(lengths.data(), t));
  EXPECT_EQ(t.fines, 7);  // 6, 6, 18, 74, 1000, 1000, 2047; the table takes 128 and 384
  for (int i = t.fines; i < LengthThresholds::kMax; ++i) EXPECT_EQ(t.fine[i], 2048);
  for (uint32_t x = 0; x < lengths.size(); ++x) {
    int length = t.coarse[x >> 7];
    for (int i = 0; i < t.fines; ++i) length -= t.fine[i] <= x;
    ASSERT_EQ(length, lengths[x]) << "window " << x;
  }
  lengths[100] = 8;  // a length that rises
  EXPECT_FALSE(ThresholdsOf(lengths.data(), t));
}

// Each vector walk takes sixteen blocks of one code at a time, as ckfmt's
// zstd writer makes them, then eight, and the scalar loop the rest (34
// blocks: 16, 16 and 2; 26: 16, 8 and 2; 14: 8 and 6); each must answer as
// the scalar walk does for the frame and for every change to it (a changed
// code moves where its stream ends, a changed jump table where streams
// start), since a lane that moved differently would pass or refuse
// differently.
TEST(ZstdLiteralsCheckTest, VectorWalksAnswerAsTheScalarWalk) {
  std::vector<WalkKind> walks;
  for (WalkKind walk : {WalkKind::kAvx2, WalkKind::kAvx512}) {
    if (WalkAvailable(walk)) walks.push_back(walk);
  }
  if (walks.empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  auto passes = [](const Bytes& frame, size_t n, WalkKind walk) {
    LimitWalk(walk);
    const bool ok = Passes(frame, n);
    LimitWalk(WalkKind::kAvx512);
    return ok;
  };
  for (WalkKind walk : walks) {
    for (size_t blocks : {34, 26, 14}) {
      const bool bf16 = blocks != 26;
      SCOPED_TRACE(testing::Message() << (walk == WalkKind::kAvx2 ? "AVX2 " : "AVX-512 ") << blocks
                                      << " blocks of " << (bf16 ? "bf16" : "fp32"));
      const Bytes in = TrainingBytes(((blocks - 1) << 17) + 4000, bf16, 17);
      Bytes frame(MaxEncodedSize(Codec::kZstd, in.size()));
      auto n = EncodeChunk(Codec::kZstd, 1, bf16 ? 2 : 4, in.data(), in.size(), frame.data(),
                           frame.size());
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      frame.resize(*n);
      ASSERT_EQ(TreelessBlocks(frame), blocks - 1);  // all but the first reuse its code
      ASSERT_TRUE(passes(frame, in.size(), walk));
      ASSERT_TRUE(passes(frame, in.size(), WalkKind::kScalar));
      std::mt19937 rng{uint32_t(blocks)};
      size_t passed = 0;
      for (int k = 0; k < 300; ++k) {
        Bytes changed = frame;
        const size_t at = rng() % changed.size();
        changed[at] ^= uint8_t(1 + rng() % 255);
        const bool vector = passes(changed, in.size(), walk);
        ASSERT_EQ(vector, passes(changed, in.size(), WalkKind::kScalar)) << "byte " << at;
        if (vector) {
          ASSERT_TRUE(Decodes(changed, in.size())) << "byte " << at;
          ++passed;
        }
      }
      EXPECT_GT(passed, 10u);
    }
  }
}

TEST(ZstdLiteralsCheckTest, CheckChunkDecodesAgreesWithDecodeChunk) {
  const Bytes in = TrainingBytes(96 << 10, true, 13);
  for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kBytePlaneZstd}) {
    SCOPED_TRACE(CodecName(uint8_t(codec)));
    Bytes stored(MaxEncodedSize(codec, in.size()));
    auto n = EncodeChunk(codec, 1, 2, in.data(), in.size(), stored.data(), stored.size());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    stored.resize(*n);
    Bytes out(in.size() + 2);  // the largest raw size asked below
    std::mt19937 rng{uint32_t(codec)};
    for (int k = 0; k < 400; ++k) {
      Bytes changed = stored;
      if (k > 0) changed[rng() % changed.size()] ^= uint8_t(1 + rng() % 255);
      for (size_t raw : {in.size(), in.size() - 2, in.size() + 2}) {
        const Status decoded =
            DecodeChunk(uint8_t(codec), changed.data(), changed.size(), out.data(), raw);
        const Status checked =
            CheckChunkDecodes(uint8_t(codec), changed.data(), changed.size(), raw);
        ASSERT_EQ(checked.ok(), decoded.ok())
            << "change " << k << ", raw size " << raw << ": " << decoded.ToString();
        if (!decoded.ok()) {
          EXPECT_EQ(checked.ToString(), decoded.ToString());
        }
      }
    }
  }
  const Status unknown = CheckChunkDecodes(9, in.data(), in.size(), in.size());
  EXPECT_EQ(unknown.code(), StatusCode::kUnsupported) << unknown.ToString();
}

}  // namespace
}  // namespace ckfmt
