// VerifyFile: a valid file passes; any single changed byte anywhere in a
// file is reported ("no byte goes unchecked", spec §8.1).
#include <gtest/gtest.h>

#include <algorithm>

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

// A small file with every kind of region: plain, zstd and byte-plane chunks,
// a bytes entry, an empty tensor, scalars, padding after every chunk, and a
// tail gap. Written through CheckpointWriter so codecs can be mixed.
std::string WriteSmallFile(const std::string& path) {
  SaveOptions o = SmallSaveOptions(Codec::kNone);
  o.chunk_size = 4096;
  {
    auto w = CheckpointWriter::Create(path, o);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    Tensor a = RandomTensor(DType::kF32, {3000}, 1);  // 12000 bytes: 3 chunks
    EXPECT_TRUE((*w)->AddContainer({"m"}, EntryKind::kDict).ok());
    EXPECT_TRUE((*w)->AddTensorPiece({"m", "a"}, DType::kF32, {3000}, Region::Whole({3000}), 0,
                                     a.data()).ok());
    Tensor e = Tensor::Zeros(DType::kI8, {0, 4});
    EXPECT_TRUE((*w)->AddTensorPiece({"m", "empty"}, DType::kI8, {0, 4}, Region::Whole({0, 4}),
                                     0, e.data()).ok());
    EXPECT_TRUE((*w)->AddBytes({"blob"}, "raw", "hello, blob", 11).ok());
    EXPECT_TRUE((*w)->AddScalar({"step"}, Value(int64_t{77})).ok());
    EXPECT_TRUE((*w)->AddScalar({"name"}, Value("run-1")).ok());
    EXPECT_TRUE((*w)->Commit().ok());
  }
  return path;
}

std::string WriteSmallCompressedFile(const std::string& path, Codec codec) {
  Tensor t = Tensor::Zeros(DType::kF32, {2500});
  auto* f = static_cast<float*>(t.data());
  for (int i = 0; i < 2500; ++i) f[i] = float(i % 13) * 0.5f;
  Dict d;
  d.Set("z", t);
  d.Set("r", RandomTensor(DType::kU16, {700}, 3));
  SaveOptions o = SmallSaveOptions(codec);
  o.chunk_size = 4096;
  EXPECT_TRUE(ckfmt::Save(path, Value(std::move(d)), o).ok());
  return path;
}

TEST(VerifyTest, ValidFilePasses) {
  ScopedTempDir dir;
  const std::string path = WriteSmallFile(dir.File("v.ckfmt"));
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  VerifyOptions vo;
  vo.progress = [&](uint64_t done, uint64_t total) { progress.emplace_back(done, total); };
  auto r = VerifyFile(path, vo);
  CKFMT_ASSERT_OK(r);
  EXPECT_TRUE(r->ok()) << r->problems[0].where << ": " << r->problems[0].message;
  EXPECT_EQ(r->file, path);
  EXPECT_EQ(r->file_size, FileSize(path));
  EXPECT_EQ(r->entries, 6u);
  EXPECT_EQ(r->chunks, 4u);
  EXPECT_EQ(r->bytes_checked, FileSize(path));
  ASSERT_FALSE(progress.empty());
  for (size_t i = 1; i < progress.size(); ++i) EXPECT_GE(progress[i].first, progress[i - 1].first);
  for (const auto& [done, total] : progress) {
    EXPECT_EQ(total, FileSize(path));
    EXPECT_LE(done, total);
  }
}

// BUG (engine/src/verify.cc, ScanDataRegion): progress is reported only for
// the data region, so the last call says (index_offset, file_size) and a
// progress bar never reaches 100%.
TEST(VerifyTest, ProgressReachesTheTotal) {
  ScopedTempDir dir;
  const std::string path = WriteSmallFile(dir.File("v.ckfmt"));
  std::pair<uint64_t, uint64_t> last{0, 1};
  VerifyOptions vo;
  vo.progress = [&](uint64_t done, uint64_t total) { last = {done, total}; };
  CKFMT_ASSERT_OK(VerifyFile(path, vo));
  EXPECT_EQ(last.first, last.second) << "last progress call: " << last.first << " of "
                                     << last.second;
}

