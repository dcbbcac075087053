// Region arithmetic against a brute-force reference that expands every
// region to its stream of global flat indices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>

#include "ckfmt/region.h"
#include "util/region_ref.h"

namespace {

using ckfmt::Region;
using ckfmt::Shape;
using ckfmt::StatusCode;
using ckfmt_test::RefRuns;
using ckfmt_test::RunsToString;

std::vector<ckfmt::Run> Runs(const Shape& shape, const Region& src, const Region& dst) {
  std::vector<ckfmt::Run> out;
  ckfmt::ForEachOverlap(shape, src, dst, [&](const ckfmt::Run& r) { out.push_back(r); });
  return out;
}

bool SameRuns(const std::vector<ckfmt::Run>& a, const std::vector<ckfmt::Run>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].src_offset != b[i].src_offset || a[i].dst_offset != b[i].dst_offset ||
        a[i].count != b[i].count) {
      return false;
    }
  }
  return true;
}

std::string Describe(const Shape& shape, const Region& src, const Region& dst) {
  std::string s = "shape [";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "] src " + src.ToString() + " dst " + dst.ToString();
}

// Checks ForEachOverlap and OverlapElements against the reference, both ways.
void CheckAgainstReference(const Shape& shape, const Region& a, const Region& b) {
  ASSERT_TRUE(ckfmt::ValidateRegion(a, shape).ok()) << Describe(shape, a, b);
  ASSERT_TRUE(ckfmt::ValidateRegion(b, shape).ok()) << Describe(shape, a, b);
  for (int dir = 0; dir < 2; ++dir) {
    const Region& src = dir ? b : a;
    const Region& dst = dir ? a : b;
    auto want = RefRuns(shape, src, dst);
    auto got = Runs(shape, src, dst);
    EXPECT_TRUE(SameRuns(want, got)) << Describe(shape, src, dst) << "\n want "
                                     << RunsToString(want) << "\n got  " << RunsToString(got);
    uint64_t n = 0;
    for (const auto& r : want) n += r.count;
    EXPECT_EQ(ckfmt::OverlapElements(shape, src, dst), n) << Describe(shape, src, dst);
    EXPECT_EQ(ckfmt::RegionsIntersect(shape, src, dst), n != 0) << Describe(shape, src, dst);
  }
  // FlatSpanOf: from the region's smallest flat index to its largest.
  for (const Region* r : {&a, &b}) {
    std::vector<uint64_t> idx = ckfmt_test::RefGlobalIndices(shape, *r);
    if (idx.empty()) continue;
    const ckfmt::FlatSpan span = ckfmt::FlatSpanOf(shape, *r);
    EXPECT_EQ(span.begin, *std::min_element(idx.begin(), idx.end())) << r->ToString();
    EXPECT_EQ(span.end, *std::max_element(idx.begin(), idx.end()) + 1) << r->ToString();
  }
}

TEST(RegionTest, NumElementsOfRegions) {
  EXPECT_EQ(Region::Box({}, {}).NumElements(), 1u);  // 0-d: one element
  EXPECT_EQ(Region::Box({1, 2}, {3, 4}).NumElements(), 12u);
  EXPECT_EQ(Region::Box({0, 0}, {0, 4}).NumElements(), 0u);
  EXPECT_EQ(Region::Flat(7, 9).NumElements(), 9u);
  EXPECT_EQ(Region::Whole({2, 3, 5}), Region::Box({0, 0, 0}, {2, 3, 5}));
  EXPECT_EQ(Region::Whole({}).NumElements(), 1u);
}

TEST(RegionTest, ShapeNumElements) {
  EXPECT_EQ(*ckfmt::NumElements({}), 1u);
  EXPECT_EQ(*ckfmt::NumElements({0}), 0u);
  EXPECT_EQ(*ckfmt::NumElements({3, 0, 7}), 0u);
  EXPECT_EQ(*ckfmt::NumElements({7, 13, 3}), 273u);
  EXPECT_EQ(*ckfmt::NumElements({1ull << 32, 1ull << 31}), 1ull << 63);
  EXPECT_EQ(*ckfmt::NumElements({UINT64_MAX}), UINT64_MAX);
  EXPECT_EQ(*ckfmt::NumElements({0, UINT64_MAX}), 0u);
  EXPECT_EQ(*ckfmt::NumElements({1ull << 40, 0, 1ull << 23}), 0u);
}

