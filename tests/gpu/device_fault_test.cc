// Pinning host memory fails in real jobs (cudaHostRegister under a memory
// lock limit, or with the host's memory exhausted), and so may a copy (a
// GPU in an error state). Each test makes every pin, or every copy, that
// one operation takes fail in turn, from the first to the last, on the
// simulated device, and checks what a user relies on: a clear error naming
// the file and the cause, the previous checkpoint kept byte for byte,
// nothing left pinned, and the next attempt working.
#include <gtest/gtest.h>

#include "ckfmt/async_save.h"
#include "ckfmt/reader.h"
#include "ckfmt/writer.h"
#include "gpu/device_test_util.h"
#include "util/fault_sweep.h"
#include "util/file_util.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt_test;

// What fails: the simulator's pins, copies or device allocations.
enum class Fault { kPin, kCopy, kAllocation };

class DeviceFaultTest : public SimulatedDeviceTest {
 protected:
  // Runs `attempt` with the k-th pin, copy or allocation it makes failing,
  // for k = 1, 2, ... until an attempt succeeds, and hands each failure to
  // `check` after checking that it names the injected failure and (unless
  // `holds_pins`: an open reader or an AsyncSaver keeps its memory pinned)
  // left nothing pinned. Returns how many attempts failed.
  int Sweep(Fault fault, const std::function<Status()>& attempt,
            const std::function<void(const Status&)>& check, bool holds_pins = false) {
    auto fail_from = [&](uint64_t k) {
      switch (fault) {
        case Fault::kPin:
          ops().FailPinsFrom(k ? ops().pins() + k : 0);
          break;
        case Fault::kCopy:
          ops().FailCopiesFrom(k ? ops().copies() + k : 0);
          break;
        case Fault::kAllocation:
          ops().FailAllocationsFrom(k ? ops().allocate_calls() + k : 0);
          break;
      }
    };
    return SweepFaults(fail_from, attempt, [&](const Status& s) {
      EXPECT_NE(s.message().find(Injected(fault)), std::string::npos) << s.ToString();
      if (!holds_pins) {
        EXPECT_EQ(ops().pinned_ranges(), 0u) << "host memory left pinned after " << s.ToString();
      }
      check(s);
    });
  }
  // What the injected failure says.
  static const char* Injected(Fault fault) {
    switch (fault) {
      case Fault::kPin:
        return "injected pin failure";
      case Fault::kCopy:
        return "injected copy failure";
      case Fault::kAllocation:
        return "out of memory (injected)";
    }
    return "?";
  }
};

// The tests that pins and copies fail in alike.
class DeviceFault : public DeviceFaultTest, public ::testing::WithParamInterface<Fault> {};

void ExpectNames(const Status& s, const std::string& what) {
  EXPECT_NE(s.message().find(what), std::string::npos) << s.ToString();
}

TEST_P(DeviceFault, SavesKeepThePreviousCheckpoint) {
  ScopedTempDir dir;
  const std::string path = dir.File("a.ckfmt");
  CKFMT_ASSERT_OK(Save(path, MakeRichStateDict(30), SmallSaveOptions()));
  const std::string before = ReadFileBytes(path);
  Value host = MakeRichStateDict(31);
  Value dev = ToDevice(ops(), host, 0);
  for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kBytePlaneZstd}) {
    SCOPED_TRACE(std::string(CodecName(uint8_t(codec))));
    int failures = Sweep(
        GetParam(), [&] { return Save(path, dev, SmallSaveOptions(codec)).status(); },
        [&](const Status& s) {
          ExpectNames(s, path);
          ExpectPreviousFileKept(dir.path(), path, before);
        });
    EXPECT_GE(failures, 1);  // the staging slots at least
    EXPECT_EQ(DiffValues(LoadToHost(path), host), "");
    CKFMT_ASSERT_OK(Save(path, MakeRichStateDict(30), SmallSaveOptions()));
  }
}

TEST_P(DeviceFault, LoadsIntoDeviceTensorsFailClearly) {
  ScopedTempDir dir;
  const std::string path = dir.File("a.ckfmt");
  Value host = MakeRichStateDict(32);
  for (Codec codec : {Codec::kNone, Codec::kBytePlaneZstd}) {
    SCOPED_TRACE(std::string(CodecName(uint8_t(codec))));
    CKFMT_ASSERT_OK(Save(path, host, SmallSaveOptions(codec)));
    Value dev = ToDevice(ops(), ZeroedLike(host), 0);
    int failures = Sweep(
        GetParam(), [&] { return Load(path, &dev, {}, SmallReadOptions()).status(); },
        [&](const Status& s) { ExpectNames(s, path); });
    EXPECT_GE(failures, 1);
    EXPECT_EQ(DiffValues(ToHost(ops(), dev), host), "");
  }
}

