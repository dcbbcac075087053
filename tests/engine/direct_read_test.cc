// Loads from the disk read whole-block uncompressed chunks straight into
// destinations aligned for O_DIRECT (HostReads::kDirect), and everything
// else through staging. Both must give the same bytes and the same checks.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "ckfmt/reader.h"
#include "ckfmt/writer.h"
#include "util/file_util.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt_test;

constexpr size_t kChunk = 64 << 10;

class DirectReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path = dir.File("d.ckfmt");
    // 256 KiB + 100 bytes: whole-block chunks and a short last one.
    Dict root;
    root.Set("aligned", RandomTensor(DType::kF32, {65561}, 1));
    root.Set("offset", RandomTensor(DType::kF32, {65561}, 2));
    original = Value(std::move(root));
    SaveOptions o;
    o.chunk_size = kChunk;
    o.fsync = false;
    CKFMT_ASSERT_OK(ckfmt::Save(path, original, o));
  }

  // A state dict like `original` whose "aligned" tensor is page-aligned and
  // whose "offset" tensor starts 64 bytes into a page, as PyTorch's large
  // CPU tensors do (too little for a disk that needs 512).
  Value Destination() {
    const size_t bytes = original.Find({"aligned"})->as_tensor().nbytes();
    for (auto* b : {&aligned_mem, &offset_mem}) {
      *b = PagePlus(bytes);
      std::memset(b->get(), 0xa5, bytes + 4096);
    }
    Dict root;
    root.Set("aligned", Tensor::View(DType::kF32, {65561}, aligned_mem.get()));
    root.Set("offset", Tensor::View(DType::kF32, {65561}, offset_mem.get() + 64));
    return Value(std::move(root));
  }

  // The memory alignment O_DIRECT reads of `path` need (statx), or 0 where
  // the file system refuses O_DIRECT: then nothing is read straight into
  // place.
  static uint32_t DirectAlignment(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
    if (fd < 0) return 0;
    uint32_t align = 4096;
#ifdef STATX_DIOALIGN
    struct statx sx;
    if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
        (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_mem_align > 0) {
      align = sx.stx_dio_mem_align;
    }
#endif
    ::close(fd);
    return align;
  }
  // The chunks of `key` as saved. The writer chooses their sizes (the
  // first is cut short to end on a multiple of the chunk size in the file).
  std::vector<ChunkRecord> Chunks(const char* key) const {
    auto reader = CheckpointReader::Open(path);
    EXPECT_TRUE(reader.ok());
    return reader.ok() ? (*reader)->Find({key})->pieces[0].chunks : std::vector<ChunkRecord>{};
  }

  // Bytes a load of `key` into memory `page_offset` bytes into a page reads
  // straight into place: its chunks of whole 4096-byte blocks, where the
  // destination meets the alignment; never the short last chunk.
  uint64_t ExpectedDirect(const char* key, size_t page_offset) const {
    const uint32_t align = DirectAlignment(path);
    if (align == 0 || page_offset % align != 0) return 0;
    uint64_t bytes = 0;
    for (const ChunkRecord& c : Chunks(key)) bytes += c.raw_size % 4096 == 0 ? c.raw_size : 0;
    EXPECT_GE(bytes, 3 * kChunk) << key;  // all but the first and the last
    return bytes;
  }

  Result<LoadReport> LoadFromDisk(Value* into, bool verify = true,
                                  HostReads host_reads = HostReads::kDirect) {
    DropFileCache(path);
    ReadOptions ro;
    ro.verify_checksums = verify;
    ro.host_reads = host_reads;
    auto r = CheckpointReader::Open(path, ro);
    if (!r.ok()) return r.status();
    return (*r)->Load(into);
  }

  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  // Page-aligned memory with room for `bytes` plus a page. aligned_alloc's
  // size must be a multiple of the alignment (C11; ASan returns null).
  static std::unique_ptr<uint8_t, Free> PagePlus(size_t bytes) {
    const size_t size = (bytes + 2 * 4096 - 1) / 4096 * 4096;
    return std::unique_ptr<uint8_t, Free>(static_cast<uint8_t*>(std::aligned_alloc(4096, size)));
  }
  ScopedTempDir dir;
  std::string path;
  Value original;
  std::unique_ptr<uint8_t, Free> aligned_mem, offset_mem;
};

TEST_F(DirectReadTest, AlignedAndOffsetDestinationsLoadBitwise) {
  Value into = Destination();
  auto report = LoadFromDisk(&into);
  CKFMT_ASSERT_OK(report);
  EXPECT_EQ(report->bytes_read_direct, ExpectedDirect("aligned", 0) + ExpectedDirect("offset", 64));
  EXPECT_EQ(report->bytes_read, 2 * (4 * kChunk + 4096));
  for (const char* key : {"aligned", "offset"}) {
    EXPECT_EQ(TensorBytes(into.Find({key})->as_tensor()),
              TensorBytes(original.Find({key})->as_tensor()))
        << key;
  }
  // Nothing written around the destinations.
  const size_t bytes = original.Find({"aligned"})->as_tensor().nbytes();
  EXPECT_EQ(offset_mem.get()[63], 0xa5);
  EXPECT_EQ(offset_mem.get()[64 + bytes], 0xa5);
  EXPECT_EQ(aligned_mem.get()[bytes], 0xa5);
}

