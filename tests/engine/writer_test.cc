// CheckpointWriter's checks on what it is given: a writer never commits an
// index that a reader would refuse.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "ckfmt/reader.h"
#include "ckfmt/writer.h"
#include "util/file_util.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt_test;

class WriterTest : public ::testing::Test {
 protected:
  // Runs `steps` against a fresh writer and then commits: some step or the
  // commit must fail, leaving no file and no temporary.
  void ExpectRefused(const std::function<Status(CheckpointWriter&)>& steps, const char* what) {
    const std::string path = dir.File("w.ckfmt");
    auto w = CheckpointWriter::Create(path, SmallSaveOptions());
    CKFMT_ASSERT_OK(w);
    Status st = steps(**w);
    if (st.ok()) st = (*w)->Commit();
    EXPECT_FALSE(st.ok()) << what << ": the writer committed";
    w->reset();
    EXPECT_FALSE(FileExists(path)) << what;
    EXPECT_TRUE(TempNames(dir.List()).empty()) << what;
  }
  ScopedTempDir dir;
};

#define CHAIN(expr)                       \
  do {                                    \
    ::ckfmt::Status _s = (expr);          \
    if (!_s.ok()) return _s;              \
  } while (0)

TEST_F(WriterTest, ChildBeforeParent) {
  ExpectRefused([](CheckpointWriter& w) { return w.AddScalar({"a", "b"}, Value(int64_t{1})); },
                "child without parent");
}

TEST_F(WriterTest, DuplicatePath) {
  ExpectRefused(
      [](CheckpointWriter& w) {
        CHAIN(w.AddScalar({"a"}, Value(int64_t{1})));
        return w.AddScalar({"a"}, Value(int64_t{2}));
      },
      "duplicate path");
}

TEST_F(WriterTest, ListIndicesOutOfOrder) {
  ExpectRefused(
      [](CheckpointWriter& w) {
        CHAIN(w.AddContainer({"l"}, EntryKind::kList));
        CHAIN(w.AddScalar({"l", 0u}, Value(int64_t{1})));
        return w.AddScalar({"l", 2u}, Value(int64_t{2}));
      },
      "list index gap");
}

TEST_F(WriterTest, KeyInsideList) {
  ExpectRefused(
      [](CheckpointWriter& w) {
        CHAIN(w.AddContainer({"l"}, EntryKind::kList));
        return w.AddScalar({"l", "k"}, Value(int64_t{1}));
      },
      "key inside a list");
}

TEST_F(WriterTest, NotPreOrder) {
  ExpectRefused(
      [](CheckpointWriter& w) {
        CHAIN(w.AddContainer({"a"}, EntryKind::kDict));
        CHAIN(w.AddContainer({"b"}, EntryKind::kDict));
        return w.AddScalar({"a", "x"}, Value(int64_t{1}));
      },
      "child of a closed container");
}

TEST_F(WriterTest, ContainerKindMustBeDictOrList) {
  ExpectRefused([](CheckpointWriter& w) { return w.AddContainer({"t"}, EntryKind::kTensor); },
                "AddContainer(kTensor)");
  ExpectRefused([](CheckpointWriter& w) { return w.AddContainer({"i"}, EntryKind::kInt); },
                "AddContainer(kInt)");
}

TEST_F(WriterTest, AddScalarRefusesNonScalars) {
  ExpectRefused(
      [](CheckpointWriter& w) { return w.AddScalar({"t"}, Value(Tensor::Zeros(DType::kF32, {1}))); },
      "AddScalar(tensor)");
  ExpectRefused([](CheckpointWriter& w) { return w.AddScalar({"d"}, Value(Dict{})); },
                "AddScalar(dict)");
  ExpectRefused([](CheckpointWriter& w) { return w.AddScalar({"b"}, Value(Bytes{"raw", "x"})); },
                "AddScalar(bytes)");
}

TEST_F(WriterTest, LayoutAndPartialForUnknownPaths) {
  ExpectRefused(
      [](CheckpointWriter& w) {
        return w.AddSavedLayout({"nope"}, ShardRecord{0, Region::Flat(0, 1)});
      },
      "AddSavedLayout of an unknown path");
  ExpectRefused([](CheckpointWriter& w) { return w.MarkPartial({"nope"}); },
                "MarkPartial of an unknown path");
}

