// Multi-process tests, run by mpirun with 1 to 4 ranks (see CMakeLists.txt).
// Every test is collective: all ranks run the same tests in the same order.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ckfmt/dist/comm_util.h"
#include "ckfmt/dist/dist_load.h"
#include "ckfmt/dist/dist_save.h"
#include "ckfmt/dist/mpi_communicator.h"
#include "ckfmt/reader.h"
#include "ckfmt/verify.h"
#include "ckfmt/writer.h"
#include "dist_test_util.h"
#include "gpu/device_test_util.h"
#include "sim_device_comm.h"

namespace {

using namespace ckfmt;
using namespace ckfmt::dist;
using namespace ckfmt_dist_test;
namespace fs = std::filesystem;
using std::chrono::milliseconds;

class Dist : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = MakeMpiCommunicator(MPI_COMM_WORLD, CommOptions{milliseconds(20000)});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    comm = std::move(*c);
    rank = comm->rank();
    world = comm->size();
    if (rank == 0) {
      std::string tmpl = ::testing::TempDir() + "ckfmt_dist_mpi_XXXXXX";
      ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
      dir = tmpl;
    }
    ASSERT_TRUE(BroadcastString(*comm, &dir, 0).ok());
  }
  void TearDown() override {
    if (comm && !comm->broken()) (void)comm->Barrier();
    if (rank == 0 && !dir.empty() && !std::getenv("CKFMT_KEEP_TEST_FILES")) fs::remove_all(dir);
  }
  std::string File(const std::string& n) const { return dir + "/" + n; }
  // Every rank's status, as rank 0 sees it (for checking that all agree).
  std::vector<std::string> Messages(const Status& s) {
    auto all = AllGatherStrings(*comm, s.ToString());
    return all.ok() ? *all : std::vector<std::string>{};
  }

  std::unique_ptr<Communicator> comm;
  int rank = 0, world = 1;
  std::string dir;
};

DistSaveOptions SmallOptions(SaveMode mode) {
  DistSaveOptions o;
  o.mode = mode;
  o.memory_budget = 512;  // many buckets; tensors above 256 bytes are sliced
  o.save.chunk_size = 128;
  o.save.fsync = false;
  return o;
}

// Zeroes every tensor so a load has to fill it.
void Zero(Value& v) {
  VisitValues(v, [](const KeyPath&, const Value& x) {
    if (x.is_tensor() && x.as_tensor().nbytes()) {
      std::memset(x.as_tensor().data(), 0, x.as_tensor().nbytes());
    }
  });
}

// Small staging for the many small loads (allocating the default staging
// for each would dominate the tests' time).
ReadOptions SmallReads() {
  ReadOptions r;
  r.io.block_size = 64 << 10;
  r.io.staging_bytes = 512 << 10;
  r.io.threads = 1;
  return r;
}

bool GridFits(LayoutKind kind, int world) {
  return kind != LayoutKind::kGrid2D || world == 1 || world % 2 == 0;
}

// ---------------------------------------------------------------------------
// Communicator.

