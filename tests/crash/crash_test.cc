// Crash safety: a writer SIGKILLed at any point never damages the previous
// checkpoint at the final name (writer.h commit protocol, spec §10).
//
// The binary re-executes itself ("--crash-child") as the writer, so the
// child starts from a clean process (no inherited thread pools); the child
// reports progress through a pipe and the parent kills it at chosen points:
// before any data, after some tensors, after all data, inside Commit(), and
// at fixed delays after start.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "ckfmt/commit.h"
#include "ckfmt/reader.h"
#include "ckfmt/verify.h"
#include "ckfmt/writer.h"
#include "util/file_util.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt_test;

constexpr int kTensors = 32;
constexpr uint64_t kTensorElems = 256 * 1024;  // 1 MiB of float32 each: 32 MiB in all

// Events the child writes to the pipe.
constexpr char kCreated = 'C', kTensorDone = 'D', kBeforeCommit = 'B', kCommitted = 'K';

Tensor NewTensor(int i) { return RandomTensor(DType::kF32, {kTensorElems}, 5000 + i); }

// What the child commits, for the parent to compare with.
Value NewCheckpoint() {
  Dict model;
  for (int i = 0; i < kTensors; ++i) model.Set("w" + std::to_string(i), NewTensor(i));
  Dict root;
  root.Set("model", std::move(model));
  root.Set("step", Value(int64_t{2}));
  return Value(std::move(root));
}

Value OldCheckpoint() {
  Value v = MakeRichStateDict(77);
  v.as_dict().Set("step", Value(int64_t{1}));
  return v;
}

void Notify(int fd, char event) {
  while (::write(fd, &event, 1) < 0 && errno == EINTR) {
  }
}

// The child: stream the new checkpoint over `path` with small chunks and
// fsync on, report each step, then wait to be killed.
int ChildMain(const std::string& path, int fd) {
  SaveOptions o;
  o.chunk_size = 64 << 10;
  o.fsync = true;
  o.io.block_size = 1 << 20;
  o.io.staging_bytes = 4 << 20;
  auto w = CheckpointWriter::Create(path, o);
  if (!w.ok()) return 2;
  Notify(fd, kCreated);
  if (!(*w)->AddContainer({"model"}, EntryKind::kDict).ok()) return 3;
  for (int i = 0; i < kTensors; ++i) {
    Tensor t = NewTensor(i);
    if (!(*w)->AddTensorPiece({"model", "w" + std::to_string(i)}, DType::kF32, {kTensorElems},
                              Region::Whole({kTensorElems}), 0, t.data())
             .ok()) {
      return 4;
    }
    Notify(fd, kTensorDone);
  }
  if (!(*w)->AddScalar({"step"}, Value(int64_t{2})).ok()) return 5;
  Notify(fd, kBeforeCommit);
  if (!(*w)->Commit().ok()) return 6;
  Notify(fd, kCommitted);
  for (;;) ::pause();
}

struct KillPoint {
  const char* name;
  char event;       // wait for this event (0: none, kill after `delay_us` from start)
  int count;        // ... this many times
  int delay_us;     // then wait this long
  bool must_be_old; // the kill lands before Commit() starts
};

void PrintTo(const KillPoint& k, std::ostream* os) { *os << k.name; }

class Child {
 public:
  Child(const std::string& path) {
    int p[2];
    if (::pipe(p) != 0) return;
    read_fd_ = p[0];
    std::string fd_arg = std::to_string(p[1]);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(p[0]);
      const char* argv[] = {"/proc/self/exe", "--crash-child", path.c_str(), fd_arg.c_str(),
                            nullptr};
      ::execv("/proc/self/exe", const_cast<char* const*>(argv));
      ::_exit(127);
    }
    ::close(p[1]);
  }
  ~Child() {
    Kill();
    if (read_fd_ >= 0) ::close(read_fd_);
  }
  bool started() const { return pid_ > 0 && read_fd_ >= 0; }
  // Reads events until `count` of `event` arrived; false on EOF (child exited).
  bool WaitFor(char event, int count) {
    int seen = 0;
    while (seen < count) {
      char c;
      ssize_t n = ::read(read_fd_, &c, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      if (c == event) ++seen;
    }
    return true;
  }
  // SIGKILLs and reaps the child; returns its wait status.
  int Kill() {
    if (pid_ <= 0) return status_;
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status_;
  }

 private:
  pid_t pid_ = -1;
  int read_fd_ = -1;
  int status_ = 0;
};

class CrashTest : public ::testing::TestWithParam<KillPoint> {
 protected:
  void SetUp() override {
    path = dir.File("ckpt.ckfmt");
    old_value = OldCheckpoint();
    SaveOptions o = SmallSaveOptions();
    o.fsync = true;
    CKFMT_ASSERT_OK(ckfmt::Save(path, old_value, o));
    old_bytes = ReadFileBytes(path);
  }

  // The file at `path` loads, verifies and equals `want` bit for bit.
  void ExpectCheckpoint(const Value& want, const std::string& what) {
    ReadOptions ro;
    ro.io.block_size = 1 << 20;
    ro.io.staging_bytes = 4 << 20;
    auto r = CheckpointReader::Open(path, ro);
    CKFMT_ASSERT_OK(r);
    Value sd = Dict{};
    CKFMT_ASSERT_OK((*r)->Load(&sd));
    EXPECT_TRUE(ValuesBitwiseEqual(want, sd)) << what;
    VerifyOptions vo;
    vo.io.block_size = 1 << 20;
    vo.io.staging_bytes = 4 << 20;
    auto v = VerifyFile(path, vo);
    CKFMT_ASSERT_OK(v);
    EXPECT_TRUE(v->ok()) << what;
  }

