// Save -> Open -> Load round trips, bit for bit, across codecs, I/O
// backends, direct I/O and chunk sizes; the file layout the writer produces.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "ckfmt/checksum.h"
#include "ckfmt/file_layout.h"
#include "ckfmt/reader.h"
#include "ckfmt/verify.h"
#include "ckfmt/writer.h"
#include "util/file_util.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt_test;

struct IoConfig {
  Codec codec;
  IoBackend save_backend;
  bool save_direct;
  IoBackend read_backend;
  bool read_direct;
  uint64_t chunk_size;
  uint64_t block_size;
  const char* name;
};

void PrintTo(const IoConfig& c, std::ostream* os) { *os << c.name; }

std::string ConfigName(const ::testing::TestParamInfo<IoConfig>& info) { return info.param.name; }

class RoundTripTest : public ::testing::TestWithParam<IoConfig> {
 protected:
  SaveOptions Save() const {
    SaveOptions o = SmallSaveOptions(GetParam().codec);
    o.chunk_size = GetParam().chunk_size;
    o.io.backend = GetParam().save_backend;
    o.io.direct_io = GetParam().save_direct;
    o.io.block_size = GetParam().block_size;
    o.io.staging_bytes = 4 * GetParam().block_size;
    return o;
  }
  ReadOptions Read() const {
    ReadOptions o = SmallReadOptions();
    o.io.backend = GetParam().read_backend;
    o.io.direct_io = GetParam().read_direct;
    o.io.block_size = GetParam().block_size;
    o.io.staging_bytes = 4 * GetParam().block_size;
    return o;
  }
  ScopedTempDir dir;
};

TEST_P(RoundTripTest, RichStateDictIntoEmptyDict) {
  const std::string path = dir.File("rich.ckfmt");
  Value original = MakeRichStateDict(1);
  auto stats = ckfmt::Save(path, original, Save());
  CKFMT_ASSERT_OK(stats);
  auto reader = CheckpointReader::Open(path, Read());
  CKFMT_ASSERT_OK(reader);
  Value loaded = Dict{};
  auto report = (*reader)->Load(&loaded);
  CKFMT_ASSERT_OK(report);
  EXPECT_TRUE(ValuesBitwiseEqual(original, loaded));
  EXPECT_TRUE(report->missing.empty()) << PathsToString(report->missing);
  EXPECT_TRUE(report->unexpected.empty()) << PathsToString(report->unexpected);
  EXPECT_TRUE(report->loaded_in_place.empty()) << PathsToString(report->loaded_in_place);
  for (const KeyPath& p : LeafPaths(original)) {
    EXPECT_TRUE(ContainsPath(report->reconstructed, p)) << FormatKeyPath(p) << " not reported";
  }
  for (const KeyPath& p : {KeyPath{"empty_dict"}, KeyPath{"empty_list"}}) {
    EXPECT_TRUE(ContainsPath(report->reconstructed, p)) << FormatKeyPath(p) << " not reported";
  }
  auto verify = ckfmt::VerifyFile(path);
  CKFMT_ASSERT_OK(verify);
  EXPECT_TRUE(verify->ok()) << verify->problems.size() << " problems, first: "
                            << (verify->problems.empty() ? "" : verify->problems[0].message);
}