// A reader kept open (as a converter or a resharding job keeps it) loads
// again after a failed load.
TEST_P(DeviceFault, AReaderLoadsAgainAfterAFailedLoad) {
  ScopedTempDir dir;
  const std::string path = dir.File("a.ckfmt");
  Value host = MakeRichStateDict(36);
  CKFMT_ASSERT_OK(Save(path, host, SmallSaveOptions(Codec::kBytePlaneZstd)));
  auto reader = CheckpointReader::Open(path, SmallReadOptions());
  CKFMT_ASSERT_OK(reader);
  Value dev = ToDevice(ops(), ZeroedLike(host), 0);
  int failures = Sweep(
      GetParam(), [&] { return (*reader)->Load(&dev).status(); },
      [&](const Status& s) { ExpectNames(s, path); },
      /*holds_pins=*/true);  // the reader's staging, while it is open
  EXPECT_GE(failures, 1);
  EXPECT_EQ(DiffValues(ToHost(ops(), dev), host), "");
}

TEST_P(DeviceFault, ReconstructingOnTheDeviceFailsClearly) {
  ScopedTempDir dir;
  const std::string path = dir.File("a.ckfmt");
  Value host = MakeRichStateDict(33);
  CKFMT_ASSERT_OK(Save(path, host, SmallSaveOptions(Codec::kZstd)));
  LoadOptions lo;
  lo.reconstruct_device = Device{DeviceType::kCUDA, 1};
  Value v{Dict{}};
  int failures = Sweep(
      GetParam(),
      [&] {
        v = Value{Dict{}};
        return Load(path, &v, lo, SmallReadOptions()).status();
      },
      [&](const Status& s) { ExpectNames(s, path); });
  EXPECT_GE(failures, 1);
  EXPECT_EQ(DiffValues(ToHost(ops(), v), host), "");
}

// The saver reports the failure at the call or at Wait(), never leaves a
// file at the final name, and its next save works.
TEST_P(DeviceFault, AsyncSavesFailClearlyAndTheSaverRecovers) {
  ScopedTempDir dir;
  const std::string path = dir.File("a.ckfmt");
  CKFMT_ASSERT_OK(Save(path, MakeRichStateDict(34), SmallSaveOptions()));
  const std::string before = ReadFileBytes(path);
  Value host = MakeRichStateDict(35);
  Value dev = ToDevice(ops(), host, 0);
  for (uint64_t snapshot : {uint64_t{0}, TotalTensorBytes(host) / 4}) {
    SCOPED_TRACE("snapshot_bytes " + std::to_string(snapshot));
    AsyncSaverOptions o;
    o.snapshot_bytes = snapshot;
    AsyncSaver saver(o);
    int failures = Sweep(
        GetParam(),
        [&] {
          Status s = saver.SaveAsync(path, dev, SmallSaveOptions(Codec::kZstd));
          Status w = saver.Wait().status();
          return s.ok() ? w : s;
        },
        [&](const Status& s) {
          ExpectNames(s, path);
          ExpectPreviousFileKept(dir.path(), path, before);
        },
        /*holds_pins=*/true);
    EXPECT_GE(failures, 1);
    EXPECT_EQ(DiffValues(LoadToHost(path), host), "");
    CKFMT_ASSERT_OK(Save(path, MakeRichStateDict(34), SmallSaveOptions()));
  }
}

// Tensors the caller lacks are created on the GPU one by one; a GPU too
// full for the k-th frees the k - 1 made before it with the dict.
TEST_F(DeviceFaultTest, ReconstructingOnAFullGpuFailsClearlyAndLeaksNothing) {
  ScopedTempDir dir;
  const std::string path = dir.File("a.ckfmt");
  Value host = MakeRichStateDict(37);
  CKFMT_ASSERT_OK(Save(path, host, SmallSaveOptions(Codec::kBytePlaneZstd)));
  LoadOptions lo;
  lo.reconstruct_device = Device{DeviceType::kCUDA, 0};
  Value v{Dict{}};
  int failures = Sweep(
      Fault::kAllocation,
      [&] {
        v = Value{Dict{}};
        return Load(path, &v, lo, SmallReadOptions()).status();
      },
      [&](const Status& s) {
        ExpectNames(s, path + ": allocating ");
        v = Value{Dict{}};
        EXPECT_EQ(ops().allocations(), 0u) << "device memory leaked after " << s.ToString();
      });
  EXPECT_EQ(failures, static_cast<int>(CountDeviceTensors(v)));
  EXPECT_EQ(DiffValues(ToHost(ops(), v), host), "");
}

INSTANTIATE_TEST_SUITE_P(PinsAndCopies, DeviceFault, ::testing::Values(Fault::kPin, Fault::kCopy),
                         [](const auto& info) {
                           return std::string(info.param == Fault::kPin ? "Pins" : "Copies");
                         });

}  // namespace