TEST(RegionTest, ShapeNumElementsOverflow) {
  // A zero dimension does not excuse the others (T1): strides are products
  // of them, and validity must not depend on where the zero is.
  for (const Shape& s : {Shape{1ull << 32, 1ull << 32}, Shape{UINT64_MAX, 2},
                         Shape{5, 1ull << 62}, Shape{1ull << 21, 1ull << 21, 1ull << 22},
                         Shape{1ull << 40, 1ull << 40, 0}, Shape{0, 1ull << 40, 1ull << 40},
                         Shape{1ull << 40, 0, 1ull << 40}}) {
    auto r = ckfmt::NumElements(s);
    ASSERT_FALSE(r.ok()) << ::testing::PrintToString(s);
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  }
}

TEST(RegionTest, ShapeBytes) {
  EXPECT_EQ(*ckfmt::ShapeBytes({}, 4), 4u);
  EXPECT_EQ(*ckfmt::ShapeBytes({3, 5}, 2), 30u);
  EXPECT_EQ(*ckfmt::ShapeBytes({1ull << 61}, 4), 1ull << 63);
  EXPECT_EQ(*ckfmt::ShapeBytes({0, 1ull << 61}, 4), 0u);
  for (const Shape& s : {Shape{1ull << 62}, Shape{0, 1ull << 62}, Shape{1ull << 62, 0},
                         Shape{1ull << 31, 0, 1ull << 31}}) {
    auto r = ckfmt::ShapeBytes(s, 4);
    ASSERT_FALSE(r.ok()) << ::testing::PrintToString(s);
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  }
}

TEST(RegionTest, CheckedBytes) {
  EXPECT_EQ(*ckfmt::CheckedBytes(10, 8), 80u);
  EXPECT_EQ(*ckfmt::CheckedBytes(0, 16), 0u);
  EXPECT_EQ(*ckfmt::CheckedBytes(UINT64_MAX / 16, 16), UINT64_MAX / 16 * 16);
  EXPECT_FALSE(ckfmt::CheckedBytes(UINT64_MAX / 16 + 1, 16).ok());
  EXPECT_FALSE(ckfmt::CheckedBytes(1ull << 62, 8).ok());
}

TEST(RegionTest, ValidateRegionAcceptsInBounds) {
  const Shape s{4, 6};
  EXPECT_TRUE(ckfmt::ValidateRegion(Region::Whole(s), s).ok());
  EXPECT_TRUE(ckfmt::ValidateRegion(Region::Box({4, 6}, {0, 0}), s).ok());  // empty at the end
  EXPECT_TRUE(ckfmt::ValidateRegion(Region::Box({3, 0}, {1, 6}), s).ok());
  EXPECT_TRUE(ckfmt::ValidateRegion(Region::Flat(0, 24), s).ok());
  EXPECT_TRUE(ckfmt::ValidateRegion(Region::Flat(24, 0), s).ok());
  EXPECT_TRUE(ckfmt::ValidateRegion(Region::Box({}, {}), Shape{}).ok());
  EXPECT_TRUE(ckfmt::ValidateRegion(Region::Flat(0, 1), Shape{}).ok());
  EXPECT_TRUE(ckfmt::ValidateRegion(Region::Box({0, 5}, {0, 0}), Shape{0, 5}).ok());
  EXPECT_TRUE(ckfmt::ValidateRegion(Region::Box({0}, {UINT64_MAX}), Shape{UINT64_MAX}).ok());
}

