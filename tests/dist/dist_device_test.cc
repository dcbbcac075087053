// The distributed save of GPU tensors (DistSaveOptions::device_comm) in
// one process, on the simulated device: GPU entries gathered over the
// device communicator into device buffers on rank 0 and written through
// the writer's device path, host entries beside them, and the refusals.
// tests/dist/dist_mpi_test.cc runs the same across ranks; tests/gpu/
// nccl_test.cc on a real GPU with NCCL.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "ckfmt/dist/dist_load.h"
#include "ckfmt/dist/dist_save.h"
#include "ckfmt/dist/sharded_state.h"
#include "ckfmt/reader.h"
#include "ckfmt/verify.h"
#include "dist_test_util.h"
#include "gpu/device_test_util.h"
#include "sim_device_comm.h"
#include "util/fault_sweep.h"
#include "util/file_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt::dist;
using namespace ckfmt_dist_test;
namespace fs = std::filesystem;

// Step counters (0-d tensors) stay on the host, as torch keeps them.
bool IsCounter(const Tensor& t) { return t.shape().empty(); }

class DistDeviceSave : public ckfmt_test::SimulatedDeviceTest {
 protected:
  void SetUp() override {
    SimulatedDeviceTest::SetUp();
    std::string tmpl = ::testing::TempDir() + "ckfmt_dist_device_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    fs::remove_all(dir_);
    SimulatedDeviceTest::TearDown();
  }
  std::string File(const std::string& n) const { return dir_ + "/" + n; }

  static DistSaveOptions Small(Communicator* device_comm) {
    DistSaveOptions o;
    o.memory_budget = 512;  // many buckets; tensors above 256 bytes are sliced
    o.save.chunk_size = 128;
    o.save.fsync = false;
    o.device_comm = device_comm;
    return o;
  }

  std::string dir_;
};

TEST_F(DistDeviceSave, GpuAndHostEntriesRoundTripBitwise) {
  for (LayoutKind kind : {LayoutKind::kFsdp1, LayoutKind::kFsdp2}) {
    SCOPED_TRACE(LayoutName(kind));
    Value full = MakeFullState(3);
    auto host = ShardStateDict(full, MakeLayout(kind, full, 1, 0));
    ASSERT_TRUE(host.ok()) << host.status().ToString();
    Value local = ckfmt_test::ToDevice(ops(), *host, 1, IsCounter);
    ASSERT_GT(ckfmt_test::CountDeviceTensors(local), 10u);

    SingleCommunicator comm;
    SimulatedDeviceComm device_comm(comm, ops(), 1);
    const std::string path = File(LayoutName(kind));
    auto stats = DistSave(comm, path, local, Small(&device_comm));
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_GT(stats->buckets, 5u);
    EXPECT_GT(stats->device_gather_bytes, 0u);
    EXPECT_LE(stats->device_gather_bytes, 512u);
    // Every byte of every GPU tensor went over the device communicator.
    uint64_t device_bytes = 0;
    VisitValues(local, [&](const KeyPath&, const Value& v) {
      if (v.is_tensor() && v.as_tensor().device().type == DeviceType::kCUDA) {
        device_bytes += v.as_tensor().nbytes();
      }
    });
    EXPECT_EQ(device_comm.gathered_bytes(), device_bytes);

    EXPECT_TRUE(FileHoldsFull(path, full));
    // Compressed or not, the file is the one a save from host memory writes.
    for (Codec codec : {Codec::kNone, Codec::kBytePlaneZstd}) {
      DistSaveOptions host_options = Small(nullptr), device_options = Small(&device_comm);
      host_options.save.codec = device_options.save.codec = codec;
      ASSERT_TRUE(DistSave(comm, path + ".host", *host, host_options).ok());
      ASSERT_TRUE(DistSave(comm, path, local, device_options).ok());
      EXPECT_EQ(ckfmt_test::ReadFileBytes(path), ckfmt_test::ReadFileBytes(path + ".host"))
          << CodecName(uint8_t(codec));
    }
  }
}

