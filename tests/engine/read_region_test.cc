// Partial reads and resharding: ReadRegion, sharded saves through
// CheckpointWriter, loading into differently sharded caller tensors, partial
// entries, and reads that touch only the chunks they need.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "ckfmt/reader.h"
#include "ckfmt/writer.h"
#include "util/file_util.h"
#include "util/region_ref.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt_test;

std::string ReadRegionBytes(CheckpointReader& r, const KeyPath& path, const Region& region,
                            size_t esize, Status* status) {
  std::string out(region.NumElements() * esize + 1, '\x5a');  // +1 guards against overrun
  *status = r.ReadRegion(path, region, out.data());
  EXPECT_EQ(out.back(), '\x5a') << "ReadRegion wrote past the region's bytes";
  out.pop_back();
  return out;
}

class ReadRegionTest : public ::testing::TestWithParam<Codec> {
 protected:
  void SetUp() override {
    path = dir.File("r.ckfmt");
    whole = RandomTensor(DType::kF32, {37, 53, 3}, 17);  // 23532 bytes, 6 chunks of 4096
    blob = RandomString(20000, 4);
    Dict d;
    d.Set("t", whole);
    d.Set("blob", Bytes{"raw", blob});
    d.Set("scalar", Value(int64_t{3}));
    SaveOptions o = SmallSaveOptions(GetParam());
    o.chunk_size = 4096;
    CKFMT_ASSERT_OK(ckfmt::Save(path, Value(std::move(d)), o));
    auto r = CheckpointReader::Open(path, SmallReadOptions());
    CKFMT_ASSERT_OK(r);
    reader = std::move(*r);
    ASSERT_GE(reader->Find({"t"})->pieces[0].chunks.size(), 5u);
  }
  ScopedTempDir dir;
  std::string path, blob;
  Tensor whole;
  std::unique_ptr<CheckpointReader> reader;
};

TEST_P(ReadRegionTest, RandomBoxesAndFlatRanges) {
  std::mt19937_64 rng(99);
  const std::string all = TensorBytes(whole);
  for (int i = 0; i < 150; ++i) {
    Region region = i % 2 ? RandomBox(rng, whole.shape()) : RandomFlat(rng, whole.shape());
    Status st;
    std::string got = ReadRegionBytes(*reader, {"t"}, region, 4, &st);
    ASSERT_TRUE(st.ok()) << region.ToString() << ": " << st.ToString();
    ASSERT_EQ(got, RefExtract(whole.shape(), region, all, 4)) << region.ToString();
  }
}

TEST_P(ReadRegionTest, RegionsOnChunkBoundaries) {
  const std::string all = TensorBytes(whole);
  const uint64_t per_chunk = 4096 / 4;
  for (uint64_t start : {uint64_t{0}, per_chunk - 1, per_chunk, 2 * per_chunk + 1}) {
    for (uint64_t len : {uint64_t{1}, uint64_t{2}, per_chunk, per_chunk + 1}) {
      Region region = Region::Flat(start, len);
      Status st;
      std::string got = ReadRegionBytes(*reader, {"t"}, region, 4, &st);
      ASSERT_TRUE(st.ok()) << region.ToString() << ": " << st.ToString();
      EXPECT_EQ(got, RefExtract(whole.shape(), region, all, 4)) << region.ToString();
    }
  }
  Status st;
  EXPECT_EQ(ReadRegionBytes(*reader, {"t"}, Region::Whole(whole.shape()), 4, &st), all);
  EXPECT_TRUE(st.ok()) << st.ToString();
  // The last element alone.
  Region last = Region::Box({36, 52, 2}, {1, 1, 1});
  EXPECT_EQ(ReadRegionBytes(*reader, {"t"}, last, 4, &st), all.substr(all.size() - 4));
}

TEST_P(ReadRegionTest, BytesEntry) {
  Status st;
  EXPECT_EQ(ReadRegionBytes(*reader, {"blob"}, Region::Flat(4000, 9000), 1, &st),
            blob.substr(4000, 9000));
  EXPECT_TRUE(st.ok()) << st.ToString();
}