TEST_F(WriterTest, PieceRankOutsideWorld) {
  ExpectRefused(
      [](CheckpointWriter& w) {
        uint8_t data[4] = {1, 2, 3, 4};
        return w.AddTensorPiece({"t"}, DType::kU8, {4}, Region::Whole({4}), 5, data);
      },
      "rank 5 with world size 1");
}

// A saved layout is informational, but a reader refuses one that names a
// rank outside the world or a box outside the tensor (FORMAT.md), so the
// writer refuses it at the call, naming the key.
TEST_F(WriterTest, SavedLayoutOutsideTheWorldOrTheTensor) {
  auto add = [](CheckpointWriter& w, ShardRecord shard) {
    uint8_t data[8] = {};
    CHAIN(w.AddTensorPiece({"t"}, DType::kU8, {8}, Region::Whole({8}), 0, data));
    return w.AddSavedLayout({"t"}, shard);
  };
  for (ShardRecord bad : {ShardRecord{1, Region::Flat(0, 8)}, ShardRecord{0, Region::Flat(4, 12)}}) {
    Status st;
    ExpectRefused(
        [&](CheckpointWriter& w) {
          st = add(w, bad);
          return st;
        },
        "saved layout");
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("t: saved layout"), std::string::npos) << st.ToString();
  }
}

TEST_F(WriterTest, PieceWithoutData) {
  Status st;
  ExpectRefused(
      [&](CheckpointWriter& w) {
        st = w.AddTensorPiece({"t"}, DType::kF32, {4}, Region::Whole({4}), 0, nullptr);
        return st;
      },
      "a piece with elements but no data");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("has no data"), std::string::npos) << st.ToString();
}

TEST_F(WriterTest, EmptyPath) {
  ExpectRefused([](CheckpointWriter& w) { return w.AddScalar({}, Value(int64_t{1})); },
                "empty path");
}

TEST_F(WriterTest, AddAfterCommitFails) {
  const std::string path = dir.File("c.ckfmt");
  auto w = CheckpointWriter::Create(path, SmallSaveOptions());
  CKFMT_ASSERT_OK(w);
  CKFMT_ASSERT_OK((*w)->AddScalar({"a"}, Value(int64_t{1})));
  CKFMT_ASSERT_OK((*w)->Commit());
  EXPECT_FALSE((*w)->AddScalar({"b"}, Value(int64_t{2})).ok());
  w->reset();  // destruction after commit must not remove the file
  Value sd = Dict{};
  CKFMT_ASSERT_OK(ckfmt::Load(path, &sd));
  EXPECT_EQ(sd.Find({"a"})->as_int(), 1);
  EXPECT_EQ(sd.Find({"b"}), nullptr);
}

TEST_F(WriterTest, StreamingEntriesOfEveryKind) {
  const std::string path = dir.File("s.ckfmt");
  SaveOptions o = SmallSaveOptions(Codec::kZstd);
  auto w = CheckpointWriter::Create(path, o);
  CKFMT_ASSERT_OK(w);
  CheckpointWriter& wr = **w;
  Tensor t = RandomTensor(DType::kBF16, {100, 70}, 3);
  std::string blob = RandomString(30000, 4);
  CKFMT_ASSERT_OK(wr.AddContainer({"l"}, EntryKind::kList));
  CKFMT_ASSERT_OK(wr.AddContainer({"l", 0u}, EntryKind::kDict));
  CKFMT_ASSERT_OK(wr.AddTensorPiece({"l", 0u, "t"}, DType::kBF16, {100, 70},
                                    Region::Whole({100, 70}), 0, t.data()));
  CKFMT_ASSERT_OK(wr.AddBytes({"l", 1u}, "opaque", blob.data(), blob.size()));
  CKFMT_ASSERT_OK(wr.AddScalar({"l", 2u}, Value()));
  CKFMT_ASSERT_OK(wr.AddScalar({"f"}, Value(-0.0)));
  CKFMT_ASSERT_OK(wr.AddScalar({"b"}, Value(true)));
  CKFMT_ASSERT_OK(wr.AddScalar({"s"}, Value(std::string("\0x", 2))));
  CKFMT_ASSERT_OK(wr.AddBytes({"e"}, "", nullptr, 0));
  CKFMT_ASSERT_OK(wr.Commit());
  const WriteStats& st = wr.stats();
  EXPECT_EQ(st.raw_bytes, t.nbytes() + blob.size());
  EXPECT_EQ(st.file_bytes, FileSize(path));
  EXPECT_GT(st.chunks, 3u);
  Value sd = Dict{};
  CKFMT_ASSERT_OK(ckfmt::Load(path, &sd));
  EXPECT_EQ(TensorBytes(sd.Find({"l", 0u, "t"})->as_tensor()), TensorBytes(t));
  EXPECT_EQ(sd.Find({"l", 1u})->as_bytes().data, blob);
  EXPECT_EQ(sd.Find({"l", 1u})->as_bytes().content_type, "opaque");
  EXPECT_TRUE(sd.Find({"l", 2u})->is_none());
  EXPECT_TRUE(std::signbit(sd.Find({"f"})->as_float())) << "-0.0 lost its sign";
  EXPECT_EQ(sd.Find({"s"})->as_string(), std::string("\0x", 2));
  EXPECT_EQ(sd.Find({"e"})->as_bytes().data, "");
}