TEST_F(DistDeviceSave, ReplicaChecksumsReadGpuTensors) {
  Value full = MakeFullState(4);
  Value local = ckfmt_test::ToDevice(ops(), full, 0, IsCounter);
  SingleCommunicator comm;
  SimulatedDeviceComm device_comm(comm, ops(), 0);
  DistSaveOptions o = Small(&device_comm);
  o.replica_check = ReplicaCheck::kChecksum;
  auto stats = DistSave(comm, File("ck"), local, o);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  auto reader = CheckpointReader::Open(File("ck"));
  ASSERT_TRUE(reader.ok());
  Value loaded{Dict{}};
  ASSERT_TRUE((*reader)->Load(&loaded).ok());
  EXPECT_TRUE(MatchesFull(loaded, full, true));
}

TEST_F(DistDeviceSave, AFailedCopyForAReplicaChecksumNamesTheKey) {
  Value local = ckfmt_test::ToDevice(ops(), MakeFullState(11), 0, IsCounter);
  SingleCommunicator comm;
  SimulatedDeviceComm device_comm(comm, ops(), 0);
  DistSaveOptions o = Small(&device_comm);
  o.replica_check = ReplicaCheck::kChecksum;
  ops().FailCopiesFrom(ops().copies() + 1);
  auto stats = DistSave(comm, File("ck"), local, o);
  ops().FailCopiesFrom(0);
  ASSERT_FALSE(stats.ok());
  EXPECT_NE(stats.status().message().find("model/embed.weight: checksum of the replica"),
            std::string::npos)
      << stats.status().ToString();
  EXPECT_NE(stats.status().message().find("injected copy failure"), std::string::npos);
  EXPECT_TRUE(fs::is_empty(dir_));
}

// Without a device communicator, GPU tensors on any device are copied to
// pinned host memory a bucket at a time and gathered with the host ones:
// the file is the one a save of the same state from host memory writes.
TEST_F(DistDeviceSave, WithoutADeviceCommunicatorGpuTensorsGoThroughHostMemory) {
  for (LayoutKind kind : {LayoutKind::kFsdp1, LayoutKind::kFsdp2}) {
    SCOPED_TRACE(LayoutName(kind));
    Value full = MakeFullState(5);
    auto host = ShardStateDict(full, MakeLayout(kind, full, 1, 0));
    ASSERT_TRUE(host.ok()) << host.status().ToString();
    // The model on cuda:1, the optimizer state on cuda:0, counters on the host.
    Value local = ckfmt_test::ToDevice(ops(), *host, 0, IsCounter);
    local.as_dict().Set("model",
                        ckfmt_test::ToDevice(ops(), *host->as_dict().Find("model"), 1, IsCounter));
    SingleCommunicator comm;
    const std::string name = LayoutName(kind);
    ASSERT_TRUE(DistSave(comm, File(name + ".host"), *host, Small(nullptr)).ok());
    const uint64_t copies = ops().copies();
    auto stats = DistSave(comm, File(name), local, Small(nullptr));
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_GT(ops().copies(), copies);
    EXPECT_EQ(stats->device_gather_bytes, 0u);
    EXPECT_GT(stats->gpu_send_staging_bytes, 0u);
    EXPECT_LE(stats->gpu_send_staging_bytes, 512u / 2);  // one bucket
    EXPECT_EQ(ckfmt_test::ReadFileBytes(File(name)),
              ckfmt_test::ReadFileBytes(File(name + ".host")));
    EXPECT_TRUE(FileHoldsFull(File(name), full));
  }
}

TEST_F(DistDeviceSave, AFailedCopyToHostMemoryNamesTheKeyAndLeavesTheOldFile) {
  Value local = ckfmt_test::ToDevice(ops(), MakeFullState(15), 0, IsCounter);
  SingleCommunicator comm;
  ASSERT_TRUE(DistSave(comm, File("ck"), local, Small(nullptr)).ok());
  const std::string before = ckfmt_test::ReadFileBytes(File("ck"));
  ops().FailCopiesFrom(ops().copies() + 1);
  auto stats = DistSave(comm, File("ck"), local, Small(nullptr));
  ops().FailCopiesFrom(0);
  ASSERT_FALSE(stats.ok());
  EXPECT_NE(stats.status().message().find("copying model/embed.weight on cuda:0 to host memory"),
            std::string::npos)
      << stats.status().ToString();
  EXPECT_NE(stats.status().message().find("injected copy failure"), std::string::npos);
  EXPECT_EQ(ckfmt_test::ReadFileBytes(File("ck")), before);
  EXPECT_EQ(ListDir(dir_), std::vector<std::string>{"ck"});
}