TEST_P(ReadRegionTest, BadRequestsFailCleanly) {
  std::string buf(1 << 20, '\0');
  Status st = reader->ReadRegion({"t"}, Region::Box({0, 0, 0}, {38, 1, 1}), buf.data());
  EXPECT_FALSE(st.ok()) << "box beyond the tensor";
  st = reader->ReadRegion({"t"}, Region::Box({0, 0}, {1, 1}), buf.data());
  EXPECT_FALSE(st.ok()) << "box of the wrong rank";
  st = reader->ReadRegion({"t"}, Region::Flat(37 * 53 * 3 - 1, 2), buf.data());
  EXPECT_FALSE(st.ok()) << "flat range beyond the tensor";
  st = reader->ReadRegion({"t"}, Region::Flat(UINT64_MAX, 2), buf.data());
  EXPECT_FALSE(st.ok()) << "flat range overflowing";
  st = reader->ReadRegion({"nope"}, Region::Flat(0, 1), buf.data());
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  st = reader->ReadRegion({"scalar"}, Region::Flat(0, 1), buf.data());
  EXPECT_FALSE(st.ok()) << "a scalar has no region";
}

INSTANTIATE_TEST_SUITE_P(Codecs, ReadRegionTest,
                         ::testing::Values(Codec::kNone, Codec::kZstd, Codec::kBytePlaneZstd),
                         [](const auto& info) {
                           return std::string(info.param == Codec::kNone   ? "none"
                                              : info.param == Codec::kZstd ? "zstd"
                                                                           : "byteplane");
                         });

// ---------------------------------------------------------------------------
// Sharded saves: several ranks' pieces of one global tensor.

class ShardedSaveTest : public ::testing::TestWithParam<Codec> {
 protected:
  void SetUp() override {
    path = dir.File("sharded.ckfmt");
    box_t = RandomTensor(DType::kF32, {96, 80}, 1);   // 30 KiB
    flat_t = RandomTensor(DType::kI16, {71, 37}, 2);  // odd sizes
    SaveOptions o = SmallSaveOptions(GetParam());
    o.chunk_size = 4096;
    o.world_size = 4;
    o.save_mode = "parallel";
    auto w = CheckpointWriter::Create(path, o);
    CKFMT_ASSERT_OK(w);
    CheckpointWriter& writer = **w;
    CKFMT_ASSERT_OK(writer.AddContainer({"model"}, EntryKind::kDict));
    // DTensor-style boxes: rows 0..40 from rank 0, the rest split by columns.
    box_pieces = {Region::Box({0, 0}, {40, 80}), Region::Box({40, 0}, {56, 33}),
                  Region::Box({40, 33}, {56, 47})};
    for (uint32_t rank = 0; rank < box_pieces.size(); ++rank) {
      Tensor s = ShardOf(box_t, box_pieces[rank]);
      CKFMT_ASSERT_OK(writer.AddTensorPiece({"model", "w"}, DType::kF32, box_t.shape(),
                                            box_pieces[rank], rank, s.data()));
      CKFMT_ASSERT_OK(writer.AddSavedLayout({"model", "w"}, ShardRecord{rank, box_pieces[rank]}));
    }
    // FSDP-style flat ranges, added out of order from ranks 3, 1, 0, 2.
    const uint64_t n = 71 * 37;
    flat_pieces = {Region::Flat(900, n - 900), Region::Flat(301, 599), Region::Flat(0, 301)};
    uint32_t ranks[] = {3, 1, 0};
    for (size_t i = 0; i < flat_pieces.size(); ++i) {
      Tensor s = ShardOf(flat_t, flat_pieces[i]);
      CKFMT_ASSERT_OK(writer.AddTensorPiece({"model", "flat"}, DType::kI16, flat_t.shape(),
                                            flat_pieces[i], ranks[i], s.data()));
    }
    auto commit = writer.Commit();
    CKFMT_ASSERT_OK(commit);
  }