TEST_F(Dist, CommunicatorCollectives) {
  // AllGatherV / GatherV with sizes 0, 1, 2, ... per rank.
  std::string mine(rank, char('a' + rank));
  auto all = AllGatherStrings(*comm, mine);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  for (int r = 0; r < world; ++r) EXPECT_EQ((*all)[r], std::string(r, char('a' + r)));
  auto gathered = GatherStrings(*comm, mine, world - 1);
  ASSERT_TRUE(gathered.ok());
  EXPECT_EQ(gathered->size(), rank == world - 1 ? size_t(world) : 0u);
  // Segments interleave in the root's buffer: rank r's bytes land at every
  // world-th position starting at r.
  const int n = 5;
  std::vector<uint8_t> src(n);
  for (int i = 0; i < n; ++i) src[i] = uint8_t(rank * 16 + i);
  std::vector<ConstSegment> send;
  for (int i = 0; i < n; ++i) send.push_back({&src[i], 1});
  std::vector<uint8_t> out(rank == 0 ? n * world : 0);
  std::vector<std::vector<Segment>> recv(rank == 0 ? world : 0);
  for (int r = 0; r < (rank == 0 ? world : 0); ++r) {
    for (int i = 0; i < n; ++i) recv[r].push_back({&out[i * world + r], 1});
  }
  ASSERT_TRUE(comm->GatherSegments(send, recv, 0).ok());
  if (rank == 0) {
    for (int i = 0; i < n; ++i) {
      for (int r = 0; r < world; ++r) EXPECT_EQ(out[i * world + r], uint8_t(r * 16 + i));
    }
  }
  int64_t v[3] = {rank, rank + 1, 1 << rank};
  ASSERT_TRUE(comm->AllReduce(v, 1, ReduceOp::kMax).ok());
  EXPECT_EQ(v[0], world - 1);
  ASSERT_TRUE(comm->AllReduce(v + 1, 1, ReduceOp::kSum).ok());
  EXPECT_EQ(v[1], int64_t(world) * (world + 1) / 2);
  ASSERT_TRUE(comm->AllReduce(v + 2, 1, ReduceOp::kBitOr).ok());
  EXPECT_EQ(v[2], (int64_t{1} << world) - 1);
  // A ring of point-to-point messages.
  int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  uint64_t token = 1000 + rank, got = 0;
  if (world > 1) {
    if (rank % 2 == 0) {
      ASSERT_TRUE(comm->Send(&token, 8, next, 7).ok());
      ASSERT_TRUE(comm->Recv(&got, 8, prev, 7).ok());
    } else {
      ASSERT_TRUE(comm->Recv(&got, 8, prev, 7).ok());
      ASSERT_TRUE(comm->Send(&token, 8, next, 7).ok());
    }
    EXPECT_EQ(got, 1000u + prev);
  }
  // Agreement: the last rank fails, everyone hears about it.
  Status agreed = comm->AgreeOnStatus(
      rank == world - 1 ? Status::IOError("disk on fire") : Status::OK(), "test step");
  EXPECT_EQ(agreed.code(), StatusCode::kIOError);
  EXPECT_NE(agreed.message().find("rank " + std::to_string(world - 1) + ": disk on fire"),
            std::string::npos)
      << agreed.message();
  EXPECT_FALSE(comm->broken());
}

TEST_F(Dist, AgreementNamesTheRankThatDidNotArrive) {
  if (world < 2) GTEST_SKIP() << "needs a peer";
  comm->set_timeout(milliseconds(500));
  const int late = world - 1;
  auto t0 = std::chrono::steady_clock::now();
  if (rank == late) std::this_thread::sleep_for(milliseconds(1500));
  Status s = comm->AgreeOnStatus(Status::OK(), "late test");
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_LT(secs, 5.0);
  if (rank != late) {
    EXPECT_NE(s.message().find("rank " + std::to_string(late) + ": did not arrive"),
              std::string::npos)
        << s.message();
  }
  EXPECT_TRUE(comm->broken());
  // Nothing more goes through a broken communicator, and nothing waits.
  EXPECT_EQ(comm->Barrier().code(), StatusCode::kAborted);
  // Let the late rank's outstanding messages drain before the next test.
  MPI_Barrier(MPI_COMM_WORLD);
}

// ---------------------------------------------------------------------------
// Save in every mode and layout; load into every layout and world size.

class DistRoundTrip : public Dist,
                      public ::testing::WithParamInterface<std::tuple<SaveMode, LayoutKind>> {};

