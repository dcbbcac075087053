// A save that runs out of disk space (ENOSPC): the error says so and names
// the file, the previous checkpoint stays as it was, and the space the
// failed save took is given back, so the next save that fits succeeds.
//
// The tests mount a small tmpfs in a mount namespace of their own, which
// needs root (CAP_SYS_ADMIN) and a process without other threads (each
// test runs in its own process under CTest); elsewhere they skip.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "ckfmt/async_save.h"
#include "ckfmt/reader.h"
#include "ckfmt/writer.h"
#include "util/file_util.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt_test;

constexpr uint64_t kFileSystemBytes = uint64_t{8} << 20;

class DiskFullTest : public ::testing::TestWithParam<Codec> {
 protected:
  void SetUp() override {
    // Private mounts, so the tmpfs is seen by no other process and goes
    // away with this one, whatever happens to it.
    if (::unshare(CLONE_NEWNS) != 0) {
      GTEST_SKIP() << "cannot make a mount namespace (needs root, no other threads): "
                   << std::strerror(errno);
    }
    ASSERT_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0)
        << std::strerror(errno);
    root = dir.File("small");
    std::filesystem::create_directory(root);
    const std::string size = "size=" + std::to_string(kFileSystemBytes);
    ASSERT_EQ(::mount("tmpfs", root.c_str(), "tmpfs", 0, size.c_str()), 0)
        << std::strerror(errno);
    mounted = true;

    path = root + "/ckpt.ckfmt";
    old_value = MakeRichStateDict(31);
    CKFMT_ASSERT_OK(ckfmt::Save(path, old_value, SmallSaveOptions(GetParam())));
    old_bytes = ReadFileBytes(path);
    free_before = FreeBytes();
  }

  void TearDown() override {
    if (mounted) ::umount2(root.c_str(), MNT_DETACH);
  }

  uint64_t FreeBytes() const {
    struct statvfs st;
    EXPECT_EQ(::statvfs(root.c_str(), &st), 0) << std::strerror(errno);
    return uint64_t(st.f_bavail) * st.f_frsize;
  }

  // Twice the file system: random floats, which no codec shrinks.
  static Value TooLarge() {
    Value v = Dict{};
    v.as_dict().Set("w", RandomTensor(DType::kF32, {kFileSystemBytes / 2}, 7));
    return v;
  }

  void ExpectOutOfSpace(const Status& s) {
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
    EXPECT_NE(s.message().find(std::strerror(ENOSPC)), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
  }

  // The old checkpoint byte for byte, nothing else in the directory, and
  // all the space the failed save used free again.
  void ExpectOldCheckpointAndSpaceBack() {
    EXPECT_TRUE(ReadFileBytes(path) == old_bytes) << "the old checkpoint changed";
    Value sd = Dict{};
    CKFMT_EXPECT_OK(ckfmt::Load(path, &sd));
    EXPECT_TRUE(ValuesBitwiseEqual(old_value, sd));
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(root)) {
      names.push_back(e.path().filename().string());
    }
    EXPECT_EQ(names, std::vector<std::string>{"ckpt.ckfmt"});
    EXPECT_EQ(FreeBytes(), free_before);
  }

  // A save that fits, over the old checkpoint, now succeeds.
  void ExpectNextSaveSucceeds() {
    Value fresh = MakeRichStateDict(32);
    CKFMT_ASSERT_OK(ckfmt::Save(path, fresh, SmallSaveOptions(GetParam())));
    Value sd = Dict{};
    CKFMT_ASSERT_OK(ckfmt::Load(path, &sd));
    EXPECT_TRUE(ValuesBitwiseEqual(fresh, sd));
  }

  ScopedTempDir dir;
  std::string root, path, old_bytes;
  bool mounted = false;
  Value old_value;
  uint64_t free_before = 0;
};

TEST_P(DiskFullTest, SaveThatRunsOutOfSpaceKeepsTheOldCheckpoint) {
  ExpectOutOfSpace(ckfmt::Save(path, TooLarge(), SmallSaveOptions(GetParam())).status());
  ExpectOldCheckpointAndSpaceBack();
  ExpectNextSaveSucceeds();
}

TEST_P(DiskFullTest, AsyncSaveThatRunsOutOfSpaceFailsAtWait) {
  AsyncSaver saver;
  CKFMT_ASSERT_OK(saver.SaveAsync(path, TooLarge(), SmallSaveOptions(GetParam())));
  ExpectOutOfSpace(saver.Wait().status());
  ExpectOldCheckpointAndSpaceBack();
  ExpectNextSaveSucceeds();
}

INSTANTIATE_TEST_SUITE_P(Codecs, DiskFullTest,
                         ::testing::Values(Codec::kNone, Codec::kBytePlaneZstd),
                         [](const auto& info) {
                           return info.param == Codec::kNone ? std::string("none")
                                                             : std::string("byteplane");
                         });

}  // namespace