  void ExpectShardLoads(const KeyPath& p, const Tensor& global, const Region& region) {
    Dict model;
    Tensor caller = Tensor::Zeros(global.dtype(), region.kind == Region::Kind::kBox
                                                      ? region.lengths
                                                      : Shape{region.length});
    caller.SetShard(ShardSpec{global.shape(), region});
    model.Set(std::get<std::string>(p[1]), caller);
    Dict root;
    root.Set("model", std::move(model));
    Value sd(std::move(root));
    LoadOptions o;
    o.unexpected = UnexpectedPolicy::kIgnore;  // the other tensor
    auto report = ckfmt::Load(path, &sd, o, SmallReadOptions());
    CKFMT_ASSERT_OK(report);
    EXPECT_EQ(TensorBytes(sd.Find(p)->as_tensor()),
              RefExtract(global.shape(), region, TensorBytes(global), DTypeSize(global.dtype())))
        << FormatKeyPath(p) << " into shard " << region.ToString();
    EXPECT_EQ(sd.Find(p)->as_tensor().data(), caller.data()) << "not loaded in place";
  }

  ScopedTempDir dir;
  std::string path;
  Tensor box_t, flat_t;
  std::vector<Region> box_pieces, flat_pieces;
};

TEST_P(ShardedSaveTest, IndexRecordsPiecesRanksAndLayout) {
  auto r = CheckpointReader::Open(path, SmallReadOptions());
  CKFMT_ASSERT_OK(r);
  const EntryRecord* w = (*r)->Find({"model", "w"});
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, box_t.shape());
  EXPECT_FALSE(w->partial);
  ASSERT_EQ(w->pieces.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(w->pieces[i].rank, i);
    EXPECT_EQ(w->pieces[i].region, box_pieces[i]);
  }
  ASSERT_EQ(w->saved_layout.size(), 3u);
  EXPECT_EQ(w->saved_layout[2].region, box_pieces[2]);
  EXPECT_EQ((*r)->index().world_size, 4u);
  EXPECT_EQ((*r)->index().save_mode, "parallel");
}

TEST_P(ShardedSaveTest, LoadsIntoWholeTensors) {
  Value sd = Dict{};
  CKFMT_ASSERT_OK(ckfmt::Load(path, &sd, {}, SmallReadOptions()));
  EXPECT_TRUE(ValuesBitwiseEqual(Value(box_t), *sd.Find({"model", "w"})));
  EXPECT_TRUE(ValuesBitwiseEqual(Value(flat_t), *sd.Find({"model", "flat"})));
  // In place, into an unsharded caller tensor.
  Dict model;
  model.Set("w", Tensor::Zeros(DType::kF32, {96, 80}));
  model.Set("flat", Tensor::Zeros(DType::kI16, {71, 37}));
  Dict root;
  root.Set("model", std::move(model));
  Value caller(std::move(root));
  CKFMT_ASSERT_OK(ckfmt::Load(path, &caller, {}, SmallReadOptions()));
  EXPECT_TRUE(ValuesBitwiseEqual(Value(box_t), *caller.Find({"model", "w"})));
  EXPECT_TRUE(ValuesBitwiseEqual(Value(flat_t), *caller.Find({"model", "flat"})));
}

TEST_P(ShardedSaveTest, ReshardsIntoOtherLayouts) {
  // Box-saved tensor into flat shards (FSDP) and other boxes, and back.
  const uint64_t nw = 96 * 80, nf = 71 * 37;
  for (const Region& r : {Region::Flat(0, nw / 3), Region::Flat(nw / 3, nw / 3 + 7),
                          Region::Flat(nw - 5, 5), Region::Box({0, 0}, {96, 40}),
                          Region::Box({30, 20}, {30, 50}), Region::Box({95, 79}, {1, 1})}) {
    ExpectShardLoads({"model", "w"}, box_t, r);
  }
  for (const Region& r : {Region::Box({0, 0}, {71, 10}), Region::Box({8, 5}, {20, 30}),
                          Region::Flat(250, 1000), Region::Flat(nf - 1, 1)}) {
    ExpectShardLoads({"model", "flat"}, flat_t, r);
  }
}

TEST_P(ShardedSaveTest, ReadRegionAcrossPieces) {
  auto r = CheckpointReader::Open(path, SmallReadOptions());
  CKFMT_ASSERT_OK(r);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 60; ++i) {
    const bool use_box = i % 2;
    const Tensor& t = i % 3 ? box_t : flat_t;
    const KeyPath p = i % 3 ? KeyPath{"model", "w"} : KeyPath{"model", "flat"};
    Region region = use_box ? RandomBox(rng, t.shape()) : RandomFlat(rng, t.shape());
    Status st;
    size_t es = DTypeSize(t.dtype());
    std::string got = ReadRegionBytes(**r, p, region, es, &st);
    ASSERT_TRUE(st.ok()) << region.ToString() << ": " << st.ToString();
    ASSERT_EQ(got, RefExtract(t.shape(), region, TensorBytes(t), es)) << region.ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, ShardedSaveTest, ::testing::Values(Codec::kNone, Codec::kZstd),
                         [](const auto& info) {
                           return std::string(info.param == Codec::kNone ? "none" : "zstd");
                         });

