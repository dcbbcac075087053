// Chunk codecs: round trips and every decode failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ckfmt/codec.h"
#include "ckfmt/file_layout.h"

namespace {

using namespace ckfmt;

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

std::string Compressible(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i / 64) % 7);
  return s;
}

std::string Encode(Codec codec, const std::string& raw, int level = 3, size_t esize = 1) {
  std::string out(MaxEncodedSize(codec, raw.size()), '\0');
  auto n = EncodeChunk(codec, level, esize, raw.data(), raw.size(), out.data(), out.size());
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  if (!n.ok()) return {};
  EXPECT_LE(*n, out.size());
  out.resize(*n);
  return out;
}

TEST(CodecTest, Names) {
  EXPECT_TRUE(IsKnownCodec(0));
  EXPECT_TRUE(IsKnownCodec(1));
  EXPECT_TRUE(IsKnownCodec(2));
  EXPECT_FALSE(IsKnownCodec(3));
  EXPECT_FALSE(IsKnownCodec(255));
  EXPECT_EQ(CodecName(0), "none");
  EXPECT_EQ(CodecName(1), "zstd");
  EXPECT_EQ(CodecName(2), "byteplane-zstd");
  EXPECT_EQ(CodecName(9), "unknown");
  for (uint8_t id = 0; IsKnownCodec(id); ++id) {
    auto c = CodecFromName(CodecName(id));
    ASSERT_TRUE(c.ok()) << CodecName(id);
    EXPECT_EQ(static_cast<uint8_t>(*c), id);
  }
  EXPECT_EQ(CodecFromName("lz4").status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(CodecFromName("unknown").ok());
}

TEST(CodecTest, NoneRoundTrip) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{4096}, size_t{100003}}) {
    std::string raw = RandomBytes(n, n);
    std::string stored = Encode(Codec::kNone, raw);
    EXPECT_EQ(stored, raw);
    std::string back(n, '\x55');
    Status st = DecodeChunk(0, stored.data(), stored.size(), back.data(), n);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(back, raw);
  }
}

TEST(CodecTest, ZstdRoundTrip) {
  for (size_t n : {size_t{1}, size_t{17}, size_t{4096}, size_t{12289}, size_t{1 << 20}}) {
    for (int level : {1, 3, 19}) {
      if (level == 19 && n > 4096) continue;  // keep it quick
      for (bool random : {false, true}) {
        std::string raw = random ? RandomBytes(n, n + level) : Compressible(n);
        std::string stored = Encode(Codec::kZstd, raw, level);
        if (!random && n >= 4096) {
          EXPECT_LT(stored.size(), raw.size() / 4);
        }
        std::string back(n, '\0');
        Status st = DecodeChunk(1, stored.data(), stored.size(), back.data(), n);
        ASSERT_TRUE(st.ok()) << st.ToString() << " n=" << n << " level=" << level;
        EXPECT_EQ(back, raw);
      }
    }
  }
}

TEST(CodecTest, ZstdEmptyInput) {
  std::string stored = Encode(Codec::kZstd, "");
  EXPECT_FALSE(stored.empty());  // a frame header at least
  char dummy = 0;
  EXPECT_TRUE(DecodeChunk(1, stored.data(), stored.size(), &dummy, 0).ok());
}

// An empty chunk's buffers may be null (an empty vector's data()); found by
// tests/fuzz (UBSan: null passed to memcpy).
TEST(CodecTest, EmptyChunksWithNullBuffersRoundTrip) {
  for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kBytePlaneZstd}) {
    SCOPED_TRACE(std::string(CodecName(uint8_t(codec))));
    std::string out(MaxEncodedSize(codec, 0), '\0');
    auto n = EncodeChunk(codec, 1, 4, nullptr, 0, out.empty() ? nullptr : out.data(), out.size());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_TRUE(DecodeChunk(uint8_t(codec), out.data(), *n, nullptr, 0).ok());
  }
}

