// Header and footer encoding: round trips, and every corruption detected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "ckfmt/checksum.h"
#include "ckfmt/file_layout.h"

namespace {

using namespace ckfmt;

constexpr char kFile[] = "/ckpt/file-under-test.ckfmt";

struct HeaderBuf {
  uint8_t b[kHeaderSize];
};
struct FooterBuf {
  uint8_t b[kFooterSize];
};

HeaderBuf GoodHeader() {
  HeaderBuf h;
  EncodeHeader(FileHeader{}, h.b);
  return h;
}

FooterBuf MakeFooter(uint64_t off, uint64_t len, uint64_t sum = 0x1122334455667788ull,
                     uint16_t major = kMajorVersion, uint16_t minor = kMinorVersion) {
  FooterBuf f;
  FileFooter ff;
  ff.index_offset = off;
  ff.index_length = len;
  ff.index_checksum = sum;
  ff.major = major;
  ff.minor = minor;
  EncodeFooter(ff, f.b);
  return f;
}

// Recomputes the footer's own checksum after a test edited a field, so the
// only defect is the edited field.
void Reseal(FooterBuf& f) { PutU64(f.b + 48, Checksum(f.b, 48)); }

TEST(LittleEndianTest, PutGetRoundTrip) {
  uint8_t b[8];
  PutU16(b, 0xBEEF);
  EXPECT_EQ(b[0], 0xEF);
  EXPECT_EQ(b[1], 0xBE);
  EXPECT_EQ(GetU16(b), 0xBEEF);
  PutU32(b, 0xDEADBEEFu);
  EXPECT_EQ(b[0], 0xEF);
  EXPECT_EQ(b[3], 0xDE);
  EXPECT_EQ(GetU32(b), 0xDEADBEEFu);
  PutU64(b, 0x0102030405060708ull);
  EXPECT_EQ(b[0], 0x08);
  EXPECT_EQ(b[7], 0x01);
  EXPECT_EQ(GetU64(b), 0x0102030405060708ull);
  PutU64(b, UINT64_MAX);
  EXPECT_EQ(GetU64(b), UINT64_MAX);
}

TEST(LayoutTest, AlignHelpers) {
  EXPECT_EQ(AlignUp(0), 0u);
  EXPECT_EQ(AlignUp(1), 4096u);
  EXPECT_EQ(AlignUp(4096), 4096u);
  EXPECT_EQ(AlignUp(4097), 8192u);
  EXPECT_TRUE(IsAligned(0));
  EXPECT_TRUE(IsAligned(8192));
  EXPECT_FALSE(IsAligned(8193));
}

// The reference writer's cut of uncompressed chunks (FORMAT.md §5.2).
TEST(LayoutTest, CutAtGridEndsChunksOnTheGrid) {
  constexpr uint64_t kGrid = 4 << 20;
  EXPECT_EQ(CutAtGrid(4096, kGrid, kGrid, 2), kGrid - 4096) << "after the header";
  EXPECT_EQ(CutAtGrid(kGrid, kGrid, kGrid, 4), kGrid) << "on the grid: whole";
  EXPECT_EQ(CutAtGrid(3 * kGrid + 8192, 4096, kGrid, 4), 4096u) << "fits before the line";
  EXPECT_EQ(CutAtGrid(2 * kGrid - 4096, 100, kGrid, 1), 100u) << "ends before the line";
  EXPECT_EQ(CutAtGrid(2 * kGrid - 4096, 8192, kGrid, 16), 4096u);
  // No cut where one would leave a chunk that is not whole 4096-byte
  // blocks before a piece's last: the grid is not whole blocks, or the
  // element size does not divide 4096.
  EXPECT_EQ(CutAtGrid(4096, 6000, 6000, 2), 6000u);
  EXPECT_EQ(CutAtGrid(4096, kGrid, kGrid, 3), kGrid);
  EXPECT_EQ(CutAtGrid(4096, kGrid, 0, 2), kGrid);
}

TEST(HeaderTest, RoundTrip) {
  HeaderBuf h = GoodHeader();
  EXPECT_EQ(std::memcmp(h.b, kHeaderMagic.data(), 8), 0);
  auto r = DecodeHeader(h.b, kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->major, kMajorVersion);
  EXPECT_EQ(r->minor, kMinorVersion);
}

TEST(HeaderTest, EncodeZeroFillsReservedBytes) {
  HeaderBuf h;
  std::memset(h.b, 0xAB, sizeof h.b);
  EncodeHeader(FileHeader{}, h.b);
  for (size_t i = 16; i < kHeaderSize; ++i) ASSERT_EQ(h.b[i], 0) << i;
}

TEST(HeaderTest, NewerMinorVersionIsAccepted) {
  HeaderBuf h;
  EncodeHeader(FileHeader{kMajorVersion, 7}, h.b);
  auto r = DecodeHeader(h.b, kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->minor, 7);
}

TEST(HeaderTest, EveryMagicByteChecked) {
  for (size_t i = 0; i < 8; ++i) {
    HeaderBuf h = GoodHeader();
    h.b[i] ^= 0x01;
    auto r = DecodeHeader(h.b, kFile);
    ASSERT_FALSE(r.ok()) << "magic byte " << i;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
    EXPECT_NE(r.status().message().find(kFile), std::string::npos) << r.status().message();
  }
}

TEST(HeaderTest, OtherMajorVersionIsUnsupported) {
  for (uint16_t major : {uint16_t{0}, uint16_t{2}, uint16_t{0xFFFF}}) {
    HeaderBuf h;
    EncodeHeader(FileHeader{major, 0}, h.b);
    auto r = DecodeHeader(h.b, kFile);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported) << major;
    EXPECT_NE(r.status().message().find(std::to_string(major)), std::string::npos);
  }
}

