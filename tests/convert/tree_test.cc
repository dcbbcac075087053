// Tensor sources stream any strided view as row-major pieces through the
// caller's PieceMemory, which later tensors reuse.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tree.h"

namespace ckfmt::convert::testing {
namespace {

// A u32 storage holding 0, 1, 2, ...
std::vector<uint32_t> Iota(size_t n) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint32_t(i);
  return v;
}

std::shared_ptr<TensorSource> View(const std::vector<uint32_t>& storage, Shape shape,
                                   std::vector<uint64_t> stride, uint64_t offset) {
  auto s = StridedTensorSource::Create(
      DType::kU32, std::move(shape), std::move(stride), offset, storage.size() * 4,
      [&storage](uint64_t off, void* dst, uint64_t n) {
        std::memcpy(dst, reinterpret_cast<const uint8_t*>(storage.data()) + off, n);
        return Status::OK();
      },
      "test tensor");
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return *s;
}

// Streams `t` and places each piece at its row-major position.
std::vector<uint32_t> Assemble(TensorSource& t, PieceMemory& memory) {
  std::vector<uint32_t> out(NumElements(t.shape).value(), 0xdeadbeef);
  const Region whole = Region::Whole(t.shape);
  Status s = t.Stream(memory, [&](const Region& r, uint32_t, const void* data, uint64_t n) {
    EXPECT_EQ(n, r.NumElements() * 4);
    EXPECT_LE(n, memory.budget());
    ForEachOverlap(t.shape, r, whole, [&](const Run& run) {
      std::memcpy(&out[run.dst_offset], static_cast<const uint32_t*>(data) + run.src_offset,
                  run.count * 4);
    });
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

TEST(TensorSource, TransposedViewStreamsRowMajorInSmallPieces) {
  const auto storage = Iota(64 * 48 + 5);
  // The transpose of a 64x48 matrix stored at element offset 5: 48x64.
  auto t = View(storage, {48, 64}, {1, 48}, 5);
  PieceMemory memory(1024);  // 256 elements: many pieces, both slots
  std::vector<uint32_t> got = Assemble(*t, memory);
  for (uint64_t i = 0; i < 48; ++i) {
    for (uint64_t j = 0; j < 64; ++j) {
      ASSERT_EQ(got[i * 64 + j], storage[5 + j * 48 + i]) << i << "," << j;
    }
  }
}

TEST(PieceMemory, BuffersAreKeptWhileRequestsFit) {
  PieceMemory memory(4096);
  uint8_t* a = memory.Buffer(PieceMemory::Id(0, 0), 4096);
  uint8_t* b = memory.Buffer(PieceMemory::Id(1, 0), 4096);
  EXPECT_NE(a, b);
  for (int i = 0; i < 4096; ++i) a[i] = uint8_t(i * 7);
  // Smaller and equal requests: the same bytes, contents kept.
  EXPECT_EQ(memory.Buffer(PieceMemory::Id(0, 0), 100), a);
  EXPECT_EQ(memory.Buffer(PieceMemory::Id(0, 0), 4096), a);
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(a[i], uint8_t(i * 7)) << i;
  // A larger one gets room for it.
  uint8_t* c = memory.Buffer(PieceMemory::Id(0, 0), 1 << 20);
  c[(1 << 20) - 1] = 1;
  EXPECT_EQ(memory.Buffer(PieceMemory::Id(0, 0), 4096), c);
}

TEST(TensorSource, TensorsShareOnePieceMemory) {
  const auto storage = Iota(1 << 16);
  PieceMemory memory(16 << 10);
  auto a = View(storage, {256, 64}, {64, 1}, 0);     // contiguous
  auto b = View(storage, {64, 256}, {1, 64}, 0);     // transposed
  auto c = View(storage, {256, 64}, {64, 1}, 1000);  // contiguous, shifted
  EXPECT_EQ(Assemble(*a, memory),
            std::vector<uint32_t>(storage.begin(), storage.begin() + (1 << 14)));
  std::vector<uint32_t> got_b = Assemble(*b, memory);
  for (uint64_t i = 0; i < 64; ++i) {
    for (uint64_t j = 0; j < 256; ++j) ASSERT_EQ(got_b[i * 256 + j], storage[j * 64 + i]);
  }
  EXPECT_EQ(Assemble(*c, memory),
            std::vector<uint32_t>(storage.begin() + 1000, storage.begin() + 1000 + (1 << 14)));
}

}  // namespace
}  // namespace ckfmt::convert::testing