TEST(CodecTest, MaxEncodedSizeBoundsIncompressibleData) {
  EXPECT_EQ(MaxEncodedSize(Codec::kNone, 1000), 1000u);
  EXPECT_GE(MaxEncodedSize(Codec::kZstd, 1000), 1000u);
  std::string raw = RandomBytes(1 << 16, 7);
  std::string stored = Encode(Codec::kZstd, raw, 1);
  EXPECT_LE(stored.size(), MaxEncodedSize(Codec::kZstd, raw.size()));
}

TEST(CodecTest, UnknownCodecIsUnsupported) {
  std::string raw = RandomBytes(64, 1);
  std::string out(64, '\0');
  for (uint8_t id : {uint8_t{3}, uint8_t{9}, uint8_t{127}, uint8_t{255}}) {
    Status st = DecodeChunk(id, raw.data(), raw.size(), out.data(), out.size());
    EXPECT_EQ(st.code(), StatusCode::kUnsupported) << int(id) << ": " << st.ToString();
    EXPECT_NE(st.message().find(std::to_string(id)), std::string::npos) << st.message();
  }
}

TEST(CodecTest, NoneWithWrongSizeIsCorruption) {
  std::string raw = RandomBytes(64, 1);
  std::string out(128, '\0');
  EXPECT_EQ(DecodeChunk(0, raw.data(), 64, out.data(), 63).code(), StatusCode::kCorruption);
  EXPECT_EQ(DecodeChunk(0, raw.data(), 64, out.data(), 65).code(), StatusCode::kCorruption);
}

TEST(CodecTest, CorruptZstdIsCorruption) {
  const size_t n = 50000;
  std::string raw = Compressible(n);
  std::string good = Encode(Codec::kZstd, raw);
  std::string out(n, '\0');
  ASSERT_TRUE(DecodeChunk(1, good.data(), good.size(), out.data(), n).ok());

  auto expect_corrupt = [&](const std::string& bad, const char* what) {
    Status st = DecodeChunk(1, bad.data(), bad.size(), out.data(), n);
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << what << ": " << st.ToString();
  };
  std::string bad = good;
  bad[0] ^= 0x01;  // frame magic
  expect_corrupt(bad, "magic");
  expect_corrupt(good.substr(0, good.size() - 1), "truncated by one");
  expect_corrupt(good.substr(0, good.size() / 2), "truncated by half");
  expect_corrupt(good.substr(0, 3), "truncated to 3 bytes");
  const std::string header_only = good.substr(0, 5);
  expect_corrupt(header_only, "truncated inside the frame header");
  EXPECT_NE(DecodeChunk(1, header_only.data(), 5, out.data(), n).message().find("frame header"),
            std::string::npos);
  expect_corrupt(good + "garbage!", "trailing garbage");
  expect_corrupt(RandomBytes(good.size(), 99), "random bytes");
  expect_corrupt(std::string(good.size(), '\0'), "zeros");
  // Not a zstd frame at all: an uncompressed chunk mislabelled as zstd.
  expect_corrupt(raw, "raw data labelled zstd");
}

// FORMAT.md §5.3: stored bytes are exactly one regular frame. libzstd's
// one-shot decoder alone takes these, and decodes them to the right size.
std::string EmptyFrame() { return Encode(Codec::kZstd, std::string()); }
std::string SkippableFrame() {
  return std::string("\x50\x2a\x4d\x18\x03\x00\x00\x00" "abc", 11);  // magic, size 3, bytes
}

TEST(CodecTest, ZstdChunkIsExactlyOneRegularFrame) {
  const size_t n = 50000;
  std::string raw = Compressible(n);
  std::string good = Encode(Codec::kZstd, raw);
  std::string out(n, '\0');
  const std::pair<std::string, std::string> cases[] = {
      {good + EmptyFrame(), "zstd chunk has 9 bytes after the end of its zstd frame"},
      {EmptyFrame() + good, "zstd chunk has " + std::to_string(good.size()) +
                                " bytes after the end of its zstd frame"},
      {SkippableFrame() + good, "zstd chunk is not a zstd frame"},
      {good + SkippableFrame(), "zstd chunk has 11 bytes after the end of its zstd frame"},
  };
  for (const auto& [stored, message] : cases) {
    Status st = DecodeChunk(1, stored.data(), stored.size(), out.data(), n);
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << message;
    EXPECT_EQ(st.message(), message + " [FORMAT.md D4]");
  }
  ASSERT_EQ(EmptyFrame().size(), 9u);
}

