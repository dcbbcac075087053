// The literals-only zstd frame writer (format/src/zstd_literals.h): what it
// writes must be a frame that libzstd decodes to the input, whatever the
// byte distribution, the sample and the size; where it declines it says so
// and writes nothing past its output buffer.
#include "zstd_literals.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "zstd_frame.h"

namespace ckfmt {
namespace {

using Bytes = std::vector<uint8_t>;
using Counts = std::array<uint32_t, 256>;

Counts CountAll(const Bytes& b, size_t step = 1) {
  Counts c{};
  for (size_t i = 0; i < b.size(); i += step) ++c[b[i]];
  return c;
}

// Writes `in` with `counts` into a buffer of `cap` bytes followed by a
// guard; checks the guard. Returns the frame, empty where the writer
// declined.
Bytes Write(const Counts& counts, const Bytes& in, size_t cap) {
  Bytes out(cap + 64, 0xA5);
  const size_t n = WriteLiteralsFrame(counts.data(), in.data(), in.size(), out.data(), cap);
  for (size_t i = cap; i < out.size(); ++i) {
    EXPECT_EQ(out[i], 0xA5) << "wrote past its output, at " << i;
  }
  EXPECT_LE(n, cap);
  out.resize(n);
  return out;
}

// Decodes as a ckfmt reader does (exactly one regular frame).
void ExpectDecodesTo(const Bytes& frame, const Bytes& want) {
  ASSERT_FALSE(frame.empty());
  Bytes got(want.size() + 1, 0x5A);
  const std::string problem =
      DecodeOneZstdFrame(frame.data(), frame.size(), got.data(), want.size());
  ASSERT_EQ(problem, "");
  got.pop_back();
  ASSERT_TRUE(got == want) << "decoded bytes differ";
}

// Sign-and-exponent bytes of N(0, sigma) values of an 8-bit-exponent float:
// two narrow ranges, one per sign, above 0x80 for negative values.
Bytes ExponentBytes(size_t n, double sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, float(sigma));
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) {
    const float v = dist(rng);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    b[i] = uint8_t(bits >> 24);
  }
  return b;
}

size_t Cap(size_t n) { return n + n / 8 + 1024; }

TEST(ZstdLiteralsTest, SignedExponentPlaneRoundTripsAndShrinks) {
  // Values above 128 have codes: the description must be FSE-coded.
  const Bytes in = ExponentBytes(3 * (128 << 10) + 777, 0.02, 1);
  const Bytes frame = Write(CountAll(in, 64), in, Cap(in.size()));
  ExpectDecodesTo(frame, in);
  EXPECT_LT(frame.size(), in.size() / 2);
}

TEST(ZstdLiteralsTest, UnsignedPlaneRoundTrips) {
  // Only values below 128: the four-bit description.
  Bytes in = ExponentBytes(200000, 1e-3, 2);
  for (uint8_t& b : in) b &= 0x7f;
  const Bytes frame = Write(CountAll(in, 16), in, Cap(in.size()));
  ExpectDecodesTo(frame, in);
  EXPECT_LT(frame.size(), in.size() / 2);
}

TEST(ZstdLiteralsTest, SizesAroundBlockAndStreamBoundaries) {
  // Short planes code byte by byte, long ones by pairs of bytes; stream
  // lengths of every residue modulo 8 exercise both coders' tails.
  std::vector<size_t> sizes = {1,    7,    1023, 1024, 1025, 1027, 4099, (128 << 10) - 1,
                               128 << 10, (128 << 10) + 1, (128 << 10) + 1024, 256 << 10};
  for (size_t n = 100000; n < 100032; ++n) sizes.push_back(n);
  for (size_t n : sizes) {
    SCOPED_TRACE(n);
    const Bytes in = ExponentBytes(n, 0.02, uint32_t(n));
    const Bytes frame = Write(CountAll(in), in, Cap(n));
    if (n < kLiteralsBlockMin) {
      EXPECT_TRUE(frame.empty()) << "less than one coded block: left to libzstd";
      continue;
    }
    ExpectDecodesTo(frame, in);
  }
}

