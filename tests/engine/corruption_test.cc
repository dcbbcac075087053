// Damaged and hostile files: every failure is a clean Status (kCorruption
// unless the rule says otherwise), never a crash, and never wrong data.
#include <gtest/gtest.h>

#include <cstring>

#include "ckfmt/checksum.h"
#include "ckfmt/file_layout.h"
#include "ckfmt/reader.h"
#include "ckfmt/verify.h"
#include "ckfmt/writer.h"
#include "util/file_util.h"
#include "util/raw_file.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt_test;

struct Layout {
  uint64_t size, index_offset, index_length;
  std::vector<std::pair<uint64_t, uint64_t>> chunks;  // offset, stored size of model/w's chunks
};

Layout ReadLayout(const std::string& path) {
  Layout l;
  std::string bytes = ReadFileBytes(path);
  l.size = bytes.size();
  auto f = DecodeFooter(reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size() - kFooterSize,
                        bytes.size(), path);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  if (!f.ok()) return l;
  l.index_offset = f->index_offset;
  l.index_length = f->index_length;
  auto r = CheckpointReader::Open(path);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return l;
  for (const auto& c : (*r)->Find({"model", "w"})->pieces[0].chunks) {
    l.chunks.emplace_back(c.offset, c.stored_size);
  }
  return l;
}

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path = dir.File("c.ckfmt");
    Dict model;
    model.Set("w", RandomTensor(DType::kF32, {50, 100}, 1));  // 20000 bytes: 2 chunks
    model.Set("b", RandomTensor(DType::kF64, {3}, 2));
    Dict root;
    root.Set("model", std::move(model));
    root.Set("step", Value(int64_t{9}));
    original = Value(std::move(root));
    SaveOptions o = SmallSaveOptions();
    o.chunk_size = 16384;
    CKFMT_ASSERT_OK(ckfmt::Save(path, original, o));
    layout = ReadLayout(path);
    ASSERT_EQ(layout.chunks.size(), 2u);
    good = ReadFileBytes(path);
  }
  void Restore() { WriteFileBytes(path, good); }

  // Open (or, if Open succeeds, a full Load) must fail with `code`.
  void ExpectOpenFails(StatusCode code, const std::string& what) {
    auto r = CheckpointReader::Open(path, SmallReadOptions());
    ASSERT_FALSE(r.ok()) << what << ": opened a damaged file";
    EXPECT_EQ(r.status().code(), code) << what << ": " << r.status().ToString();
    EXPECT_NE(r.status().message().find(path), std::string::npos)
        << what << ": message does not name the file: " << r.status().message();
  }

  ScopedTempDir dir;
  std::string path, good;
  Value original;
  Layout layout;
};

TEST_F(CorruptionTest, ChunkByteFlipFailsLoadNamingTheKey) {
  XorByte(path, layout.chunks[1].first + 7, 0x10);
  auto r = CheckpointReader::Open(path, SmallReadOptions());
  CKFMT_ASSERT_OK(r);  // the index is intact; the damage shows when data is read
  Value sd = Dict{};
  auto load = (*r)->Load(&sd);
  ASSERT_FALSE(load.ok());
  EXPECT_EQ(load.status().code(), StatusCode::kCorruption);
  EXPECT_TRUE(MentionsPath(load.status().message(), {"model", "w"})) << load.status().message();
  auto t = (*r)->ReadTensor({"model", "w"});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kCorruption);
  // Other entries still read fine.
  CKFMT_EXPECT_OK((*r)->ReadTensor({"model", "b"}));
}

// A file in the page cache is read into place in pieces, each hashed as
// it arrives: a chunk of several pieces loads bitwise, and a byte flipped
// in its last piece fails the load with the chunk's key.
TEST(CachedLoadTest, ChunksOfSeveralPiecesLoadBitwiseAndDamageIsFound) {
  ScopedTempDir dir;
  const std::string path = dir.File("cached.ckfmt");
  Dict root;
  root.Set("w", RandomTensor(DType::kF32, {300, 1000}, 3));  // 1.2 MB: one chunk of 5 pieces
  const Value original(std::move(root));
  SaveOptions so = SmallSaveOptions();
  so.chunk_size = 4ull << 20;
  CKFMT_ASSERT_OK(ckfmt::Save(path, original, so));
  for (bool damaged : {false, true}) {
    if (damaged) XorByte(path, 4096 + 1200000 - 3, 0x01);  // the header, then the chunk
    (void)ReadFileBytes(path);  // cached: the load takes the page-cache path
    Dict into_root;
    into_root.Set("w", Tensor::Empty(DType::kF32, {300, 1000}));
    Value into(std::move(into_root));
    auto r = ckfmt::Load(path, &into);
    if (!damaged) {
      CKFMT_ASSERT_OK(r);
      EXPECT_EQ(TensorBytes(into.Find({"w"})->as_tensor()),
                TensorBytes(original.Find({"w"})->as_tensor()));
      continue;
    }
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
    EXPECT_NE(r.status().message().find("checksum"), std::string::npos) << r.status().ToString();
    EXPECT_TRUE(MentionsPath(r.status().message(), {"w"})) << r.status().message();
  }
}