TEST(VerifyTest, ValidRichFilesPass) {
  ScopedTempDir dir;
  for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kBytePlaneZstd}) {
    const std::string path = dir.File("rich.ckfmt");
    CKFMT_ASSERT_OK(ckfmt::Save(path, MakeRichStateDict(1), SmallSaveOptions(codec)));
    for (IoBackend backend : {IoBackend::kUring, IoBackend::kPread}) {
      VerifyOptions vo;
      vo.io.backend = backend;
      vo.io.block_size = 16 << 10;
      vo.io.staging_bytes = 64 << 10;
      auto r = VerifyFile(path, vo);
      CKFMT_ASSERT_OK(r);
      EXPECT_TRUE(r->ok()) << r->problems[0].where << ": " << r->problems[0].message;
    }
  }
}

TEST(VerifyTest, ProblemsNameTheChunkAndKeyAndAllAreListed) {
  ScopedTempDir dir;
  const std::string path = WriteSmallFile(dir.File("v.ckfmt"));
  std::vector<ChunkRecord> chunks;
  {
    auto rd = CheckpointReader::Open(path);
    CKFMT_ASSERT_OK(rd);
    chunks = (*rd)->Find({"m", "a"})->pieces[0].chunks;
  }
  ASSERT_EQ(chunks.size(), 3u);
  XorByte(path, chunks[0].offset + 1);
  XorByte(path, chunks[2].offset + 2);
  auto r = VerifyFile(path);
  CKFMT_ASSERT_OK(r);
  ASSERT_GE(r->problems.size(), 2u) << "one pass should list every damaged chunk";
  for (const auto& p : r->problems) {
    EXPECT_EQ(p.code, StatusCode::kCorruption);
    EXPECT_TRUE(MentionsPath(p.where + " " + p.message, {"m", "a"})) << p.where << ": " << p.message;
  }
}

TEST(VerifyTest, ChecksumsOnlyPassSaysSoAndFindsDamage) {
  ScopedTempDir dir;
  const std::string path = WriteSmallCompressedFile(dir.File("z.ckfmt"), Codec::kZstd);
  VerifyOptions vo;
  vo.decode = false;
  auto clean = VerifyFile(path, vo);
  CKFMT_ASSERT_OK(clean);
  EXPECT_TRUE(clean->ok());
  EXPECT_FALSE(clean->decoded);
  EXPECT_EQ(clean->bytes_checked, FileSize(path));
  auto full = VerifyFile(path);
  CKFMT_ASSERT_OK(full);
  EXPECT_TRUE(full->decoded);

  uint64_t offset = 0;
  {
    auto rd = CheckpointReader::Open(path);
    CKFMT_ASSERT_OK(rd);
    offset = (*rd)->Find({"z"})->pieces[0].chunks[0].offset;
  }
  XorByte(path, offset + 3);
  auto damaged = VerifyFile(path, vo);
  CKFMT_ASSERT_OK(damaged);
  ASSERT_EQ(damaged->problems.size(), 1u);
  EXPECT_EQ(damaged->problems[0].code, StatusCode::kCorruption);
  EXPECT_EQ(damaged->problems[0].where, "chunk @ " + std::to_string(offset) + " (z)");
  EXPECT_TRUE(damaged->problems[0].message.starts_with("checksum mismatch"))
      << damaged->problems[0].message;
}

TEST(VerifyTest, MissingFileIsAnError) {
  ScopedTempDir dir;
  auto r = VerifyFile(dir.File("nope.ckfmt"));
  EXPECT_FALSE(r.ok());
}