TEST_P(RoundTripTest, LoadInPlaceWritesIntoCallerMemory) {
  const std::string path = dir.File("inplace.ckfmt");
  Value original = MakeRichStateDict(2);
  CKFMT_ASSERT_OK(ckfmt::Save(path, original, Save()));
  Value caller = ZeroedLike(original);
  // Remember where the caller's tensors live: a load in place must not move them.
  std::vector<std::pair<KeyPath, void*>> buffers;
  VisitValues(caller, [&](const KeyPath& p, const Value& v) {
    if (v.is_tensor()) buffers.emplace_back(p, v.as_tensor().data());
  });
  auto report = ckfmt::Load(path, &caller, {}, Read());
  CKFMT_ASSERT_OK(report);
  EXPECT_TRUE(ValuesBitwiseEqual(original, caller));
  for (const auto& [p, data] : buffers) {
    const Value* v = caller.Find(p);
    ASSERT_NE(v, nullptr);
    ASSERT_TRUE(v->is_tensor());
    EXPECT_EQ(v->as_tensor().data(), data) << FormatKeyPath(p) << " was reallocated";
  }
  for (const KeyPath& p : LeafPaths(original)) {
    EXPECT_TRUE(ContainsPath(report->loaded_in_place, p)) << FormatKeyPath(p) << " not reported";
  }
  EXPECT_TRUE(report->reconstructed.empty()) << PathsToString(report->reconstructed);
}

TEST_P(RoundTripTest, StatsAndIndexAgreeWithTheFile) {
  const std::string path = dir.File("stats.ckfmt");
  Value original = MakeRichStateDict(3);
  SaveOptions so = Save();
  so.metadata = {{"step", "42"}, {"", ""}, {"note", "ü/ß"}};
  auto stats = ckfmt::Save(path, original, so);
  CKFMT_ASSERT_OK(stats);
  auto reader = CheckpointReader::Open(path, Read());
  CKFMT_ASSERT_OK(reader);
  const IndexRecord& idx = (*reader)->index();
  EXPECT_EQ(stats->file_bytes, FileSize(path));
  EXPECT_EQ((*reader)->file_size(), FileSize(path));
  uint64_t raw = 0, stored = 0, chunks = 0;
  const uint64_t esize_chunk = GetParam().chunk_size;
  for (const auto& e : idx.entries) {
    if (!e.HasData()) continue;
    for (const auto& p : e.pieces) {
      for (const auto& c : p.chunks) {
        raw += c.raw_size;
        stored += c.stored_size;
        ++chunks;
        // Chunk size is rounded down to whole elements.
        uint64_t es = DTypeSize(e.dtype);
        EXPECT_LE(c.raw_size, esize_chunk / es * es) << FormatKeyPath(e.path);
        EXPECT_TRUE(c.codec == uint8_t(Codec::kNone) || c.codec == uint8_t(GetParam().codec) ||
                    (GetParam().codec == Codec::kBytePlaneZstd && c.codec == uint8_t(Codec::kZstd)))
            << "chunk codec " << int(c.codec);
      }
    }
  }
  uint64_t expect_raw = 0;
  VisitValues(original, [&](const KeyPath&, const Value& v) {
    if (v.is_tensor()) expect_raw += v.as_tensor().nbytes();
    if (v.kind() == Value::Kind::kBytes) expect_raw += v.as_bytes().data.size();
  });
  EXPECT_EQ(raw, expect_raw);
  EXPECT_EQ(stats->raw_bytes, expect_raw);
  EXPECT_EQ(stats->stored_bytes, stored);
  EXPECT_EQ(stats->chunks, chunks);
  if (GetParam().codec == Codec::kNone) {
    EXPECT_EQ(stored, raw);
  }
  // Multi-chunk tensors really are split.
  const EntryRecord* big = (*reader)->Find({"model", "shapes", "multi_chunk"});
  ASSERT_NE(big, nullptr);
  ASSERT_EQ(big->pieces.size(), 1u);
  EXPECT_GE(big->pieces[0].chunks.size(), 132096u / GetParam().chunk_size);
  // Metadata and save mode survive.
  for (const auto& kv : so.metadata) {
    EXPECT_NE(std::find(idx.metadata.begin(), idx.metadata.end(), kv), idx.metadata.end())
        << kv.first;
  }
  EXPECT_EQ(idx.save_mode, "single");
  EXPECT_EQ(idx.world_size, 1u);
  EXPECT_FALSE(stats->io_path.empty());
}