TEST(RegionTest, ValidateRegionRejectsOutOfBoundsAndOverflow) {
  const Shape s{4, 6};
  struct Case {
    Region r;
    Shape shape;
  };
  const Case cases[] = {
      {Region::Box({0, 0}, {5, 6}), s},                      // length beyond extent
      {Region::Box({4, 0}, {1, 1}), s},                      // offset at end, nonempty
      {Region::Box({5, 0}, {0, 0}), s},                      // offset beyond extent
      {Region::Box({0, 3}, {1, 4}), s},                      // offset + length beyond
      {Region::Box({0}, {4}), s},                            // rank too small
      {Region::Box({0, 0, 0}, {1, 1, 1}), s},                // rank too large
      {Region::Box({0, 0}, {1}), s},                         // offsets/lengths disagree
      {Region::Box({0}, {1}), Shape{}},                      // rank vs 0-d
      {Region::Box({UINT64_MAX - 1}, {2}), Shape{UINT64_MAX}},  // offset + length overflows
      {Region::Box({1}, {UINT64_MAX}), Shape{UINT64_MAX}},
      {Region::Flat(0, 25), s},                              // past the end
      {Region::Flat(25, 0), s},                              // start past the end
      {Region::Flat(5, UINT64_MAX), s},                      // start + length overflows
      {Region::Flat(UINT64_MAX, 2), s},
      {Region::Flat(0, 2), Shape{}},                         // 0-d has one element
      {Region::Flat(0, 1), Shape{1ull << 32, 1ull << 32}},   // shape itself overflows
  };
  for (const auto& c : cases) {
    ckfmt::Status st = ckfmt::ValidateRegion(c.r, c.shape);
    EXPECT_FALSE(st.ok()) << c.r.ToString();
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << c.r.ToString();
    EXPECT_FALSE(st.message().empty());
  }
}

TEST(RegionTest, ToStringIsReadable) {
  EXPECT_EQ(Region::Box({1, 2}, {3, 4}).ToString(), "box[1:4, 2:6]");
  EXPECT_EQ(Region::Flat(5, 10).ToString(), "flat[5, 15)");
}

// Hand-derived expectations, readable on their own.
TEST(ForEachOverlapTest, BoxInsideWhole2d) {
  const Shape s{4, 6};
  auto got = Runs(s, Region::Box({1, 2}, {2, 3}), Region::Whole(s));
  // Rows 1 and 2, columns 2..4: source stream 0..2 and 3..5.
  std::vector<ckfmt::Run> want = {{0, 8, 3}, {3, 14, 3}};
  EXPECT_TRUE(SameRuns(got, want)) << RunsToString(got);
}

TEST(ForEachOverlapTest, FullRowsMergeIntoOneRun) {
  const Shape s{4, 6};
  auto got = Runs(s, Region::Box({1, 0}, {2, 6}), Region::Whole(s));
  std::vector<ckfmt::Run> want = {{0, 6, 12}};
  EXPECT_TRUE(SameRuns(got, want)) << RunsToString(got);
  got = Runs(s, Region::Flat(3, 14), Region::Flat(0, 24));
  want = {{0, 3, 14}};
  EXPECT_TRUE(SameRuns(got, want)) << RunsToString(got);
}

TEST(ForEachOverlapTest, FlatAgainstBox) {
  const Shape s{4, 6};
  // Flat [4, 16) covers (0,4) (0,5) row 1 (1,0..5) and (2,0..3).
  // Box rows 0..3, columns 1..2.
  auto got = Runs(s, Region::Flat(4, 12), Region::Box({0, 1}, {4, 2}));
  std::vector<ckfmt::Run> want = {{3, 2, 2}, {9, 4, 2}};
  EXPECT_TRUE(SameRuns(got, want)) << RunsToString(got);
}

TEST(ForEachOverlapTest, DisjointAndEmpty) {
  const Shape s{4, 6};
  EXPECT_TRUE(Runs(s, Region::Box({0, 0}, {2, 6}), Region::Box({2, 0}, {2, 6})).empty());
  EXPECT_TRUE(Runs(s, Region::Flat(0, 12), Region::Flat(12, 12)).empty());
  EXPECT_TRUE(Runs(s, Region::Box({0, 0}, {0, 6}), Region::Whole(s)).empty());
  EXPECT_TRUE(Runs(s, Region::Whole(s), Region::Flat(7, 0)).empty());
  EXPECT_TRUE(Runs(Shape{0, 5}, Region::Whole({0, 5}), Region::Whole({0, 5})).empty());
  EXPECT_EQ(ckfmt::OverlapElements(Shape{3, 0}, Region::Whole({3, 0}), Region::Flat(0, 0)), 0u);
}

