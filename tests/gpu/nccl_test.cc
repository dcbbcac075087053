// The NCCL communicator on one GPU, as one rank: creation through a host
// bootstrap, every collective on device buffers, the host-value operations
// (AllReduce, AgreeOnStatus), and the flattened DistSave of GPU tensors
// through it (beside the parallel one, which needs no device
// communicator). NCCL refuses two ranks on one GPU, so gathers between
// ranks need a machine with several GPUs (tests/dist runs them across MPI
// ranks on the simulated device); with one rank these check the backend's
// own work (packing, scatter, polling, host staging) and the save's use of
// it. Skips, saying why, without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <numeric>
#include <vector>

#include "ckfmt/cuda.h"
#include "ckfmt/dist/dist_load.h"
#include "ckfmt/dist/dist_save.h"
#include "ckfmt/dist/nccl_communicator.h"
#include "ckfmt/dist/sharded_state.h"
#include "ckfmt/reader.h"
#include "ckfmt/verify.h"
#include "dist_test_util.h"
#include "gpu/device_test_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt::dist;

using ckfmt_test::NoGpuReason;

// Device memory holding `bytes`, freed at scope end.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) : size(bytes) {
    EXPECT_EQ(cudaMalloc(&data, bytes), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(data); }
  void Upload(const std::vector<uint8_t>& v) {
    ASSERT_EQ(cudaMemcpy(data, v.data(), v.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<uint8_t> Download() const {
    std::vector<uint8_t> v(size);
    EXPECT_EQ(cudaMemcpy(v.data(), data, size, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  uint8_t* at(size_t off) { return static_cast<uint8_t*>(data) + off; }
  void* data = nullptr;
  size_t size;
};

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(seed + i * 7 + (i >> 9));
  return v;
}

class NcclOneRankTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = NoGpuReason();
    if (!why.empty()) GTEST_SKIP() << "needs a CUDA GPU: " << why;
    auto comm = MakeNcclCommunicator(bootstrap_, 0);
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    comm_ = std::move(*comm);
  }
  SingleCommunicator bootstrap_;
  std::unique_ptr<Communicator> comm_;
};

TEST_F(NcclOneRankTest, DescribesItself) {
  EXPECT_EQ(comm_->name(), "nccl");
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->size(), 1);
  EXPECT_EQ(comm_->memory(), MemorySpace::kDevice);
}

TEST_F(NcclOneRankTest, CollectivesCopyDeviceBytes) {
  const size_t n = (3 << 20) + 5;
  auto src = Pattern(n, 1);
  DeviceBuffer send(n), recv(n);
  send.Upload(src);

  ASSERT_TRUE(comm_->Broadcast(send.data, n, 0).ok());
  EXPECT_EQ(send.Download(), src);
  ASSERT_TRUE(comm_->AllGather(send.data, n, recv.data).ok());
  EXPECT_EQ(recv.Download(), src);
  recv.Upload(std::vector<uint8_t>(n, 0));
  ASSERT_TRUE(comm_->AllGatherV(send.data, n, recv.data, {n}).ok());
  EXPECT_EQ(recv.Download(), src);
  recv.Upload(std::vector<uint8_t>(n, 0));
  ASSERT_TRUE(comm_->GatherV(send.data, n, recv.data, {n}, 0).ok());
  EXPECT_EQ(recv.Download(), src);
  ASSERT_TRUE(comm_->Barrier().ok());
}

TEST_F(NcclOneRankTest, GatherSegmentsScattersTheStreamInOrder) {
  // Three send runs (out of order in memory) into two receive runs.
  auto src = Pattern(10000, 3);
  DeviceBuffer send(10000), recv(9000);
  send.Upload(src);
  std::vector<ConstSegment> runs = {
      {send.at(6000), 4000}, {send.at(0), 1000}, {send.at(2000), 4000}};
  std::vector<std::vector<Segment>> into = {{{recv.at(5000), 4000}, {recv.at(0), 5000}}};
  ASSERT_TRUE(comm_->GatherSegments(runs, into, 0).ok());

  std::vector<uint8_t> stream;
  for (auto [off, len] : {std::pair{6000, 4000}, {0, 1000}, {2000, 4000}}) {
    stream.insert(stream.end(), src.begin() + off, src.begin() + off + len);
  }
  std::vector<uint8_t> want(9000);
  std::memcpy(want.data() + 5000, stream.data(), 4000);
  std::memcpy(want.data(), stream.data() + 4000, 5000);
  EXPECT_EQ(recv.Download(), want);
}

TEST_F(NcclOneRankTest, GatherSegmentsIntoPinnedHostMemory) {
  // The flattened save's destination: pinned host buffers bound for the
  // staging ring. One rank copies through device scratch into them.
  auto src = Pattern(1 << 20, 9);
  DeviceBuffer send(src.size());
  send.Upload(src);
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, src.size(), cudaHostAllocDefault), cudaSuccess);
  std::vector<std::vector<Segment>> into = {{{pinned, src.size()}}};
  ASSERT_TRUE(comm_->GatherSegments({{send.data, src.size()}}, into, 0).ok());
  EXPECT_EQ(std::memcmp(pinned, src.data(), src.size()), 0);
  cudaFreeHost(pinned);
}