TEST_F(CorruptionTest, ChecksumsOffLoadsTheDamagedValue) {
  const uint64_t pos = layout.chunks[1].first + 7;
  XorByte(path, pos, 0x10);
  ReadOptions ro = SmallReadOptions();
  ro.verify_checksums = false;
  Value sd = Dict{};
  auto load = ckfmt::Load(path, &sd, {}, ro);
  CKFMT_ASSERT_OK(load);
  std::string want = TensorBytes(original.Find({"model", "w"})->as_tensor());
  std::string got = TensorBytes(sd.Find({"model", "w"})->as_tensor());
  ASSERT_EQ(got.size(), want.size());
  size_t diffs = 0, at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) ++diffs, at = i;
  }
  EXPECT_EQ(diffs, 1u);
  EXPECT_EQ(at, layout.chunks[0].second + 7) << "the flipped byte is byte 7 of the second chunk";
  EXPECT_EQ(uint8_t(got[at] ^ want[at]), 0x10);
}

TEST_F(CorruptionTest, CompressedChunkFlipNeverCrashes) {
  Value big = MakeRichStateDict(3);
  for (Codec codec : {Codec::kZstd, Codec::kBytePlaneZstd}) {
    CKFMT_ASSERT_OK(ckfmt::Save(path, big, SmallSaveOptions(codec)));
    auto r = CheckpointReader::Open(path);
    CKFMT_ASSERT_OK(r);
    const EntryRecord* e = (*r)->Find({"model", "shapes", "multi_chunk"});
    ASSERT_NE(e, nullptr);
    std::vector<ChunkRecord> chunks = e->pieces[0].chunks;
    r->reset();
    for (size_t k = 0; k < chunks.size(); k += 3) {
      for (uint64_t off : {uint64_t{0}, uint64_t{5}, chunks[k].stored_size / 2,
                           chunks[k].stored_size - 1}) {
        XorByte(path, chunks[k].offset + off, 0xff);
        for (bool verify : {true, false}) {
          ReadOptions ro = SmallReadOptions();
          ro.verify_checksums = verify;
          Value sd = Dict{};
          auto load = ckfmt::Load(path, &sd, {}, ro);
          if (verify) {
            ASSERT_FALSE(load.ok());
            EXPECT_EQ(load.status().code(), StatusCode::kCorruption);
          } else if (!load.ok()) {
            EXPECT_EQ(load.status().code(), StatusCode::kCorruption) << load.status().ToString();
          }
        }
        XorByte(path, chunks[k].offset + off, 0xff);
      }
    }
  }
}

TEST_F(CorruptionTest, IndexByteFlips) {
  for (uint64_t off : {uint64_t{0}, uint64_t{4}, uint64_t{5}, layout.index_length / 3,
                       layout.index_length / 2, layout.index_length - 1}) {
    XorByte(path, layout.index_offset + off, 0x01);
    ExpectOpenFails(StatusCode::kCorruption, "index byte " + std::to_string(off));
    Restore();
  }
}

TEST_F(CorruptionTest, EveryFooterByteFlip) {
  for (uint64_t off = 0; off < kFooterSize; ++off) {
    XorByte(path, layout.size - kFooterSize + off, 0x04);
    ExpectOpenFails(StatusCode::kCorruption, "footer byte " + std::to_string(off));
    Restore();
  }
}

TEST_F(CorruptionTest, HeaderByteFlips) {
  for (uint64_t off : {0, 1, 7, 12, 13, 15, 16, 17, 100, 2048, 4095}) {
    XorByte(path, off, 0x02);
    ExpectOpenFails(StatusCode::kCorruption, "header byte " + std::to_string(off));
    Restore();
  }
  // Major version bytes: an unsupported version, not corruption (spec H2).
  for (uint64_t off : {8, 9}) {
    XorByte(path, off, 0x02);
    ExpectOpenFails(StatusCode::kUnsupported, "header byte " + std::to_string(off));
    Restore();
  }
  // Minor version bytes: the header then disagrees with the footer (spec H5).
  for (uint64_t off : {10, 11}) {
    XorByte(path, off, 0x02);
    ExpectOpenFails(StatusCode::kCorruption, "header byte " + std::to_string(off));
    Restore();
  }
}