// A frame made by hand: no content size, Window_Descriptor 2^window_log,
// one raw block holding `data` (RFC 8878 §3.1.1).
std::string RawBlockFrame(int window_log, const std::string& data) {
  std::string f("\x28\xb5\x2f\xfd", 4);
  f += char(0x00);                        // no FCS, not single-segment, no checksum
  f += char((window_log - 10) << 3);      // exponent, mantissa 0
  const uint32_t header = uint32_t(data.size()) << 3 | 1;  // last block, raw
  f += char(header & 0xff);
  f += char(header >> 8 & 0xff);
  f += char(header >> 16 & 0xff);
  return f + data;
}

// §5.3: a window above 2^27 is refused, as libzstd's streaming decoder
// (ckfmt verify's) refuses it, though the one-shot decoder would take it.
TEST(CodecTest, ZstdWindowAboveTheLimitIsCorruption) {
  const std::string data = Compressible(1000);
  std::string out(data.size(), '\0');
  const std::string at_limit = RawBlockFrame(27, data);
  ASSERT_TRUE(DecodeChunk(1, at_limit.data(), at_limit.size(), out.data(), out.size()).ok());
  EXPECT_EQ(out, data);
  const std::string above = RawBlockFrame(28, data);
  Status st = DecodeChunk(1, above.data(), above.size(), out.data(), out.size());
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_EQ(st.message(),
            "zstd chunk declares a zstd window of 268435456 bytes, more than the 134217728 "
            "allowed [FORMAT.md D4]");
}

TEST(CodecTest, ZstdWrongRawSizeIsCorruption) {
  const size_t n = 10000;
  std::string raw = RandomBytes(n, 3);
  std::string stored = Encode(Codec::kZstd, raw);
  std::string out(n + 100, '\0');
  EXPECT_EQ(DecodeChunk(1, stored.data(), stored.size(), out.data(), n - 1).code(),
            StatusCode::kCorruption);
  EXPECT_EQ(DecodeChunk(1, stored.data(), stored.size(), out.data(), n + 1).code(),
            StatusCode::kCorruption);
  EXPECT_EQ(DecodeChunk(1, stored.data(), stored.size(), out.data(), n + 100).code(),
            StatusCode::kCorruption);
  EXPECT_EQ(DecodeChunk(1, stored.data(), stored.size(), out.data(), 0).code(),
            StatusCode::kCorruption);
}

// ---------------------------------------------------------------------------
// Codec 2: byte planes, each zstd-coded or raw.

// Float32-like data: random mantissas, few distinct exponents.
std::string FloatLike(size_t n_elems, size_t esize, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n_elems * esize, '\0');
  for (size_t i = 0; i < n_elems; ++i) {
    for (size_t b = 0; b < esize; ++b) {
      bool high = b + 1 == esize;
      s[i * esize + b] = static_cast<char>(high ? 0x3f + (rng() % 3) : rng());
    }
  }
  return s;
}

// Codec 1 at levels 2 and below codes values without repeats as literals
// only, through ckfmt's writer: one single-segment frame, where libzstd's
// level 1 to 3 frames of these sizes (above their 512 KiB-2 MiB windows)
// have several segments. Runs with repeats still get zstd's match finder.
// Every frame is one that libzstd decodes back, bitwise.
TEST(CodecTest, ZstdFastLevelsCodeValuesWithoutRepeatsAsLiteralsOnly) {
  constexpr size_t kElems = 3 << 20;  // 6 and 12 MiB
  for (int level : {-1, 1, 2, 3}) {
    for (size_t esize : {size_t{2}, size_t{4}}) {
      std::string raw = FloatLike(kElems, esize, 10 + level);
      std::string stored = Encode(Codec::kZstd, raw, level);
      ASSERT_GE(stored.size(), 5u);
      EXPECT_LT(stored.size(), raw.size()) << "level " << level << " esize " << esize;
      const bool single_segment = (uint8_t(stored[4]) >> 5) & 1;
      EXPECT_EQ(single_segment, level <= 2) << "level " << level << " esize " << esize;
      std::string back(raw.size(), '\0');
      ASSERT_TRUE(DecodeChunk(1, stored.data(), stored.size(), back.data(), back.size()).ok());
      EXPECT_EQ(back, raw) << "level " << level << " esize " << esize;
    }
  }
  // Rows of random bytes, repeated: coded with matches at every level.
  const std::string row = RandomBytes(4000, 3);
  std::string rows;
  while (rows.size() < (4u << 20)) rows += row;
  for (int level : {-1, 1, 2}) {
    std::string stored = Encode(Codec::kZstd, rows, level);
    EXPECT_LT(stored.size(), rows.size() / 100) << "level " << level;
    std::string back(rows.size(), '\0');
    ASSERT_TRUE(DecodeChunk(1, stored.data(), stored.size(), back.data(), back.size()).ok());
    EXPECT_EQ(back, rows) << "level " << level;
  }
}