TEST(ForEachOverlapTest, ZeroDim) {
  const Shape s{};
  auto got = Runs(s, Region::Whole(s), Region::Flat(0, 1));
  std::vector<ckfmt::Run> want = {{0, 0, 1}};
  EXPECT_TRUE(SameRuns(got, want)) << RunsToString(got);
  EXPECT_EQ(ckfmt::OverlapElements(s, Region::Whole(s), Region::Whole(s)), 1u);
  EXPECT_EQ(ckfmt::OverlapElements(s, Region::Flat(1, 0), Region::Whole(s)), 0u);
}

TEST(ForEachOverlapTest, HugeShapeIsNotEnumerated) {
  // 2^40 x 2^20 elements: the result must come from arithmetic, not a scan.
  const Shape s{1ull << 40, 1ull << 20};
  const uint64_t row = 1ull << 20;
  auto got = Runs(s, Region::Flat(5 * row + 7, 3 * row), Region::Box({6, 0}, {10, row}));
  // Rows 6 and 7 are wholly inside the flat range; row 8 up to column 6.
  std::vector<ckfmt::Run> want = {{row - 7, 0, 2 * row + 7}};
  EXPECT_TRUE(SameRuns(got, want)) << RunsToString(got);
  EXPECT_EQ(ckfmt::OverlapElements(s, Region::Whole(s), Region::Box({1, 0}, {1ull << 39, row})),
            1ull << 59);
}

struct FixedCase {
  Shape shape;
  Region a, b;
};

TEST(ForEachOverlapTest, FixedCasesMatchReference) {
  const std::vector<FixedCase> cases = {
      // 1-d
      {{10}, Region::Box({2}, {5}), Region::Box({4}, {6})},
      {{10}, Region::Flat(0, 10), Region::Box({3}, {3})},
      {{10}, Region::Flat(9, 1), Region::Flat(0, 10)},
      {{1}, Region::Whole({1}), Region::Flat(0, 1)},
      // 2-d
      {{5, 7}, Region::Box({1, 1}, {3, 5}), Region::Box({2, 0}, {3, 4})},
      {{5, 7}, Region::Flat(3, 20), Region::Box({1, 2}, {4, 3})},
      {{5, 7}, Region::Flat(3, 20), Region::Flat(10, 25)},
      {{5, 7}, Region::Box({0, 6}, {5, 1}), Region::Flat(6, 29)},
      {{1, 9}, Region::Flat(2, 5), Region::Box({0, 3}, {1, 6})},
      {{9, 1}, Region::Flat(2, 5), Region::Box({3, 0}, {6, 1})},
      // 3-d
      {{3, 4, 5}, Region::Box({1, 1, 1}, {2, 2, 3}), Region::Whole({3, 4, 5})},
      {{3, 4, 5}, Region::Flat(7, 41), Region::Box({0, 1, 2}, {3, 3, 2})},
      {{3, 4, 5}, Region::Flat(7, 41), Region::Flat(20, 40)},
      {{3, 4, 5}, Region::Box({0, 0, 0}, {3, 4, 1}), Region::Box({0, 0, 0}, {1, 4, 5})},
      {{7, 13, 3}, Region::Flat(38, 200), Region::Box({1, 2, 0}, {5, 9, 3})},
      {{7, 13, 3}, Region::Box({0, 0, 1}, {7, 13, 2}), Region::Box({2, 5, 0}, {3, 1, 3})},
      // 4-d with unit dims
      {{2, 1, 3, 1}, Region::Flat(1, 4), Region::Box({0, 0, 1, 0}, {2, 1, 2, 1})},
      // zero-size dims
      {{0, 5}, Region::Whole({0, 5}), Region::Flat(0, 0)},
      {{3, 0}, Region::Box({1, 0}, {2, 0}), Region::Whole({3, 0})},
      {{4, 0, 2}, Region::Flat(0, 0), Region::Whole({4, 0, 2})},
  };
  for (const auto& c : cases) CheckAgainstReference(c.shape, c.a, c.b);
}