// ---------------------------------------------------------------------------

class PartialEntryTest : public ::testing::Test {
 protected:
  ScopedTempDir dir;
};

// Save() of a lone shard stores a partial entry; reading elements no piece
// covers must fail (spec T4), never return zeros.
TEST_F(PartialEntryTest, LoneShardIsPartialAndUncoveredReadsFail) {
  const std::string path = dir.File("partial.ckfmt");
  Tensor global = RandomTensor(DType::kF64, {20, 10}, 8);
  Region mine = Region::Box({5, 0}, {10, 10});
  Dict d;
  d.Set("w", ShardOf(global, mine));
  CKFMT_ASSERT_OK(ckfmt::Save(path, Value(std::move(d)), SmallSaveOptions()));
  auto r = CheckpointReader::Open(path, SmallReadOptions());
  CKFMT_ASSERT_OK(r);
  const EntryRecord* e = (*r)->Find({"w"});
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->partial);
  EXPECT_EQ(e->shape, global.shape());
  // Covered: fine.
  Status st;
  Region inside = Region::Box({6, 2}, {3, 5});
  EXPECT_EQ(ReadRegionBytes(**r, {"w"}, inside, 8, &st),
            RefExtract(global.shape(), inside, TensorBytes(global), 8));
  EXPECT_TRUE(st.ok()) << st.ToString();
  // Partly uncovered: an error.
  ReadRegionBytes(**r, {"w"}, Region::Box({4, 0}, {2, 10}), 8, &st);
  EXPECT_FALSE(st.ok()) << "read of uncovered elements succeeded";
  EXPECT_FALSE((*r)->ReadTensor({"w"}).ok()) << "whole read of a partial entry succeeded";
  // Loading the same shard works; reconstructing the whole does not.
  Dict same;
  Tensor caller = Tensor::Zeros(DType::kF64, {10, 10});
  caller.SetShard(ShardSpec{global.shape(), mine});
  same.Set("w", caller);
  Value sd(std::move(same));
  CKFMT_ASSERT_OK(ckfmt::Load(path, &sd, {}, SmallReadOptions()));
  EXPECT_EQ(TensorBytes(sd.Find({"w"})->as_tensor()),
            RefExtract(global.shape(), mine, TensorBytes(global), 8));
  Value empty = Dict{};
  EXPECT_FALSE(ckfmt::Load(path, &empty, {}, SmallReadOptions()).ok())
      << "reconstructing a partial entry must not fill zeros silently";
  // A caller shard reaching outside the stored rows must fail too.
  Dict wider;
  Tensor w = Tensor::Zeros(DType::kF64, {12, 10});
  w.SetShard(ShardSpec{global.shape(), Region::Box({4, 0}, {12, 10})});
  wider.Set("w", w);
  Value sd2(std::move(wider));
  EXPECT_FALSE(ckfmt::Load(path, &sd2, {}, SmallReadOptions()).ok())
      << "loaded a shard that the file covers only in part";
}

TEST_F(PartialEntryTest, WriterMarkPartialAllowsGaps) {
  const std::string path = dir.File("gaps.ckfmt");
  Tensor global = RandomTensor(DType::kU8, {1000}, 1);
  SaveOptions o = SmallSaveOptions();
  o.world_size = 2;
  auto w = CheckpointWriter::Create(path, o);
  CKFMT_ASSERT_OK(w);
  Tensor a = ShardOf(global, Region::Flat(0, 100));
  Tensor b = ShardOf(global, Region::Flat(900, 100));
  CKFMT_ASSERT_OK((*w)->AddTensorPiece({"x"}, DType::kU8, {1000}, Region::Flat(0, 100), 0, a.data()));
  CKFMT_ASSERT_OK((*w)->AddTensorPiece({"x"}, DType::kU8, {1000}, Region::Flat(900, 100), 1, b.data()));
  CKFMT_ASSERT_OK((*w)->MarkPartial({"x"}));
  CKFMT_ASSERT_OK((*w)->Commit());
  auto r = CheckpointReader::Open(path);
  CKFMT_ASSERT_OK(r);
  Status st;
  EXPECT_EQ(ReadRegionBytes(**r, {"x"}, Region::Flat(950, 50), 1, &st),
            TensorBytes(global).substr(950, 50));
  EXPECT_TRUE(st.ok()) << st.ToString();
  ReadRegionBytes(**r, {"x"}, Region::Flat(50, 100), 1, &st);
  EXPECT_FALSE(st.ok());
}

