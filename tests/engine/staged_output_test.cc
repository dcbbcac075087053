// StagedOutput's file allocation: ahead of the writes for a writer that owns
// the file, never for one that writes a range of another's file. What it
// reports of finished writes, the checksums Put computes as it copies, and
// SyncBehind, which syncs on those reports.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ckfmt/checksum.h"
#include "ckfmt/file_layout.h"
#include "io/file.h"
#include "io/staged_output.h"
#include "io/sync_behind.h"
#include "util/file_util.h"
#include "util/temp_dir.h"

namespace ckfmt {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Whether this directory's file system allocates (tmpfs and ext4 do).
bool CanAllocate(const std::string& dir) {
  const std::string probe = dir + "/probe";
  int fd = ::open(probe.c_str(), O_CREAT | O_WRONLY, 0644);
  bool ok = fd >= 0 && ::fallocate(fd, 0, 0, 4096) == 0;
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return ok;
}

uint64_t AllocatedBytes(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

// Puts `chunks` (each padded to 4096 by Put) and returns what the file
// must then hold from the output's base.
std::vector<uint8_t> PutAll(StagedOutput& out, const std::vector<std::vector<uint8_t>>& chunks) {
  std::vector<uint8_t> expected;
  for (const auto& c : chunks) {
    auto at = out.Put(c.data(), c.size());
    EXPECT_TRUE(at.ok()) << at.status().ToString();
    expected.insert(expected.end(), c.begin(), c.end());
    expected.resize(AlignUp(expected.size()), 0);
  }
  return expected;
}

// A new file written from its start, allocated ahead.
class AllocateAheadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CanAllocate(dir_.path())) GTEST_SKIP() << "the file system does not allocate";
    file = File::Create(path, /*direct=*/true);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    out = StagedOutput::Create(*file, IoOptions{}, 4 * kMiB, 4);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    (*out)->AllocateAhead();
  }

  ckfmt_test::ScopedTempDir dir_;
  const std::string path = dir_.File("out.bin");
  Result<File> file = Status::Internal("not opened");
  Result<std::unique_ptr<StagedOutput>> out = Status::Internal("not opened");
};

TEST_F(AllocateAheadTest, AllocatesAheadAndTrimsTheFileToItsEnd) {
  // The first slot's write allocates a whole first step.
  std::vector<std::vector<uint8_t>> first = {RandomBytes(4 * kMiB + 123, 1)};
  std::vector<uint8_t> expected = PutAll(**out, first);
  EXPECT_GE(ckfmt_test::FileSize(path), 16 * kMiB) << "nothing was allocated ahead of the writes";

  // Then past the 16 and 48 MiB step boundaries, ending mid-step.
  std::vector<std::vector<uint8_t>> more;
  for (uint32_t i = 0; i < 13; ++i) more.push_back(RandomBytes(4 * kMiB - 4096 * i - 7, 2 + i));
  std::vector<uint8_t> rest = PutAll(**out, more);
  expected.insert(expected.end(), rest.begin(), rest.end());
  ASSERT_TRUE((*out)->Finish().ok());
  ASSERT_TRUE(file->Close().ok());

  EXPECT_EQ(ckfmt_test::FileSize(path), expected.size());
  EXPECT_LE(AllocatedBytes(path), expected.size() + 1 * kMiB) << "allocation beyond the end kept";
  EXPECT_TRUE(ckfmt_test::ReadFileBytes(path) == std::string(expected.begin(), expected.end()));
}

TEST_F(AllocateAheadTest, AllocatesWhatWasAnnouncedAtOnce) {
  (*out)->ExpectMore(40 * kMiB);
  std::vector<std::vector<uint8_t>> first = {RandomBytes(4 * kMiB, 30)};
  std::vector<uint8_t> expected = PutAll(**out, first);
  EXPECT_GE(ckfmt_test::FileSize(path), 40 * kMiB);
  // Less came than announced: the file still ends where the writes end.
  std::vector<std::vector<uint8_t>> more = {RandomBytes(5 * kMiB + 1, 31)};
  std::vector<uint8_t> rest = PutAll(**out, more);
  expected.insert(expected.end(), rest.begin(), rest.end());
  ASSERT_TRUE((*out)->Finish().ok());
  ASSERT_TRUE(file->Close().ok());
  EXPECT_EQ(ckfmt_test::FileSize(path), expected.size());
  EXPECT_TRUE(ckfmt_test::ReadFileBytes(path) == std::string(expected.begin(), expected.end()));
}