TEST(HeaderTest, FlagsAndReservedBytesMustBeZero) {
  for (size_t i : {size_t{12}, size_t{13}, size_t{15}, size_t{16}, size_t{100}, size_t{2048},
                   size_t{kHeaderSize - 1}}) {
    HeaderBuf h = GoodHeader();
    h.b[i] = 0x40;
    auto r = DecodeHeader(h.b, kFile);
    ASSERT_FALSE(r.ok()) << "byte " << i;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << "byte " << i;
  }
}

TEST(FooterTest, RoundTrip) {
  // Index right after the header, file = header + one block.
  FooterBuf f = MakeFooter(4096, 100, 0xCAFEF00D, kMajorVersion, 3);
  EXPECT_EQ(std::memcmp(f.b + 56, kFooterMagic.data(), 8), 0);
  auto r = DecodeFooter(f.b, 8192, kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->index_offset, 4096u);
  EXPECT_EQ(r->index_length, 100u);
  EXPECT_EQ(r->index_checksum, 0xCAFEF00Du);
  EXPECT_EQ(r->major, kMajorVersion);
  EXPECT_EQ(r->minor, 3);
}

TEST(FooterTest, IndexFillingItsLastBlockExactly) {
  // Index ends exactly where the footer begins.
  FooterBuf f = MakeFooter(8192, 4096 - kFooterSize);
  EXPECT_TRUE(DecodeFooter(f.b, 12288, kFile).ok());
  // Index spanning several blocks.
  f = MakeFooter(8192, 3 * 4096 + 5);
  EXPECT_TRUE(DecodeFooter(f.b, 8192 + 4 * 4096, kFile).ok());
  // An empty index is at least well placed (ParseIndex refuses it later).
  f = MakeFooter(4096, 0);
  EXPECT_TRUE(DecodeFooter(f.b, 8192, kFile).ok());
}

TEST(FooterTest, EveryMagicByteChecked) {
  for (size_t i = 56; i < 64; ++i) {
    FooterBuf f = MakeFooter(4096, 100);
    f.b[i] ^= 0x20;
    auto r = DecodeFooter(f.b, 8192, kFile);
    ASSERT_FALSE(r.ok()) << i;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
    EXPECT_NE(r.status().message().find(kFile), std::string::npos);
  }
}

TEST(FooterTest, EveryChecksummedByteChecked) {
  // Bytes 0..47 are covered by the footer checksum, 48..55 are the checksum.
  for (size_t i = 0; i < 56; ++i) {
    FooterBuf f = MakeFooter(4096, 100);
    f.b[i] ^= 0x01;
    auto r = DecodeFooter(f.b, 8192, kFile);
    ASSERT_FALSE(r.ok()) << "footer byte " << i;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << "footer byte " << i;
  }
}