// Flip one byte at a time, at every offset of a small file (all of them when
// the file is at most 64 KiB), and require VerifyFile to notice each time.
void ExpectEveryFlipDetected(const std::string& path, IoBackend backend, uint64_t stride,
                             bool decode = true) {
  const uint64_t size = FileSize(path);
  ASSERT_LE(size, 64u << 10) << "keep the exhaustive test's file small";
  ASSERT_GE(size, 3u * 4096) << "the file should hold data chunks";
  VerifyOptions vo;
  vo.decode = decode;
  vo.io.backend = backend;
  vo.io.threads = 1;
  // Buffered: an O_DIRECT read of a just-modified page forces a writeback
  // to disk on every iteration. Small staging: the default 64 MiB costs
  // more to set up than a small file costs to check.
  vo.io.direct_io = false;
  vo.io.block_size = 16 << 10;
  vo.io.staging_bytes = 64 << 10;
  std::vector<uint64_t> missed;
  for (uint64_t pos = 0; pos < size; pos += stride) {
    const uint8_t mask = uint8_t(1u << (pos % 8));
    XorByte(path, pos, mask);
    auto r = VerifyFile(path, vo);
    XorByte(path, pos, mask);
    ASSERT_TRUE(r.ok()) << "VerifyFile failed outright at byte " << pos << ": "
                        << r.status().ToString();
    if (r->ok()) missed.push_back(pos);
  }
  auto clean = VerifyFile(path, vo);
  CKFMT_ASSERT_OK(clean);
  EXPECT_TRUE(clean->ok());
  std::string list;
  for (size_t i = 0; i < missed.size() && i < 20; ++i) list += " " + std::to_string(missed[i]);
  EXPECT_TRUE(missed.empty()) << missed.size() << " single-byte changes went unnoticed, at:"
                              << list;
}

TEST(VerifyEveryByteTest, PlainChunksEveryByte) {
  ScopedTempDir dir;
  ExpectEveryFlipDetected(WriteSmallFile(dir.File("v.ckfmt")), IoBackend::kPread, 1);
}

TEST(VerifyEveryByteTest, ZstdChunksEveryByte) {
  ScopedTempDir dir;
  ExpectEveryFlipDetected(WriteSmallCompressedFile(dir.File("z.ckfmt"), Codec::kZstd),
                          IoBackend::kPread, 1);
}

TEST(VerifyEveryByteTest, BytePlaneChunksEveryByte) {
  ScopedTempDir dir;
  ExpectEveryFlipDetected(WriteSmallCompressedFile(dir.File("b.ckfmt"), Codec::kBytePlaneZstd),
                          IoBackend::kPread, 1);
}

// Without decoding, the checksums alone still catch every changed byte
// (spec §8.1), compressed chunks included.
TEST(VerifyEveryByteTest, ChecksumsOnlyEveryByte) {
  ScopedTempDir dir;
  for (Codec codec : {Codec::kZstd, Codec::kBytePlaneZstd}) {
    SCOPED_TRACE(std::string(CodecName(uint8_t(codec))));
    ExpectEveryFlipDetected(WriteSmallCompressedFile(dir.File("c.ckfmt"), codec),
                            IoBackend::kPread, 1, /*decode=*/false);
  }
}

TEST(VerifyEveryByteTest, UringSample) {
  ScopedTempDir dir;
  ExpectEveryFlipDetected(WriteSmallFile(dir.File("v.ckfmt")), IoBackend::kUring, 61);
}