TEST_F(AllocateAheadTest, WritesOnWhereTheFileSystemRefusesToAllocate) {
  // A file size limit of 24 MiB admits the first step (16 MiB) but not the
  // second (to 48 MiB); the writes below it must all land.
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit lim = old;
  lim.rlim_cur = 24 * kMiB;
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  std::vector<std::vector<uint8_t>> chunks;
  for (uint32_t i = 0; i < 5; ++i) chunks.push_back(RandomBytes(4 * kMiB - 4096 - i, 20 + i));
  std::vector<uint8_t> expected = PutAll(**out, chunks);
  Status finished = (*out)->Finish();
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_TRUE(finished.ok()) << finished.ToString();
  ASSERT_TRUE(file->Close().ok());

  EXPECT_EQ(ckfmt_test::FileSize(path), expected.size());
  EXPECT_TRUE(ckfmt_test::ReadFileBytes(path) == std::string(expected.begin(), expected.end()));
}

TEST(StagedOutputRangeTest, ARangeWriterLeavesTheRestOfTheFileAlone) {
  ckfmt_test::ScopedTempDir dir;
  const std::string path = dir.File("shared.bin");
  // Another writer's bytes fill 24 MiB; this one writes [8, 16) MiB.
  const std::vector<uint8_t> before = RandomBytes(24 * kMiB, 40);
  ckfmt_test::WriteFileBytes(path, std::string(before.begin(), before.end()));
  auto file = File::OpenWrite(path, /*direct=*/true);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto out = StagedOutput::Create(*file, IoOptions{}, 4 * kMiB, 4, 8 * kMiB);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<std::vector<uint8_t>> chunks = {RandomBytes(4 * kMiB, 41), RandomBytes(4 * kMiB, 42)};
  std::vector<uint8_t> mine = PutAll(**out, chunks);
  ASSERT_TRUE((*out)->Finish().ok());
  ASSERT_TRUE(file->Close().ok());

  std::vector<uint8_t> expected = before;
  std::copy(mine.begin(), mine.end(), expected.begin() + 8 * kMiB);
  EXPECT_EQ(ckfmt_test::FileSize(path), before.size());
  EXPECT_TRUE(ckfmt_test::ReadFileBytes(path) == std::string(expected.begin(), expected.end()));
}

// A chunk hashed while Put copies it gets the checksum of its bytes,
// whether it fits a slot, fills one exactly or spans several; the file
// holds the same bytes as without hashing.
TEST(StagedOutputChecksumTest, PutHashesEveryPieceOfAChunk) {
  ckfmt_test::ScopedTempDir dir;
  const std::string path = dir.File("out.bin");
  auto file = File::Create(path, /*direct=*/true);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  constexpr size_t kSlot = 256 << 10;
  auto out = StagedOutput::Create(*file, IoOptions{}, kSlot, 4);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const std::vector<size_t> sizes = {1, 5000, kSlot, kSlot + 1, 3 * kSlot - 4096 + 17, 300 << 10};
  std::vector<uint8_t> expected;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::vector<uint8_t> chunk = RandomBytes(sizes[i], 60 + uint32_t(i));
    ChecksumStream sum;
    auto at = (*out)->Put(chunk.data(), chunk.size(), &sum);
    ASSERT_TRUE(at.ok()) << at.status().ToString();
    EXPECT_EQ(*at, expected.size()) << "chunk " << i;
    EXPECT_EQ(sum.Digest(), Checksum(chunk.data(), chunk.size())) << "chunk of " << sizes[i];
    expected.insert(expected.end(), chunk.begin(), chunk.end());
    expected.resize(AlignUp(expected.size()), 0);
  }
  ASSERT_TRUE((*out)->Finish().ok());
  ASSERT_TRUE(file->Close().ok());
  EXPECT_TRUE(ckfmt_test::ReadFileBytes(path) == std::string(expected.begin(), expected.end()));
}