TEST(FooterTest, OtherMajorVersionIsUnsupported) {
  FooterBuf f = MakeFooter(4096, 100, 1, 2, 0);
  auto r = DecodeFooter(f.b, 8192, kFile);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
}

TEST(FooterTest, ReservedAndFlagsMustBeZeroEvenWhenResealed) {
  for (size_t i : {size_t{28}, size_t{31}, size_t{32}, size_t{40}, size_t{47}}) {
    FooterBuf f = MakeFooter(4096, 100);
    f.b[i] = 1;
    Reseal(f);
    auto r = DecodeFooter(f.b, 8192, kFile);
    ASSERT_FALSE(r.ok()) << "byte " << i;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << "byte " << i;
  }
}

TEST(FooterTest, IndexBoundsChecked) {
  struct Case {
    uint64_t off, len, file_size;
    const char* what;
  };
  const Case cases[] = {
      {4095, 10, 8192, "offset inside the header"},
      {0, 10, 8192, "offset zero"},
      {4097, 10, 8192, "unaligned offset"},
      {8192, 10, 8192, "offset at the footer block"},
      {12288, 10, 8192, "offset past the end"},
      {4096, 4096 - kFooterSize + 1, 8192, "index runs into the footer"},
      {4096, UINT64_MAX, 8192, "length overflows"},
      {UINT64_MAX & ~4095ull, 10, 8192, "huge offset"},
      {4096, 100, 12288, "a whole empty block between index and footer"},
      {4096, 100, 8192 + 100, "file size not a multiple of 4096"},
      {4096, 100, 8191, "file size one short"},
      {4096, 100, 4096, "file smaller than two blocks"},
      {0, 0, 0, "empty file"},
  };
  for (const auto& c : cases) {
    FooterBuf f = MakeFooter(c.off, c.len);
    auto r = DecodeFooter(f.b, c.file_size, kFile);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << c.what;
    EXPECT_NE(r.status().message().find(kFile), std::string::npos) << c.what;
  }
}

TEST(FooterTest, IndexLargerThanLimitRejected) {
  const uint64_t len = kMaxIndexSize + 1;
  const uint64_t file_size = AlignUp(4096 + len + kFooterSize);
  FooterBuf f = MakeFooter(4096, len);
  auto r = DecodeFooter(f.b, file_size, kFile);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  // Exactly at the limit is fine.
  FooterBuf g = MakeFooter(4096, kMaxIndexSize);
  EXPECT_TRUE(DecodeFooter(g.b, AlignUp(4096 + kMaxIndexSize + kFooterSize), kFile).ok());
}

TEST(VersionTest, HeaderAndFooterMustAgree) {
  FileFooter f;
  EXPECT_TRUE(CheckVersionsAgree(FileHeader{1, 0}, f, kFile).ok());
  f.minor = 2;
  EXPECT_TRUE(CheckVersionsAgree(FileHeader{1, 2}, f, kFile).ok());
  Status st = CheckVersionsAgree(FileHeader{1, 0}, f, kFile);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find(kFile), std::string::npos);
  f.minor = 0;
  f.major = 1;
  EXPECT_EQ(CheckVersionsAgree(FileHeader{2, 0}, f, kFile).code(), StatusCode::kCorruption);
}

TEST(ChecksumTest, IsXxh3SeedZero) {
  // Known XXH3-64 values (seed 0).
  EXPECT_EQ(Checksum("", 0), 0x2D06800538D394C2ull);
  const char abc[] = "abc";
  EXPECT_EQ(Checksum(abc, 3), 0x78AF5F94892F3950ull);
  EXPECT_NE(Checksum("abd", 3), Checksum(abc, 3));
}

TEST(ChecksumTest, LongInputsMatchTheScalarReference) {
  // Above 240 bytes XXH3 runs its vector loop, which may be SSE2, AVX2 or
  // AVX-512 depending on the build and the CPU; the values are the
  // portable scalar code's.
  std::vector<uint8_t> b((1 << 20) + 77), dst(b.size());
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i * 2654435761u >> 11);
  const std::pair<size_t, uint64_t> known[] = {
      {241, 0xE1B13E283F955891ull},    {1024, 0x7809D9A56AD93DDFull},
      {1025, 0x2B6DB20917198AE5ull},   {100000, 0xD2E038F9EE30079Eull},
      {b.size(), 0x630EBE03E459A7B4ull}};
  for (const auto& [n, h] : known) {
    EXPECT_EQ(Checksum(b.data(), n), h) << n;
    EXPECT_EQ(CopyAndChecksum(dst.data(), b.data(), n), h) << n;
  }
}