TEST_F(PartialEntryTest, GapsWithoutMarkPartialFailTheCommit) {
  const std::string path = dir.File("gaps.ckfmt");
  Tensor global = RandomTensor(DType::kU8, {1000}, 1);
  auto w = CheckpointWriter::Create(path, SmallSaveOptions());
  CKFMT_ASSERT_OK(w);
  Tensor a = ShardOf(global, Region::Flat(0, 100));
  Status add = (*w)->AddTensorPiece({"x"}, DType::kU8, {1000}, Region::Flat(0, 100), 0, a.data());
  Status commit = add.ok() ? (*w)->Commit() : add;
  EXPECT_FALSE(commit.ok()) << "committed a tensor with uncovered elements";
  EXPECT_FALSE(FileExists(path));
  w->reset();
  EXPECT_TRUE(TempNames(dir.List()).empty());
}

// ---------------------------------------------------------------------------
// Reads touch only the chunks they need: with checksums on, a damaged chunk
// outside the requested region does not fail the request.

TEST(SelectiveReadTest, DamagedChunkOutsideTheRegionIsNotRead) {
  ScopedTempDir dir;
  const std::string path = dir.File("sel.ckfmt");
  Tensor t = RandomTensor(DType::kF32, {1024, 16}, 3);  // 64 KiB: 16 chunks of 64 rows
  Dict d;
  d.Set("t", t);
  SaveOptions o = SmallSaveOptions();
  o.chunk_size = 4096;
  CKFMT_ASSERT_OK(ckfmt::Save(path, Value(std::move(d)), o));
  uint64_t last_chunk_offset = 0;
  {
    auto r = CheckpointReader::Open(path);
    CKFMT_ASSERT_OK(r);
    const auto& chunks = (*r)->Find({"t"})->pieces[0].chunks;
    ASSERT_EQ(chunks.size(), 16u);
    last_chunk_offset = chunks.back().offset;
  }
  XorByte(path, last_chunk_offset + 100);
  auto r = CheckpointReader::Open(path, SmallReadOptions());
  CKFMT_ASSERT_OK(r);
  const std::string all = TensorBytes(t);
  Status st;
  // Rows 0..959 lie in chunks 0..14.
  for (const Region& region : {Region::Box({0, 0}, {64, 16}), Region::Box({100, 3}, {860, 5}),
                               Region::Flat(0, 960 * 16), Region::Flat(5000, 7)}) {
    EXPECT_EQ(ReadRegionBytes(**r, {"t"}, region, 4, &st),
              RefExtract(t.shape(), region, all, 4))
        << region.ToString();
    EXPECT_TRUE(st.ok()) << region.ToString() << ": " << st.ToString();
  }
  // A shard load of the intact part works too.
  Tensor shard = Tensor::Zeros(DType::kF32, {500, 16});
  shard.SetShard(ShardSpec{{1024, 16}, Region::Box({0, 0}, {500, 16})});
  Dict sd_d;
  sd_d.Set("t", shard);
  Value sd(std::move(sd_d));
  CKFMT_EXPECT_OK(ckfmt::Load(path, &sd, {}, SmallReadOptions()));
  // The damaged chunk fails any read that needs it.
  ReadRegionBytes(**r, {"t"}, Region::Box({1000, 0}, {1, 1}), 4, &st);
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  Value whole = Dict{};
  auto load = ckfmt::Load(path, &whole, {}, SmallReadOptions());
  ASSERT_FALSE(load.ok());
  EXPECT_EQ(load.status().code(), StatusCode::kCorruption);
}

}  // namespace