// Without DeferReads a caller may reuse its buffer as soon as a call
// returns; with it, after Flush(). Either way the file holds what each
// buffer held at the time the contract promised it.
TEST_F(WriterTest, BufferReuseAfterCallOrFlush) {
  for (bool defer : {false, true}) {
    for (Codec codec : {Codec::kNone, Codec::kBytePlaneZstd}) {
      const std::string path = dir.File("reuse.ckfmt");
      auto w = CheckpointWriter::Create(path, SmallSaveOptions(codec));
      CKFMT_ASSERT_OK(w);
      if (defer) (*w)->DeferReads();
      Tensor a = RandomTensor(DType::kF32, {300, 50}, 11);
      Tensor b = RandomTensor(DType::kF32, {300, 50}, 12);
      const auto a_bytes = TensorBytes(a);
      std::vector<uint8_t> buf(a_bytes.begin(), a_bytes.end());
      CKFMT_ASSERT_OK((*w)->AddTensorPiece({"a"}, DType::kF32, {300, 50},
                                           Region::Whole({300, 50}), 0, buf.data()));
      if (defer) CKFMT_ASSERT_OK((*w)->Flush());
      std::memcpy(buf.data(), b.data(), buf.size());  // the buffer is reused
      CKFMT_ASSERT_OK((*w)->AddTensorPiece({"b"}, DType::kF32, {300, 50},
                                           Region::Whole({300, 50}), 0, buf.data()));
      CKFMT_ASSERT_OK((*w)->Commit());
      Value sd = Dict{};
      CKFMT_ASSERT_OK(ckfmt::Load(path, &sd));
      EXPECT_EQ(TensorBytes(sd.Find({"a"})->as_tensor()), TensorBytes(a)) << defer;
      EXPECT_EQ(TensorBytes(sd.Find({"b"})->as_tensor()), TensorBytes(b)) << defer;
    }
  }
}

// Deferred chunks of many small tensors share batches; each piece still
// lists its own chunks in stream order.
TEST_F(WriterTest, DeferredSmallTensorsRoundTrip) {
  for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kBytePlaneZstd}) {
    const std::string path = dir.File("many.ckfmt");
    Dict d;
    for (int i = 0; i < 40; ++i) {
      d.Set("t" + std::to_string(i), Value(RandomTensor(i % 2 ? DType::kBF16 : DType::kF32,
                                                       {uint64_t(7 + 13 * i), 33}, 100 + i)));
    }
    Value v(std::move(d));
    CKFMT_ASSERT_OK(Save(path, v, SmallSaveOptions(codec)));
    Value loaded = Dict{};
    CKFMT_ASSERT_OK(ckfmt::Load(path, &loaded));
    EXPECT_TRUE(ValuesBitwiseEqual(v, loaded)) << CodecName(uint8_t(codec));
    auto r = CheckpointReader::Open(path);
    CKFMT_ASSERT_OK(r);
    for (const EntryRecord& e : (*r)->index().entries) {
      for (const PieceRecord& p : e.pieces) {
        uint64_t raw = 0;
        for (const ChunkRecord& c : p.chunks) raw += c.raw_size;
        EXPECT_EQ(raw, p.region.NumElements() * DTypeSize(e.dtype)) << FormatKeyPath(e.path);
      }
    }
  }
}