TEST(ZstdLiteralsTest, BytesTheSampleMissedStillHaveCodes) {
  // A sample that saw only the three commonest values: every other value
  // present (the tails near zero, both signs) must still be coded.
  const Bytes in = ExponentBytes(1 << 20, 0.02, 3);
  Counts all = CountAll(in), top{};
  for (int k = 0; k < 3; ++k) {
    int best = 0;
    for (int s = 0; s < 256; ++s) {
      if (all[s] > all[best] && !top[s]) best = s;
    }
    top[best] = all[best];
  }
  ExpectDecodesTo(Write(top, in, Cap(in.size())), in);
  // And with no sample at all.
  ExpectDecodesTo(Write(Counts{}, in, Cap(in.size())), in);
}

TEST(ZstdLiteralsTest, AnUnsampledByteGetsACodeWhereverItLies) {
  // Every byte value the writer must find without the sample's help: at
  // either end of either half, alone in its half or not, in the first
  // vector, mid-plane, or among the last bytes no vector loop reads.
  const size_t n = 4096 + 29;
  for (const uint8_t base : {uint8_t(0x3c), uint8_t(0xbc)}) {
    for (const uint8_t rare : {0x00, 0x01, 0x3b, 0x7f, 0x80, 0x81, 0xbb, 0xfe, 0xff}) {
      for (const size_t at : {size_t{0}, size_t{31}, size_t{2049}, n - 29, n - 1}) {
        SCOPED_TRACE(testing::Message()
                     << "base " << int(base) << " rare " << int(rare) << " at " << at);
        Bytes in(n);
        for (size_t i = 0; i < n; ++i) in[i] = uint8_t(base + i % 3);
        in[at] = rare;
        Counts sample{};
        for (int k = 0; k < 3; ++k) sample[uint8_t(base + k)] = 100;
        sample[rare] = 0;
        ExpectDecodesTo(Write(sample, in, Cap(n)), in);
      }
    }
  }
}

TEST(ZstdLiteralsTest, RandomDistributionsRoundTrip) {
  // Geometric-like distributions over random sets of values, including 0
  // and 255, alphabets from 2 to 256 values, sampled or not.
  std::mt19937 rng(4);
  for (int trial = 0; trial < 60; ++trial) {
    SCOPED_TRACE(trial);
    const int alphabet = 2 + int(rng() % 255);
    std::vector<uint8_t> values(256);
    for (int i = 0; i < 256; ++i) values[i] = uint8_t(i);
    std::shuffle(values.begin(), values.end(), rng);
    values.resize(alphabet);
    if (trial % 5 == 0) values[0] = 0, values[1] = 255;
    const double p = 0.02 + 0.9 * (rng() % 1000) / 1000.0;
    std::geometric_distribution<int> pick(p);
    const size_t n = 1 + rng() % (300 << 10);
    Bytes in(n);
    for (size_t i = 0; i < n; ++i) in[i] = values[std::min(pick(rng), alphabet - 1)];
    const Bytes frame = Write(CountAll(in, 1 + rng() % 97), in, Cap(n));
    if (frame.empty()) {
      // Declining is allowed only where a code cannot exist, or for less
      // than one coded block.
      if (n >= kLiteralsBlockMin) {
        EXPECT_EQ(std::count(in.begin(), in.end(), in[0]), std::ptrdiff_t(n));
      }
      continue;
    }
    ExpectDecodesTo(frame, in);
  }
}

TEST(ZstdLiteralsTest, SkewedCountsAreLimitedToElevenBits) {
  // Fibonacci-like frequencies make an optimal code 20+ bits deep; the
  // format allows 11, which the decoder checks.
  Bytes in;
  uint64_t a = 1, b = 1;
  for (int s = 0; s < 24; ++s) {
    in.insert(in.end(), size_t(a), uint8_t(s * 7));
    const uint64_t c = a + b;
    a = b;
    b = c;
  }
  std::shuffle(in.begin(), in.end(), std::mt19937(5));
  ExpectDecodesTo(Write(CountAll(in), in, Cap(in.size())), in);
}