// Entries appear in pre-order with dicts in insertion order (spec W1), so a
// reader can present them in the order the trainer built them.
TEST_P(RoundTripTest, EntriesInPreOrderAndInsertionOrder) {
  const std::string path = dir.File("order.ckfmt");
  Value original = MakeRichStateDict(4);
  CKFMT_ASSERT_OK(ckfmt::Save(path, original, Save()));
  auto reader = CheckpointReader::Open(path, Read());
  CKFMT_ASSERT_OK(reader);
  std::vector<KeyPath> want = AllPaths(original), got;
  for (const auto& e : (*reader)->index().entries) got.push_back(e.path);
  EXPECT_TRUE(want == got) << "want " << PathsToString(want) << "\ngot  " << PathsToString(got);
}

// The canonical layout of spec §2.2 (W8): chunks back to back at aligned
// offsets from 4096, zero padding, index right after, smallest file size.
TEST_P(RoundTripTest, CanonicalLayout) {
  const std::string path = dir.File("layout.ckfmt");
  CKFMT_ASSERT_OK(ckfmt::Save(path, MakeRichStateDict(5), Save()));
  auto reader = CheckpointReader::Open(path, Read());
  CKFMT_ASSERT_OK(reader);
  std::string bytes = ReadFileBytes(path);
  ASSERT_EQ(bytes.size() % kAlignment, 0u);
  auto footer = DecodeFooter(reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size() - kFooterSize,
                             bytes.size(), path);
  CKFMT_ASSERT_OK(footer);
  auto header = DecodeHeader(reinterpret_cast<const uint8_t*>(bytes.data()), path);
  CKFMT_ASSERT_OK(header);
  EXPECT_EQ(header->major, kMajorVersion);
  EXPECT_EQ(header->minor, footer->minor);
  std::vector<std::pair<uint64_t, uint64_t>> extents;
  for (const auto& e : (*reader)->index().entries) {
    for (const auto& p : e.pieces) {
      for (const auto& c : p.chunks) {
        extents.emplace_back(c.offset, c.stored_size);
        EXPECT_EQ(Checksum(bytes.data() + c.offset, c.stored_size), c.checksum);
      }
    }
  }
  std::sort(extents.begin(), extents.end());
  uint64_t pos = kHeaderSize;
  for (const auto& [off, size] : extents) {
    EXPECT_EQ(off, pos) << "chunks not back to back";
    for (uint64_t i = off + size; i < AlignUp(off + size); ++i) {
      ASSERT_EQ(bytes[i], 0) << "nonzero padding at " << i;
    }
    pos = AlignUp(off + size);
  }
  EXPECT_EQ(footer->index_offset, pos);
  EXPECT_EQ(bytes.size(), AlignUp(footer->index_offset + footer->index_length + kFooterSize));
  EXPECT_EQ(footer->index_checksum,
            Checksum(bytes.data() + footer->index_offset, footer->index_length));
  for (uint64_t i = footer->index_offset + footer->index_length; i < bytes.size() - kFooterSize; ++i) {
    ASSERT_EQ(bytes[i], 0) << "nonzero tail gap at " << i;
  }
}