// A compressed save with fsync syncs behind its writes (SyncBehind, tested
// in staged_output_test.cc); with syncs every 64 KiB it still commits the
// same checkpoint and leaves no temporary file.
TEST_F(WriterTest, CompressedSaveThatSyncsBehindRoundTrips) {
  Dict d;
  for (int i = 0; i < 6; ++i) {
    d.Set("t" + std::to_string(i), Value(RandomTensor(DType::kBF16, {300, 257}, 200 + i)));
  }
  const Value v(std::move(d));
  SaveOptions o = SmallSaveOptions(Codec::kBytePlaneZstd);
  o.fsync = true;
  o.chunk_size = 64 << 10;
  o.sync_behind_bytes = 64 << 10;
  const std::string path = dir.File("synced.ckfmt");
  CKFMT_ASSERT_OK(Save(path, v, o));
  EXPECT_TRUE(TempNames(dir.List()).empty());
  Value loaded = Dict{};
  CKFMT_ASSERT_OK(ckfmt::Load(path, &loaded));
  EXPECT_TRUE(ValuesBitwiseEqual(v, loaded));
}

// Writer rules of spec §6.7 that a writer must enforce on what it is given.

// Uncompressed chunks end where they would cross a multiple of the chunk
// size in the file, so that staging slots of that size are written whole at
// aligned offsets; whatever the threads (how many chunks are queued before
// one is placed) and whether the writer defers its reads.
TEST_F(WriterTest, UncompressedChunksDoNotCrossMultiplesOfTheChunkSize) {
  constexpr uint64_t kGrid = 64 << 10;
  Dict d;
  d.Set("blob", Value(Bytes{"application/octet-stream", std::string(5000, 'b')}));
  d.Set("u8", Value(RandomTensor(DType::kU8, {5001}, 1)));
  d.Set("f32", Value(RandomTensor(DType::kF32, {70001}, 2)));
  d.Set("bf16", Value(RandomTensor(DType::kBF16, {100003}, 3)));
  d.Set("f64", Value(RandomTensor(DType::kF64, {3, 12345}, 4)));
  d.Set("small", Value(RandomTensor(DType::kF32, {1000}, 5)));
  const Value v(std::move(d));
  for (unsigned threads : {1u, 4u}) {
    for (bool deferred : {true, false}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + (deferred ? ", deferred" : ""));
      const std::string path = dir.File("grid.ckfmt");
      SaveOptions o = SmallSaveOptions();
      o.chunk_size = kGrid;
      o.io.threads = threads;
      if (deferred) {
        CKFMT_ASSERT_OK(Save(path, v, o));
      } else {
        auto w = CheckpointWriter::Create(path, o);
        CKFMT_ASSERT_OK(w);
        for (size_t i = 0; i < v.as_dict().size(); ++i) {
          const Value& e = v.as_dict().value(i);
          const KeyPath key{v.as_dict().key(i)};
          if (e.kind() == Value::Kind::kBytes) {
            CKFMT_ASSERT_OK((*w)->AddBytes(key, e.as_bytes().content_type,
                                           e.as_bytes().data.data(), e.as_bytes().data.size()));
          } else {
            const Tensor& t = e.as_tensor();
            CKFMT_ASSERT_OK((*w)->AddTensorPiece(key, t.dtype(), t.shape(),
                                                 Region::Whole(t.shape()), 0, t.data()));
          }
        }
        CKFMT_ASSERT_OK((*w)->Commit());
      }
      Value loaded = Dict{};
      CKFMT_ASSERT_OK(ckfmt::Load(path, &loaded));
      EXPECT_TRUE(ValuesBitwiseEqual(v, loaded));
      auto r = CheckpointReader::Open(path);
      CKFMT_ASSERT_OK(r);
      size_t cut = 0;
      for (const EntryRecord& e : (*r)->index().entries) {
        for (const PieceRecord& p : e.pieces) {
          const uint64_t bytes = p.region.NumElements() * DTypeSize(e.dtype);
          EXPECT_LE(p.chunks.size(), (bytes + kGrid - 1) / kGrid + 1) << FormatKeyPath(e.path);
          for (size_t k = 0; k < p.chunks.size(); ++k) {
            const ChunkRecord& c = p.chunks[k];
            EXPECT_EQ(c.offset / kGrid, (c.offset + c.stored_size - 1) / kGrid)
                << FormatKeyPath(e.path) << " chunk " << k << " crosses a multiple of the chunk size";
            if (k > 0 && k + 1 < p.chunks.size()) {  // between the first and the last: whole
              EXPECT_EQ(c.offset % kGrid, 0u) << FormatKeyPath(e.path) << " chunk " << k;
              EXPECT_EQ(c.raw_size, kGrid) << FormatKeyPath(e.path) << " chunk " << k;
            }
            if (k == 0 && c.raw_size < std::min(bytes, kGrid)) ++cut;
          }
        }
      }
      EXPECT_GE(cut, 3u) << "pieces starting between multiples get a shorter first chunk";
    }
  }
}

