// The compressed write path: EncodePipeline's ordering, errors and
// cancellation, and the writer's files staying the same bytes whatever the
// threads, staging and deferral that produced them.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "ckfmt/checksum.h"
#include "ckfmt/codec.h"
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
    EXPECT_EQ(c.checksum, Checksum(c.data, c.size));
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

INSTANTIATE_TEST_SUITE_P(Threads, EncodePipelineTest, ::testing::Values(1u, 2u, 4u),
                         [](const auto& info) { return std::to_string(info.param); });

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

TEST(WriterPipelineTest, SameBytesWhateverThreadsStagingAndDeferral) {
  ckfmt_test::ScopedTempDir dir;
  const Value state = MixedState();
  // Uncompressed batches are sized by the threads too (one chunk per
  // thread but one), so every codec's file must not depend on them.
  for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kBytePlaneZstd}) {
    std::string first;
    int n = 0;
    for (unsigned threads : {1u, 2u, 4u}) {
      for (uint64_t block : {uint64_t{4096}, uint64_t{1} << 20}) {
        for (bool deferred : {true, false}) {
          SaveOptions o;
          o.codec = codec;
          o.chunk_size = 48 << 10;
          o.io.threads = threads;
          o.io.block_size = block;
          o.io.staging_bytes = 4 * block;
          std::string bytes =
              SaveBytes(dir.File("c" + std::to_string(n++)), state, o, deferred);
          ASSERT_FALSE(bytes.empty());
          if (first.empty()) first = bytes;
          EXPECT_TRUE(bytes == first) << CodecName(uint8_t(codec)) << " threads " << threads
                                      << " block " << block << " deferred " << deferred;
        }
      }
    }
    Value back{Dict{}};
    ASSERT_TRUE(Load(dir.File("c0"), &back).ok());
    EXPECT_TRUE(ckfmt_test::ValuesBitwiseEqual(state, back));
  }
}

}  // namespace
}  // namespace ckfmt