// Pinning host memory fails as cudaHostRegister does under a memory lock
// limit, and a copy may fail too. With each pin, then each copy, a save
// takes failing in turn: the error says so, nothing stays pinned, the old
// file stays byte for byte with no temporary beside it, and the save
// works once pinning and copying do.
TEST_F(DistDeviceSave, EveryFailedPinOrCopyLeavesTheOldFile) {
  Value full = MakeFullState(16);
  auto host = ShardStateDict(full, MakeLayout(LayoutKind::kFsdp2, full, 1, 0));
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  Value local = ckfmt_test::ToDevice(ops(), *host, 0, IsCounter);
  SingleCommunicator comm;
  SimulatedDeviceComm device_comm(comm, ops(), 0);
  struct Case {
    const char* name;
    Communicator* device_comm;
    SaveMode mode;
    Codec codec;
  };
  for (bool pins : {true, false}) {
    for (const Case& c : {Case{"flattened through host memory", nullptr, SaveMode::kFlattened,
                               Codec::kBytePlaneZstd},
                          Case{"flattened over the device communicator", &device_comm,
                               SaveMode::kFlattened, Codec::kNone},
                          Case{"parallel", nullptr, SaveMode::kParallel, Codec::kBytePlaneZstd}}) {
      SCOPED_TRACE(std::string(c.name) + (pins ? ", pins failing" : ", copies failing"));
      const std::string path = File("ck");
      ASSERT_TRUE(DistSave(comm, path, MakeFullState(17), Small(nullptr)).ok());
      const std::string before = ckfmt_test::ReadFileBytes(path);
      DistSaveOptions o = Small(c.device_comm);
      o.mode = c.mode;
      o.save.codec = c.codec;
      auto fail_from = [&](uint64_t k) {
        if (pins) {
          ops().FailPinsFrom(k ? ops().pins() + k : 0);
        } else {
          ops().FailCopiesFrom(k ? ops().copies() + k : 0);
        }
      };
      int failures = ckfmt_test::SweepFaults(
          fail_from, [&] { return DistSave(comm, path, local, o).status(); },
          [&](const Status& s) {
            EXPECT_NE(s.message().find(pins ? "injected pin failure" : "injected copy failure"),
                      std::string::npos)
                << s.ToString();
            EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
            EXPECT_EQ(ops().pinned_ranges(), 0u);
            EXPECT_EQ(ckfmt_test::ReadFileBytes(path), before);
            EXPECT_EQ(ListDir(dir_), std::vector<std::string>{"ck"});
          });
      EXPECT_GE(failures, 1);
      EXPECT_TRUE(FileHoldsFull(path, full));
    }
  }
}