// Values drawn from a few thousand distinct ones (a fixed basis, weights
// dequantized from a small grid) have few 8-byte repeats but recur one by
// one: at fast levels codec 1 finds them with zstd's shortest matches, even
// where their bytes look random and literals alone would gain nothing
// (stored raw before matches were tried: 1.00).
TEST(CodecTest, ZstdFastLevelsMatchRecurringValues) {
  std::mt19937_64 rng(7);
  std::vector<uint32_t> grid(2000);
  for (auto& v : grid) v = static_cast<uint32_t>(rng());
  std::string raw(4u << 20, '\0');
  for (size_t i = 0; i < raw.size(); i += 4) {
    const uint32_t v = grid[rng() % grid.size()];
    std::memcpy(&raw[i], &v, 4);
  }
  for (int level : {-1, 1, 2}) {
    std::string stored = Encode(Codec::kZstd, raw, level);
    EXPECT_LT(stored.size(), raw.size() * 7 / 10) << "level " << level;  // 0.61 when written
    std::string back(raw.size(), '\0');
    ASSERT_TRUE(DecodeChunk(1, stored.data(), stored.size(), back.data(), back.size()).ok());
    EXPECT_EQ(back, raw) << "level " << level;
  }
}

// Small integers recur as well, but their bytes cost 4-5 bits each as
// literals, about what a 4-byte match costs: they stay literal-only frames
// (single-segment, from ckfmt's writer), coded many times faster than with
// matches, for the same size within a few percent.
TEST(CodecTest, ZstdFastLevelsKeepRecurringSmallIntegersAsLiterals) {
  std::mt19937_64 rng(8);
  std::string raw(4u << 20, '\0');
  for (size_t i = 0; i < raw.size(); i += 4) {
    const uint32_t v = static_cast<uint32_t>(rng() % 3000);
    std::memcpy(&raw[i], &v, 4);
  }
  for (int level : {-1, 1, 2}) {
    std::string stored = Encode(Codec::kZstd, raw, level);
    ASSERT_GE(stored.size(), 5u);
    EXPECT_LT(stored.size(), raw.size() * 6 / 10) << "level " << level;
    EXPECT_TRUE((uint8_t(stored[4]) >> 5) & 1) << "level " << level << ": not literals only";
    std::string back(raw.size(), '\0');
    ASSERT_TRUE(DecodeChunk(1, stored.data(), stored.size(), back.data(), back.size()).ok());
    EXPECT_EQ(back, raw) << "level " << level;
  }
}

// Random planes around a constant low byte: a zstd plane comes first and
// the raw planes after it cannot be split straight into the output.
std::string ConstantLowByte(size_t n_elems, size_t esize, uint64_t seed) {
  std::string s = RandomBytes(n_elems * esize, seed);
  for (size_t i = 0; i < n_elems; ++i) s[i * esize] = 0x5a;
  return s;
}