  ScopedTempDir dir;
  std::string path, old_bytes;
  Value old_value;
};

// Whether the lock a dead writer held on its temporary goes within 10 s.
// Not at once: the file stays open, lock and all, while the kernel tears
// down the dead process's io_uring ring (it had the file registered), a
// few milliseconds after the process is gone.
bool LockIsReleased(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool free = false;
  for (int i = 0; i < 1000 && !free; ++i) {
    free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (!free) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::close(fd);
  return free;
}

TEST_P(CrashTest, KilledWriterLeavesAValidCheckpoint) {
  const KillPoint& kp = GetParam();
  bool reached = true;
  int status = 0;
  {
    Child child(path);
    ASSERT_TRUE(child.started());
    if (kp.event) reached = child.WaitFor(kp.event, kp.count);
    if (kp.delay_us) std::this_thread::sleep_for(std::chrono::microseconds(kp.delay_us));
    status = child.Kill();
  }
  ASSERT_TRUE(reached) << "the child exited before the kill point; wait status " << status;
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the child was not killed but exited with " << WEXITSTATUS(status);

  ASSERT_TRUE(FileExists(path)) << "the final name vanished";
  const bool is_old = ReadFileBytes(path) == old_bytes;
  if (kp.must_be_old) {
    EXPECT_TRUE(is_old) << "the final name changed before Commit() was called";
  }
  if (is_old) {
    ExpectCheckpoint(old_value, "old checkpoint after the kill");
  } else {
    // Only a finished commit may have replaced it, and then completely.
    ExpectCheckpoint(NewCheckpoint(), "new checkpoint after the kill");
  }
  RecordProperty("final_file", is_old ? "old" : "new");
  // Stray temporaries may remain; they never shadow the final name, and a
  // later save over it still works. Once they are old enough, that save
  // removes them: the killed writer's lock on its temporary died with it.
  for (const std::string& name : TempNames(dir.List())) {
    EXPECT_EQ(name.rfind("ckpt.ckfmt.tmp.", 0), 0u) << name;
    SetModifiedSecondsAgo(dir.File(name), kStaleTemporarySeconds + 5);
    EXPECT_TRUE(LockIsReleased(dir.File(name))) << name;
  }
  Value later = MakeRichStateDict(78);
  CKFMT_ASSERT_OK(ckfmt::Save(path, later, SmallSaveOptions()));
  Value sd = Dict{};
  CKFMT_ASSERT_OK(ckfmt::Load(path, &sd));
  EXPECT_TRUE(ValuesBitwiseEqual(later, sd));
  EXPECT_TRUE(TempNames(dir.List()).empty()) << ::testing::PrintToString(dir.List());
}

const KillPoint kKillPoints[] = {
    {"AfterCreate", kCreated, 1, 0, true},
    {"AfterFirstTensor", kTensorDone, 1, 0, true},
    {"MidData", kTensorDone, 16, 0, true},
    {"MidDataPlus300us", kTensorDone, 20, 300, true},
    {"AfterAllData", kTensorDone, kTensors, 0, true},
    {"InCommitAt0us", kBeforeCommit, 1, 0, false},
    {"InCommitAt100us", kBeforeCommit, 1, 100, false},
    {"InCommitAt300us", kBeforeCommit, 1, 300, false},
    {"InCommitAt600us", kBeforeCommit, 1, 600, false},
    {"InCommitAt1ms", kBeforeCommit, 1, 1000, false},
    {"InCommitAt5ms", kBeforeCommit, 1, 5000, false},
    {"InCommitAt20ms", kBeforeCommit, 1, 20000, false},
    {"TimerAt0ms", 0, 0, 0, false},
    {"TimerAt1ms", 0, 0, 1000, false},
    {"TimerAt5ms", 0, 0, 5000, false},
    {"TimerAt20ms", 0, 0, 20000, false},
    {"TimerAt50ms", 0, 0, 50000, false},
};

INSTANTIATE_TEST_SUITE_P(KillPoints, CrashTest, ::testing::ValuesIn(kKillPoints),
                         [](const auto& info) { return std::string(info.param.name); });

// After Commit() returned, the new checkpoint is there, complete.
TEST_F(CrashTest, KilledAfterCommitLeavesTheNewCheckpoint) {
  {
    Child child(path);
    ASSERT_TRUE(child.started());
    ASSERT_TRUE(child.WaitFor(kCommitted, 1));
    child.Kill();
  }
  EXPECT_NE(ReadFileBytes(path), old_bytes);
  ExpectCheckpoint(NewCheckpoint(), "after a completed commit");
  EXPECT_TRUE(TempNames(dir.List()).empty()) << ::testing::PrintToString(dir.List());
}

// With no previous checkpoint, a killed first save leaves nothing at the
// final name.
TEST(CrashFirstSaveTest, NothingAppearsAtTheFinalName) {
  ScopedTempDir dir;
  const std::string path = dir.File("first.ckfmt");
  for (int count : {1, 10, kTensors}) {
    {
      Child child(path);
      ASSERT_TRUE(child.started());
      ASSERT_TRUE(child.WaitFor(kTensorDone, count));
      child.Kill();
    }
    EXPECT_FALSE(FileExists(path)) << "after " << count << " tensors";
    auto r = CheckpointReader::Open(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::strcmp(argv[1], "--crash-child") == 0) {
    return ChildMain(argv[2], std::atoi(argv[3]));
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
