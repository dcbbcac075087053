// The Huffman decoder of literals-only zstd frames
// (format/src/zstd_huffman_decode.h), through the block decoder that uses
// it: frames made by hand, with codes of 1 to 11 bits, streams of every
// length from none to many rounds, one or four streams a block, must decode
// as libzstd decodes them; streams that end early or late, or frames that
// libzstd refuses, must be refused.
#include "zstd_huffman_decode.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "zstd_block_decoder.h"
#include "zstd_huffman.h"
#include "zstd_test_frames.h"

namespace ckfmt {
namespace {

using test::Bytes;

// A Huffman code given by the weights of symbols 0 to n - 1 (the last
// symbol's weight implied), as a direct Huffman_Tree_Description
// (RFC 8878 §4.2.1.1) and the codes it assigns.
struct HandCode {
  Bytes description;
  HuffmanCode code;
  std::array<uint32_t, 256> value{};
  std::array<int, 256> length{};
};

HandCode MakeCode(const std::vector<uint8_t>& weights) {
  HandCode c;
  c.description.push_back(uint8_t(127 + weights.size()));
  for (size_t i = 0; i < weights.size(); i += 2) {
    const uint8_t low = i + 1 < weights.size() ? weights[i + 1] : 0;
    c.description.push_back(uint8_t(weights[i] << 4 | low));
  }
  EXPECT_EQ(ReadHuffmanCode(c.description.data(), c.description.size(), c.code),
            c.description.size());
  ForEachCode(c.code, [&](int symbol, int length, uint32_t first, uint32_t) {
    c.value[size_t(symbol)] = first >> (kMaxCodeBits - length);
    c.length[size_t(symbol)] = length;
  });
  return c;
}

// Codes of 1 to 11 bits: symbol k of weight 11 - k for k < 10, then two of
// weight 1 (the second implied).
std::vector<uint8_t> SteepWeights() {
  std::vector<uint8_t> w;
  for (int k = 0; k < 10; ++k) w.push_back(uint8_t(11 - k));
  w.push_back(1);
  return w;
}

// One stream of `symbols` (§4.2.2): codes written last symbol first, so
// that a reader from the end gets the first first, then the start mark.
// `extra` more bits (of `extra_value`) go before the mark, read first.
Bytes EncodeStream(const HandCode& c, const Bytes& symbols, int extra = 0,
                   uint32_t extra_value = 0) {
  Bytes out;
  uint64_t acc = 0;
  int bits = 0;
  auto put = [&](uint32_t v, int n) {
    acc |= uint64_t(v) << bits;
    bits += n;
    for (; bits >= 8; bits -= 8, acc >>= 8) out.push_back(uint8_t(acc));
  };
  for (size_t i = symbols.size(); i-- > 0;) put(c.value[symbols[i]], c.length[symbols[i]]);
  if (extra > 0) put(extra_value, extra);
  put(1, 1);
  if (bits > 0) out.push_back(uint8_t(acc));
  return out;
}

// A frame of one compressed block whose literals are `streams` (1 or 4)
// Huffman streams of `symbols` with code `c`; stream k gets `extra[k]`
// extra bits of `extra_value`, and stream `short_stream` lacks its last
// symbol's code. The literals header is the smallest that fits.
Bytes HandFrame(const HandCode& c, const Bytes& symbols, int streams, std::array<int, 4> extra = {},
                uint32_t extra_value = 0, int short_stream = -1) {
  const size_t n = symbols.size(), segment = (n + 3) / 4;
  Bytes body = c.description;
  if (streams == 1) {
    const Bytes s = EncodeStream(c, symbols, extra[0], extra_value);
    body.insert(body.end(), s.begin(), s.end());
  } else {
    std::vector<Bytes> s;
    for (size_t k = 0; k < 4; ++k) {
      const size_t from = std::min(n, k * segment);
      size_t to = k < 3 ? std::min(n, from + segment) : n;
      if (int(k) == short_stream && to > from) --to;
      s.push_back(EncodeStream(c, Bytes(symbols.begin() + long(from), symbols.begin() + long(to)),
                               extra[k], extra_value));
    }
    for (size_t k = 0; k < 3; ++k) {
      body.push_back(uint8_t(s[k].size()));
      body.push_back(uint8_t(s[k].size() >> 8));
    }
    for (const Bytes& x : s) body.insert(body.end(), x.begin(), x.end());
  }
  const uint64_t regenerated = n, compressed = body.size();
  Bytes literals;
  if (streams == 1) {
    const uint64_t h = 2 | 0 << 2 | regenerated << 4 | compressed << 14;
    for (int i = 0; i < 3; ++i) literals.push_back(uint8_t(h >> (8 * i)));
  } else {
    const int format = std::max(regenerated, compressed) < 1024    ? 1
                       : std::max(regenerated, compressed) < 16384 ? 2
                                                                   : 3;
    const int field = format == 1 ? 10 : format == 2 ? 14 : 18;
    const uint64_t h = 2 | uint64_t(format) << 2 | regenerated << 4 | compressed << (4 + field);
    for (int i = 0; i < (format == 1 ? 3 : format == 2 ? 4 : 5); ++i) {
      literals.push_back(uint8_t(h >> (8 * i)));
    }
  }
  literals.insert(literals.end(), body.begin(), body.end());
  literals.push_back(0);  // Number_of_Sequences
  // Magic; an 8-byte content size and a window of 1 MiB, not the content
  // size, so that a block may be larger than what it regenerates.
  Bytes f = {0x28, 0xb5, 0x2f, 0xfd, 0xc0, 10 << 3};
  for (int i = 0; i < 8; ++i) f.push_back(uint8_t(n >> (8 * i)));
  const uint32_t block = 1 | 2 << 1 | uint32_t(literals.size()) << 3;
  for (int i = 0; i < 3; ++i) f.push_back(uint8_t(block >> (8 * i)));
  f.insert(f.end(), literals.begin(), literals.end());
  return f;
}

// What the block decoder makes of `frame`, and whether it passed.
bool BlockDecode(const Bytes& frame, size_t n, Bytes& out) {
  LiteralsOnlyBlockDecoder decoder;
  if (!decoder.Start(frame.data(), frame.size(), n)) return false;
  out.clear();
  Bytes block(kZstdBlockMax);
  for (int64_t got; (got = decoder.Next(block.data())) != 0;) {
    if (got < 0) return false;
    out.insert(out.end(), block.begin(), block.begin() + got);
  }
  return true;
}

bool LibzstdDecodes(const Bytes& frame, const Bytes& want) {
  Bytes out(want.size() + 1);
  const size_t got = ZSTD_decompress(out.data(), out.size(), frame.data(), frame.size());
  return !ZSTD_isError(got) && got == want.size() &&
         std::equal(want.begin(), want.end(), out.begin());
}

Bytes RandomSymbols(size_t n, int alphabet, uint32_t seed) {
  std::mt19937 rng(seed);
  std::geometric_distribution<int> skew(0.35);
  Bytes s(n);
  for (auto& b : s) b = uint8_t(std::min(skew(rng), alphabet - 1));
  return s;
}

TEST(ZstdHuffmanDecodeTest, EachLookupGivesTheCodesThatFitInARow) {
  for (const auto& weights : {SteepWeights(), std::vector<uint8_t>{1},
                              std::vector<uint8_t>{2, 1, 1}, std::vector<uint8_t>(127, 1)}) {
    const HandCode c = MakeCode(weights);
    HuffmanDecodeTable t;
    FillDecodeTable(c.code, t);
    for (uint32_t v = 0; v < (1u << kMaxCodeBits); ++v) {
      const uint64_t e = t.multi[v];
      const int bits = int(e & 0xff), n = int((e >> 8) & 0xff);
      ASSERT_GE(n, 1);
      ASSERT_LE(n, kMaxSymbolsPerLookup);
      int at = 0;
      for (int k = 0; k < n; ++k) {
        const uint16_t single = t.single[(v << at) & 2047];
        ASSERT_EQ(uint8_t(e >> (16 + 8 * k)), uint8_t(single)) << "window " << v;
        at += single >> 8;
      }
      ASSERT_EQ(at, bits);
      if (n < kMaxSymbolsPerLookup) {  // the next code did not fit
        ASSERT_GT(bits + (t.single[(v << bits) & 2047] >> 8), kMaxCodeBits) << "window " << v;
      }
    }
  }
}

// Every count of symbols from 0 to 400, and some that take many rounds, in
// one stream and in four, with codes of 1 to 11 bits.
TEST(ZstdHuffmanDecodeTest, DecodesHandMadeStreamsOfEveryLengthAsLibzstdDoes) {
  const HandCode c = MakeCode(SteepWeights());
  std::vector<size_t> counts;
  for (size_t n = 0; n <= 400; ++n) counts.push_back(n);
  for (size_t n : {1000, 1023, 5000, 20000, 100000}) counts.push_back(n);
  size_t tried = 0;
  for (int streams : {1, 4}) {
    for (size_t n : counts) {
      if (streams == 4 && n < 6) continue;      // four streams need six symbols
      if (streams == 1 && n >= 1024) continue;  // one stream: sizes of 10 bits
      const Bytes symbols = RandomSymbols(n, 11, uint32_t(n * 7 + streams));
      const Bytes frame = HandFrame(c, symbols, streams);
      if (streams == 1 && frame.size() > 1000) continue;
      SCOPED_TRACE(testing::Message() << streams << " streams, " << n << " symbols");
      Bytes out;
      if (n == 0) {  // libzstd takes it; the decoder leaves it to libzstd
        EXPECT_FALSE(BlockDecode(frame, n, out));
        continue;
      }
      ASSERT_TRUE(LibzstdDecodes(frame, symbols)) << "the hand-made frame is wrong";
      ASSERT_TRUE(BlockDecode(frame, n, out));
      ASSERT_TRUE(out == symbols);
      ++tried;
    }
  }
  EXPECT_GT(tried, 700u);
}

// A stream with a code too few, or stray bits before its mark, does not
// decode to its count with every bit read: the decoder refuses it,
// whichever stream it is and however long.
TEST(ZstdHuffmanDecodeTest, RefusesStreamsThatEndEarlyOrLate) {
  const HandCode c = MakeCode(SteepWeights());
  size_t refused = 0;
  for (size_t n : {6, 9, 40, 120, 333, 4000, 70000}) {
    const Bytes symbols = RandomSymbols(n, 11, uint32_t(n));
    for (int stream = 0; stream < 4; ++stream) {
      if (stream == 3 && n == 6) continue;  // that stream has no symbols to lose
      std::vector<Bytes> frames = {HandFrame(c, symbols, 4, {}, 0, stream)};
      for (int extra : {1, 3, 11, 12, 40}) {
        std::array<int, 4> extras{};
        extras[size_t(stream)] = extra;
        // Zeros make the longest code (11 zero bits) or part of it; ones,
        // the shortest codes.
        for (uint32_t value : {0u, 0xffffffffu >> (32 - std::min(extra, 32))}) {
          frames.push_back(HandFrame(c, symbols, 4, extras, value));
        }
      }
      for (const Bytes& frame : frames) {
        SCOPED_TRACE(testing::Message() << n << " symbols, stream " << stream << ", frame of "
                                        << frame.size() << " bytes");
        // Such bits could, by chance, still decode to n symbols; then
        // libzstd must decode them alike. libzstd may pass more: its
        // decoder of two symbols a lookup lets a stream's last code run
        // past the stream's first bit (zeros, as the RFC reads them), and
        // the callers of the block decoder leave to libzstd what it refuses.
        Bytes want(n + 1), out;
        const size_t got = ZSTD_decompress(want.data(), want.size(), frame.data(), frame.size());
        if (BlockDecode(frame, n, out)) {
          ASSERT_TRUE(!ZSTD_isError(got) && got == n);
          ASSERT_TRUE(std::equal(out.begin(), out.end(), want.begin()));
        } else {
          ++refused;
        }
      }
    }
  }
  EXPECT_GT(refused, 200u);  // of 297; a Huffman code soon finds its step again
}

}  // namespace
}  // namespace ckfmt