// Levels 1 and 2 code planes as literal-only frames, level 3 with zstd's
// match finder: both paths, for every kind of plane mix.
TEST(BytePlaneCodecTest, RoundTripEveryElementSize) {
  for (int level : {1, 3}) {
    for (size_t esize : {size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{8}, size_t{16}}) {
      // Up to 4096 elements the whole chunk is the coder's sample; above,
      // runs spread over it, as many as fit an eighth of it (at 32768
      // elements and up) or 16384 elements.
      for (size_t n : {size_t{1}, size_t{7}, size_t{17}, size_t{1000}, size_t{4096}, size_t{4097},
                       size_t{40000}, size_t{65536}, size_t{131075}}) {
        for (int kind = 0; kind < 4; ++kind) {
          std::string raw = kind == 0   ? RandomBytes(n * esize, n + esize)
                            : kind == 1 ? FloatLike(n, esize, n)
                            : kind == 2 ? Compressible(n * esize)
                                        : ConstantLowByte(n, esize, n);
          std::string stored = Encode(Codec::kBytePlaneZstd, raw, level, esize);
          EXPECT_LE(stored.size(), MaxEncodedSize(Codec::kBytePlaneZstd, raw.size()));
          std::string back(raw.size(), '\0');
          Status st = DecodeChunk(2, stored.data(), stored.size(), back.data(), back.size());
          ASSERT_TRUE(st.ok()) << st.ToString() << " esize=" << esize << " n=" << n;
          EXPECT_EQ(back, raw) << "level=" << level << " esize=" << esize << " n=" << n
                               << " kind=" << kind;
        }
      }
    }
  }
}

// Each zstd plane is one standard frame that plain libzstd decodes (codec 1's
// decoder), at the literal-only levels too.
TEST(BytePlaneCodecTest, ZstdPlanesAreStandardFrames) {
  for (int level : {-1, 1, 2, 3}) {
    std::string raw = FloatLike(1 << 16, 4, 9);
    std::string stored = Encode(Codec::kBytePlaneZstd, raw, level, 4);
    const size_t n = raw.size() / 4;
    size_t pos = 2 + 5 * 4, zstd_planes = 0;
    for (size_t p = 0; p < 4; ++p) {
      const uint8_t* d = reinterpret_cast<const uint8_t*>(stored.data()) + 2 + 5 * p;
      uint32_t len = d[1] | d[2] << 8 | d[3] << 16 | uint32_t(d[4]) << 24;
      if (d[0] == 1) {
        ++zstd_planes;
        std::string plane(n, '\0');
        ASSERT_TRUE(DecodeChunk(1, stored.data() + pos, len, plane.data(), n).ok())
            << "level " << level << " plane " << p;
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(plane[i], raw[i * 4 + p]);
      }
      pos += len;
    }
    EXPECT_EQ(zstd_planes, 1u) << "level " << level;
  }
}

// Raw planes hold byte p of every element, in order, at every length
// around the split's vector blocks (64 elements) and their tails.
TEST(BytePlaneCodecTest, RawPlanesHoldEachElementsBytesAndJoinBack) {
  for (size_t esize : {size_t{2}, size_t{3}, size_t{4}, size_t{8}}) {
    for (size_t n : {size_t{63}, size_t{64}, size_t{65}, size_t{127}, size_t{200}, size_t{4111}}) {
      std::string raw = RandomBytes(n * esize, 7 * n + esize);  // every plane stays raw
      std::string stored = Encode(Codec::kBytePlaneZstd, raw, 1, esize);
      ASSERT_EQ(stored.size(), 2 + 5 * esize + raw.size()) << "esize=" << esize << " n=" << n;
      const char* planes = stored.data() + 2 + 5 * esize;
      for (size_t p = 0; p < esize; ++p) {
        ASSERT_EQ(stored[2 + 5 * p], 0) << "plane " << p << " is not raw";
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(planes[p * n + i], raw[i * esize + p])
              << "esize=" << esize << " n=" << n << " plane " << p << " element " << i;
        }
      }
      // And back: the join interleaves them again, vector blocks and tail.
      std::string back(raw.size(), '\0');
      ASSERT_TRUE(DecodeChunk(uint8_t(Codec::kBytePlaneZstd), stored.data(), stored.size(),
                              back.data(), back.size()).ok());
      ASSERT_EQ(back, raw) << "esize=" << esize << " n=" << n;
    }
  }
}

// The ratios the fast path must keep on training-state values: bf16