const IoConfig kConfigs[] = {
    {Codec::kNone, IoBackend::kUring, true, IoBackend::kUring, true, kSmallChunk, 16 << 10, "none_uring_direct"},
    {Codec::kNone, IoBackend::kUring, false, IoBackend::kUring, false, kSmallChunk, 16 << 10, "none_uring_buffered"},
    {Codec::kNone, IoBackend::kPread, true, IoBackend::kPread, true, kSmallChunk, 16 << 10, "none_pread_direct"},
    {Codec::kNone, IoBackend::kPread, false, IoBackend::kPread, false, kSmallChunk, 16 << 10, "none_pread_buffered"},
    {Codec::kZstd, IoBackend::kUring, true, IoBackend::kUring, true, kSmallChunk, 16 << 10, "zstd_uring_direct"},
    {Codec::kZstd, IoBackend::kUring, false, IoBackend::kPread, false, kSmallChunk, 16 << 10, "zstd_uring_to_pread"},
    {Codec::kZstd, IoBackend::kPread, true, IoBackend::kUring, false, kSmallChunk, 16 << 10, "zstd_pread_to_uring"},
    {Codec::kZstd, IoBackend::kPread, false, IoBackend::kPread, true, kSmallChunk, 16 << 10, "zstd_pread_buffered"},
    {Codec::kBytePlaneZstd, IoBackend::kUring, true, IoBackend::kUring, true, kSmallChunk, 16 << 10, "byteplane_uring_direct"},
    {Codec::kBytePlaneZstd, IoBackend::kPread, false, IoBackend::kPread, false, kSmallChunk, 16 << 10, "byteplane_pread_buffered"},
    {Codec::kNone, IoBackend::kAuto, true, IoBackend::kAuto, true, kSmallChunk, 16 << 10, "none_auto"},
    // Chunk size not a multiple of any element size, and of 4096.
    {Codec::kNone, IoBackend::kUring, true, IoBackend::kPread, false, 10001, 16 << 10, "odd_chunk_size"},
    {Codec::kZstd, IoBackend::kUring, true, IoBackend::kUring, true, 10001, 16 << 10, "zstd_odd_chunk_size"},
    // Blocks smaller than a chunk; staging of four blocks.
    {Codec::kNone, IoBackend::kUring, true, IoBackend::kUring, true, kSmallChunk, 4096, "tiny_blocks_uring"},
    {Codec::kZstd, IoBackend::kPread, false, IoBackend::kPread, false, kSmallChunk, 4096, "tiny_blocks_pread"},
    // The default 4 MiB chunks: everything fits one chunk per tensor.
    {Codec::kNone, IoBackend::kUring, true, IoBackend::kUring, true, 4ull << 20, 1 << 20, "default_chunks"},
};

INSTANTIATE_TEST_SUITE_P(Configs, RoundTripTest, ::testing::ValuesIn(kConfigs), ConfigName);

// ---------------------------------------------------------------------------

class SingleSaveTest : public ::testing::Test {
 protected:
  ScopedTempDir dir;
};

TEST_F(SingleSaveTest, EmptyStateDictIsTheSmallestFile) {
  const std::string path = dir.File("empty.ckfmt");
  CKFMT_ASSERT_OK(ckfmt::Save(path, Dict{}, SmallSaveOptions()));
  EXPECT_EQ(FileSize(path), 8192u);
  Value loaded = Dict{};
  auto report = ckfmt::Load(path, &loaded);
  CKFMT_ASSERT_OK(report);
  EXPECT_TRUE(loaded.as_dict().empty());
}

TEST_F(SingleSaveTest, EveryDtypeAcrossManyChunks) {
  // Each dtype with a size that is not a multiple of the chunk size.
  for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kBytePlaneZstd}) {
    Dict d;
    for (DType dt : kAllDTypes) {
      d.Set(std::string(DTypeName(dt)), RandomTensor(dt, {3, 4099}, uint64_t(dt) + 7));
    }
    Value original(std::move(d));
    const std::string path = dir.File("dtypes.ckfmt");
    CKFMT_ASSERT_OK(ckfmt::Save(path, original, SmallSaveOptions(codec)));
    Value loaded = Dict{};
    CKFMT_ASSERT_OK(ckfmt::Load(path, &loaded, {}, SmallReadOptions()));
    EXPECT_TRUE(ValuesBitwiseEqual(original, loaded)) << CodecName(uint8_t(codec));
  }
}

TEST_F(SingleSaveTest, CompressibleDataIsCompressed) {
  Tensor t = Tensor::Zeros(DType::kF32, {100000});
  auto* f = static_cast<float*>(t.data());
  for (int i = 0; i < 100000; ++i) f[i] = float(i % 17);
  Dict d;
  d.Set("t", t);
  for (Codec codec : {Codec::kZstd, Codec::kBytePlaneZstd}) {
    const std::string path = dir.File("z.ckfmt");
    auto stats = ckfmt::Save(path, Value(d), SmallSaveOptions(codec));
    CKFMT_ASSERT_OK(stats);
    EXPECT_LT(stats->stored_bytes, stats->raw_bytes / 4) << CodecName(uint8_t(codec));
    Value loaded = Dict{};
    CKFMT_ASSERT_OK(ckfmt::Load(path, &loaded));
    EXPECT_TRUE(ValuesBitwiseEqual(Value(d), loaded));
  }
}

