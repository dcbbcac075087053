// The transpose between elements and byte planes (format/src/byte_planes.h):
// every vector path this machine has must split exactly as a byte at a
// time does, at every length around its block sizes and at any alignment,
// and the join must undo it.
#include "byte_planes.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace ckfmt {
namespace {

using Bytes = std::vector<uint8_t>;

struct NamedPath {
  SplitPath path;
  const char* name;
};
constexpr NamedPath kPaths[] = {{SplitPath::kSse2, "sse2"},
                                {SplitPath::kAvx2, "avx2"},
                                {SplitPath::kAvx512Vbmi, "avx512vbmi"},
                                {SplitPath::kBest, "best"}};

Bytes RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (uint8_t& x : b) x = uint8_t(rng());
  return b;
}

// The planes of `in` as the definition says: plane p holds byte p of each
// element.
std::vector<Bytes> Reference(const Bytes& in, size_t e) {
  const size_t n = in.size() / e;
  std::vector<Bytes> planes(e, Bytes(n));
  for (size_t i = 0; i < n; ++i) {
    for (size_t p = 0; p < e; ++p) planes[p][i] = in[i * e + p];
  }
  return planes;
}

// Splits `in` (starting `skew` bytes into its buffer, planes starting
// `skew` bytes into theirs) with `path`, into planes with a guard byte after
// each, which must survive.
std::vector<Bytes> SplitWith(SplitPath path, const Bytes& in, size_t e, size_t skew) {
  const size_t n = in.size() / e;
  Bytes src(skew + in.size());
  std::copy(in.begin(), in.end(), src.begin() + ptrdiff_t(skew));
  std::vector<Bytes> buffers(e, Bytes(skew + n + 1, 0xA5));
  std::vector<uint8_t*> dst;
  for (Bytes& b : buffers) dst.push_back(b.data() + skew);
  SplitPlanes(src.data() + skew, e, n, dst.data(), path);
  std::vector<Bytes> planes;
  for (Bytes& b : buffers) {
    EXPECT_EQ(b[skew + n], 0xA5) << "a plane was written past its end";
    planes.emplace_back(b.begin() + ptrdiff_t(skew), b.begin() + ptrdiff_t(skew + n));
  }
  return planes;
}

TEST(BytePlanesTest, EveryPathSplitsAsTheDefinitionSays) {
  int paths_run = 0;
  for (const NamedPath& p : kPaths) {
    if (!SplitPathAvailable(p.path)) continue;
    ++paths_run;
    for (size_t e : {1, 2, 3, 4, 8, 16}) {
      // Around the SSE2 (16), AVX2 (32) and AVX-512 (64) blocks and their sums.
      for (size_t n : {0, 1, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 95, 127, 128, 129, 1000, 4113}) {
        for (size_t skew : {0, 1, 7}) {
          const Bytes in = RandomBytes(n * e, uint32_t(n * 131 + e * 7 + skew));
          EXPECT_EQ(SplitWith(p.path, in, e, skew), Reference(in, e))
              << p.name << ": " << n << " elements of " << e << " bytes, skew " << skew;
        }
      }
    }
  }
  EXPECT_GE(paths_run, 1);  // kBest always runs
}

TEST(BytePlanesTest, ScalarPathSplitsAsTheDefinitionSays) {
  for (size_t e : {2, 4, 5}) {
    const Bytes in = RandomBytes(77 * e, uint32_t(e));
    EXPECT_EQ(SplitWith(SplitPath::kScalar, in, e, 0), Reference(in, e)) << e;
  }
}

TEST(BytePlanesTest, OnlyScalarAndBestAreAlwaysAvailable) {
  EXPECT_TRUE(SplitPathAvailable(SplitPath::kScalar));
  EXPECT_TRUE(SplitPathAvailable(SplitPath::kBest));
#if defined(__x86_64__)
  EXPECT_TRUE(SplitPathAvailable(SplitPath::kSse2));  // part of x86-64 itself
#endif
}

// Joins back what was split, for outputs small (cached stores) and large
// (stored around the cache from the first 16-byte boundary), at every
// alignment of the output.
TEST(BytePlanesTest, JoinUndoesSplit) {
  for (size_t e : {1, 2, 3, 4, 8}) {
    for (size_t n : {size_t{0}, size_t{33}, size_t{4099}, (size_t{300} << 10) / e + 5}) {
      const Bytes in = RandomBytes(n * e, uint32_t(n + e));
      const std::vector<Bytes> planes = Reference(in, e);
      std::vector<const uint8_t*> src;
      for (const Bytes& p : planes) src.push_back(p.data());
      for (size_t skew = 0; skew < 16; skew += (n > 5000 ? 1 : 5)) {
        Bytes out(skew + n * e + 1, 0x5A);
        JoinPlanes(src.data(), e, n, out.data() + skew);
        EXPECT_TRUE(std::equal(in.begin(), in.end(), out.begin() + ptrdiff_t(skew)))
            << n << " elements of " << e << " bytes, output skew " << skew;
        EXPECT_EQ(out.back(), 0x5A) << "written past the end";
      }
    }
  }
}

}  // namespace
}  // namespace ckfmt