TEST(ChecksumTest, CopyAndChecksumMatchesChecksumAtEverySize) {
  // Sizes around the internal block size and odd tails.
  std::vector<uint8_t> src(300000), dst(src.size());
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 2654435761u >> 13);
  for (size_t n : {0ul, 1ul, 4095ul, 65535ul, 65536ul, 65537ul, 131072ul, 200001ul, 300000ul}) {
    std::fill(dst.begin(), dst.end(), 0xEE);
    EXPECT_EQ(CopyAndChecksum(dst.data(), src.data(), n), Checksum(src.data(), n)) << n;
    EXPECT_TRUE(std::equal(src.begin(), src.begin() + n, dst.begin())) << n;
    if (n < dst.size()) {
      EXPECT_EQ(dst[n], 0xEE) << "wrote past " << n;
    }
  }
}

TEST(ChecksumTest, StreamMatchesChecksumHoweverTheBytesAreSplit) {
  std::vector<uint8_t> b(700000);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i * 2654435761u >> 9);
  for (size_t piece : {1ul, 63ul, 4096ul, 65536ul, 262144ul, 700000ul}) {
    for (size_t n : {0ul, 1ul, 240ul, 241ul, 262144ul, 700000ul}) {
      ChecksumStream s;
      for (size_t at = 0; at < n; at += piece) s.Update(b.data() + at, std::min(piece, n - at));
      EXPECT_EQ(s.Digest(), Checksum(b.data(), n)) << "pieces of " << piece << ", " << n << " bytes";
    }
  }
}

TEST(ChecksumTest, CopyAndUpdateCopiesAndMatchesChecksumHoweverSplit) {
  // Pieces below and above the size from which copies store around the cache.
  std::vector<uint8_t> src(700000), dst(src.size() + 1);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 2654435761u >> 9);
  for (size_t piece : {1ul, 4096ul, 65537ul, 262144ul, 300001ul, 700000ul}) {
    std::fill(dst.begin(), dst.end(), 0xEE);
    ChecksumStream s;
    for (size_t at = 0; at < src.size(); at += piece) {
      s.CopyAndUpdate(dst.data() + at, src.data() + at, std::min(piece, src.size() - at));
    }
    EXPECT_EQ(s.Digest(), Checksum(src.data(), src.size())) << "pieces of " << piece;
    EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin())) << "pieces of " << piece;
    EXPECT_EQ(dst.back(), 0xEE) << "wrote past the end, pieces of " << piece;
  }
}

TEST(ChecksumTest, LargeCopiesMatchAtEveryDestinationAlignment) {
  // Large copies take the streaming-store path, which aligns its stores.
  std::vector<uint8_t> src((1 << 20) + 77), dst(src.size() + 32);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 2654435761u >> 11);
  for (size_t shift : {0ul, 1ul, 7ul, 15ul, 16ul, 31ul}) {
    for (size_t n : {(256ul << 10), (256ul << 10) + 13, src.size()}) {
      std::fill(dst.begin(), dst.end(), 0xEE);
      EXPECT_EQ(CopyAndChecksum(dst.data() + shift, src.data(), n), Checksum(src.data(), n));
      EXPECT_TRUE(std::equal(src.begin(), src.begin() + n, dst.begin() + shift)) << shift << " " << n;
      EXPECT_EQ(dst[shift + n], 0xEE) << "wrote past " << n;
      if (shift > 0) {
        EXPECT_EQ(dst[shift - 1], 0xEE) << "wrote before the destination";
      }
      std::fill(dst.begin(), dst.end(), 0xEE);
      CopyUncached(dst.data() + shift, src.data(), n);
      EXPECT_TRUE(std::equal(src.begin(), src.begin() + n, dst.begin() + shift)) << shift << " " << n;
      EXPECT_EQ(dst[shift + n], 0xEE) << "wrote past " << n;
    }
  }
}

}  // namespace