TEST_F(SingleSaveTest, SaveOverwritesAnExistingCheckpoint) {
  const std::string path = dir.File("ckpt.ckfmt");
  Value a = MakeRichStateDict(10), b = MakeRichStateDict(11);
  CKFMT_ASSERT_OK(ckfmt::Save(path, a, SmallSaveOptions()));
  CKFMT_ASSERT_OK(ckfmt::Save(path, b, SmallSaveOptions()));
  Value loaded = Dict{};
  CKFMT_ASSERT_OK(ckfmt::Load(path, &loaded));
  EXPECT_TRUE(ValuesBitwiseEqual(b, loaded));
  EXPECT_TRUE(TempNames(dir.List()).empty());
  EXPECT_EQ(dir.List().size(), 1u);
}

TEST_F(SingleSaveTest, ReadTensorAndFind) {
  const std::string path = dir.File("rt.ckfmt");
  Value original = MakeRichStateDict(12);
  CKFMT_ASSERT_OK(ckfmt::Save(path, original, SmallSaveOptions(Codec::kZstd)));
  auto reader = CheckpointReader::Open(path, SmallReadOptions());
  CKFMT_ASSERT_OK(reader);
  EXPECT_EQ((*reader)->path(), path);
  EXPECT_EQ((*reader)->Find({"nope"}), nullptr);
  EXPECT_EQ((*reader)->Find({"model", "shapes", "missing"}), nullptr);
  const KeyPath tp = {"model", "shapes", "primes"};
  ASSERT_NE((*reader)->Find(tp), nullptr);
  EXPECT_EQ((*reader)->Find(tp)->kind, EntryKind::kTensor);
  auto t = (*reader)->ReadTensor(tp);
  CKFMT_ASSERT_OK(t);
  EXPECT_TRUE(ValuesBitwiseEqual(*original.Find(tp), Value(*t)));
  // A bytes entry reads as a 1-d uint8 tensor of its blob.
  auto b = (*reader)->ReadTensor({"blobs", "big"});
  CKFMT_ASSERT_OK(b);
  EXPECT_EQ(b->dtype(), DType::kU8);
  EXPECT_EQ(TensorBytes(*b), original.Find({"blobs", "big"})->as_bytes().data);
  // Through a custom allocator.
  int calls = 0;
  Allocator alloc = [&](DType dt, const Shape& shape, const KeyPath& p, Device) -> Result<Tensor> {
    ++calls;
    EXPECT_TRUE(p == tp) << FormatKeyPath(p);
    return Tensor::Zeros(dt, shape);
  };
  auto t2 = (*reader)->ReadTensor(tp, alloc);
  CKFMT_ASSERT_OK(t2);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(ValuesBitwiseEqual(*original.Find(tp), Value(*t2)));
  // Scalars and containers have no data to read.
  EXPECT_FALSE((*reader)->ReadTensor({"scalars", "int_max"}).ok());
  EXPECT_FALSE((*reader)->ReadTensor({"model"}).ok());
  auto nf = (*reader)->ReadTensor({"does", "not", "exist"});
  ASSERT_FALSE(nf.ok());
  EXPECT_EQ(nf.status().code(), StatusCode::kNotFound);
}