// One reader keeps its staging between loads and grows it when a later load
// needs more of it (destinations it cannot read straight into).
TEST_F(DirectReadTest, OneReaderLoadsAlignedThenOffsetThenAlignedAgain) {
  DropFileCache(path);
  ReadOptions ro;
  ro.host_reads = HostReads::kDirect;
  auto reader = CheckpointReader::Open(path, ro);
  CKFMT_ASSERT_OK(reader);
  for (size_t offset : {size_t{0}, size_t{64}, size_t{0}}) {
    const size_t bytes = original.Find({"aligned"})->as_tensor().nbytes();
    std::unique_ptr<uint8_t, Free> mem = PagePlus(bytes);
    Dict root;
    root.Set("aligned", Tensor::View(DType::kF32, {65561}, mem.get() + offset));
    Value into(std::move(root));
    LoadOptions lo;
    lo.prefixes = {{"aligned"}};
    DropFileCache(path);
    auto report = (*reader)->Load(&into, lo);
    CKFMT_ASSERT_OK(report);
    EXPECT_EQ(report->bytes_read_direct, ExpectedDirect("aligned", offset)) << offset;
    EXPECT_EQ(TensorBytes(into.Find({"aligned"})->as_tensor()),
              TensorBytes(original.Find({"aligned"})->as_tensor()))
        << offset;
  }
}

TEST_F(DirectReadTest, ReconstructedTensorsLoadBitwise) {
  Value into = Dict{};
  auto report = LoadFromDisk(&into);
  CKFMT_ASSERT_OK(report);
  EXPECT_EQ(report->bytes_read_direct, ExpectedDirect("aligned", 0) + ExpectedDirect("offset", 0));
  for (const char* key : {"aligned", "offset"}) {
    const Tensor& t = into.Find({key})->as_tensor();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 4096, 0u) << key;
    EXPECT_EQ(TensorBytes(t), TensorBytes(original.Find({key})->as_tensor())) << key;
  }
}

TEST_F(DirectReadTest, StagedReadsPutNothingStraightIntoPlace) {
  for (bool fresh : {false, true}) {
    Value into = fresh ? Value(Dict{}) : Destination();
    auto report = LoadFromDisk(&into, /*verify=*/true, HostReads::kStaged);
    CKFMT_ASSERT_OK(report);
    EXPECT_EQ(report->bytes_read_direct, 0u) << fresh;
    EXPECT_EQ(report->bytes_read, 2 * (4 * kChunk + 4096)) << fresh;
    for (const char* key : {"aligned", "offset"}) {
      EXPECT_EQ(TensorBytes(into.Find({key})->as_tensor()),
                TensorBytes(original.Find({key})->as_tensor()))
          << key << " " << fresh;
    }
  }
}

TEST_F(DirectReadTest, FlippedByteInAChunkReadIntoPlaceFailsTheLoad) {
  const std::vector<ChunkRecord> chunks = Chunks("aligned");
  ASSERT_GE(chunks.size(), 3u);
  const ChunkRecord c = chunks[2];
  ASSERT_EQ(c.raw_size, kChunk);
  XorByte(path, c.offset + 5, 0x40);

  Value into = Destination();
  auto load = LoadFromDisk(&into);
  ASSERT_FALSE(load.ok());
  EXPECT_EQ(load.status().code(), StatusCode::kCorruption) << load.status().ToString();
  EXPECT_TRUE(MentionsPath(load.status().message(), {"aligned"})) << load.status().message();
  EXPECT_NE(load.status().message().find(path), std::string::npos) << load.status().message();

  // Without checksums the damaged value loads, with exactly that byte off.
  Value unchecked = Destination();
  CKFMT_ASSERT_OK(LoadFromDisk(&unchecked, /*verify=*/false));
  const std::string got = TensorBytes(unchecked.Find({"aligned"})->as_tensor());
  const std::string want = TensorBytes(original.Find({"aligned"})->as_tensor());
  ASSERT_EQ(got.size(), want.size());
  size_t diffs = 0, at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) ++diffs, at = i;
  }
  EXPECT_EQ(diffs, 1u);
  EXPECT_EQ(at, chunks[0].raw_size + chunks[1].raw_size + 5);
}

// HostReads::kAuto reads straight into tensors on huge pages on any disk,
// and into other memory only off a virtio disk (whose host may serve each
// 4 KiB page of such memory on its own).
TEST_F(DirectReadTest, AutoReadsStraightIntoHugePagesOnAnyDisk) {
  constexpr uint64_t kElems = 1 << 20;  // 4 MiB: Tensor::Empty maps it on huge pages
  Dict root;
  root.Set("big", RandomTensor(DType::kF32, {kElems}, 3));
  root.Set("plain", RandomTensor(DType::kF32, {kElems}, 4));
  original = Value(std::move(root));
  SaveOptions o;
  o.chunk_size = kChunk;
  o.fsync = false;
  CKFMT_ASSERT_OK(ckfmt::Save(path, original, o));

  std::unique_ptr<uint8_t, Free> plain_mem = PagePlus(kElems * 4);
  Dict into_root;
  into_root.Set("big", Tensor::Empty(DType::kF32, {kElems}));
  into_root.Set("plain", Tensor::View(DType::kF32, {kElems}, plain_mem.get()));
  Value into(std::move(into_root));
  const bool huge = into.Find({"big"})->as_tensor().on_huge_pages();

  auto report = LoadFromDisk(&into, /*verify=*/true, HostReads::kAuto);
  CKFMT_ASSERT_OK(report);
  // "plain" is read straight in or not, as the disk under the file decides.
  const uint64_t big = huge ? ExpectedDirect("big", 0) : 0;
  const uint64_t direct = report->bytes_read_direct;
  EXPECT_TRUE(direct == big || direct == big + ExpectedDirect("plain", 0))
      << direct << " bytes read straight into place; huge pages: " << huge;
  for (const char* key : {"big", "plain"}) {
    EXPECT_EQ(TensorBytes(into.Find({key})->as_tensor()),
              TensorBytes(original.Find({key})->as_tensor()))
        << key;
  }
}

}  // namespace
