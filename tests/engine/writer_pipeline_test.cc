// The compressed write path: EncodePipeline's ordering, errors and
// cancellation; the writer's files staying the same bytes whatever the
// threads and staging that produced them; deferred chunks spread out by
// element size, the same chunks in another place.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ckfmt/codec.h"
#include "ckfmt/reader.h"
#include "encode_pipeline.h"
#include "util/file_util.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

namespace ckfmt {
namespace {

using ckfmt_test::FillRandom;

constexpr size_t kChunk = 64 << 10;

// Chunks of every kind the writer queues: compressible and random (stored
// raw) data, elements of 1, 2 and 4 bytes, short tails.
struct Source {
  std::vector<std::vector<uint8_t>> data;
  std::vector<ChunkJob> jobs;

  explicit Source(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const size_t esize = size_t{1} << (i % 3);
      const size_t size = i % 7 == 6 ? kChunk / 3 / esize * esize : kChunk;
      std::vector<uint8_t> bytes(size);
      if (i % 4 == 3) {
        FillRandom(bytes.data(), size, i);
      } else {
        for (size_t b = 0; b < size; ++b) bytes[b] = uint8_t((b / esize) % 17 * (i + 1));
      }
      data.push_back(std::move(bytes));
      jobs.push_back({data.back().data(), size, esize, i, 0});
    }
  }
};

// A sink that checks every chunk against its source and its position.
struct CheckingSink {
  const Source& src;
  Codec codec;
  size_t next = 0;