TEST_F(CorruptionTest, PaddingFlipsAreFoundByVerify) {
  // Zero padding after model/w's second (short) chunk, and in the tail gap.
  const uint64_t chunk_pad = layout.chunks[1].first + layout.chunks[1].second + 10;
  const uint64_t tail_gap = layout.index_offset + layout.index_length + 3;
  ASSERT_LT(chunk_pad, AlignUp(layout.chunks[1].first + layout.chunks[1].second));
  ASSERT_LT(tail_gap, layout.size - kFooterSize);
  for (uint64_t pos : {chunk_pad, tail_gap}) {
    XorByte(path, pos, 0x80);
    auto report = VerifyFile(path);
    CKFMT_ASSERT_OK(report);
    EXPECT_FALSE(report->ok()) << "padding byte " << pos << " changed unnoticed";
    // The data itself is intact, so a load (which may not look at padding) must
    // either succeed with the right values or refuse; never return wrong data.
    Value sd = Dict{};
    auto load = ckfmt::Load(path, &sd, {}, SmallReadOptions());
    if (load.ok()) {
      EXPECT_TRUE(ValuesBitwiseEqual(original, sd));
    }
    Restore();
  }
}

TEST_F(CorruptionTest, TruncationAtEveryBoundary) {
  const uint64_t mid_data = layout.chunks[0].first + 100;
  for (uint64_t size : {uint64_t{0}, uint64_t{1}, uint64_t{2000}, uint64_t{4096}, mid_data,
                        AlignUp(mid_data), layout.index_offset,
                        layout.index_offset + layout.index_length / 2,
                        layout.index_offset + layout.index_length, layout.size - kFooterSize,
                        layout.size - 1, layout.size - 4096}) {
    TruncateFile(path, size);
    ExpectOpenFails(StatusCode::kCorruption, "truncated to " + std::to_string(size));
    auto v = VerifyFile(path);
    CKFMT_ASSERT_OK(v);  // readable, so a report, not an error
    EXPECT_FALSE(v->ok()) << "truncated to " << size;
    Restore();
  }
}

TEST_F(CorruptionTest, FileTruncatedUnderAnOpenReader) {
  // Another process cuts the file after Open validated it: the data the
  // index points at is gone. Loads and region reads fail with kCorruption
  // naming the file, its size now and the key, whichever way host reads
  // go; none hangs or crashes.
  for (int run = 0; run < 3; ++run) {
    ReadOptions ro = SmallReadOptions();
    ro.host_reads = run == 0 ? HostReads::kDirect : HostReads::kStaged;
    if (run == 2) {
      (void)ReadFileBytes(path);  // cached: reads take the page-cache path
    } else {
      DropFileCache(path);
    }
    auto reader = CheckpointReader::Open(path, ro);
    CKFMT_ASSERT_OK(reader);
    TruncateFile(path, layout.chunks[0].first + 4096);
    Value sd = Dict{};
    auto r = (*reader)->Load(&sd);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
    // What was expected and what was found, and the key being read.
    for (const std::string& needle : std::vector<std::string>{
             path + ": unexpected end of file at offset ", "(the file is now " +
          std::to_string(layout.chunks[0].first + 4096) + " bytes)", "while reading model/w: chunk"}) {
      EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
    }
    std::vector<float> w(50 * 100);
    Status s = (*reader)->ReadRegion({"model", "w"}, Region::Whole({50, 100}), w.data());
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find("model/w"), std::string::npos) << s.ToString();
    Restore();
  }
}

TEST_F(CorruptionTest, ExtendedFile) {
  WriteFileBytes(path, good + std::string(1, '\0'));
  ExpectOpenFails(StatusCode::kCorruption, "one byte appended");
  WriteFileBytes(path, good + std::string(4096, '\0'));
  ExpectOpenFails(StatusCode::kCorruption, "a zero block appended");
  // A duplicated last block: the footer is intact but no longer after its index.
  WriteFileBytes(path, good + good.substr(good.size() - 4096));
  ExpectOpenFails(StatusCode::kCorruption, "last block duplicated");
}