// Large outputs are joined around the cache from their first 16-byte
// boundary on, with a cached head before it; outputs whose boundary falls
// inside an element are joined cached throughout. Every placement of the
// output within 16 bytes, just below and above the size where that starts.
TEST(BytePlaneCodecTest, LargeOutputsJoinBackAtEveryAlignment) {
  for (size_t esize : {size_t{2}, size_t{4}}) {
    for (size_t bytes : {size_t{256 << 10} - 64, size_t{256 << 10}, size_t{(256 << 10) + 4 * 37}}) {
      std::string raw = FloatLike(bytes / esize, esize, bytes + esize);
      std::string stored = Encode(Codec::kBytePlaneZstd, raw, 1, esize);
      std::vector<char> out(raw.size() + 16 + 16);
      char* base = out.data() + (16 - reinterpret_cast<uintptr_t>(out.data()) % 16) % 16;
      for (size_t shift = 0; shift < 16; ++shift) {
        std::fill(out.begin(), out.end(), '\x77');
        ASSERT_TRUE(DecodeChunk(uint8_t(Codec::kBytePlaneZstd), stored.data(), stored.size(),
                                base + shift, raw.size()).ok());
        ASSERT_EQ(std::string(base + shift, raw.size()), raw)
            << "esize=" << esize << " bytes=" << bytes << " shift=" << shift;
        // Nothing written outside the output.
        for (char* p = out.data(); p < base + shift; ++p) ASSERT_EQ(*p, '\x77');
        for (char* p = base + shift + raw.size(); p < out.data() + out.size(); ++p) {
          ASSERT_EQ(*p, '\x77');
        }
      }
    }
  }
}
// weights, fp32 AdamW exp_avg and exp_avg_sq.
// Chunks of 1 MiB (a quarter of the writer's) and 64 KiB (a small tensor,
// whose codes come from a sample of an eighth of it).
class BytePlaneRatioTest : public ::testing::TestWithParam<size_t> {};

