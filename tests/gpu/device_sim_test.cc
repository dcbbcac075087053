// GPU tensors on the simulated device backend (see
// engine/src/device/simulated_device_ops.h): device memory the host cannot
// touch, copies that run late on their own thread and must go to pinned
// memory. Runs in CI without a GPU and covers every device path of save,
// load and async save.
#include <gtest/gtest.h>

#include <cstring>

#include "ckfmt/async_save.h"
#include "ckfmt/cuda.h"
#include "ckfmt/reader.h"
#include "ckfmt/writer.h"
#include "gpu/device_test_util.h"
#include "util/file_util.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt_test;
using std::chrono::microseconds;

class DeviceSimTest : public SimulatedDeviceTest {};
class DeviceCodecTest : public SimulatedDeviceTest,
                        public ::testing::WithParamInterface<Codec> {};

TEST_P(DeviceCodecTest, SaveFromDeviceRoundTripsBitwise) {
  ScopedTempDir dir;
  Value host = MakeRichStateDict(7);
  Value dev = ToDevice(ops(), host, 1);
  ASSERT_GT(CountDeviceTensors(dev), 10u);
  auto stats = Save(dir.File("a.ckfmt"), dev, SmallSaveOptions(GetParam()));
  CKFMT_ASSERT_OK(stats);
  EXPECT_GT(ops().bytes_to_host(), 0u);
  EXPECT_EQ(DiffValues(LoadToHost(dir.File("a.ckfmt")), host), "");
  // The same state saved from the host gives the same file, byte for byte.
  CKFMT_ASSERT_OK(Save(dir.File("h.ckfmt"), host, SmallSaveOptions(GetParam())));
  EXPECT_TRUE(ReadFileBytes(dir.File("a.ckfmt")) == ReadFileBytes(dir.File("h.ckfmt")));
}