// Randomized: every pairing of box and flat, ranks 0-4, fixed seed.
TEST(ForEachOverlapTest, RandomizedMatchesReference) {
  std::mt19937_64 rng(0xC4EC4F07);
  for (int i = 0; i < 3000; ++i) {
    Shape shape = ckfmt_test::RandomShape(rng, 4, 6);
    auto pick = [&](int kind) {
      return kind == 0 ? ckfmt_test::RandomBox(rng, shape) : ckfmt_test::RandomFlat(rng, shape);
    };
    Region a = pick(i % 2), b = pick((i / 2) % 2);
    CheckAgainstReference(shape, a, b);
    if (HasFailure()) {
      ADD_FAILURE() << "stopping at iteration " << i;
      return;
    }
  }
}

// Many small pieces tiling a tensor: overlap sums add up to the caller's region size.
TEST(ForEachOverlapTest, TilingCoversDestinationExactlyOnce) {
  std::mt19937_64 rng(42);
  for (int iter = 0; iter < 200; ++iter) {
    Shape shape = ckfmt_test::RandomShape(rng, 3, 7);
    uint64_t n = ckfmt_test::RefNumElements(shape);
    // Split the flat range into random consecutive pieces.
    std::vector<Region> pieces;
    for (uint64_t pos = 0; pos < n;) {
      uint64_t len = 1 + rng() % (n - pos);
      pieces.push_back(Region::Flat(pos, len));
      pos += len;
    }
    Region dst = ckfmt_test::RandomBox(rng, shape);
    std::vector<int> hits(dst.NumElements(), 0);
    for (const auto& p : pieces) {
      ckfmt::ForEachOverlap(shape, p, dst, [&](const ckfmt::Run& r) {
        for (uint64_t k = 0; k < r.count; ++k) ++hits[r.dst_offset + k];
      });
    }
    for (size_t k = 0; k < hits.size(); ++k) {
      ASSERT_EQ(hits[k], 1) << "dst element " << k << " of " << dst.ToString();
    }
  }
}

// The boxes' streams joined in order are the flat range's stream, and each
// box is valid and non-empty; every range of several shapes, then random
// ones.
void ExpectFlatRangeBoxes(const Shape& shape, uint64_t start, uint64_t length) {
  const std::vector<Region> boxes = ckfmt::FlatRangeBoxes(shape, start, length);
  std::vector<uint64_t> joined;
  for (const Region& b : boxes) {
    ASSERT_EQ(b.kind, Region::Kind::kBox);
    ASSERT_TRUE(ckfmt::ValidateRegion(b, shape).ok()) << b.ToString();
    ASSERT_GT(b.NumElements(), 0u) << b.ToString();
    for (uint64_t i : ckfmt_test::RefGlobalIndices(shape, b)) joined.push_back(i);
  }
  EXPECT_EQ(joined, ckfmt_test::RefGlobalIndices(shape, Region::Flat(start, length)))
      << "range [" << start << ", " << start + length << ")";
  EXPECT_LE(boxes.size(), std::max<size_t>(1, 2 * shape.size() - 1));
}

TEST(FlatRangeBoxesTest, EveryRangeOfSmallShapes) {
  for (const Shape& shape : std::vector<Shape>{{}, {5}, {3, 4}, {2, 3, 4}, {2, 1, 3}, {4, 0}}) {
    const uint64_t n = ckfmt_test::RefNumElements(shape);
    for (uint64_t a = 0; a <= n; ++a) {
      for (uint64_t b = a; b <= n; ++b) ExpectFlatRangeBoxes(shape, a, b - a);
    }
  }
  EXPECT_TRUE(ckfmt::FlatRangeBoxes({3, 4}, 5, 0).empty());
  // Whole rows are one box; a range inside a row is one box.
  EXPECT_EQ(ckfmt::FlatRangeBoxes({3, 4}, 4, 8),
            (std::vector<Region>{Region::Box({1, 0}, {2, 4})}));
  EXPECT_EQ(ckfmt::FlatRangeBoxes({3, 4}, 5, 2),
            (std::vector<Region>{Region::Box({1, 1}, {1, 2})}));
}

TEST(FlatRangeBoxesTest, RandomRanges) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 300; ++i) {
    Shape shape = ckfmt_test::RandomShape(rng, 4, 6);
    Region r = ckfmt_test::RandomFlat(rng, shape);
    ExpectFlatRangeBoxes(shape, r.start, r.length);
  }
}

}  // namespace