TEST_F(CorruptionTest, NotACheckpoint) {
  WriteFileBytes(path, std::string(8192, 'x'));
  ExpectOpenFails(StatusCode::kCorruption, "text");
  WriteFileBytes(path, "");
  ExpectOpenFails(StatusCode::kCorruption, "empty");
  std::string wrong_magic = good;
  wrong_magic[1] = 'X';
  WriteFileBytes(path, wrong_magic);
  ExpectOpenFails(StatusCode::kCorruption, "wrong magic");
  auto missing = CheckpointReader::Open(dir.File("does-not-exist.ckfmt"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
  auto directory = CheckpointReader::Open(dir.path());
  EXPECT_FALSE(directory.ok());
}

TEST_F(CorruptionTest, PathsThatAreNotRegularFilesAreRefusedAtOnce) {
  // A FIFO (which a plain open for reading would wait on forever), a
  // directory and a character device: each is refused by the reader and
  // by verify, naming the path.
  const std::string fifo = dir.File("fifo.ckfmt");
  MakeFifo(fifo);
  for (const std::string& p : {fifo, dir.path(), std::string("/dev/null")}) {
    for (bool direct : {true, false}) {
      ReadOptions ro = SmallReadOptions();
      ro.io.direct_io = direct;
      auto r = WithinSeconds(fifo, [&] { return CheckpointReader::Open(p, ro); });
      ASSERT_FALSE(r.ok()) << p;
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
      EXPECT_NE(r.status().message().find(p + " is not a regular file"), std::string::npos)
          << r.status().ToString();
      VerifyOptions vo;
      vo.io.direct_io = direct;
      auto v = WithinSeconds(fifo, [&] { return VerifyFile(p, vo); });
      ASSERT_FALSE(v.ok()) << p;
      EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument) << v.status().ToString();
    }
  }
}

TEST_F(CorruptionTest, FooterResealedWithBadIndexPlacement) {
  // Valid footer checksum, index placed beyond the file: a semantic footer error.
  std::string bytes = good;
  uint8_t* f = reinterpret_cast<uint8_t*>(bytes.data()) + bytes.size() - kFooterSize;
  PutU64(f + 8, 1ull << 40);  // index_length
  PutU64(f + 48, Checksum(f, 48));
  WriteFileBytes(path, bytes);
  ExpectOpenFails(StatusCode::kCorruption, "huge index length");
  bytes = good;
  PutU64(f + 0, 4096 + 8);  // unaligned index offset
  PutU64(f + 48, Checksum(f, 48));
  WriteFileBytes(path, bytes);
  ExpectOpenFails(StatusCode::kCorruption, "unaligned index offset");
}

// ---------------------------------------------------------------------------
// Hand-made files: valid header, footer and checksums around an index whose
// only problem is semantic (or none at all).

class RawFileTest : public ::testing::Test {
 protected:
  std::string Write(const IndexRecord& idx, const RawFileBuilder& b, RawLayout* l = nullptr,
                    const RawVersions& v = {}) {
    std::string p = dir.File("raw" + std::to_string(counter++) + ".ckfmt");
    WriteFileBytes(p, b.BuildWithIndexBytes(SerializeIndex(idx), l, v));
    return p;
  }
  ScopedTempDir dir;
  int counter = 0;
};

EntryRecord Whole(RawFileBuilder& b, const KeyPath& path, DType dt, const Shape& shape,
                  const std::string& bytes, uint64_t chunk) {
  EntryRecord e = TensorEntry(path, dt, shape);
  e.pieces.push_back(b.AddPiece(Region::Whole(shape), 0, bytes, chunk));
  return e;
}

TEST_F(RawFileTest, HandWrittenFileLoads) {
  // Pieces from two ranks, chunks stored in reverse order (the spec leaves
  // chunk order to the writer), a bytes entry and scalars.
  Tensor t = RandomTensor(DType::kF32, {30, 20}, 5);
  std::string tb = TensorBytes(t);
  RawFileBuilder b;
  IndexRecord idx;
  idx.world_size = 2;
  EntryRecord e = TensorEntry({"t"}, DType::kF32, {30, 20});
  PieceRecord hi = b.AddPiece(Region::Flat(250, 350), 1, tb.substr(1000), 400);
  PieceRecord lo = b.AddPiece(Region::Flat(0, 250), 0, tb.substr(0, 1000), 300);
  e.pieces = {hi, lo};
  idx.entries.push_back(e);
  EntryRecord blob = TensorEntry({"blob"}, DType::kU8, {5});
  blob.kind = EntryKind::kBytes;
  blob.content_type = "json";
  blob.pieces.push_back(b.AddPiece(Region::Whole({5}), 0, "[1,2]", 4096));
  idx.entries.push_back(blob);
  EntryRecord s;
  s.path = {"s"};
  s.kind = EntryKind::kString;
  s.string_value = "hi";
  idx.entries.push_back(s);
  std::string p = Write(idx, b);
  Value sd = Dict{};
  auto report = ckfmt::Load(p, &sd);
  CKFMT_ASSERT_OK(report);
  EXPECT_EQ(TensorBytes(sd.Find({"t"})->as_tensor()), tb);
  EXPECT_EQ(sd.Find({"blob"})->as_bytes().data, "[1,2]");
  EXPECT_EQ(sd.Find({"blob"})->as_bytes().content_type, "json");
  EXPECT_EQ(sd.Find({"s"})->as_string(), "hi");
  auto v = VerifyFile(p);
  CKFMT_ASSERT_OK(v);
  EXPECT_TRUE(v->ok()) << (v->problems.empty() ? "" : v->problems[0].message);
}

TEST_F(RawFileTest, NewerMinorVersionOpens) {
  RawFileBuilder b;
  IndexRecord idx;
  EntryRecord e;
  e.path = {"x"};
  e.kind = EntryKind::kInt;
  e.int_value = 5;
  idx.entries.push_back(e);
  RawVersions v;
  v.header_minor = v.footer_minor = 3;
  auto r = CheckpointReader::Open(Write(idx, b, nullptr, v));
  CKFMT_EXPECT_OK(r);
}

TEST_F(RawFileTest, OtherMajorVersionIsUnsupported) {
  RawFileBuilder b;
  IndexRecord idx;
  RawVersions v;
  v.header_major = v.footer_major = 2;
  auto r = CheckpointReader::Open(Write(idx, b, nullptr, v));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported) << r.status().ToString();
}