TEST_F(NcclOneRankTest, HostValueOperations) {
  int64_t v[3] = {5, -2, 0x0f};
  ASSERT_TRUE(comm_->AllReduce(v, 3, ReduceOp::kSum).ok());
  EXPECT_EQ(v[0], 5);
  EXPECT_EQ(v[1], -2);
  ASSERT_TRUE(comm_->AllReduce(v, 3, ReduceOp::kBitAnd).ok());
  EXPECT_EQ(v[2], 0x0f);

  EXPECT_TRUE(comm_->AgreeOnStatus(Status::OK(), "a step").ok());
  Status s = comm_->AgreeOnStatus(Status::IOError("disk gone"), "writing");
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  EXPECT_NE(s.message().find("disk gone"), std::string::npos) << s.ToString();
  EXPECT_FALSE(comm_->broken());  // a reported failure is not a broken transport
}

TEST_F(NcclOneRankTest, RefusesMismatchedCounts) {
  DeviceBuffer b(16);
  EXPECT_EQ(comm_->AllGatherV(b.data, 16, b.data, {8}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->GatherV(b.data, 16, b.data, {16, 16}, 0).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(comm_->broken());
}

// `v` with every tensor of more than one element copied to cuda:0.
Value ToGpu(const Value& v) {
  return ckfmt_test::MapTensors(v, [](const Tensor& t) {
    if (t.shape().empty()) return t;  // counters stay on the host
    Tensor g = CudaAllocator(0)(t.dtype(), t.shape(), {}, {}).value();
    EXPECT_EQ(cudaMemcpy(g.data(), t.data(), t.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
    if (t.shard()) g.SetShard(*t.shard());
    return g;
  });
}

TEST_F(NcclOneRankTest, FlattenedDistSaveOfGpuShards) {
  using namespace ckfmt_dist_test;
  std::string dir = ::testing::TempDir() + "ckfmt_nccl_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  for (LayoutKind kind : {LayoutKind::kFsdp1, LayoutKind::kFsdp2}) {
    SCOPED_TRACE(LayoutName(kind));
    Value full = MakeFullState(31);
    auto host = ShardStateDict(full, MakeLayout(kind, full, 1, 0));
    ASSERT_TRUE(host.ok());
    Value local = ToGpu(*host);
    DistSaveOptions o;
    o.memory_budget = 4096;  // many buckets, large tensors sliced
    o.save.chunk_size = 1024;
    o.save.fsync = false;
    o.device_comm = comm_.get();
    const std::string path = dir + "/" + LayoutName(kind);
    auto stats = DistSave(bootstrap_, path, local, o);
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_GT(stats->buckets, 5u);
    EXPECT_GT(stats->device_gather_bytes, 0u);
    EXPECT_TRUE(FileHoldsFull(path, full));
    std::remove(path.c_str());
  }
  ::rmdir(dir.c_str());
}

// The parallel mode writes GPU shards from the rank's own device and uses
// no device communicator; it sits here beside the flattened one.
TEST_F(NcclOneRankTest, ParallelDistSaveOfGpuShards) {
  using namespace ckfmt_dist_test;
  std::string dir = ::testing::TempDir() + "ckfmt_nccl_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  for (Codec codec : {Codec::kNone, Codec::kBytePlaneZstd}) {
    SCOPED_TRACE(std::string(CodecName(uint8_t(codec))));
    Value full = MakeFullState(32);
    auto host = ShardStateDict(full, MakeLayout(LayoutKind::kFsdp2, full, 1, 0));
    ASSERT_TRUE(host.ok());
    Value local = ToGpu(*host);
    DistSaveOptions o;
    o.mode = SaveMode::kParallel;
    o.save.chunk_size = 1024;
    o.save.codec = codec;
    o.save.fsync = false;
    const std::string path = dir + "/ck";
    auto stats = DistSave(bootstrap_, path, local, o);
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_TRUE(FileHoldsFull(path, full));
    std::remove(path.c_str());
  }
  ::rmdir(dir.c_str());
}

// `v` with every CUDA tensor copied back to the host.
Value FromGpu(const Value& v) {
  return ckfmt_test::MapTensors(v, [](const Tensor& t) {
    if (t.device().type == DeviceType::kCPU) return t;
    Tensor h = Tensor::Empty(t.dtype(), t.shape());
    EXPECT_EQ(cudaMemcpy(h.data(), t.data(), t.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    if (t.shard()) h.SetShard(*t.shard());
    return h;
  });
}

// The resharding load on a real GPU: each of three FSDP2 ranks holds its
// model shards on cuda:0 and no optimizer state; the model shards are
// filled in place and the optimizer shards are created on the GPU by
// CudaAllocator. Needs no communicator, so it runs on one GPU.
TEST(GpuReshardTest, ReshardingLoadReconstructsShardsOnTheGpu) {
  using namespace ckfmt_dist_test;
  std::string why = NoGpuReason();
  if (!why.empty()) GTEST_SKIP() << "needs a CUDA GPU: " << why;
  std::string dir = ::testing::TempDir() + "ckfmt_nccl_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string path = dir + "/ck";
  Value full = MakeFullState(33);
  SingleCommunicator comm;
  DistSaveOptions o;
  o.save.chunk_size = 1024;
  o.save.fsync = false;
  ASSERT_TRUE(DistSave(comm, path, full, o).ok());
  auto reader = CheckpointReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    LayoutFn layout = MakeLayout(LayoutKind::kFsdp2, full, 3, rank);
    auto model = ShardStateDict(ModelOnly(full), layout);
    ASSERT_TRUE(model.ok());
    Value local = ToGpu(*model);
    ShardedLoadOptions lo;
    lo.layout = layout;
    lo.load.reconstruct_device = Device{DeviceType::kCUDA, 0};
    auto report = LoadSharded(**reader, &local, lo);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_FALSE(report->reconstructed.empty());
    size_t host_arrays = 0;
    VisitValues(local, [&](const KeyPath&, const Value& v) {
      if (v.is_tensor() && !v.as_tensor().shape().empty() &&
          v.as_tensor().device().type == DeviceType::kCPU) {
        ++host_arrays;
      }
    });
    EXPECT_EQ(host_arrays, 0u);
    EXPECT_TRUE(MatchesFull(FromGpu(local), full, true));
  }
  std::remove(path.c_str());
  ::rmdir(dir.c_str());
}

TEST(NcclSetupTest, RefusesADeviceBootstrap) {
  std::string why = NoGpuReason();
  if (!why.empty()) GTEST_SKIP() << "needs a CUDA GPU: " << why;
  SingleCommunicator host;
  auto nccl = MakeNcclCommunicator(host, 0);
  ASSERT_TRUE(nccl.ok()) << nccl.status().ToString();
  auto nested = MakeNcclCommunicator(**nccl, 0);
  EXPECT_EQ(nested.status().code(), StatusCode::kInvalidArgument);
}

TEST(NcclSetupTest, ABadDeviceFailsClearly) {
  std::string why = NoGpuReason();
  if (!why.empty()) GTEST_SKIP() << "needs a CUDA GPU: " << why;
  SingleCommunicator host;
  auto nccl = MakeNcclCommunicator(host, 1000);
  ASSERT_FALSE(nccl.ok());
  EXPECT_NE(nccl.status().message().find("cudaSetDevice(1000)"), std::string::npos)
      << nccl.status().ToString();
}

}  // namespace