TEST_P(DistRoundTrip, SavesVerifiesAndReshards) {
  auto [mode, kind] = GetParam();
  if (!GridFits(kind, world)) GTEST_SKIP() << "2-D grid needs an even world size";
  Value full = MakeFullState(11);
  auto local = ShardStateDict(full, MakeLayout(kind, full, world, rank));
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  if (rank == 0) {
    SaveOptions so;
    so.fsync = false;
    ASSERT_TRUE(Save(File("ref"), full, so).ok());  // the single-process reference
  }
  auto stats = DistSave(*comm, File("ck"), *local, SmallOptions(mode));
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  if (getenv("TIMING")) fprintf(stderr, "rank %d save %.3f s buckets %lu\n", rank, stats->seconds, (unsigned long)stats->buckets);
  ASSERT_TRUE(comm->Barrier().ok());

  auto reader = CheckpointReader::Open(File("ck"), SmallReads());
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto ref = CheckpointReader::Open(File("ref"), SmallReads());
  ASSERT_TRUE(ref.ok());
  const IndexRecord& index = (*reader)->index();
  EXPECT_EQ(index.world_size, uint32_t(world));
  EXPECT_EQ(index.save_mode, std::string(SaveModeName(mode)));
  EXPECT_TRUE(std::filesystem::exists(File("ck")));
  if (rank == 0) {
    auto v = VerifyFile(File("ck"));
    ASSERT_TRUE(v.ok());
    EXPECT_TRUE(v->ok()) << v->problems[0].where << ": " << v->problems[0].message;
    EXPECT_EQ(ListDir(dir), (std::vector<std::string>{"ck", "ref"}));
    // Same entries, same order, same whole-tensor bytes as the reference.
    ASSERT_EQ(index.entries.size(), (*ref)->index().entries.size());
    for (size_t i = 0; i < index.entries.size(); ++i) {
      const EntryRecord& e = index.entries[i];
      EXPECT_EQ(FormatKeyPath(e.path), FormatKeyPath((*ref)->index().entries[i].path));
      if (e.kind != EntryKind::kTensor) continue;
      auto a = (*reader)->ReadTensor(e.path);
      auto b = (*ref)->ReadTensor(e.path);
      ASSERT_TRUE(a.ok() && b.ok()) << FormatKeyPath(e.path);
      ASSERT_EQ(a->nbytes(), b->nbytes());
      if (a->nbytes()) {
        EXPECT_EQ(0, std::memcmp(a->data(), b->data(), a->nbytes())) << FormatKeyPath(e.path);
      }
      for (const PieceRecord& p : e.pieces) {
        if (mode == SaveMode::kFlattened) {
          EXPECT_EQ(p.rank, 0u);
        }
        EXPECT_LT(p.rank, uint32_t(world));
      }
    }
    // Flattened: each rank's original region is in saved_layout.
    const EntryRecord* head = (*reader)->Find(
        {std::string("model"), std::string("head.weight")});
    ASSERT_NE(head, nullptr);
    if (mode == SaveMode::kFlattened && world > 1) {
      EXPECT_EQ(head->saved_layout.size(), size_t(world));
    }
  }
  // Resharding: every layout, world sizes 1, 2, 3, 5; this run's ranks play
  // the target ranks round-robin. The target holds only the model; the
  // optimizer state comes back as this rank's shards.
  for (int m : {1, 2, 3, 5}) {
    for (LayoutKind target_kind : {LayoutKind::kFsdp1, LayoutKind::kFsdp2, LayoutKind::kGrid2D}) {
      for (int v = rank; v < m; v += world) {
        SCOPED_TRACE(std::string("target ") + LayoutName(target_kind) + " world " +
                     std::to_string(m) + " rank " + std::to_string(v));
        LayoutFn layout = MakeLayout(target_kind, full, m, v);
        for (CheckpointReader* r : {reader->get(), ref->get()}) {
          auto target = ShardStateDict(ModelOnly(full), layout);
          ASSERT_TRUE(target.ok());
          Zero(*target);
          ShardedLoadOptions o;
          o.layout = layout;
          auto report = LoadSharded(*r, &*target, o);
          ASSERT_TRUE(report.ok()) << report.status().ToString();
          EXPECT_TRUE(MatchesFull(*target, full, true)) << r->path();
          EXPECT_FALSE(report->reconstructed.empty());
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, DistRoundTrip,
    ::testing::Combine(::testing::Values(SaveMode::kFlattened, SaveMode::kParallel),
                       ::testing::Values(LayoutKind::kFsdp1, LayoutKind::kFsdp2,
                                         LayoutKind::kGrid2D)),
    [](const auto& info) {
      return std::string(SaveModeName(std::get<0>(info.param))) + "_" +
             LayoutName(std::get<1>(info.param));
    });

TEST_F(Dist, DuplicatedShardsAreWrittenOnce) {
  // HSDP: ranks 2k and 2k+1 hold the same shard of a world/2 FSDP2 layout.
  if (world % 2 != 0) GTEST_SKIP() << "needs an even world size";
  Value full = MakeFullState(12);
  auto local = ShardStateDict(full, MakeLayout(LayoutKind::kFsdp2, full, world / 2, rank / 2));
  ASSERT_TRUE(local.ok());
  for (SaveMode mode : {SaveMode::kFlattened, SaveMode::kParallel}) {
    std::string path = File(std::string("hsdp_") + std::string(SaveModeName(mode)));
    auto s = DistSave(*comm, path, *local, SmallOptions(mode));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE(comm->Barrier().ok());
    if (rank == 0) {
      auto v = VerifyFile(path);
      ASSERT_TRUE(v.ok() && v->ok());
    }
    Value loaded{Dict{}};
    ASSERT_TRUE(Load(path, &loaded).ok());
    EXPECT_TRUE(MatchesFull(loaded, full, true));
  }
}

// A parallel save cuts uncompressed chunks as a single-process save does
// (FORMAT.md §5.2): none crosses a multiple of the chunk size in the file,
// although each rank's range starts where the one before it ended.
TEST_F(Dist, ParallelSaveChunksDoNotCrossMultiplesOfTheChunkSize) {
  constexpr uint64_t kGrid = 8192;
  auto tensor = [](DType dtype, Shape shape, uint8_t seed) {
    Tensor t = Tensor::Zeros(dtype, std::move(shape));
    auto* p = static_cast<uint8_t*>(t.data());
    for (uint64_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(i * 131 + seed);
    return t;
  };
  Dict model;
  model.Set("a", Value(tensor(DType::kF32, {3001, 3}, 1)));
  model.Set("b", Value(tensor(DType::kBF16, {7777, 2}, 2)));
  model.Set("c", Value(tensor(DType::kF64, {1500}, 3)));
  Dict root;
  root.Set("model", Value(std::move(model)));
  const Value full(std::move(root));
  auto local = ShardStateDict(full, MakeLayout(LayoutKind::kFsdp2, full, world, rank));
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  DistSaveOptions o;
  o.mode = SaveMode::kParallel;
  o.save.chunk_size = kGrid;
  o.save.fsync = false;
  auto saved = DistSave(*comm, File("grid"), *local, o);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  ASSERT_TRUE(comm->Barrier().ok());
  if (rank != 0) return;
  auto v = VerifyFile(File("grid"));
  ASSERT_TRUE(v.ok() && v->ok());
  Value loaded{Dict{}};
  ASSERT_TRUE(Load(File("grid"), &loaded).ok());
  EXPECT_TRUE(MatchesFull(loaded, full, true));
  auto reader = CheckpointReader::Open(File("grid"));
  ASSERT_TRUE(reader.ok());
  size_t cut = 0;
  for (const EntryRecord& e : (*reader)->index().entries) {
    for (const PieceRecord& p : e.pieces) {
      const uint64_t bytes = p.region.NumElements() * DTypeSize(e.dtype);
      for (size_t k = 0; k < p.chunks.size(); ++k) {
        const ChunkRecord& c = p.chunks[k];
        EXPECT_EQ(c.offset / kGrid, (c.offset + c.stored_size - 1) / kGrid)
            << FormatKeyPath(e.path) << " rank " << p.rank << " chunk " << k;
        if (k == 0 && c.raw_size < std::min(bytes, kGrid)) ++cut;
      }
    }
  }
  EXPECT_GT(cut, 0u) << "pieces starting between multiples get a shorter first chunk";
}

TEST_F(Dist, DistLoadEachRankItsOwnLayout) {
  Value full = MakeFullState(13);
  if (rank == 0) {
    ASSERT_TRUE(Save(File("ref"), full).ok());
  }
  ASSERT_TRUE(comm->Barrier().ok());
  LayoutFn layout = MakeLayout(LayoutKind::kFsdp1, full, world, rank);
  Value target{Dict{}};
  ShardedLoadOptions o;
  o.layout = layout;
  auto report = DistLoad(*comm, File("ref"), &target, o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(MatchesFull(target, full, true));
  // One rank's dict disagrees: every rank fails, naming it.
  Value bad{Dict{}};
  if (rank == world - 1) bad.as_dict().Set("step", Value(1.5));
  auto failed = DistLoad(*comm, File("ref"), &bad, o);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kMismatch);
  EXPECT_NE(failed.status().message().find("rank " + std::to_string(world - 1) + ":"),
            std::string::npos)
      << failed.status().message();
}

// ---------------------------------------------------------------------------
// Replicated entries and disagreements.

TEST_F(Dist, ReplicatedEntriesMustAgree) {
  Value full = MakeFullState(14);
  auto local = ShardStateDict(full, MakeLayout(LayoutKind::kFsdp2, full, world, rank));
  ASSERT_TRUE(local.ok());
  // Contents differ on the last rank: fine by metadata, refused by checksum.
  if (rank == world - 1 && world > 1) {
    Tensor t = Tensor::Zeros(DType::kF32, {});
    local->as_dict().Find("model")->as_dict().Set("scale", t);
  }
  DistSaveOptions o = SmallOptions(SaveMode::kFlattened);
  o.replica_check = ReplicaCheck::kChecksum;
  auto s = DistSave(*comm, File("a"), *local, o);
  if (world > 1) {
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("model/scale: replicated contents differ between rank 0 "
                                        "and rank " + std::to_string(world - 1)),
              std::string::npos)
        << s.status().message();
  }
  o.replica_check = ReplicaCheck::kMetadata;
  ASSERT_TRUE(DistSave(*comm, File("b"), *local, o).ok());
  // A dtype that differs is refused whatever the check.
  if (rank == world - 1 && world > 1) {
    Tensor t = Tensor::Zeros(DType::kF64, {});
    local->as_dict().Find("model")->as_dict().Set("scale", t);
  }
  s = DistSave(*comm, File("c"), *local, o);
  if (world > 1) {
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("rank 0 has tensor float32[], rank " +
                                        std::to_string(world - 1) + " has tensor float64[]"),
              std::string::npos)
        << s.status().message();
  }
  ASSERT_TRUE(comm->Barrier().ok());
  if (rank == 0) {
    std::vector<std::string> want = {"b"};
    if (world == 1) want = {"a", "b", "c"};
    EXPECT_EQ(ListDir(dir), want);
  }
}

// ---------------------------------------------------------------------------
// Failures without timeouts: a rank reports an error mid-save.

TEST_F(Dist, ErrorOnOneRankLeavesThePreviousCheckpoint) {
  Value before = MakeFullState(15), after = MakeFullState(16);
  if (rank == 0) {
    ASSERT_TRUE(Save(File("ck"), before).ok());
  }
  const int bad = world - 1;
  for (SaveMode mode : {SaveMode::kFlattened, SaveMode::kParallel}) {
    auto local = ShardStateDict(after, MakeLayout(LayoutKind::kFsdp1, after, world, rank));
    ASSERT_TRUE(local.ok());
    DistSaveOptions o = SmallOptions(mode);
    const char* where = mode == SaveMode::kFlattened ? "bucket" : "data";
    o.fault_hook = [&](const std::string& point, uint64_t index) {
      if (rank == bad && point == where && index == (mode == SaveMode::kFlattened ? 3u : 0u)) {
        return Status::IOError("injected failure");
      }
      return Status::OK();
    };
    auto s = DistSave(*comm, File("ck"), *local, o);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kIOError);
    EXPECT_NE(s.status().message().find("rank " + std::to_string(bad) + ": at " + where),
              std::string::npos)
        << s.status().message();
    EXPECT_FALSE(comm->broken());
    ASSERT_TRUE(comm->Barrier().ok());
    if (rank == 0) {
      EXPECT_EQ(ListDir(dir), std::vector<std::string>{"ck"});  // no temporary file left
      Value loaded{Dict{}};
      ASSERT_TRUE(Load(File("ck"), &loaded).ok());
      EXPECT_TRUE(MatchesFull(loaded, before, true));
    }
  }
}

TEST_F(Dist, StaleTemporaryFilesDoNotDisturbASave) {
  // Modified just now, so another writer's as far as a save can tell: kept
  // (ckfmt/commit.h, PrepareTemporary; dist_fault_resave_* has them old).
  if (rank == 0) {
    std::ofstream(File("ck.tmp.0000000000000000")) << "stale";
    std::ofstream(File("ck.tmp.ffffffffffffffff")) << "stale";
  }
  Value full = MakeFullState(17);
  auto local = ShardStateDict(full, MakeLayout(LayoutKind::kFsdp2, full, world, rank));
  ASSERT_TRUE(local.ok());
  for (SaveMode mode : {SaveMode::kFlattened, SaveMode::kParallel}) {
    auto s = DistSave(*comm, File("ck"), *local, SmallOptions(mode));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE(comm->Barrier().ok());
    if (rank == 0) {
      EXPECT_EQ(ListDir(dir), (std::vector<std::string>{"ck", "ck.tmp.0000000000000000",
                                                        "ck.tmp.ffffffffffffffff"}));
    }
    Value loaded{Dict{}};
    ASSERT_TRUE(Load(File("ck"), &loaded).ok());
    EXPECT_TRUE(MatchesFull(loaded, full, true));
  }
}

// ---------------------------------------------------------------------------
// GPU tensors (simulated device): shards gathered over the device
// communicator, host entries over MPI.

class DistDevice : public Dist {
 protected:
  void SetUp() override {
    Dist::SetUp();
    SetDeviceOps(&ops);
  }
  void TearDown() override {
    SetDeviceOps(nullptr);
    EXPECT_EQ(ops.pinned_ranges(), 0u);
    EXPECT_EQ(ops.violations(), "");
    Dist::TearDown();
  }
  static bool IsCounter(const Tensor& t) { return t.shape().empty(); }
  SimulatedDeviceOps ops;  // outlives the tensors of each test body
};

TEST_F(DistDevice, FlattenedSaveGathersGpuShards) {
  for (LayoutKind kind : {LayoutKind::kFsdp1, LayoutKind::kFsdp2, LayoutKind::kGrid2D}) {
    if (!GridFits(kind, world)) continue;
    SCOPED_TRACE(LayoutName(kind));
    Value full = MakeFullState(21);
    auto host = ShardStateDict(full, MakeLayout(kind, full, world, rank));
    ASSERT_TRUE(host.ok());
    Value local = ckfmt_test::ToDevice(ops, *host, 0, IsCounter);
    SimulatedDeviceComm device_comm(*comm, ops, 0);
    DistSaveOptions o = SmallOptions(SaveMode::kFlattened);
    o.device_comm = &device_comm;
    auto s = DistSave(*comm, File(LayoutName(kind)), local, o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->local_raw_bytes > 0, device_comm.gathered_bytes() > 0);
    ASSERT_TRUE(comm->Barrier().ok());
    Value loaded{Dict{}};
    ASSERT_TRUE(Load(File(LayoutName(kind)), &loaded).ok());
    EXPECT_TRUE(MatchesFull(loaded, full, true));
  }
}

TEST_F(DistDevice, ShardsSplitBetweenGpuAndHostAreRefused) {
  if (world < 2) GTEST_SKIP() << "needs two ranks";
  Value full = MakeFullState(22);
  auto host = ShardStateDict(full, MakeLayout(LayoutKind::kFsdp2, full, world, rank));
  ASSERT_TRUE(host.ok());
  // The last rank keeps its shards on the host.
  Value local = rank == world - 1 ? *host : ckfmt_test::ToDevice(ops, *host, 0, IsCounter);
  SimulatedDeviceComm device_comm(*comm, ops, 0);
  DistSaveOptions o = SmallOptions(SaveMode::kFlattened);
  o.device_comm = &device_comm;
  auto s = DistSave(*comm, File("ck"), local, o);
  ASSERT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("model/embed.weight: rank 0 holds its shard on a GPU, rank " +
                                      std::to_string(world - 1) + " on the host"),
            std::string::npos)
      << s.status().message();
  ASSERT_TRUE(comm->Barrier().ok());
  if (rank == 0) {
    EXPECT_TRUE(ListDir(dir).empty());
  }
}

// Without a device communicator, the flattened mode sends GPU shards over
// the host communicator: each rank copies what it sends to pinned host
// memory, a bucket at a time. Shards may then sit on any GPU or on the
// host: here odd ranks use cuda:1 and the last rank keeps its on the host.
TEST_F(DistDevice, FlattenedSaveWithoutADeviceCommunicatorSendsGpuShardsThroughHostMemory) {
  for (LayoutKind kind : {LayoutKind::kFsdp1, LayoutKind::kFsdp2, LayoutKind::kGrid2D}) {
    if (!GridFits(kind, world)) continue;
    SCOPED_TRACE(LayoutName(kind));
    Value full = MakeFullState(26);
    auto host = ShardStateDict(full, MakeLayout(kind, full, world, rank));
    ASSERT_TRUE(host.ok());
    const bool on_host = world > 1 && rank == world - 1;
    Value local = on_host ? *host : ckfmt_test::ToDevice(ops, *host, rank % 2, IsCounter);
    DistSaveOptions o = SmallOptions(SaveMode::kFlattened);
    auto s = DistSave(*comm, File(LayoutName(kind)), local, o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->device_gather_bytes, 0u);
    EXPECT_EQ(s->gpu_send_staging_bytes > 0, !on_host);
    EXPECT_LE(s->gpu_send_staging_bytes, o.memory_budget / 2);
    ASSERT_TRUE(comm->Barrier().ok());
    Value loaded{Dict{}};
    ASSERT_TRUE(Load(File(LayoutName(kind)), &loaded).ok());
    EXPECT_TRUE(MatchesFull(loaded, full, true));
    ASSERT_TRUE(comm->Barrier().ok());
  }
}

// The parallel mode writes each rank's GPU shards from its own device, with
// no device communicator, and a tensor's shards may be split between GPUs
// and the host: here the last rank keeps its shards on the host.
TEST_F(DistDevice, ParallelSaveWritesGpuShardsFromEveryRank) {
  for (Codec codec : {Codec::kNone, Codec::kBytePlaneZstd}) {
    for (LayoutKind kind : {LayoutKind::kFsdp1, LayoutKind::kFsdp2, LayoutKind::kGrid2D}) {
      if (!GridFits(kind, world)) continue;
      SCOPED_TRACE(std::string(LayoutName(kind)) + " " + std::string(CodecName(uint8_t(codec))));
      Value full = MakeFullState(25);
      auto host = ShardStateDict(full, MakeLayout(kind, full, world, rank));
      ASSERT_TRUE(host.ok());
      const bool on_host = world > 1 && rank == world - 1;
      Value local = on_host ? *host : ckfmt_test::ToDevice(ops, *host, 0, IsCounter);
      DistSaveOptions o = SmallOptions(SaveMode::kParallel);
      o.save.codec = codec;
      const std::string path = File(LayoutName(kind));
      auto s = DistSave(*comm, path, local, o);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      ASSERT_TRUE(comm->Barrier().ok());
      Value loaded{Dict{}};
      ASSERT_TRUE(Load(path, &loaded).ok());
      EXPECT_TRUE(MatchesFull(loaded, full, true));
      ASSERT_TRUE(comm->Barrier().ok());
    }
  }
}

TEST_F(DistDevice, ADeviceCommunicatorOnSomeRanksOnlyIsRefused) {
  if (world < 2) GTEST_SKIP() << "needs two ranks";
  Value full = MakeFullState(23);
  auto local = ShardStateDict(full, MakeLayout(LayoutKind::kFsdp2, full, world, rank));
  ASSERT_TRUE(local.ok());
  SimulatedDeviceComm device_comm(*comm, ops, 0);
  DistSaveOptions o = SmallOptions(SaveMode::kFlattened);
  if (rank == 0) o.device_comm = &device_comm;
  auto s = DistSave(*comm, File("ck"), *local, o);
  ASSERT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("is given on 1 of " + std::to_string(world) + " ranks"),
            std::string::npos)
      << s.status().message();
  EXPECT_EQ(Messages(s.status()).size(), size_t(world));
}

TEST_F(DistDevice, ADeviceCommunicatorOverOtherRanksIsRefused) {
  if (world < 2) GTEST_SKIP() << "needs two ranks";
  Value full = MakeFullState(24);
  auto local = ShardStateDict(full, MakeLayout(LayoutKind::kFsdp2, full, world, rank));
  ASSERT_TRUE(local.ok());
  SingleCommunicator alone;  // every rank its own world of one
  SimulatedDeviceComm device_comm(alone, ops, 0);
  DistSaveOptions o = SmallOptions(SaveMode::kFlattened);
  o.device_comm = &device_comm;
  auto s = DistSave(*comm, File("ck"), *local, o);
  ASSERT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("is rank 0 of 1, the host communicator rank " +
                                      std::to_string(world - 1) + " of " + std::to_string(world) +
                                      ": they must match"),
            std::string::npos)
      << s.status().message();
  ASSERT_TRUE(comm->Barrier().ok());
  if (rank == 0) {
    EXPECT_TRUE(ListDir(dir).empty());
  }
}

}  // namespace