TEST_P(DeviceCodecTest, LoadInPlaceIntoDeviceTensors) {
  ScopedTempDir dir;
  Value host = MakeRichStateDict(8);
  CKFMT_ASSERT_OK(Save(dir.File("a.ckfmt"), host, SmallSaveOptions(GetParam())));
  for (IoBackend backend : {IoBackend::kUring, IoBackend::kPread}) {
    Value dev = ToDevice(ops(), ZeroedLike(host), 0);
    ReadOptions ro = SmallReadOptions();
    ro.io.backend = backend;
    auto report = Load(dir.File("a.ckfmt"), &dev, {}, ro);
    CKFMT_ASSERT_OK(report);
    EXPECT_TRUE(report->reconstructed.empty()) << report->ToString();
    EXPECT_EQ(CountDeviceTensors(dev), CountDeviceTensors(ToDevice(ops(), host, 0)));
    EXPECT_EQ(DiffValues(ToHost(ops(), dev), host), "") << IoBackendName(backend);
  }
  EXPECT_GT(ops().bytes_to_device(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Codecs, DeviceCodecTest,
                         ::testing::Values(Codec::kNone, Codec::kZstd, Codec::kBytePlaneZstd));

// A file already in the page cache is read with buffered reads; device
// targets then go through pinned bounce buffers.
TEST_F(DeviceSimTest, LoadFromThePageCacheIntoDeviceTensors) {
  ScopedTempDir dir;
  Value host = MakeRichStateDict(9);
  for (Codec codec : {Codec::kNone, Codec::kZstd}) {
    const std::string path = dir.File("c" + std::string(CodecName(uint8_t(codec))));
    CKFMT_ASSERT_OK(Save(path, host, SmallSaveOptions(codec)));
    (void)ReadFileBytes(path);  // into the page cache
    Value dev = ToDevice(ops(), ZeroedLike(host), 0);
    CKFMT_ASSERT_OK(Load(path, &dev, {}, SmallReadOptions()));
    EXPECT_EQ(DiffValues(ToHost(ops(), dev), host), "");
  }
}

TEST_F(DeviceSimTest, ReconstructsOnTheDeviceThroughCudaAllocator) {
  ScopedTempDir dir;
  Value host = MakeRichStateDict(10);
  CKFMT_ASSERT_OK(Save(dir.File("a.ckfmt"), host, SmallSaveOptions(Codec::kZstd)));
  size_t tensors = CountDeviceTensors(ToDevice(ops(), host, 0));
  for (bool explicit_allocator : {true, false}) {
    Value v{Dict{}};
    LoadOptions lo;
    lo.reconstruct_device = Device{DeviceType::kCUDA, 1};
    if (explicit_allocator) lo.allocator = CudaAllocator();
    auto report = Load(dir.File("a.ckfmt"), &v, lo, SmallReadOptions());
    CKFMT_ASSERT_OK(report);
    EXPECT_FALSE(report->reconstructed.empty());
    EXPECT_EQ(CountDeviceTensors(v), tensors);
    VisitValues(v, [&](const KeyPath& p, const Value& x) {
      if (x.is_tensor()) {
        EXPECT_EQ(x.as_tensor().device().index, 1) << FormatKeyPath(p);
      }
    });
    EXPECT_EQ(DiffValues(ToHost(ops(), v), host), "");
  }
}

TEST_F(DeviceSimTest, ReadTensorIntoADeviceAllocator) {
  ScopedTempDir dir;
  Tensor t = RandomTensor(DType::kF32, {1000, 37}, 3);
  Dict d;
  d.Set("w", t);
  CKFMT_ASSERT_OK(Save(dir.File("a.ckfmt"), Value(d), SmallSaveOptions()));
  auto reader = CheckpointReader::Open(dir.File("a.ckfmt"), SmallReadOptions());
  CKFMT_ASSERT_OK(reader);
  auto dev = (*reader)->ReadTensor({"w"}, CudaAllocator(0));
  CKFMT_ASSERT_OK(dev);
  EXPECT_EQ(dev->device().type, DeviceType::kCUDA);
  EXPECT_EQ(TensorBytes(ToHost(ops(), *dev)), TensorBytes(t));
}

// Shards on the device, saved and loaded into another sharding on the device.
TEST_F(DeviceSimTest, DeviceShardsReshard) {
  ScopedTempDir dir;
  Tensor whole = RandomTensor(DType::kBF16, {64, 96}, 11);
  Dict d;
  d.Set("w0", ToDevice(ops(), ShardOf(whole, Region::Box({0, 0}, {40, 96})), 0));
  CKFMT_ASSERT_OK(Save(dir.File("a.ckfmt"), Value(d), SmallSaveOptions()));
  auto reader = CheckpointReader::Open(dir.File("a.ckfmt"), SmallReadOptions());
  CKFMT_ASSERT_OK(reader);
  Tensor part = ToDevice(ops(), Tensor::Zeros(DType::kBF16, {30, 50}), 1);
  CKFMT_ASSERT_OK(
      (*reader)->ReadRegion({"w0"}, Region::Box({5, 20}, {30, 50}), part.data(), part.device()));
  EXPECT_EQ(TensorBytes(ToHost(ops(), part)),
            TensorBytes(ShardOf(whole, Region::Box({5, 20}, {30, 50}))));
}

// Copies that run late expose any read of a destination before its fence,
// and any reuse of a staging slot or bounce buffer before its copy ran.
TEST_F(DeviceSimTest, SlowCopiesStillRoundTrip) {
  ops().set_copy_delay(microseconds(300));
  ScopedTempDir dir;
  Value host = MakeRichStateDict(12);
  for (Codec codec : {Codec::kNone, Codec::kBytePlaneZstd}) {
    const std::string path = dir.File("s" + std::string(CodecName(uint8_t(codec))));
    CKFMT_ASSERT_OK(Save(path, ToDevice(ops(), host, 0), SmallSaveOptions(codec)));
    EXPECT_EQ(DiffValues(LoadToHost(path), host), "");
    Value dev = ToDevice(ops(), ZeroedLike(host), 0);
    ReadOptions ro = SmallReadOptions();
    ro.io.backend = IoBackend::kUring;
    CKFMT_ASSERT_OK(Load(path, &dev, {}, ro));
    EXPECT_EQ(DiffValues(ToHost(ops(), dev), host), "");
  }
}

TEST_F(DeviceSimTest, MixedHostAndDeviceTensors) {
  ScopedTempDir dir;
  Value host = MakeRichStateDict(13);
  Value mixed = host;
  mixed.as_dict().Set("gpu", ToDevice(ops(), host, 1));
  Value expect = host;
  expect.as_dict().Set("gpu", host);
  for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kBytePlaneZstd}) {
    SCOPED_TRACE(std::string(CodecName(uint8_t(codec))));
    CKFMT_ASSERT_OK(Save(dir.File("a.ckfmt"), mixed, SmallSaveOptions(codec)));
    EXPECT_EQ(DiffValues(LoadToHost(dir.File("a.ckfmt")), expect), "");
    // Where a tensor lives does not change the file.
    CKFMT_ASSERT_OK(Save(dir.File("h.ckfmt"), expect, SmallSaveOptions(codec)));
    EXPECT_TRUE(ReadFileBytes(dir.File("a.ckfmt")) == ReadFileBytes(dir.File("h.ckfmt")));
  }
}