TEST_P(BytePlaneRatioTest, FastLevelRatioOnTrainingLikeValues) {
  const size_t n = GetParam();  // bytes
  std::mt19937_64 rng(3);
  std::string bf16(n, '\0'), avg(n, '\0'), avg_sq(n, '\0');
  std::normal_distribution<float> weight(0.f, 0.02f), grad(0.f, 1e-3f);
  for (size_t i = 0; i < n / 2; ++i) {
    float f = weight(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
    uint16_t b = uint16_t(u >> 16);
    std::memcpy(&bf16[2 * i], &b, 2);
  }
  for (size_t i = 0; i < n / 4; ++i) {
    float g = grad(rng), g2 = g * g + 1e-9f;
    std::memcpy(&avg[4 * i], &g, 4);
    std::memcpy(&avg_sq[4 * i], &g2, 4);
  }
  auto ratio = [](const std::string& raw, size_t esize) {
    return double(raw.size()) / double(Encode(Codec::kBytePlaneZstd, raw, 1, esize).size());
  };
  EXPECT_GE(ratio(bf16, 2), 1.35);
  EXPECT_GE(ratio(avg, 4), 1.15);
  EXPECT_GE(ratio(avg_sq, 4), 1.15);
}
INSTANTIATE_TEST_SUITE_P(ChunkSizes, BytePlaneRatioTest,
                         ::testing::Values(size_t{1} << 20, size_t{64} << 10));

// An output buffer smaller than header + raw bytes still works when the
// planes compress, and is an error, never an overrun, when they do not.
TEST(BytePlaneCodecTest, TightOutputBuffer) {
  std::string raw = FloatLike(4096, 4, 21);
  std::string out(raw.size() + 64, '\0');
  auto n = EncodeChunk(Codec::kBytePlaneZstd, 1, 4, raw.data(), raw.size(), out.data(),
                       raw.size());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  std::string back(raw.size(), '\0');
  ASSERT_TRUE(DecodeChunk(2, out.data(), *n, back.data(), back.size()).ok());
  EXPECT_EQ(back, raw);
  std::string noise = RandomBytes(raw.size(), 22);
  const std::string guard(64, '\x77');
  out.replace(noise.size() - 64, 64, guard);
  EXPECT_FALSE(EncodeChunk(Codec::kBytePlaneZstd, 1, 4, noise.data(), noise.size(), out.data(),
                           noise.size() - 64)
                   .ok());
  EXPECT_EQ(out.substr(noise.size() - 64, 64), guard);
}

TEST(BytePlaneCodecTest, CompressesExponentPlanes) {
  std::string raw = FloatLike(1 << 16, 4, 5);
  std::string stored = Encode(Codec::kBytePlaneZstd, raw, 3, 4);
  // Three random planes stay raw (75%); the 3-valued exponent plane shrinks to ~20% of itself.
  EXPECT_LT(stored.size(), raw.size() * 85 / 100);
}

// Tensors of a few hundred elements (biases, norms) at the fast levels:
// planes smaller than one of ckfmt's literal blocks are coded by libzstd,
// not stored raw, as silero-vad's 2 KiB fp32 biases were for a while.
TEST(BytePlaneCodecTest, SmallTensorsAtFastLevelsStillCodeTheirExponentPlane) {
  for (size_t elems : {size_t{128}, size_t{512}, size_t{1000}}) {
    const std::string raw = FloatLike(elems, 4, elems);
    const std::string stored = Encode(Codec::kBytePlaneZstd, raw, 1, 4);
    // The header, three raw planes and the 3-valued exponent plane in
    // under half its bytes.
    EXPECT_LT(stored.size(), 2 + 4 * 5 + 3 * elems + elems / 2) << elems << " elements";
    ASSERT_EQ(stored[2], 0) << "mantissa planes stay raw";
    EXPECT_EQ(stored[2 + 3 * 5], 1) << elems << " elements: exponent plane not coded";
    std::string back(raw.size(), '\0');
    ASSERT_TRUE(DecodeChunk(2, stored.data(), stored.size(), back.data(), back.size()).ok());
    EXPECT_EQ(back, raw);
  }
}

TEST(BytePlaneCodecTest, ElementSizeMustDivideChunk) {
  std::string raw = RandomBytes(10, 1);
  std::string out(MaxEncodedSize(Codec::kBytePlaneZstd, raw.size()), '\0');
  EXPECT_FALSE(EncodeChunk(Codec::kBytePlaneZstd, 1, 4, raw.data(), raw.size(), out.data(),
                           out.size())
                   .ok());
  EXPECT_FALSE(EncodeChunk(Codec::kBytePlaneZstd, 1, 0, raw.data(), raw.size(), out.data(),
                           out.size())
                   .ok());
  EXPECT_FALSE(EncodeChunk(Codec::kBytePlaneZstd, 1, 17, raw.data(), 17, out.data(), out.size())
                   .ok());
}

class BytePlaneCorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    raw = FloatLike(4096, 4, 11);
    good = Encode(Codec::kBytePlaneZstd, raw, 3, 4);
    out.assign(raw.size() + 64, '\0');
    ASSERT_TRUE(DecodeChunk(2, good.data(), good.size(), out.data(), raw.size()).ok());
    ASSERT_EQ(uint8_t(good[0]), 4);
  }
  void ExpectCorrupt(const std::string& bad, size_t raw_size, const char* what) {
    Status st = DecodeChunk(2, bad.data(), bad.size(), out.data(), raw_size);
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << what << ": " << st.ToString();
  }
  // Offset of plane p's descriptor {mode u8, length u32le}.
  static size_t Desc(size_t p) { return 2 + 5 * p; }
  std::string raw, good, out;
};

TEST_F(BytePlaneCorruptionTest, HeaderFields) {
  ExpectCorrupt("", raw.size(), "empty");
  ExpectCorrupt(good.substr(0, 1), raw.size(), "one byte");
  ExpectCorrupt(good.substr(0, 2 + 5 * 4 - 1), raw.size(), "truncated descriptors");
  std::string bad = good;
  bad[0] = 0;
  ExpectCorrupt(bad, raw.size(), "element size 0");
  bad = good;
  bad[0] = 17;
  ExpectCorrupt(bad, raw.size(), "element size 17");
  bad = good;
  bad[0] = 3;  // 16384 % 3 != 0
  ExpectCorrupt(bad, raw.size(), "element size not dividing raw size");
  bad = good;
  bad[1] = 1;
  ExpectCorrupt(bad, raw.size(), "reserved byte");
}