TEST_F(RawFileTest, HeaderAndFooterVersionsMustAgree) {
  RawFileBuilder b;
  IndexRecord idx;
  RawVersions v;
  v.header_minor = 1;
  auto r = CheckpointReader::Open(Write(idx, b, nullptr, v));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
}

TEST_F(RawFileTest, SemanticIndexErrorsNameTheKey) {
  RawFileBuilder b;
  IndexRecord idx;
  EntryRecord e = Whole(b, {"dup_key"}, DType::kU8, {10}, std::string(10, 'a'), 4096);
  idx.entries.push_back(e);
  EntryRecord again;
  again.path = {"dup_key"};
  again.kind = EntryKind::kNone;
  idx.entries.push_back(again);
  std::string p = Write(idx, b);
  auto r = CheckpointReader::Open(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("dup_key"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status().message();
}

TEST_F(RawFileTest, HostileSizesAndOffsets) {
  struct Case {
    const char* what;
    std::function<void(RawFileBuilder&, IndexRecord&)> make;
  };
  const std::vector<Case> cases = {
      {"chunk far beyond the file",
       [](RawFileBuilder& b, IndexRecord& idx) {
         EntryRecord e = Whole(b, {"t"}, DType::kU8, {10}, std::string(10, 'a'), 4096);
         e.pieces[0].chunks[0].offset = 1ull << 62;
         idx.entries.push_back(e);
       }},
      {"chunk inside the index",
       [](RawFileBuilder& b, IndexRecord& idx) {
         EntryRecord e = Whole(b, {"t"}, DType::kU8, {10}, std::string(10, 'a'), 4096);
         e.pieces[0].chunks[0].offset = b.data_end() + 4096;
         idx.entries.push_back(e);
       }},
      {"shape overflow",
       [](RawFileBuilder&, IndexRecord& idx) {
         EntryRecord e = TensorEntry({"t"}, DType::kF64, {1ull << 40, 1ull << 40});
         e.partial = true;
         idx.entries.push_back(e);
       }},
      // T1 looks past a zero dimension, wherever it is: the strides of
      // such shapes overflow.
      {"huge dimensions before a zero one",
       [](RawFileBuilder&, IndexRecord& idx) {
         idx.entries.push_back(TensorEntry({"t"}, DType::kF32, {1ull << 40, 1ull << 40, 0}));
       }},
      {"huge dimensions after a zero one",
       [](RawFileBuilder&, IndexRecord& idx) {
         idx.entries.push_back(TensorEntry({"t"}, DType::kF32, {0, 1ull << 40, 1ull << 40}));
       }},
      {"huge bytes beside a zero dimension",
       [](RawFileBuilder&, IndexRecord& idx) {
         idx.entries.push_back(TensorEntry({"t"}, DType::kF64, {0, 1ull << 62}));
       }},
      {"1 TiB raw chunk",
       [](RawFileBuilder& b, IndexRecord& idx) {
         EntryRecord e = TensorEntry({"t"}, DType::kU8, {1ull << 40});
         PieceRecord p;
         p.region = Region::Whole(e.shape);
         p.chunks.push_back(b.AddChunk(std::string(100, 'z'), 1ull << 40, 1));
         e.pieces.push_back(p);
         idx.entries.push_back(e);
       }},
      {"chunks not adding up",
       [](RawFileBuilder& b, IndexRecord& idx) {
         EntryRecord e = Whole(b, {"t"}, DType::kU8, {10}, std::string(10, 'a'), 4096);
         e.shape = {1ull << 30};
         e.pieces[0].region = Region::Whole(e.shape);
         idx.entries.push_back(e);
       }},
      {"million-element region with a tiny piece",
       [](RawFileBuilder& b, IndexRecord& idx) {
         EntryRecord e = Whole(b, {"t"}, DType::kU8, {10}, std::string(10, 'a'), 4096);
         e.pieces[0].region = Region::Box({0}, {1000000});
         idx.entries.push_back(e);
       }},
  };
  for (const auto& c : cases) {
    RawFileBuilder b;
    IndexRecord idx;
    c.make(b, idx);
    auto r = CheckpointReader::Open(Write(idx, b));
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << c.what << ": " << r.status().ToString();
  }
}

// A partial tensor of 2^64 - 101 bytes, one piece of it saved: its size
// does not overflow 64 bits, so it opens, but rounding it up to any
// alignment would wrap. A load into an empty dict refuses it before
// allocating, naming the key and the memory it would need (the allocator's
// own refusal is TensorTest.HostAllocator's).
TEST_F(RawFileTest, ALoadRefusesATensorLargerThanMemoryBeforeAllocating) {
  RawFileBuilder b;
  IndexRecord idx;
  const uint64_t n = ~uint64_t{0} - 100;
  EntryRecord e = TensorEntry({"wraps"}, DType::kU8, {n});
  e.partial = true;
  e.pieces.push_back(b.AddPiece(Region::Flat(n - 4096, 4096), 0, std::string(4096, 'w'), 4096));
  idx.entries.push_back(e);
  auto r = CheckpointReader::Open(Write(idx, b));
  CKFMT_ASSERT_OK(r);
  Value sd = Dict{};
  auto load = (*r)->Load(&sd);
  ASSERT_FALSE(load.ok());
  EXPECT_TRUE(MentionsPath(load.status().message(), {"wraps"})) << load.status().ToString();
  EXPECT_NE(load.status().message().find("of new host memory"), std::string::npos)
      << load.status().ToString();
}

TEST_F(RawFileTest, HugePartialTensorFailsCleanlyOnRead) {
  // Valid by every open-time rule: a partial 8 PiB tensor with no pieces.
  RawFileBuilder b;
  IndexRecord idx;
  EntryRecord e = TensorEntry({"huge"}, DType::kF64, {1ull << 50});
  e.partial = true;
  idx.entries.push_back(e);
  std::string p = Write(idx, b);
  auto r = CheckpointReader::Open(p);
  CKFMT_ASSERT_OK(r);
  EXPECT_FALSE((*r)->ReadTensor({"huge"}).ok());
  Value sd = Dict{};
  EXPECT_FALSE((*r)->Load(&sd).ok());
  // A small covered... nothing is covered: any region read fails.
  double x = 0;
  EXPECT_FALSE((*r)->ReadRegion({"huge"}, Region::Flat(0, 1), &x).ok());
}

// A chunk whose checksum matches but whose stored bytes are not a valid
// encoding (a buggy writer): reads fail with kCorruption naming the key, and
// full verification reports it (spec Z2).
void ExpectUndecodableChunkReported(const std::string& path) {
  auto r = CheckpointReader::Open(path);
  CKFMT_ASSERT_OK(r);
  auto read = (*r)->ReadTensor({"z"});
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kCorruption) << read.status().ToString();
  EXPECT_TRUE(MentionsPath(read.status().message(), {"z"})) << read.status().message();
  Value sd = Dict{};
  EXPECT_EQ((*r)->Load(&sd).status().code(), StatusCode::kCorruption);
  auto v = VerifyFile(path);
  CKFMT_ASSERT_OK(v);
  EXPECT_FALSE(v->ok()) << "VerifyFile passed a chunk that does not decode";
}

std::string WriteUndecodable(const std::string& path, uint8_t codec) {
  RawFileBuilder b;
  IndexRecord idx;
  EntryRecord e = TensorEntry({"z"}, DType::kF32, {1000});
  PieceRecord p;
  p.region = Region::Whole({1000});
  p.chunks.push_back(b.AddChunk(RandomString(700, 1), 4000, codec));
  e.pieces.push_back(p);
  idx.entries.push_back(e);
  WriteFileBytes(path, b.Build(idx));
  return path;
}

TEST_F(RawFileTest, GarbageZstdChunkWithMatchingChecksum) {
  ExpectUndecodableChunkReported(WriteUndecodable(dir.File("z.ckfmt"), uint8_t(Codec::kZstd)));
}

// BUG (engine/src/verify.cc, ChunkCheck): VerifyFile decodes only codec 1
// (zstd) chunks; a byte-plane (codec 2) chunk that does not decode passes
// verification although every read of it fails (spec Z2: every chunk with a
// known codec must decode to exactly raw_size bytes).
TEST_F(RawFileTest, GarbageBytePlaneChunkWithMatchingChecksum) {
  ExpectUndecodableChunkReported(
      WriteUndecodable(dir.File("b.ckfmt"), uint8_t(Codec::kBytePlaneZstd)));
}

TEST_F(RawFileTest, ZstdChunkDecodingToTheWrongSize) {
  // A well-formed frame whose content is 3996 bytes where 4000 are declared.
  std::string raw(3996, 'q');
  std::string stored(MaxEncodedSize(Codec::kZstd, raw.size()), '\0');
  auto n = EncodeChunk(Codec::kZstd, 1, 1, raw.data(), raw.size(), stored.data(), stored.size());
  CKFMT_ASSERT_OK(n);
  stored.resize(*n);
  RawFileBuilder b;
  IndexRecord idx;
  EntryRecord e = TensorEntry({"z"}, DType::kF32, {1000});
  PieceRecord p;
  p.region = Region::Whole({1000});
  p.chunks.push_back(b.AddChunk(stored, 4000, uint8_t(Codec::kZstd)));
  e.pieces.push_back(p);
  idx.entries.push_back(e);
  const std::string path = Write(idx, b);
  auto r = CheckpointReader::Open(path);
  CKFMT_ASSERT_OK(r);
  auto t = (*r)->ReadTensor({"z"});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kCorruption) << t.status().ToString();
  // Verification decodes it too (Z2), and says by how much it is off.
  auto v = VerifyFile(path);
  CKFMT_ASSERT_OK(v);
  ASSERT_EQ(v->problems.size(), 1u);
  EXPECT_EQ(v->problems[0].code, StatusCode::kCorruption);
  EXPECT_TRUE(MentionsPath(v->problems[0].where, {"z"})) << v->problems[0].where;
  EXPECT_NE(v->problems[0].message.find("decodes to 3996 bytes, expected 4000"),
            std::string::npos)
      << v->problems[0].message;
}