// The trainer's next step: every device tensor of `dev` overwritten at once.
void OverwriteOnDevice(SimulatedDeviceOps& ops, const Value& dev) {
  VisitValues(dev, [&](const KeyPath&, const Value& v) {
    if (!v.is_tensor() || v.as_tensor().nbytes() == 0) return;
    const Tensor& t = v.as_tensor();
    std::string junk(t.nbytes(), t.dtype() == DType::kBool ? '\1' : '\x5a');
    ops.Upload(t.data(), junk.data(), junk.size());
  });
}

TEST_F(DeviceSimTest, AsyncSaveFromDeviceHoldsTheSnapshot) {
  ops().set_copy_delay(microseconds(200));
  ScopedTempDir dir;
  Value host = MakeRichStateDict(14);
  Value dev = ToDevice(ops(), host, 0);
  AsyncSaver saver;
  for (int round = 0; round < 2; ++round) {  // the second reuses the pinned arena
    const std::string path = dir.File("a" + std::to_string(round));
    CKFMT_ASSERT_OK(saver.SaveAsync(path, dev, SmallSaveOptions(Codec::kZstd)));
    EXPECT_GT(saver.last_blocked_seconds(), 0.0);
    OverwriteOnDevice(ops(), dev);
    CKFMT_ASSERT_OK(saver.Wait());
    EXPECT_EQ(DiffValues(LoadToHost(path), host), "");
    dev = ToDevice(ops(), host, 0);
  }
}

// With a snapshot budget below the state, the leading tensors go device ->
// pinned staging slot -> disk before SaveAsync returns and only the rest
// is copied into the (smaller) pinned arena.
TEST_F(DeviceSimTest, AsyncSaveFromDeviceWithinASnapshotBudget) {
  ops().set_copy_delay(microseconds(200));
  ScopedTempDir dir;
  Value host = MakeRichStateDict(17);
  const uint64_t total = TotalTensorBytes(host);
  Value dev = ToDevice(ops(), host, 0);
  AsyncSaverOptions o;
  o.snapshot_bytes = total / 4;
  AsyncSaver saver(o);
  for (int round = 0; round < 2; ++round) {
    const std::string path = dir.File("b" + std::to_string(round));
    const uint64_t to_host_before = ops().bytes_to_host();
    CKFMT_ASSERT_OK(saver.SaveAsync(path, dev, SmallSaveOptions(Codec::kZstd)));
    EXPECT_LE(saver.reserved_bytes(), total / 4);
    // Everything was copied off the device before the call returned (bool
    // tensors twice: the writer checks their values first).
    EXPECT_GE(ops().bytes_to_host() - to_host_before, total);
    OverwriteOnDevice(ops(), dev);
    CKFMT_ASSERT_OK(saver.Wait());
    EXPECT_EQ(DiffValues(LoadToHost(path), host), "");
    dev = ToDevice(ops(), host, 0);
  }
}

// A failed device copy: a clear error naming the file and the key, and the
// checkpoint already at the path stays as it was.
TEST_F(DeviceSimTest, FailedDeviceCopyKeepsThePreviousCheckpoint) {
  ScopedTempDir dir;
  const std::string path = dir.File("a.ckfmt");
  Value host = MakeRichStateDict(15);
  CKFMT_ASSERT_OK(Save(path, host, SmallSaveOptions()));
  const std::string before = ReadFileBytes(path);
  for (Codec codec : {Codec::kNone, Codec::kZstd}) {
    Value dev = ToDevice(ops(), MakeRichStateDict(16), 0);
    ops().FailCopiesFrom(ops().copies() + 5);
    auto r = Save(path, dev, SmallSaveOptions(codec));
    ops().FailCopiesFrom(0);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("injected copy failure"), std::string::npos)
        << r.status().ToString();
    EXPECT_NE(r.status().message().find("cuda:0"), std::string::npos) << r.status().ToString();
    bool names_key = false;
    VisitValues(dev, [&](const KeyPath& p, const Value& v) {
      if (v.is_tensor() && MentionsPath(r.status().message(), p)) names_key = true;
    });
    EXPECT_TRUE(names_key) << r.status().ToString();
    EXPECT_TRUE(ReadFileBytes(path) == before);
    EXPECT_TRUE(TempNames(dir.List()).empty());
  }
}

