// Single-process tests of the distributed layer: layouts, region
// extraction, the single-process communicator, DistSave on one rank in both
// modes, and the resharding load.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "ckfmt/dist/comm_util.h"
#include "ckfmt/dist/communicator.h"
#include "ckfmt/dist/dist_load.h"
#include "ckfmt/dist/dist_save.h"
#include "ckfmt/dist/layout.h"
#include "ckfmt/dist/sharded_state.h"
#include "ckfmt/reader.h"
#include "ckfmt/verify.h"
#include "ckfmt/writer.h"
#include "dist_test_util.h"
#include "util/fault_sweep.h"
#include "util/file_util.h"
#include "util/io_faults.h"
#include "util/raw_file.h"

namespace {

using namespace ckfmt;
using namespace ckfmt::dist;
using namespace ckfmt_dist_test;
namespace fs = std::filesystem;

KeyPath K(std::initializer_list<const char*> keys) {
  KeyPath p;
  for (const char* k : keys) p.emplace_back(std::string(k));
  return p;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "ckfmt_dist_unit_XXXXXX";
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~TempDir() {
    if (!std::getenv("CKFMT_KEEP_TEST_FILES")) fs::remove_all(path_);
  }
  std::string File(const std::string& n) const { return path_ + "/" + n; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(Fsdp1Layout, SlicesSpanParametersAndPadTheLastRank) {
  std::vector<ParamInfo> params = {{K({"a"}), {5}}, {K({"b"}), {3}}, {K({"c"}), {2, 2}}};
  EXPECT_EQ(Fsdp1ShardElements(params, 5), 3u);  // 12 elements padded to 15
  auto r0 = Fsdp1RankSlices(params, 5, 0);
  ASSERT_EQ(r0.size(), 3u);
  EXPECT_EQ(r0[0].region, Region::Flat(0, 3));
  EXPECT_EQ(r0[1].region.length, 0u);
  EXPECT_EQ(r0[2].region.length, 0u);
  auto r1 = Fsdp1RankSlices(params, 5, 1);  // flat [3, 6): a[3,5) b[0,1)
  EXPECT_EQ(r1[0].region, Region::Flat(3, 2));
  EXPECT_EQ(r1[0].local_offset, 0u);
  EXPECT_EQ(r1[1].region, Region::Flat(0, 1));
  EXPECT_EQ(r1[1].local_offset, 2u);
  auto r2 = Fsdp1RankSlices(params, 5, 2);  // flat [6, 9): b[1,3) c[0,1)
  EXPECT_EQ(r2[1].region, Region::Flat(1, 2));
  EXPECT_EQ(r2[2].region, Region::Flat(0, 1));
  EXPECT_EQ(r2[2].local_offset, 2u);
  auto r4 = Fsdp1RankSlices(params, 5, 4);  // flat [12, 15): padding only
  for (const auto& s : r4) EXPECT_EQ(s.region.length, 0u);
  // Every element is held exactly once.
  for (size_t p = 0; p < params.size(); ++p) {
    uint64_t total = 0;
    for (int r = 0; r < 5; ++r) total += Fsdp1RankSlices(params, 5, r)[p].region.length;
    uint64_t numel = 1;
    for (auto d : params[p].shape) numel *= d;
    EXPECT_EQ(total, numel);
  }
}

TEST(Fsdp2Layout, TorchChunkSemanticsWithShortAndEmptyRanks) {
  EXPECT_EQ(Fsdp2ChunkRegion({3, 6}, 4, 0), Region::Box({0, 0}, {1, 6}));
  EXPECT_EQ(Fsdp2ChunkRegion({3, 6}, 4, 2), Region::Box({2, 0}, {1, 6}));
  EXPECT_EQ(Fsdp2ChunkRegion({3, 6}, 4, 3), Region::Box({3, 0}, {0, 6}));
  EXPECT_EQ(Fsdp2ChunkRegion({10}, 4, 3), Region::Box({9}, {1}));
  EXPECT_EQ(Fsdp2ChunkRegion({10}, 4, 1), Region::Box({3}, {3}));
  EXPECT_EQ(Fsdp2ChunkRegion({0, 4}, 3, 1), Region::Box({0, 0}, {0, 4}));
  auto layout = Fsdp2Layout(4, 1);
  EXPECT_FALSE(layout(K({"x"}), {})->has_value());  // 0-d: unsharded
  EXPECT_TRUE(layout(K({"x"}), {8})->has_value());
}

TEST(ShardedState, ExtractRegionBoxAndFlat) {
  Tensor whole = Tensor::Zeros(DType::kI32, {3, 4});
  for (int i = 0; i < 12; ++i) static_cast<int32_t*>(whole.data())[i] = i;
  auto box = ExtractRegion(whole, Region::Box({1, 1}, {2, 2}));
  ASSERT_TRUE(box.ok()) << box.status().ToString();
  EXPECT_EQ(box->shape(), (Shape{2, 2}));
  const int32_t* b = static_cast<const int32_t*>(box->data());
  EXPECT_EQ(std::vector<int32_t>(b, b + 4), (std::vector<int32_t>{5, 6, 9, 10}));
  ASSERT_TRUE(box->shard().has_value());
  EXPECT_EQ(box->global_shape(), (Shape{3, 4}));
  auto flat = ExtractRegion(whole, Region::Flat(3, 4));
  ASSERT_TRUE(flat.ok());
  const int32_t* f = static_cast<const int32_t*>(flat->data());
  EXPECT_EQ(std::vector<int32_t>(f, f + 4), (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_FALSE(ExtractRegion(whole, Region::Flat(10, 4)).ok());
}

TEST(SingleCommunicator, CollectivesCopyLocally) {
  SingleCommunicator comm;
  uint64_t x = 42, y = 0;
  ASSERT_TRUE(comm.AllGather(&x, 8, &y).ok());
  EXPECT_EQ(y, 42u);
  std::string a = "abc", b = "defg", out(7, '\0');
  char c[3];
  ASSERT_TRUE(comm.GatherSegments({{a.data(), 3}, {b.data(), 4}},
                                  {{{out.data(), 2}, {out.data() + 2, 5}}}, 0)
                  .ok());
  EXPECT_EQ(out, "abcdefg");
  ASSERT_TRUE(comm.Send("xyz", 3, 0, 5).ok());
  ASSERT_TRUE(comm.Recv(c, 3, 0, 5).ok());
  EXPECT_EQ(std::string(c, 3), "xyz");
  EXPECT_FALSE(comm.Broadcast(&x, 8, 1).ok());
  Status agreed = comm.AgreeOnStatus(Status::IOError("disk full"), "step");
  EXPECT_EQ(agreed.code(), StatusCode::kIOError);
  EXPECT_NE(agreed.message().find("rank 0: disk full"), std::string::npos);
  // A receive nothing can match would wait forever: refused, and the
  // communicator is unusable afterwards.
  EXPECT_EQ(comm.Recv(c, 3, 0, 9).code(), StatusCode::kAborted);
  EXPECT_TRUE(comm.broken());
  EXPECT_EQ(comm.Barrier().code(), StatusCode::kAborted);
}

TEST(CommUtil, ReduceGatheredReducesEachValueOverTheRanks) {
  // Three ranks, two values each, as an all-gather leaves them.
  const int64_t all[] = {5, -1, 3, 6, -2, INT64_MAX};
  int64_t out[2];
  ReduceGathered(all, 2, 3, ReduceOp::kSum, out);
  EXPECT_EQ(out[0], 6);
  EXPECT_EQ(out[1], INT64_MIN + 4);  // -1 + 6 + INT64_MAX wraps around
  ReduceGathered(all, 2, 3, ReduceOp::kMin, out);
  EXPECT_EQ(out[0], -2);
  EXPECT_EQ(out[1], -1);
  ReduceGathered(all, 2, 3, ReduceOp::kMax, out);
  EXPECT_EQ(out[0], 5);
  EXPECT_EQ(out[1], INT64_MAX);
  ReduceGathered(all, 2, 3, ReduceOp::kBitOr, out);
  EXPECT_EQ(out[0], 5 | 3 | -2);
  ReduceGathered(all, 2, 3, ReduceOp::kBitAnd, out);
  EXPECT_EQ(out[0], 5 & 3 & -2);
  EXPECT_EQ(out[1], -1 & 6 & INT64_MAX);
  int64_t one[] = {9, 8};  // one rank: its own values
  ReduceGathered(one, 2, 1, ReduceOp::kSum, one);
  EXPECT_EQ(one[0], 9);
  EXPECT_EQ(one[1], 8);
}

TEST(CommUtil, StatusEncodingRoundTrips) {
  Status s = Status::Mismatch("x: shape");
  Status d = DecodeStatus(EncodeStatus(s));
  EXPECT_EQ(d.code(), s.code());
  EXPECT_EQ(d.message(), s.message());
  EXPECT_TRUE(DecodeStatus(EncodeStatus(Status::OK())).ok());
  EXPECT_FALSE(DecodeStatus("xy").ok());
  Status c = CombineStatuses({Status::OK(), Status::IOError("a"), Status::Aborted("b")}, "save");
  EXPECT_EQ(c.code(), StatusCode::kIOError);
  EXPECT_NE(c.message().find("2 of 3 ranks"), std::string::npos);
  EXPECT_NE(c.message().find("rank 2: b"), std::string::npos);
}

class DistSaveOneRank : public ::testing::TestWithParam<std::tuple<SaveMode, LayoutKind>> {};

TEST_P(DistSaveOneRank, RoundTripsAndVerifies) {
  auto [mode, kind] = GetParam();
  TempDir dir;
  SingleCommunicator comm;
  Value full = MakeFullState(1);
  auto local = ShardStateDict(full, MakeLayout(kind, full, 1, 0));
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  DistSaveOptions o;
  o.mode = mode;
  o.memory_budget = 256;  // many buckets, large tensors sliced
  o.save.chunk_size = 96;
  o.save.fsync = false;
  auto stats = DistSave(comm, dir.File("ck"), *local, o);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  if (mode == SaveMode::kFlattened) {
    EXPECT_GT(stats->buckets, 5u);
  }
  auto v = VerifyFile(dir.File("ck"));
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->ok()) << v->problems[0].where << ": " << v->problems[0].message;
  EXPECT_EQ(ListDir(dir.path()), std::vector<std::string>{"ck"});
  auto reader = CheckpointReader::Open(dir.File("ck"));
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->index().save_mode, std::string(SaveModeName(mode)));
  Value loaded{Dict{}};
  ASSERT_TRUE((*reader)->Load(&loaded).ok());
  EXPECT_TRUE(MatchesFull(loaded, full, true));
  // A tensor larger than a bucket is stored as several pieces (flattened).
  const EntryRecord* e = (*reader)->Find(K({"model", "embed.weight"}));
  ASSERT_NE(e, nullptr);
  if (mode == SaveMode::kFlattened) {
    EXPECT_GT(e->pieces.size(), 1u);
    if (kind != LayoutKind::kGrid2D) {
      EXPECT_EQ(e->saved_layout.size(), 1u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, DistSaveOneRank,
    ::testing::Combine(::testing::Values(SaveMode::kFlattened, SaveMode::kParallel),
                       ::testing::Values(LayoutKind::kFsdp1, LayoutKind::kFsdp2)),
    [](const auto& info) {
      return std::string(SaveModeName(std::get<0>(info.param))) + "_" +
             LayoutName(std::get<1>(info.param));
    });

TEST(DistSave, ParallelWithZstd) {
  TempDir dir;
  SingleCommunicator comm;
  Value full = MakeFullState(2);
  DistSaveOptions o;
  o.mode = SaveMode::kParallel;
  o.save.codec = Codec::kZstd;
  o.save.fsync = false;
  ASSERT_TRUE(DistSave(comm, dir.File("z"), full, o).ok());
  auto v = VerifyFile(dir.File("z"));
  ASSERT_TRUE(v.ok() && v->ok());
  Value loaded{Dict{}};
  ASSERT_TRUE(Load(dir.File("z"), &loaded).ok());
  EXPECT_TRUE(MatchesFull(loaded, full, true));
}

TEST(DistSave, ShardsThatDoNotTileAreRefusedAndNothingIsWritten) {
  TempDir dir;
  SingleCommunicator comm;
  Tensor t = Tensor::Zeros(DType::kF32, {2, 3});
  t.SetShard(ShardSpec{{4, 3}, Region::Box({0, 0}, {2, 3})});
  Value sd{Dict{}};
  sd.as_dict().Set("w", t);
  for (SaveMode mode : {SaveMode::kFlattened, SaveMode::kParallel}) {
    DistSaveOptions o;
    o.mode = mode;
    auto s = DistSave(comm, dir.File("bad"), sd, o);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("w: the ranks' shards do not tile"), std::string::npos)
        << s.status().message();
    EXPECT_TRUE(ListDir(dir.path()).empty());
  }
}

TEST(DistSave, OntoADirectoryIsRefusedBeforeWriting) {
  TempDir dir;
  SingleCommunicator comm;
  const std::string target = dir.File("a_directory");
  ASSERT_TRUE(std::filesystem::create_directory(target));
  for (SaveMode mode : {SaveMode::kFlattened, SaveMode::kParallel}) {
    DistSaveOptions o;
    o.mode = mode;
    o.save.fsync = false;
    auto s = DistSave(comm, target, MakeFullState(3), o);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << s.status().ToString();
    EXPECT_NE(s.status().message().find("is a directory"), std::string::npos)
        << s.status().message();
    EXPECT_EQ(ListDir(dir.path()), std::vector<std::string>{"a_directory"});
  }
}

TEST(DistSave, RegionThatDoesNotMatchTheTensorIsRefused) {
  SingleCommunicator comm;
  Tensor t = Tensor::Zeros(DType::kF32, {2, 3});
  t.SetShard(ShardSpec{{4, 3}, Region::Box({0, 0}, {3, 3})});
  Value sd{Dict{}};
  sd.as_dict().Set("w", t);
  auto s = DistSave(comm, "/nonexistent/x", sd);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("rank 0: w: shard region"), std::string::npos)
      << s.status().message();
}

// A disk that fails a write or a read (EIO), each transfer in turn: a
// one-rank distributed save in either mode keeps the old file with no
// temporary beside it, and a resharding load says what failed where.
TEST(DistIoFaults, EveryFailedTransferKeepsTheOldFileOrFailsTheLoadClearly) {
  TempDir dir;
  SingleCommunicator comm;
  Value full = MakeFullState(5);
  auto local = ShardStateDict(full, MakeLayout(LayoutKind::kFsdp2, full, 1, 0));
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  const std::string path = dir.File("ck");
  ckfmt_test::IoFaults faults;
  auto fail_from = [&](uint64_t k) { faults.FailFrom(k ? faults.transfers() + k : 0); };
  auto names_path_and_eio = [&](const Status& s) {
    EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(std::strerror(EIO)), std::string::npos) << s.ToString();
  };
  for (SaveMode mode : {SaveMode::kFlattened, SaveMode::kParallel}) {
    for (Codec codec : {Codec::kNone, Codec::kBytePlaneZstd}) {
      SCOPED_TRACE(std::string(SaveModeName(mode)) + ", " + std::string(CodecName(uint8_t(codec))));
      DistSaveOptions o;
      o.mode = mode;
      o.memory_budget = 4096;
      o.save.chunk_size = 1024;
      o.save.fsync = false;
      ASSERT_TRUE(DistSave(comm, path, MakeFullState(6), o).ok());
      const std::string before = ckfmt_test::ReadFileBytes(path);
      o.save.codec = codec;
      int failures = ckfmt_test::SweepFaults(
          fail_from, [&] { return DistSave(comm, path, *local, o).status(); },
          [&](const Status& s) {
            names_path_and_eio(s);
            EXPECT_EQ(ckfmt_test::ReadFileBytes(path), before);
            EXPECT_EQ(ListDir(dir.path()), std::vector<std::string>{"ck"});
          });
      EXPECT_GE(failures, 1);
      EXPECT_TRUE(FileHoldsFull(path, full));
    }
  }
  int failures = ckfmt_test::SweepFaults(
      fail_from,
      [&]() -> Status {
        auto reader = CheckpointReader::Open(path);
        if (!reader.ok()) return reader.status();
        return LoadRankState(**reader, MakeLayout(LayoutKind::kFsdp1, full, 2, 1)).status();
      },
      names_path_and_eio);
  EXPECT_GE(failures, 1);
}

TEST(LoadSharded, ReconstructsMissingEntriesAsShards) {
  TempDir dir;
  Value full = MakeFullState(3);
  ASSERT_TRUE(Save(dir.File("ref"), full).ok());
  auto reader = CheckpointReader::Open(dir.File("ref"));
  ASSERT_TRUE(reader.ok());
  for (int rank = 0; rank < 3; ++rank) {
    LayoutFn layout = MakeLayout(LayoutKind::kFsdp2, full, 3, rank);
    auto target = ShardStateDict(ModelOnly(full), layout);
    ASSERT_TRUE(target.ok());
    // Zero the model so the load has to fill it.
    VisitValues(*target, [](const KeyPath&, const Value& v) {
      if (v.is_tensor() && v.as_tensor().nbytes()) {
        std::memset(v.as_tensor().data(), 0, v.as_tensor().nbytes());
      }
    });
    ShardedLoadOptions o;
    o.layout = layout;
    auto report = LoadSharded(**reader, &*target, o);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_TRUE(MatchesFull(*target, full, true));
    const KeyPath ea_path = K({"optim", "state", "head.weight", "exp_avg"});
    const Value* ea = target->Find(ea_path);
    ASSERT_NE(ea, nullptr);
    ASSERT_TRUE(ea->as_tensor().shard().has_value());
    EXPECT_EQ(ea->as_tensor().region(), Fsdp2ChunkRegion({3, 6}, 3, rank));
    const auto& rec = report->reconstructed;
    EXPECT_NE(std::find(rec.begin(), rec.end(), ea_path), rec.end()) << report->ToString();
    EXPECT_TRUE(report->missing.empty());
  }
  // The inverse of flattening: everything, sharded, from nothing.
  auto state = LoadRankState(**reader, MakeLayout(LayoutKind::kFsdp1, full, 4, 1));
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_TRUE(MatchesFull(*state, full, true));
}

TEST(LoadSharded, FailedLoadLeavesTheDictUnchanged) {
  TempDir dir;
  Value full = MakeFullState(4);
  ASSERT_TRUE(Save(dir.File("ref"), full).ok());
  auto reader = CheckpointReader::Open(dir.File("ref"));
  ASSERT_TRUE(reader.ok());
  Value target{Dict{}};
  target.as_dict().Set("step", Value("not an int"));
  ShardedLoadOptions o;
  o.layout = MakeLayout(LayoutKind::kFsdp2, full, 2, 0);
  auto report = LoadSharded(**reader, &target, o);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kMismatch);
  EXPECT_EQ(target.as_dict().size(), 1u);
}

TEST(LoadSharded, ShardsBeyondTheMachineAreRefusedBeforeAllocating) {
  // A 16 MiB file of compressed chunks declaring 256 tensors of 16 GiB: even
  // this rank's halves, 2 TiB together, are refused before any is made.
  TempDir dir;
  ckfmt_test::RawFileBuilder b;
  IndexRecord idx = ckfmt_test::DeclareHugeEntries(b, 256, 16, EntryKind::kTensor);
  const std::string path = dir.File("huge");
  ckfmt_test::WriteFileBytes(path, b.Build(idx));
  auto reader = CheckpointReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  Value target{Dict{}};
  ShardedLoadOptions o;
  o.layout = [](const KeyPath&, const Shape& shape) -> std::optional<Region> {
    return Region::Box({0}, {shape[0] / 2});
  };
  auto report = LoadSharded(**reader, &target, o);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kIOError) << report.status().ToString();
  EXPECT_NE(report.status().message().find("host memory"), std::string::npos)
      << report.status().message();
  EXPECT_TRUE(target.as_dict().empty());
}

}  // namespace