// Bytes of the data region that no chunk covers are legal (another writer
// may leave them) and must be zero (Z3): verification reads them as well,
// in requests of any size, and reports the first nonzero one.
TEST_F(RawFileTest, VerifyChecksDataBytesThatNoChunkCovers) {
  for (bool dirty : {false, true}) {
    RawFileBuilder b;
    std::string unused(3 * kAlignment, '\0');
    if (dirty) unused[5000] = 'x';
    b.AddChunk(unused, unused.size());  // in the file, not in the index
    IndexRecord idx;
    idx.entries.push_back(Whole(b, {"a"}, DType::kU8, {100}, std::string(100, 'a'), 4096));
    const std::string path = Write(idx, b);
    auto r = CheckpointReader::Open(path);
    CKFMT_ASSERT_OK(r);
    auto a = (*r)->ReadTensor({"a"});
    CKFMT_ASSERT_OK(a);
    for (uint64_t block : {uint64_t{4} << 20, uint64_t{kAlignment}}) {
      VerifyOptions o;
      o.io.block_size = block;
      auto v = VerifyFile(path, o);
      CKFMT_ASSERT_OK(v);
      if (!dirty) {
        EXPECT_TRUE(v->ok()) << "block " << block << ": " << v->problems[0].message;
        continue;
      }
      ASSERT_EQ(v->problems.size(), 1u) << "block " << block;
      EXPECT_EQ(v->problems[0].code, StatusCode::kCorruption);
      EXPECT_EQ(v->problems[0].where, "padding @ " + std::to_string(kHeaderSize + 5000));
      EXPECT_EQ(CitedSpecRule(v->problems[0].message), "Z3") << v->problems[0].message;
    }
  }
}