TEST_F(DeviceSimTest, FailedAsyncSnapshotCopyNamesTheKey) {
  ScopedTempDir dir;
  Value dev = ToDevice(ops(), MakeRichStateDict(17), 0);
  AsyncSaver saver;
  ops().FailCopiesFrom(ops().copies() + 3);
  Status s = saver.SaveAsync(dir.File("a.ckfmt"), dev, SmallSaveOptions());
  ops().FailCopiesFrom(0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("injected copy failure"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("cuda:0"), std::string::npos) << s.ToString();
  EXPECT_FALSE(FileExists(dir.File("a.ckfmt")));
}

TEST_F(DeviceSimTest, FailedDeviceLoadNamesFileAndKey) {
  ScopedTempDir dir;
  Value host = MakeRichStateDict(18);
  CKFMT_ASSERT_OK(Save(dir.File("a.ckfmt"), host, SmallSaveOptions()));
  Value dev = ToDevice(ops(), ZeroedLike(host), 0);
  ops().FailCopiesFrom(ops().copies() + 4);
  auto r = Load(dir.File("a.ckfmt"), &dev, {}, SmallReadOptions());
  ops().FailCopiesFrom(0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(dir.File("a.ckfmt")), std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find("injected copy failure"), std::string::npos)
      << r.status().ToString();
}

// Spec rule W6 holds for device data too: bool elements are 0 or 1.
TEST_F(DeviceSimTest, DeviceBoolTensorsAreValidated) {
  ScopedTempDir dir;
  Tensor b = Tensor::Zeros(DType::kBool, {100});
  static_cast<uint8_t*>(b.data())[42] = 2;
  Dict d;
  d.Set("mask", ToDevice(ops(), b, 0));
  auto r = Save(dir.File("a.ckfmt"), Value(d), SmallSaveOptions());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bool element 42"), std::string::npos)
      << r.status().ToString();
}

TEST_F(DeviceSimTest, NoSuchDeviceIsAClearError) {
  ScopedTempDir dir;
  Dict d;
  d.Set("w", Tensor::View(DType::kF32, {4}, reinterpret_cast<void*>(4096),
                          Device{DeviceType::kCUDA, 7}));
  auto r = Save(dir.File("a.ckfmt"), Value(d), SmallSaveOptions());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cuda:7"), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(FileExists(dir.File("a.ckfmt")));
}

// Host-only saves and loads never touch the device layer.
TEST_F(DeviceSimTest, HostStateUsesNoDevice) {
  ScopedTempDir dir;
  Value host = MakeRichStateDict(19);
  CKFMT_ASSERT_OK(Save(dir.File("a.ckfmt"), host, SmallSaveOptions(Codec::kZstd)));
  EXPECT_EQ(DiffValues(LoadToHost(dir.File("a.ckfmt")), host), "");
  AsyncSaver saver;
  CKFMT_ASSERT_OK(saver.SaveAsync(dir.File("b.ckfmt"), host, SmallSaveOptions()));
  CKFMT_ASSERT_OK(saver.Wait());
  EXPECT_EQ(ops().copies(), 0u);
  EXPECT_EQ(ops().pinned_ranges(), 0u);
}

// The backend itself: the checks the engine relies on to catch misuse.
TEST_F(DeviceSimTest, BackendRefusesPageableMemoryAndReportsLateCopies) {
  ops().set_copy_delay(microseconds(20000));
  void* p = ops().Allocate(0, 4096).value();
  std::vector<uint8_t> pageable(4096, 1);
  auto stream = ops().NewStream(0);
  CKFMT_ASSERT_OK(stream);
  CKFMT_ASSERT_OK((*stream)->CopyToDevice(p, pageable.data(), 4096));
  Status s = (*stream)->Synchronize();
  EXPECT_NE(s.message().find("not pinned"), std::string::npos) << s.ToString();
  auto fresh = ops().NewStream(0);
  AlignedBuffer pinned(4096);
  CKFMT_ASSERT_OK(ops().Pin(pinned.data(), pinned.size()));
  std::vector<uint8_t> ones(4096, 1);
  ops().Upload(p, ones.data(), ones.size());
  const uint64_t before = ops().bytes_to_host();
  CKFMT_ASSERT_OK((*fresh)->CopyToHost(pinned.data(), p, 4096));
  // The copy's own counter, not the destination: reading that while the
  // stream may write it would race.
  EXPECT_EQ(ops().bytes_to_host(), before) << "the copy ran before its delay";
  CKFMT_ASSERT_OK((*fresh)->Synchronize());
  EXPECT_EQ(ops().bytes_to_host(), before + 4096);
  EXPECT_EQ(pinned.data()[0], 1);
  ops().Unpin(pinned.data());
  ops().Free(0, p);
}

}  // namespace