TEST_F(DistDeviceSave, TensorsOnAnotherDeviceAreRefused) {
  Value local = ckfmt_test::ToDevice(ops(), MakeFullState(6), 1, IsCounter);
  SingleCommunicator comm;
  SimulatedDeviceComm device_comm(comm, ops(), 0);
  auto stats = DistSave(comm, File("ck"), local, Small(&device_comm));
  ASSERT_EQ(stats.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(stats.status().message().find("is on cuda:1 but the device communicator is on cuda:0"),
            std::string::npos)
      << stats.status().ToString();
  EXPECT_TRUE(fs::is_empty(dir_));
}

// Chunks of the file by codec (0: stored raw).
std::map<uint8_t, size_t> ChunkCodecs(const std::string& path) {
  std::map<uint8_t, size_t> n;
  auto reader = CheckpointReader::Open(path);
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  if (!reader.ok()) return n;
  for (const auto& e : (*reader)->index().entries) {
    for (const auto& p : e.pieces) {
      for (const auto& c : p.chunks) ++n[c.codec];
    }
  }
  return n;
}

// The parallel mode needs no device communicator: each rank writes its own
// GPU shards device -> staging slot -> disk. With a codec, GPU chunks are
// encoded from pinned bounce buffers; those that do not shrink are copied
// from the device again when written.
TEST_F(DistDeviceSave, ParallelSaveWritesGpuShardsBitwise) {
  for (Codec codec : {Codec::kNone, Codec::kBytePlaneZstd}) {
    SCOPED_TRACE(std::string(CodecName(uint8_t(codec))));
    Value full = MakeFullState(7);
    // Zeros shrink under any codec; the random tensors of 128-byte chunks
    // do not.
    full.as_dict().Set("zeros", Value(Tensor::Zeros(DType::kF32, {64, 4})));
    auto host = ShardStateDict(full, MakeLayout(LayoutKind::kFsdp2, full, 1, 0));
    ASSERT_TRUE(host.ok()) << host.status().ToString();
    Value local = ckfmt_test::ToDevice(ops(), *host, 0, IsCounter);
    DistSaveOptions o = Small(nullptr);
    o.mode = SaveMode::kParallel;
    o.save.codec = codec;
    SingleCommunicator comm;
    const std::string path = File(std::string(CodecName(uint8_t(codec))));
    const uint64_t copies = ops().copies();
    auto stats = DistSave(comm, path, local, o);
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_GT(ops().copies(), copies);
    auto codecs = ChunkCodecs(path);
    EXPECT_GT(codecs[0], 10u);
    if (codec != Codec::kNone) {
      EXPECT_GT(codecs.size(), 1u) << "no chunk was encoded";
    }
    EXPECT_TRUE(FileHoldsFull(path, full));
  }
}

// A trainer that sets up a device communicator whichever the mode may pass
// it to a parallel save too: it is checked, and not used.
TEST_F(DistDeviceSave, TheParallelModeAcceptsAndIgnoresADeviceCommunicator) {
  Value full = MakeFullState(12);
  Value local = ckfmt_test::ToDevice(ops(), full, 0, IsCounter);
  SingleCommunicator comm;
  SimulatedDeviceComm device_comm(comm, ops(), 0);
  DistSaveOptions o = Small(&device_comm);
  o.mode = SaveMode::kParallel;
  auto stats = DistSave(comm, File("ck"), local, o);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(device_comm.gathered_bytes(), 0u);
  Value loaded{Dict{}};
  ASSERT_TRUE(Load(File("ck"), &loaded).ok());
  EXPECT_TRUE(MatchesFull(loaded, full, true));
}

TEST_F(DistDeviceSave, AFailedDeviceCopyInAParallelSaveNamesTheKeyAndLeavesTheOldFile) {
  for (Codec codec : {Codec::kNone, Codec::kBytePlaneZstd}) {
    SCOPED_TRACE(std::string(CodecName(uint8_t(codec))));
    Value local = ckfmt_test::ToDevice(ops(), MakeFullState(13), 0, IsCounter);
    SingleCommunicator comm;
    DistSaveOptions o = Small(nullptr);
    o.mode = SaveMode::kParallel;
    o.save.codec = codec;
    ASSERT_TRUE(DistSave(comm, File("ck"), local, o).ok());
    const auto before = fs::file_size(File("ck"));
    ops().FailCopiesFrom(ops().copies() + 1);
    auto stats = DistSave(comm, File("ck"), local, o);
    ops().FailCopiesFrom(0);
    ASSERT_FALSE(stats.ok());
    EXPECT_NE(stats.status().message().find("injected copy failure"), std::string::npos)
        << stats.status().ToString();
    EXPECT_NE(stats.status().message().find("model/embed.weight on cuda:0"), std::string::npos)
        << stats.status().ToString();
    EXPECT_EQ(fs::file_size(File("ck")), before);
    EXPECT_EQ(ListDir(dir_), std::vector<std::string>{"ck"});
    auto verified = VerifyFile(File("ck"));
    ASSERT_TRUE(verified.ok());
    EXPECT_TRUE(verified->ok());
  }
}

TEST_F(DistDeviceSave, AHostCommunicatorIsNotADeviceCommunicator) {
  Value local = MakeFullState(8);
  SingleCommunicator comm, other;
  auto stats = DistSave(comm, File("ck"), local, Small(&other));
  ASSERT_EQ(stats.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(stats.status().message().find("must be a device communicator, got single"),
            std::string::npos)
      << stats.status().ToString();
}

TEST_F(DistDeviceSave, AFailedDeviceCopyLeavesNoFile) {
  Value local = ckfmt_test::ToDevice(ops(), MakeFullState(9), 0, IsCounter);
  SingleCommunicator comm;
  SimulatedDeviceComm device_comm(comm, ops(), 0);
  ASSERT_TRUE(DistSave(comm, File("ck"), local, Small(&device_comm)).ok());
  const auto before = fs::file_size(File("ck"));
  ops().FailCopiesFrom(ops().copies() + 3);  // the writer's device -> staging copies
  auto stats = DistSave(comm, File("ck"), local, Small(&device_comm));
  ops().FailCopiesFrom(0);
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(fs::file_size(File("ck")), before);  // the older checkpoint is intact
  EXPECT_EQ(ListDir(dir_), std::vector<std::string>{"ck"});
  auto verified = VerifyFile(File("ck"));
  ASSERT_TRUE(verified.ok());
  EXPECT_TRUE(verified->ok());
}

// A GPU too full for rank 0's gather buffers: the save fails, saying what
// it could not allocate, and the older checkpoint stays.
TEST_F(DistDeviceSave, AGatherBufferThatCannotBeAllocatedLeavesTheOldFile) {
  Value local = ckfmt_test::ToDevice(ops(), MakeFullState(14), 0, IsCounter);
  SingleCommunicator comm;
  SimulatedDeviceComm device_comm(comm, ops(), 0);
  ASSERT_TRUE(DistSave(comm, File("ck"), local, Small(&device_comm)).ok());
  const auto before = fs::file_size(File("ck"));
  ops().FailAllocationsFrom(ops().allocate_calls() + 1);
  auto stats = DistSave(comm, File("ck"), local, Small(&device_comm));
  ops().FailAllocationsFrom(0);
  ASSERT_EQ(stats.status().code(), StatusCode::kIOError);
  EXPECT_NE(stats.status().message().find("a gather buffer of "), std::string::npos)
      << stats.status().ToString();
  EXPECT_NE(stats.status().message().find("on cuda:0"), std::string::npos);
  EXPECT_NE(stats.status().message().find("out of memory (injected)"), std::string::npos);
  EXPECT_EQ(fs::file_size(File("ck")), before);
  EXPECT_EQ(ListDir(dir_), std::vector<std::string>{"ck"});
  EXPECT_EQ(ops().allocations(), ckfmt_test::CountDeviceTensors(local));
}

// The resharding load's reconstructed shards land on the GPU when the load
// options say so: optimizer state the trainer lacks comes back sharded and
// on its device.
TEST_F(DistDeviceSave, ReshardingLoadReconstructsShardsOnTheGpu) {
  Value full = MakeFullState(10);
  SingleCommunicator comm;
  DistSaveOptions o = Small(nullptr);
  ASSERT_TRUE(DistSave(comm, File("ck"), full, o).ok());
  auto reader = CheckpointReader::Open(File("ck"));
  ASSERT_TRUE(reader.ok());
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    // The trainer holds its model shards on cuda:1, and no optimizer state.
    LayoutFn layout = MakeLayout(LayoutKind::kFsdp2, full, 3, rank);
    auto model = ShardStateDict(ModelOnly(full), layout);
    ASSERT_TRUE(model.ok());
    Value local = ckfmt_test::ToDevice(ops(), *model, 1);
    ShardedLoadOptions lo;
    lo.layout = layout;
    lo.load.reconstruct_device = Device{DeviceType::kCUDA, 1};
    auto report = LoadSharded(**reader, &local, lo);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_FALSE(report->reconstructed.empty());
    size_t host_tensors = 0;
    VisitValues(local, [&](const KeyPath&, const Value& v) {
      if (v.is_tensor() && v.as_tensor().device().type == DeviceType::kCPU) ++host_tensors;
    });
    EXPECT_EQ(host_tensors, 0u);
    EXPECT_TRUE(MatchesFull(ckfmt_test::ToHost(ops(), local), full, true));
  }
}

}  // namespace