TEST_F(AllocateAheadTest, ReportsEveryFinishedWrite) {
  uint64_t reported = 0, writes = 0;
  (*out)->OnWritten([&](uint64_t n) {
    reported += n;
    ++writes;
  });
  std::vector<std::vector<uint8_t>> chunks;
  for (uint32_t i = 0; i < 9; ++i) chunks.push_back(RandomBytes(3 * kMiB + 1000 * i, 50 + i));
  const std::vector<uint8_t> expected = PutAll(**out, chunks);
  ASSERT_TRUE((*out)->Finish().ok());
  EXPECT_EQ(reported, expected.size());
  EXPECT_EQ(writes, (expected.size() + 4 * kMiB - 1) / (4 * kMiB)) << "one report per slot written";
}

// Poll() reaps finished writes and starts released ones without a
// Reserve(), Put() or Finish(): what a caller in the middle of a long copy
// relies on to hand a disk that finished its queue more work.
TEST_F(AllocateAheadTest, PollStartsReleasedWritesAsOthersFinish) {
  uint64_t writes = 0;
  (*out)->OnWritten([&](uint64_t) { ++writes; });
  (*out)->LimitWrites(1);  // one write in flight; the others wait for it
  std::vector<std::vector<uint8_t>> chunks;
  for (uint32_t i = 0; i < 2; ++i) chunks.push_back(RandomBytes(4 * kMiB, 60 + i));
  const std::vector<uint8_t> expected = PutAll(**out, chunks);
  // Both slots are released; only Poll() moves them on from here.
  for (int i = 0; i < 5000 && writes < 2; ++i) {
    ASSERT_TRUE((*out)->Poll().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(writes, 2u);
  ASSERT_TRUE((*out)->Finish().ok());
  ASSERT_TRUE(file->Close().ok());
  EXPECT_TRUE(ckfmt_test::ReadFileBytes(path) == std::string(expected.begin(), expected.end()));
}

// Waits up to a few seconds for `sb` to have synced `n` times.
bool WaitForSyncs(const SyncBehind& sb, uint64_t n) {
  for (int i = 0; i < 5000 && sb.syncs() < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return sb.syncs() >= n;
}

TEST(SyncBehindTest, SyncsOnceAStepHasBeenWritten) {
  ckfmt_test::ScopedTempDir dir;
  auto file = File::Create(dir.File("s.bin"), /*direct=*/false);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  SyncBehind sb(*file, 100);
  sb.Written(60);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(sb.syncs(), 0u) << "synced before a whole step was written";
  sb.Written(60);
  EXPECT_TRUE(WaitForSyncs(sb, 1));
  sb.Written(250);  // several steps at once: one sync covers them
  EXPECT_TRUE(WaitForSyncs(sb, 2));
  EXPECT_TRUE(sb.Stop().ok());
  EXPECT_EQ(sb.syncs(), 2u);
  EXPECT_TRUE(sb.Stop().ok()) << "Stop() twice";
}

// An fdatasync error is reported once, to whichever call sees it first; the
// save must fail on it, so Stop() returns it.
TEST(SyncBehindTest, StopReturnsTheFirstSyncError) {
  ckfmt_test::ScopedTempDir dir;
  auto file = File::Create(dir.File("s.bin"), /*direct=*/false);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_TRUE(file->Close().ok());  // fdatasync on it fails (EBADF)
  SyncBehind sb(*file, 1);
  sb.Written(1);
  ASSERT_TRUE(WaitForSyncs(sb, 1));
  Status s = sb.Stop();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("fdatasync of " + dir.File("s.bin")), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace ckfmt