TEST_F(BytePlaneCorruptionTest, PlaneDescriptors) {
  for (size_t p = 0; p < 4; ++p) {
    std::string bad = good;
    bad[Desc(p)] = 2;
    ExpectCorrupt(bad, raw.size(), "unknown plane mode");
    bad = good;
    bad[Desc(p) + 4] = '\x7f';  // length's high byte: overruns the chunk
    ExpectCorrupt(bad, raw.size(), "plane overruns");
    bad = good;
    bad[Desc(p) + 1] ^= 0x01;  // length off by one
    ExpectCorrupt(bad, raw.size(), "plane length off by one");
  }
}

TEST_F(BytePlaneCorruptionTest, SizesAndPayload) {
  ExpectCorrupt(good + "x", raw.size(), "trailing byte");
  ExpectCorrupt(good.substr(0, good.size() - 1), raw.size(), "truncated payload");
  ExpectCorrupt(good, raw.size() - 4, "raw size one element short");
  ExpectCorrupt(good, raw.size() + 4, "raw size one element long");
  ExpectCorrupt(good, raw.size() - 1, "raw size not a multiple of the element size");
  // Flip the first byte of the first zstd-coded plane's payload (its frame magic).
  size_t pos = 2 + 5 * 4;
  for (size_t p = 0; p < 4; ++p) {
    uint8_t mode = uint8_t(good[Desc(p)]);
    uint32_t len = uint8_t(good[Desc(p) + 1]) | uint8_t(good[Desc(p) + 2]) << 8 |
                   uint8_t(good[Desc(p) + 3]) << 16 | uint32_t(uint8_t(good[Desc(p) + 4])) << 24;
    if (mode == 1) {
      std::string bad = good;
      bad[pos] ^= 0x01;
      ExpectCorrupt(bad, raw.size(), "zstd plane magic");
      return;
    }
    pos += len;
  }
  ADD_FAILURE() << "no plane of float-like data was zstd-coded";
}

// A zstd plane, too, is exactly one regular frame (§5.3.1, D5).
TEST_F(BytePlaneCorruptionTest, ZstdPlaneIsExactlyOneRegularFrame) {
  size_t pos = 2 + 5 * 4, plane = 4;
  for (size_t p = 0; p < 4 && plane == 4; ++p) {
    if (good[Desc(p)] == 1) {
      plane = p;
    } else {
      pos += GetU32(reinterpret_cast<const uint8_t*>(&good[Desc(p) + 1]));
    }
  }
  ASSERT_LT(plane, 4u) << "no plane of float-like data was zstd-coded";
  const uint32_t len = GetU32(reinterpret_cast<const uint8_t*>(&good[Desc(plane) + 1]));
  const std::string frame = good.substr(pos, len);
  auto with_plane = [&](const std::string& payload) {
    std::string bad = good.substr(0, pos) + payload + good.substr(pos + len);
    PutU32(reinterpret_cast<uint8_t*>(&bad[Desc(plane) + 1]), uint32_t(payload.size()));
    return bad;
  };
  const std::string prefix = "byte-plane chunk: plane " + std::to_string(plane) + " ";
  const std::pair<std::string, std::string> cases[] = {
      {frame + EmptyFrame(), prefix + "has 9 bytes after the end of its zstd frame"},
      {SkippableFrame() + frame, prefix + "is not a zstd frame"},
      {frame + SkippableFrame(), prefix + "has 11 bytes after the end of its zstd frame"},
  };
  for (const auto& [payload, message] : cases) {
    const std::string bad = with_plane(payload);
    Status st = DecodeChunk(2, bad.data(), bad.size(), out.data(), raw.size());
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << message;
    EXPECT_EQ(st.message(), message + " [FORMAT.md D5]");
  }
  const std::string same = with_plane(frame);  // the edit itself keeps a good chunk good
  EXPECT_TRUE(DecodeChunk(2, same.data(), same.size(), out.data(), raw.size()).ok());
}

}  // namespace