TEST(ZstdLiteralsTest, RunsOfElevenBitCodes) {
  // A sample that gives 8 values 11-bit codes and half the bytes among
  // them: runs of long codes fill the coder's bit container to its limit,
  // in both the byte and the pair coder.
  Counts sample{};
  for (int k = 0; k <= 10; ++k) sample[k] = 1u << (20 - k);
  for (int k = 11; k <= 18; ++k) sample[k] = 1;
  std::mt19937 rng(8);
  for (size_t n : {size_t{3001}, size_t{100001}, size_t{262143}}) {
    SCOPED_TRACE(n);
    Bytes in(n);
    for (uint8_t& b : in) b = rng() % 2 ? 0 : uint8_t(11 + rng() % 8);
    in[0] = 10;  // every sampled value occurs, so the code keeps its shape
    for (int k = 1; k <= 10; ++k) in[k] = uint8_t(k);
    const Bytes frame = Write(sample, in, Cap(n));
    ExpectDecodesTo(frame, in);
    EXPECT_LT(frame.size(), n) << "about 6 bits a byte";
  }
}

TEST(ZstdLiteralsTest, FullestBitContainer) {
  // The most bits the pair coder holds before a flush: after the bytes
  // that stream 2 has beyond stream 3 (leaving 7 bits), an odd byte and
  // two pairs, all 11-bit codes (62 bits). A block of 8197 bytes: streams
  // 0-2 of 2050 bytes, stream 3 of 2047.
  Counts sample{};
  for (int k = 0; k <= 10; ++k) sample[k] = 1u << (20 - k);
  for (int k = 11; k <= 18; ++k) sample[k] = 1;
  for (int variant = 0; variant < 64; ++variant) {
    SCOPED_TRACE(variant);
    Bytes in(8197, 0);
    in[0] = 18;  // the range of values, 0-18
    uint8_t* stream2 = in.data() + 2 * 2050;
    for (int i = 2042; i < 2050; ++i) stream2[i] = uint8_t(11 + (variant + i * 5) % 8);
    stream2[2047] = uint8_t(variant % 3);  // 23 or more bits with 2048-2049
    ExpectDecodesTo(Write(sample, in, Cap(in.size())), in);
  }
}

TEST(ZstdLiteralsTest, BlocksCodingWouldGrowAreStoredRaw) {
  // A sample that misjudges the bytes: it saw only 0, so every other value
  // gets a long code, and coding the (uniform) bytes would grow them.
  Bytes in(300000);
  std::mt19937 rng(6);
  for (uint8_t& b : in) b = uint8_t(rng() % 255);
  Counts misjudged{};
  misjudged[0] = 1000000;
  const Bytes frame = Write(misjudged, in, Cap(in.size()));
  ExpectDecodesTo(frame, in);
  // Three raw blocks and the frame header: nothing coded larger than raw.
  EXPECT_EQ(frame.size(), in.size() + 3 * 3 + 9);
}

TEST(ZstdLiteralsTest, DeclinesWhenItCannotCode) {
  const Bytes in = ExponentBytes(100000, 0.02, 7);
  const Counts counts = CountAll(in);
  // A buffer too small for the frame: declined, nothing written past it.
  EXPECT_TRUE(Write(counts, in, 5000).empty());
  EXPECT_TRUE(Write(counts, in, 4).empty());
  // All 256 values equally likely: every code is 8 bits long, a
  // description of one repeated weight, which FSE cannot code (and coding
  // would not shrink the bytes anyway).
  Bytes uniform(70000);
  for (size_t i = 0; i < uniform.size(); ++i) uniform[i] = uint8_t(i * 97);
  EXPECT_TRUE(Write(CountAll(uniform), uniform, Cap(uniform.size())).empty());
  // Less than one coded block: libzstd codes it as one stream.
  const Bytes small(in.begin(), in.begin() + kLiteralsBlockMin - 1);
  EXPECT_TRUE(Write(CountAll(small), small, Cap(small.size())).empty());
  const Bytes one_block(in.begin(), in.begin() + kLiteralsBlockMin);
  EXPECT_FALSE(Write(CountAll(one_block), one_block, Cap(one_block.size())).empty());
  // One distinct value, and nothing at all.
  EXPECT_TRUE(Write(counts, Bytes(5000, 0x3c), Cap(5000)).empty());
  EXPECT_TRUE(Write(counts, Bytes{}, 100).empty());
}

}  // namespace
}  // namespace ckfmt