TEST(VerifyEveryByteTest, LargerFileSample) {
  // A multi-block file: a sample of positions, including every block edge.
  ScopedTempDir dir;
  const std::string path = dir.File("big.ckfmt");
  CKFMT_ASSERT_OK(ckfmt::Save(path, MakeRichStateDict(2), SmallSaveOptions(Codec::kZstd)));
  const uint64_t size = FileSize(path);
  VerifyOptions vo;
  vo.io.threads = 2;
  vo.io.direct_io = false;
  vo.io.block_size = 16 << 10;
  vo.io.staging_bytes = 64 << 10;
  std::vector<uint64_t> positions;
  for (uint64_t b = 0; b < size; b += 4096) {
    positions.push_back(b);
    positions.push_back(b + 4095);
  }
  for (uint64_t p = 17; p < size; p += 4099 * 7) positions.push_back(p);
  positions.push_back(size - 64);
  positions.push_back(size - 65);
  std::vector<uint64_t> missed;
  for (uint64_t pos : positions) {
    XorByte(path, pos, 0x20);
    auto r = VerifyFile(path, vo);
    XorByte(path, pos, 0x20);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (r->ok()) missed.push_back(pos);
  }
  EXPECT_TRUE(missed.empty()) << missed.size() << " of " << positions.size()
                              << " changes unnoticed, first at " << (missed.empty() ? 0 : missed[0]);
}

// Many chunks per codec, for the parallel pass: a compressible tensor and a
// random one, each split into 8 KiB chunks, with padding after most.
std::string WriteManyChunkFile(const std::string& path, Codec codec, uint64_t chunk_size) {
  Tensor t = Tensor::Zeros(DType::kF32, {48 * 1024});
  auto* f = static_cast<float*>(t.data());
  for (int i = 0; i < 48 * 1024; ++i) f[i] = float(i % 29) * 0.25f;
  Dict d;
  d.Set("w", t);
  d.Set("r", RandomTensor(DType::kF32, {40 * 1024}, 5));
  SaveOptions o = SmallSaveOptions(codec);
  o.chunk_size = chunk_size;
  EXPECT_TRUE(ckfmt::Save(path, Value(std::move(d)), o).ok());
  return path;
}

std::vector<ChunkRecord> ChunksOf(const std::string& path, const KeyPath& key) {
  auto rd = CheckpointReader::Open(path);
  EXPECT_TRUE(rd.ok());
  return rd.ok() ? (*rd)->Find(key)->pieces[0].chunks : std::vector<ChunkRecord>{};
}

// The report as one string per problem, for exact comparisons.
std::vector<std::string> ProblemList(const std::string& path, unsigned threads,
                                     uint64_t block_size = 0, uint64_t staging_bytes = 0) {
  VerifyOptions vo;
  vo.io.threads = threads;
  if (block_size) vo.io.block_size = block_size;
  if (staging_bytes) vo.io.staging_bytes = staging_bytes;
  auto r = VerifyFile(path, vo);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  std::vector<std::string> out;
  if (!r.ok()) return out;
  EXPECT_EQ(r->bytes_checked, r->file_size);
  for (const auto& p : r->problems) {
    out.push_back(std::to_string(int(p.code)) + " | " + p.where + " | " + p.message);
  }
  return out;
}

std::string ChunkWhere(const ChunkRecord& c, const std::string& key) {
  return "chunk @ " + std::to_string(c.offset) + " (" + FormatKeyPath({key}) + ")";
}

TEST(VerifyParallelTest, OneCorruptChunkAmongManyIsTheOnlyProblem) {
  for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kBytePlaneZstd}) {
    SCOPED_TRACE(std::string(CodecName(uint8_t(codec))));
    ScopedTempDir dir;
    const std::string path = WriteManyChunkFile(dir.File("m.ckfmt"), codec, 8 << 10);
    for (const char* key : {"w", "r"}) {
      std::vector<ChunkRecord> chunks = ChunksOf(path, {key});
      ASSERT_GE(chunks.size(), 20u);
      const ChunkRecord& bad = chunks[chunks.size() / 2];
      XorByte(path, bad.offset + bad.stored_size / 2, 0x04);
      for (unsigned threads : {1u, 4u}) {
        std::vector<std::string> got = ProblemList(path, threads);
        ASSERT_EQ(got.size(), 1u) << threads << " threads";
        EXPECT_EQ(got[0].rfind(std::to_string(int(StatusCode::kCorruption)) + " | " +
                                   ChunkWhere(bad, key) + " | checksum mismatch",
                               0),
                  0u)
            << got[0];
      }
      XorByte(path, bad.offset + bad.stored_size / 2, 0x04);
      EXPECT_TRUE(ProblemList(path, 4).empty());
    }
  }
}