TEST_F(SingleSaveTest, SeveralReadersOfOneFile) {
  const std::string path = dir.File("multi.ckfmt");
  Value original = MakeRichStateDict(13);
  CKFMT_ASSERT_OK(ckfmt::Save(path, original, SmallSaveOptions()));
  auto r1 = CheckpointReader::Open(path);
  auto r2 = CheckpointReader::Open(path, SmallReadOptions());
  CKFMT_ASSERT_OK(r1);
  CKFMT_ASSERT_OK(r2);
  Value a = Dict{}, b = Dict{};
  CKFMT_ASSERT_OK((*r1)->Load(&a));
  CKFMT_ASSERT_OK((*r2)->Load(&b));
  CKFMT_ASSERT_OK((*r1)->Load(&b));  // loading twice: the second is in place
  EXPECT_TRUE(ValuesBitwiseEqual(original, a));
  EXPECT_TRUE(ValuesBitwiseEqual(original, b));
}

TEST_F(SingleSaveTest, NonDictRootIsRejected) {
  const std::string path = dir.File("bad.ckfmt");
  EXPECT_EQ(ckfmt::Save(path, Value(List{}), SmallSaveOptions()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(FileExists(path));
  Value not_a_dict = List{};
  CKFMT_ASSERT_OK(ckfmt::Save(path, Dict{}, SmallSaveOptions()));
  EXPECT_EQ(ckfmt::Load(path, &not_a_dict).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SingleSaveTest, NonHostTensorIsRejected) {
  const std::string path = dir.File("cuda.ckfmt");
  std::vector<float> host(8, 1.0f);
  Dict d;
  d.Set("gpu", Tensor::View(DType::kF32, {8}, host.data(), Device{DeviceType::kCUDA, 0}));
  auto r = ckfmt::Save(path, Value(d), SmallSaveOptions());
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(FileExists(path));
  EXPECT_TRUE(TempNames(dir.List()).empty());
}

TEST_F(SingleSaveTest, DeeplyNestedStateRoundTrips) {
  // 500 levels of dicts and lists with a tensor and a scalar at the
  // bottom: saved, then reconstructed whole into an empty dict and loaded
  // in place into a copy.
  Value state = Dict{};
  Value* v = &state;
  for (int i = 0; i < 500; ++i) {
    if (i % 2) {
      v->as_dict().Set("l" + std::to_string(i), Value(List{}));
      v = v->as_dict().Find("l" + std::to_string(i));
      v->as_list().push_back(Value(Dict{}));
      v = &v->as_list().back();
    } else {
      v->as_dict().Set("d" + std::to_string(i), Value(Dict{}));
      v = v->as_dict().Find("d" + std::to_string(i));
    }
  }
  v->as_dict().Set("w", Value(RandomTensor(DType::kF32, {3, 5}, 7)));
  v->as_dict().Set("step", Value(int64_t{9}));
  const std::string path = dir.File("deep.ckfmt");
  CKFMT_ASSERT_OK(ckfmt::Save(path, state, SmallSaveOptions()));

  Value rebuilt = Dict{};
  auto report = ckfmt::Load(path, &rebuilt);
  CKFMT_ASSERT_OK(report);
  EXPECT_TRUE(ValuesBitwiseEqual(state, rebuilt));
  Value in_place = ZeroedLike(state);
  report = ckfmt::Load(path, &in_place);
  CKFMT_ASSERT_OK(report);
  EXPECT_TRUE(report->reconstructed.empty());
  EXPECT_TRUE(ValuesBitwiseEqual(state, in_place));
}

TEST_F(SingleSaveTest, MissingDirectoryFailsCleanly) {
  // Named in the caller's terms, not by the temporary the save would make.
  const std::string path = dir.File("no/such/dir/x.ckfmt");
  auto r = ckfmt::Save(path, Dict{}, SmallSaveOptions());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
  EXPECT_EQ(r.status().message(),
            "cannot save " + path + ": directory " + dir.File("no/such/dir") + " does not exist");

  WriteFileBytes(dir.File("plain"), "x");
  r = ckfmt::Save(dir.File("plain/x.ckfmt"), Dict{}, SmallSaveOptions());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find(dir.File("plain") + " is not a directory"),
            std::string::npos)
      << r.status().ToString();
}

}  // namespace
