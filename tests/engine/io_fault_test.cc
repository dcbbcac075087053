// A disk that fails a read or a write (EIO: a bad sector, a lost network
// volume). Each test makes every transfer that one operation starts fail
// in turn, from the first to the last, through both I/O backends, and
// checks what a user relies on: an error naming the file and the cause,
// the previous checkpoint byte for byte with no temporary beside it, a
// verify that reports the I/O error instead of calling the file corrupt,
// and the next attempt working.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include "ckfmt/async_save.h"
#include "ckfmt/reader.h"
#include "ckfmt/verify.h"
#include "ckfmt/writer.h"
#include "util/fault_sweep.h"
#include "util/file_util.h"
#include "util/io_faults.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt_test;

class IoFaultTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  SaveOptions Saving(Codec codec) const {
    SaveOptions o = SmallSaveOptions(codec);
    o.io.backend = GetParam();
    return o;
  }
  ReadOptions Reading() const {
    ReadOptions o = SmallReadOptions();
    o.io.backend = GetParam();
    return o;
  }

  // Runs `attempt` with its k-th transfer failing, for k = 1, 2, ... until
  // an attempt succeeds, and hands each failure to `check` after checking
  // that it names the file and EIO. Returns how many attempts failed.
  int Sweep(const std::string& path, const std::function<Status()>& attempt,
            const std::function<void(const Status&)>& check = {}) {
    return SweepFaults(
        [&](uint64_t k) { faults_.FailFrom(k ? faults_.transfers() + k : 0); }, attempt,
        [&](const Status& s) {
          EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
          EXPECT_NE(s.message().find(std::strerror(EIO)), std::string::npos) << s.ToString();
          if (check) check(s);
        });
  }

  IoFaults faults_;
};

TEST_P(IoFaultTest, SavesKeepThePreviousCheckpoint) {
  ScopedTempDir dir;
  const std::string path = dir.File("a.ckfmt");
  Value state = MakeRichStateDict(40);
  for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kBytePlaneZstd}) {
    SCOPED_TRACE(std::string(CodecName(uint8_t(codec))));
    CKFMT_ASSERT_OK(Save(path, MakeRichStateDict(41), Saving(codec)));
    const std::string before = ReadFileBytes(path);
    int failures = Sweep(
        path, [&] { return Save(path, state, Saving(codec)).status(); },
        [&](const Status& s) {
          ExpectPreviousFileKept(dir.path(), path, before);
          // Not only the temporary, which is gone: the checkpoint it was for.
          EXPECT_EQ(s.message().rfind("saving " + path + ": ", 0), 0u) << s.ToString();
        });
    EXPECT_GE(failures, 2);
    Value back{Dict{}};
    CKFMT_ASSERT_OK(Load(path, &back, {}, Reading()));
    EXPECT_TRUE(ValuesBitwiseEqual(state, back));
  }
}

TEST_P(IoFaultTest, AsyncSavesFailAtWaitAndTheSaverRecovers) {
  ScopedTempDir dir;
  const std::string path = dir.File("a.ckfmt");
  CKFMT_ASSERT_OK(Save(path, MakeRichStateDict(42), Saving(Codec::kNone)));
  const std::string before = ReadFileBytes(path);
  Value state = MakeRichStateDict(43);
  for (uint64_t snapshot : {uint64_t{0}, TotalTensorBytes(state) / 4}) {
    SCOPED_TRACE("snapshot_bytes " + std::to_string(snapshot));
    AsyncSaverOptions ao;
    ao.snapshot_bytes = snapshot;
    AsyncSaver saver(ao);
    int failures = Sweep(
        path,
        [&] {
          Status s = saver.SaveAsync(path, state, Saving(Codec::kBytePlaneZstd));
          Status w = saver.Wait().status();
          return s.ok() ? w : s;
        },
        [&](const Status&) { ExpectPreviousFileKept(dir.path(), path, before); });
    EXPECT_GE(failures, 2);
    Value back{Dict{}};
    CKFMT_ASSERT_OK(Load(path, &back, {}, Reading()));
    EXPECT_TRUE(ValuesBitwiseEqual(state, back));
    CKFMT_ASSERT_OK(Save(path, MakeRichStateDict(42), Saving(Codec::kNone)));
  }
}

TEST_P(IoFaultTest, LoadsFailClearly) {
  ScopedTempDir dir;
  const std::string path = dir.File("a.ckfmt");
  Value state = MakeRichStateDict(44);
  for (Codec codec : {Codec::kNone, Codec::kBytePlaneZstd}) {
    SCOPED_TRACE(std::string(CodecName(uint8_t(codec))));
    CKFMT_ASSERT_OK(Save(path, state, Saving(codec)));
    // In place, and into an empty dict that gets everything reconstructed.
    Value in_place = ZeroedLike(state);
    EXPECT_GE(Sweep(path, [&] { return Load(path, &in_place, {}, Reading()).status(); }), 1);
    EXPECT_TRUE(ValuesBitwiseEqual(state, in_place));
    Value fresh{Dict{}};
    EXPECT_GE(Sweep(path,
                    [&] {
                      fresh = Value{Dict{}};
                      return Load(path, &fresh, {}, Reading()).status();
                    }),
              1);
    EXPECT_TRUE(ValuesBitwiseEqual(state, fresh));
  }
}

// A reader kept open reads again after a failed read.
TEST_P(IoFaultTest, AReaderReadsAgainAfterAFailedRead) {
  ScopedTempDir dir;
  const std::string path = dir.File("a.ckfmt");
  Value state = MakeRichStateDict(45);
  CKFMT_ASSERT_OK(Save(path, state, Saving(Codec::kZstd)));
  auto reader = CheckpointReader::Open(path, Reading());
  CKFMT_ASSERT_OK(reader);
  Value v = ZeroedLike(state);
  EXPECT_GE(Sweep(path, [&] { return (*reader)->Load(&v).status(); }), 1);
  EXPECT_TRUE(ValuesBitwiseEqual(state, v));
}

// An unreadable file is an error of the verify, not a corrupt file.
TEST_P(IoFaultTest, VerifyReportsTheIoErrorNotCorruption) {
  ScopedTempDir dir;
  const std::string path = dir.File("a.ckfmt");
  CKFMT_ASSERT_OK(Save(path, MakeRichStateDict(46), Saving(Codec::kBytePlaneZstd)));
  VerifyOptions vo;
  vo.io = Reading().io;
  int failures = Sweep(path, [&]() -> Status {
    auto report = VerifyFile(path, vo);
    if (!report.ok()) return report.status();
    EXPECT_TRUE(report->problems.empty()) << report->problems.front().message;
    return Status::OK();
  });
  EXPECT_GE(failures, 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, IoFaultTest,
                         ::testing::Values(IoBackend::kAuto, IoBackend::kPread),
                         [](const auto& info) {
                           return std::string(info.param == IoBackend::kPread ? "Pread" : "Uring");
                         });

}  // namespace