// Chunks of 64 KiB against 4 KiB I/O blocks: with little staging each chunk
// is read on its own; with the default staging the slots grow to hold one.
TEST(VerifyParallelTest, ChunksLargerThanTheStagingBlock) {
  for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kBytePlaneZstd}) {
    SCOPED_TRACE(std::string(CodecName(uint8_t(codec))));
    ScopedTempDir dir;
    const std::string path = WriteManyChunkFile(dir.File("b.ckfmt"), codec, 64 << 10);
    std::vector<ChunkRecord> chunks = ChunksOf(path, {"r"});
    ASSERT_GE(chunks.size(), 3u);
    for (unsigned threads : {1u, 4u}) {
      EXPECT_TRUE(ProblemList(path, threads, 4096, 8192).empty());
      EXPECT_TRUE(ProblemList(path, threads, 4096).empty());
    }
    XorByte(path, chunks[1].offset + 100, 0x01);
    std::vector<std::string> expected = ProblemList(path, 1);
    ASSERT_EQ(expected.size(), 1u);
    EXPECT_NE(expected[0].find(ChunkWhere(chunks[1], "r")), std::string::npos) << expected[0];
    for (unsigned threads : {1u, 4u}) {
      EXPECT_EQ(ProblemList(path, threads, 4096, 8192), expected) << threads << " threads";
      EXPECT_EQ(ProblemList(path, threads, 4096), expected) << threads << " threads";
    }
  }
}

// Damage in chunks and in padding all over a file: every thread count and
// block size gives the same problems, in file order, one per bad gap.
TEST(VerifyParallelTest, SameReportForAnyThreadsAndBlocks) {
  for (Codec codec : {Codec::kZstd, Codec::kBytePlaneZstd}) {
    SCOPED_TRACE(std::string(CodecName(uint8_t(codec))));
    ScopedTempDir dir;
    const std::string path = WriteManyChunkFile(dir.File("s.ckfmt"), codec, 8 << 10);
    std::vector<ChunkRecord> chunks = ChunksOf(path, {"w"});
    for (const ChunkRecord& c : ChunksOf(path, {"r"})) chunks.push_back(c);
    std::sort(chunks.begin(), chunks.end(),
              [](const ChunkRecord& a, const ChunkRecord& b) { return a.offset < b.offset; });
    size_t gaps = 0, damaged = 0;
    for (size_t i = 0; i < chunks.size(); i += 3) {
      const ChunkRecord& c = chunks[i];
      XorByte(path, c.offset + c.stored_size - 1, 0x10);
      ++damaged;
      // Two bad bytes in one gap are one problem.
      if (AlignUp(c.offset + c.stored_size) - (c.offset + c.stored_size) >= 2 && i % 2 == 0) {
        XorByte(path, c.offset + c.stored_size, 0x01);
        XorByte(path, AlignUp(c.offset + c.stored_size) - 1, 0x01);
        ++gaps;
      }
    }
    ASSERT_GT(gaps, 2u);
    std::vector<std::string> expected = ProblemList(path, 1);
    ASSERT_EQ(expected.size(), damaged + gaps);
    uint64_t last = 0;
    for (const std::string& p : expected) {
      uint64_t at = std::stoull(p.substr(p.find('@') + 2));
      EXPECT_GT(at, last) << "problems out of file order: " << p;
      last = at;
    }
    for (unsigned threads : {1u, 2u, 4u}) {
      EXPECT_EQ(ProblemList(path, threads), expected) << threads << " threads";
      EXPECT_EQ(ProblemList(path, threads, 16 << 10, 64 << 10), expected) << threads;
      EXPECT_EQ(ProblemList(path, threads, 4096, 8192), expected) << threads;
    }
  }
}

}  // namespace