TEST_F(WriterTest, DuplicateMetadataKeysAreRefused) {  // W2
  SaveOptions o = SmallSaveOptions();
  o.metadata = {{"step", "1"}, {"step", "2"}};
  const std::string path = dir.File("m.ckfmt");
  EXPECT_FALSE(ckfmt::Save(path, Dict{}, o).ok());
  EXPECT_FALSE(FileExists(path));
  EXPECT_TRUE(TempNames(dir.List()).empty());
}

// Spec §6.7 W5: every string in a file is valid UTF-8. Keys, string
// values, content types and metadata that are not are refused.
TEST_F(WriterTest, StringsThatAreNotUtf8AreRefused) {  // W5
  const std::string bad = "caf\xe9";  // Latin-1, not UTF-8
  ExpectRefused([&](CheckpointWriter& w) { return w.AddScalar({bad}, Value(int64_t{1})); },
                "key");
  ExpectRefused(
      [&](CheckpointWriter& w) {
        CHAIN(w.AddContainer({"a"}, EntryKind::kDict));
        return w.AddContainer({"a", bad}, EntryKind::kList);
      },
      "nested key");
  ExpectRefused([&](CheckpointWriter& w) { return w.AddScalar({"s"}, Value(bad)); },
                "string value");
  ExpectRefused([&](CheckpointWriter& w) { return w.AddBytes({"b"}, bad, "x", 1); },
                "content type");
  SaveOptions o = SmallSaveOptions();
  o.metadata = {{"note", bad}};
  const std::string path = dir.File("m.ckfmt");
  auto r = ckfmt::Save(path, Dict{}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_FALSE(FileExists(path));
  // Valid UTF-8 beyond ASCII is kept.
  Dict d;
  d.Set("caf\xc3\xa9", Value(std::string("\xe2\x82\xac")));
  CKFMT_ASSERT_OK(ckfmt::Save(path, d, SmallSaveOptions()));
}

TEST_F(WriterTest, ZeroWorldSizeIsRefused) {  // W3
  SaveOptions o = SmallSaveOptions();
  o.world_size = 0;
  const std::string path = dir.File("m.ckfmt");
  EXPECT_FALSE(ckfmt::Save(path, Dict{}, o).ok());
  EXPECT_FALSE(FileExists(path));
}

// Spec §6.7 W6: every element of a Bool tensor is 0x00 or 0x01 (readers
// hand bool tensors to frameworks where other bytes are undefined
// behaviour). A writer given other bytes must refuse them (it may not
// change bits, §4).
TEST_F(WriterTest, BoolTensorWithOtherBytesIsRefused) {  // W6
  Tensor b = Tensor::Zeros(DType::kBool, {4});
  static_cast<uint8_t*>(b.data())[2] = 2;
  Dict d;
  d.Set("mask", b);
  const std::string path = dir.File("b.ckfmt");
  auto r = ckfmt::Save(path, Value(std::move(d)), SmallSaveOptions());
  EXPECT_FALSE(r.ok()) << "wrote a bool tensor holding the byte 0x02";
  if (r.ok()) {
    auto t = CheckpointReader::Open(path);
    CKFMT_ASSERT_OK(t);
    auto read = (*t)->ReadTensor({"mask"});
    CKFMT_ASSERT_OK(read);
    EXPECT_LE(static_cast<uint8_t*>(read->data())[2], 1);
  }
}

TEST_F(WriterTest, ZeroChunkSizeIsRefused) {
  SaveOptions o = SmallSaveOptions();
  o.chunk_size = 0;
  auto r = ckfmt::Save(dir.File("c.ckfmt"), Dict{}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(WriterTest, ChunkSizeSmallerThanAnElement) {
  // 3-byte chunks for 8- and 16-byte elements: one element per chunk at least.
  SaveOptions o = SmallSaveOptions();
  o.chunk_size = 3;
  Dict d;
  d.Set("c", RandomTensor(DType::kC128, {5}, 1));
  d.Set("i", RandomTensor(DType::kI64, {3}, 2));
  Value v(std::move(d));
  const std::string path = dir.File("c.ckfmt");
  CKFMT_ASSERT_OK(ckfmt::Save(path, v, o));
  Value loaded = Dict{};
  CKFMT_ASSERT_OK(ckfmt::Load(path, &loaded));
  EXPECT_TRUE(ValuesBitwiseEqual(v, loaded));
}

}  // namespace