TEST_F(RawFileTest, UnknownCodecIsUnsupportedOnlyForThatChunk) {
  RawFileBuilder b;
  IndexRecord idx;
  // Chunk 0: 50 plain bytes; chunk 1: 50 bytes under the unassigned codec 9.
  EntryRecord e = TensorEntry({"odd"}, DType::kU8, {100});
  PieceRecord p;
  p.region = Region::Whole({100});
  p.chunks.push_back(b.AddChunk(std::string(50, 'a'), 50, 0));
  p.chunks.push_back(b.AddChunk(std::string(30, 'b'), 50, 9));
  e.pieces.push_back(p);
  idx.entries.push_back(e);
  idx.entries.push_back(Whole(b, {"fine"}, DType::kU8, {3}, "abc", 4096));
  std::string path = Write(idx, b);
  auto r = CheckpointReader::Open(path);
  CKFMT_ASSERT_OK(r);  // an unknown codec is not an index error (spec §5.3)
  auto t = (*r)->ReadTensor({"odd"});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnsupported) << t.status().ToString();
  std::string buf(50, '\0');
  CKFMT_EXPECT_OK((*r)->ReadRegion({"odd"}, Region::Flat(0, 50), buf.data()));
  EXPECT_EQ(buf, std::string(50, 'a'));
  auto fine = (*r)->ReadTensor({"fine"});
  CKFMT_ASSERT_OK(fine);
  EXPECT_EQ(TensorBytes(*fine), "abc");
  auto v = VerifyFile(path);
  CKFMT_ASSERT_OK(v);
  ASSERT_FALSE(v->ok());
  bool unsupported = false;
  for (const auto& prob : v->problems) unsupported |= prob.code == StatusCode::kUnsupported;
  EXPECT_TRUE(unsupported) << "unknown codec not reported as unsupported";
}