  Status operator()(const ChunkJob& job, const StoredChunk& c) {
    EXPECT_EQ(job.entry, next) << "chunks must arrive in queue order";
    const std::vector<uint8_t>& raw = src.data[job.entry];
    if (c.codec == Codec::kNone) {
      EXPECT_EQ(c.size, raw.size());
      EXPECT_EQ(std::memcmp(c.data, raw.data(), raw.size()), 0);
    } else {
      EXPECT_LT(c.size, raw.size());
      std::vector<uint8_t> out(raw.size());
      EXPECT_TRUE(DecodeChunk(uint8_t(c.codec), c.data, c.size, out.data(), out.size()).ok());
      EXPECT_EQ(out, raw);
    }
    ++next;
    return Status::OK();
  }
};

class EncodePipelineTest : public ::testing::TestWithParam<unsigned> {};

TEST_P(EncodePipelineTest, DeliversEveryChunkOnceInQueueOrder) {
  ThreadPool pool(GetParam());
  Source src(61);
  for (Codec codec : {Codec::kZstd, Codec::kBytePlaneZstd}) {
    for (size_t ring : {1, 2, 5}) {
      CheckingSink check{src, codec};
      EncodePipeline p(pool, codec, 1, ring, kChunk,
                       [&](const ChunkJob& j, const StoredChunk& c) { return check(j, c); });
      for (size_t i = 0; i < src.jobs.size(); ++i) {
        ASSERT_TRUE(p.Push(src.jobs[i]).ok());
        if (i == 20) {
          ASSERT_TRUE(p.Drain().ok());  // and goes on afterwards
        }
      }
      ASSERT_TRUE(p.Drain().ok());
      EXPECT_EQ(check.next, src.jobs.size()) << CodecName(uint8_t(codec)) << " ring " << ring;
    }
  }
}

TEST_P(EncodePipelineTest, SinkErrorIsReturnedAndStopsDelivery) {
  ThreadPool pool(GetParam());
  Source src(40);
  size_t delivered = 0;
  EncodePipeline p(pool, Codec::kZstd, 1, 4, kChunk, [&](const ChunkJob&, const StoredChunk&) {
    return ++delivered == 6 ? Status::IOError("disk on fire") : Status::OK();
  });
  Status s;
  for (size_t i = 0; i < src.jobs.size() && s.ok(); ++i) s = p.Push(src.jobs[i]);
  if (s.ok()) s = p.Drain();
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_EQ(s.message(), "disk on fire");
  EXPECT_EQ(delivered, 6u);
  // Cancelled: nothing queued is left, and the pipeline works again.
  EXPECT_TRUE(p.Drain().ok());
  EXPECT_EQ(delivered, 6u);
  EXPECT_TRUE(p.Push(src.jobs[0]).ok());
  EXPECT_TRUE(p.Drain().ok());
  EXPECT_EQ(delivered, 7u);
}

TEST_P(EncodePipelineTest, EncodeErrorSurfacesAtItsTurn) {
  ThreadPool pool(GetParam());
  Source src(12);
  std::vector<uint8_t> odd(4096);
  std::vector<ChunkJob> jobs = src.jobs;
  jobs[7] = {odd.data(), odd.size(), 3, 7, 0};  // 3-byte elements do not divide 4096
  size_t delivered = 0;
  EncodePipeline p(pool, Codec::kBytePlaneZstd, 1, 3, kChunk,
                   [&](const ChunkJob& j, const StoredChunk&) {
                     EXPECT_EQ(j.entry, delivered++);
                     return Status::OK();
                   });
  Status s;
  for (size_t i = 0; i < jobs.size() && s.ok(); ++i) s = p.Push(jobs[i]);
  if (s.ok()) s = p.Drain();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(delivered, 7u);  // every chunk before it, none after
}

TEST_P(EncodePipelineTest, DestroyedWithChunksQueued) {
  ThreadPool pool(GetParam());
  Source src(30);
  std::atomic<size_t> delivered{0};
  {
    EncodePipeline p(pool, Codec::kZstd, 1, 8, kChunk, [&](const ChunkJob&, const StoredChunk&) {
      ++delivered;
      return Status::OK();
    });
    for (size_t i = 0; i < 8; ++i) ASSERT_TRUE(p.Push(src.jobs[i]).ok());
  }
  // Nothing after destruction may touch the pipeline or the sources.
  src.data.clear();
  EXPECT_LE(delivered.load(), 8u);
}

// Jobs "on a device" (here: their src is not readable, so only the fetch
// can give their bytes) are encoded from what the fetch returns, which is
// held until their turn at the sink and then let go; a failed fetch comes
// back through the error hook at its turn.
TEST_P(EncodePipelineTest, DeviceJobsAreEncodedFromTheirFetchedBytes) {
  ThreadPool pool(GetParam());
  Source src(24);
  std::vector<ChunkJob> jobs = src.jobs;
  for (size_t i = 1; i < jobs.size(); i += 2) {
    jobs[i].src = nullptr;
    jobs[i].device = Device{DeviceType::kCUDA, 1};
  }
  std::atomic<int> held{0};
  std::mutex mu;
  std::vector<std::weak_ptr<void>> holds;
  auto fetch = [&](const ChunkJob& j) -> Result<FetchedChunk> {
    EXPECT_EQ(j.device.index, 1);
    if (j.entry == 17) return Status::IOError("copy failed");
    ++held;
    std::shared_ptr<void> hold(new int(0), [&](int* p) {
      --held;
      delete p;
    });
    std::lock_guard<std::mutex> l(mu);
    holds.push_back(hold);
    return FetchedChunk{src.data[j.entry].data(), hold};
  };
  auto on_error = [](const ChunkJob& j, const Status& e) {
    return e.WithContext("chunk " + std::to_string(j.entry));
  };
  CheckingSink check{src, Codec::kZstd};
  EncodePipeline p(
      pool, Codec::kZstd, 1, 4, kChunk,
      [&](const ChunkJob& j, const StoredChunk& c) {
        EXPECT_LE(held.load(), 4) << "more fetched chunks held than the ring has slots";
        return check(j, c);
      },
      fetch, on_error);
  Status s;
  for (size_t i = 0; i < jobs.size() && s.ok(); ++i) s = p.Push(jobs[i]);
  if (s.ok()) s = p.Drain();
  EXPECT_EQ(s.ToString(), "IOError: chunk 17: copy failed");
  EXPECT_EQ(check.next, 17u);  // every chunk before it, none after
  EXPECT_EQ(held.load(), 0) << "fetched bytes still held after the pipeline cancelled";
}

INSTANTIATE_TEST_SUITE_P(Threads, EncodePipelineTest, ::testing::Values(1u, 2u, 4u),
                         [](const auto& info) { return std::to_string(info.param); });

ChunkJob JobOf(uint64_t size, size_t element_size) {
  return ChunkJob{nullptr, size, element_size, 0, 0};
}

TEST(SpreadElementSizesTest, OneElementSizeKeepsQueueOrder) {
  std::vector<ChunkJob> jobs;
  for (uint64_t n : {5, 1, 9, 3}) jobs.push_back(JobOf(n * 4, 4));
  EXPECT_EQ(SpreadElementSizes(jobs), (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_TRUE(SpreadElementSizes({}).empty());
}

TEST(SpreadElementSizesTest, EachNextJobComesFromTheSizeFurthestBehind) {
  // 2-byte jobs of 100 bytes (400 in all) and 4-byte jobs of 200, 200, 400
  // (800 in all), queued grouped as a state dict's weights and moments are.
  std::vector<ChunkJob> jobs{JobOf(100, 2), JobOf(100, 2), JobOf(100, 2), JobOf(100, 2),
                             JobOf(200, 4), JobOf(200, 4), JobOf(400, 4)};
  // Shares placed before each pick (2-byte vs 4-byte): 0 vs 0 (tie: the
  // smaller size), 1/4 vs 0, 1/4 vs 1/4, 2/4 vs 1/4, 2/4 vs 2/4, 3/4 vs 2/4,
  // 3/4 vs 1.
  EXPECT_EQ(SpreadElementSizes(jobs), (std::vector<size_t>{0, 4, 1, 5, 2, 6, 3}));
}

TEST(SpreadElementSizesTest, EveryJobExactlyOnceInGroupOrder) {
  std::vector<ChunkJob> jobs;
  for (size_t i = 0; i < 500; ++i) {
    jobs.push_back(JobOf((i * 7919) % 4096 + (i % 11 == 0 ? 0 : 1), size_t{1} << (i % 4)));
  }
  std::vector<size_t> order = SpreadElementSizes(jobs);
  ASSERT_EQ(order.size(), jobs.size());
  std::vector<bool> seen(jobs.size());
  std::map<size_t, size_t> last;  // element size -> last index taken
  for (size_t i : order) {
    ASSERT_LT(i, jobs.size());
    EXPECT_FALSE(seen[i]);
    seen[i] = true;
    auto it = last.find(jobs[i].element_size);
    if (it != last.end()) {
      EXPECT_LT(it->second, i);
    }
    last[jobs[i].element_size] = i;
  }
}

// A state of many tensors, some larger than a chunk, of 1-, 2- and 4-byte
// elements, some incompressible.
Value MixedState() {
  Dict d;
  for (int i = 0; i < 24; ++i) {
    const DType t = i % 3 == 0 ? DType::kBF16 : i % 3 == 1 ? DType::kF32 : DType::kU8;
    const uint64_t n = uint64_t(1000 + 7919 * i) * (i % 5 == 0 ? 9 : 1);
    Tensor x = ckfmt_test::RandomTensor(t, {n}, i);
    if (i % 4 != 3) {  // low entropy: compresses
      auto* b = static_cast<uint8_t*>(x.data());
      for (size_t k = 0; k < x.nbytes(); ++k) b[k] &= 0x0f;
    }
    d.Set("t" + std::to_string(i), x);
  }
  return Value(d);
}

std::string SaveBytes(const std::string& path, const Value& state, SaveOptions o, bool deferred) {
  if (deferred) {
    EXPECT_TRUE(Save(path, state, o).ok());
  } else {  // each call encodes and writes its own chunks before it returns
    auto w = CheckpointWriter::Create(path, o);
    EXPECT_TRUE(w.ok());
    const Dict& d = state.as_dict();
    for (size_t i = 0; i < d.size(); ++i) {
      const Tensor& t = d.value(i).as_tensor();
      EXPECT_TRUE((*w)->AddTensorPiece({d.key(i)}, t.dtype(), t.shape(), Region::Whole(t.shape()),
                                       0, t.data()).ok());
    }
    EXPECT_TRUE((*w)->Commit().ok());
  }
  return ckfmt_test::ReadFileBytes(path);
}

TEST(WriterPipelineTest, SameBytesWhateverThreadsAndStaging) {
  ckfmt_test::ScopedTempDir dir;
  const Value state = MixedState();
  // Uncompressed batches are sized by the threads too (one chunk per
  // thread but one), so every codec's file must not depend on them.
  for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kBytePlaneZstd}) {
    for (bool deferred : {true, false}) {
      std::string first;
      int n = 0;
      for (unsigned threads : {1u, 2u, 4u}) {
        for (uint64_t block : {uint64_t{4096}, uint64_t{1} << 20}) {
          SaveOptions o;
          o.codec = codec;
          o.chunk_size = 48 << 10;
          o.io.threads = threads;
          o.io.block_size = block;
          o.io.staging_bytes = 4 * block;
          std::string file = dir.File("c" + std::to_string(deferred) + "_" + std::to_string(n++));
          std::string bytes = SaveBytes(file, state, o, deferred);
          ASSERT_FALSE(bytes.empty());
          if (first.empty()) first = bytes;
          EXPECT_TRUE(bytes == first) << CodecName(uint8_t(codec)) << " threads " << threads
                                      << " block " << block << " deferred " << deferred;
        }
      }
      Value back{Dict{}};
      ASSERT_TRUE(Load(dir.File("c" + std::to_string(deferred) + "_0"), &back).ok());
      EXPECT_TRUE(ckfmt_test::ValuesBitwiseEqual(state, back));
    }
    // Deferral changes at most where the chunks lie.
    EXPECT_EQ(ckfmt_test::StoredChunksByEntry(dir.File("c1_0")),
              ckfmt_test::StoredChunksByEntry(dir.File("c0_0")))
        << CodecName(uint8_t(codec));
    if (codec == Codec::kNone) {
      EXPECT_TRUE(ckfmt_test::ReadFileBytes(dir.File("c1_0")) ==
                  ckfmt_test::ReadFileBytes(dir.File("c0_0")));
    }
  }
}

// Deferred compressed chunks are written spread out by element size: the
// bf16 chunks of MixedState do not all come first, as they would in entry
// order, and each tensor's chunks still follow each other in stream order.
TEST(WriterPipelineTest, DeferredCompressedChunksAreSpreadByElementSize) {
  ckfmt_test::ScopedTempDir dir;
  Dict d;
  // 5 chunks of 16 KiB per bf16 tensor, 10 per fp32 one.
  for (int i = 0; i < 4; ++i) {
    d.Set("w" + std::to_string(i), ckfmt_test::RandomTensor(DType::kBF16, {40960}, i));
  }
  for (int i = 0; i < 4; ++i) {
    d.Set("m" + std::to_string(i), ckfmt_test::RandomTensor(DType::kF32, {40960}, 10 + i));
  }
  SaveOptions o;
  o.codec = Codec::kBytePlaneZstd;
  o.chunk_size = 16 << 10;
  ASSERT_TRUE(Save(dir.File("s"), Value(d), o).ok());
  auto reader = CheckpointReader::Open(dir.File("s"));
  ASSERT_TRUE(reader.ok());
  // Chunks in file order: the element size of each.
  std::vector<std::pair<uint64_t, size_t>> by_offset;
  for (const EntryRecord& e : (*reader)->index().entries) {
    uint64_t prev = 0;
    for (const ChunkRecord& c : e.pieces.at(0).chunks) {
      EXPECT_GT(c.offset, prev) << FormatKeyPath(e.path) << ": chunks out of stream order";
      prev = c.offset;
      by_offset.push_back({c.offset, DTypeSize(e.dtype)});
    }
  }
  std::sort(by_offset.begin(), by_offset.end());
  ASSERT_EQ(by_offset.size(), 20u + 40u);
  // In every stretch of 6 chunks, 2 are bf16 (a third of the bytes).
  for (size_t i = 0; i + 6 <= by_offset.size(); i += 6) {
    size_t bf16 = 0;
    for (size_t k = i; k < i + 6; ++k) bf16 += by_offset[k].second == 2;
    EXPECT_EQ(bf16, 2u) << "chunks " << i << ".." << i + 5;
  }
  Value back{Dict{}};
  ASSERT_TRUE(Load(dir.File("s"), &back).ok());
  EXPECT_TRUE(ckfmt_test::ValuesBitwiseEqual(Value(d), back));
}

}  // namespace
}  // namespace ckfmt