// Compressed chunks decode to up to 1 GiB each, so a small file can declare
// entries far larger than itself. Sizes no machine of this size could hold
// are refused before anything is allocated, naming the file and the entry,
// and the caller's dict is left as it was.
void ExpectRefusedForMemory(const Result<LoadReport>& r, const std::string& path) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIOError) << r.status().ToString();
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("host memory"), std::string::npos) << r.status().message();
  EXPECT_TRUE(MentionsPath(r.status().message(), {"e0"})) << r.status().message();
}

TEST_F(RawFileTest, TerabyteBytesEntryIsRefusedBeforeAllocating) {
  // One 1 TiB bytes entry in a 4 MiB file: used to end in std::bad_alloc.
  RawFileBuilder b;
  const std::string path = Write(DeclareHugeEntries(b, 1, 1024, EntryKind::kBytes), b);
  auto reader = CheckpointReader::Open(path);
  CKFMT_ASSERT_OK(reader);
  Value fresh = Dict{};
  ExpectRefusedForMemory((*reader)->Load(&fresh), path);
  EXPECT_TRUE(fresh.as_dict().empty());
  // The caller's own bytes entry would be resized to the declared size.
  Value has = Dict{};
  has.as_dict().Set("e0", Value(Bytes{"", "abc"}));
  ExpectRefusedForMemory((*reader)->Load(&has), path);
  EXPECT_EQ(has.Find({"e0"})->as_bytes().data, "abc");
}

TEST_F(RawFileTest, ReadTensorRefusesATerabyteBeforeAllocating) {
  RawFileBuilder b;
  const std::string path = Write(DeclareHugeEntries(b, 1, 1024, EntryKind::kTensor), b);
  auto reader = CheckpointReader::Open(path);
  CKFMT_ASSERT_OK(reader);
  auto t = (*reader)->ReadTensor({"e0"});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kIOError) << t.status().ToString();
  EXPECT_NE(t.status().message().find(path), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("host memory"), std::string::npos) << t.status().message();
  EXPECT_TRUE(MentionsPath(t.status().message(), {"e0"})) << t.status().message();
}

TEST_F(RawFileTest, TensorsTogetherBeyondTheMachineAreRefused) {
  // 256 tensors of 16 GiB: each alone may pass the kernel's overcommit
  // check; together they are 4 TiB, and filling them would get the process
  // killed.
  RawFileBuilder b;
  const std::string path = Write(DeclareHugeEntries(b, 256, 16, EntryKind::kTensor), b);
  Value sd = Dict{};
  auto r = ckfmt::Load(path, &sd);
  ExpectRefusedForMemory(r, path);
  EXPECT_NE(r.status().message().find("for 256 entries"), std::string::npos)
      << r.status().message();
  EXPECT_TRUE(sd.as_dict().empty());
}

}  // namespace
