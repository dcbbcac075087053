// The commit protocol (writer.h, spec §10): until Commit() returns OK the
// final name keeps whatever was there; failures and aborts leave no
// temporary files behind.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include "ckfmt/commit.h"
#include "ckfmt/reader.h"
#include "ckfmt/writer.h"
#include "util/file_util.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt_test;

class AtomicCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path = dir.File("ckpt.ckfmt");
    old_value = MakeRichStateDict(21);
    CKFMT_ASSERT_OK(ckfmt::Save(path, old_value, SmallSaveOptions()));
    old_bytes = ReadFileBytes(path);
  }

  // The old checkpoint is still there, byte for byte, and loads; no
  // temporaries are left.
  void ExpectOldCheckpointIntact(const std::string& what) {
    ASSERT_TRUE(FileExists(path)) << what;
    EXPECT_TRUE(ReadFileBytes(path) == old_bytes) << what << ": the old checkpoint changed";
    Value sd = Dict{};
    CKFMT_EXPECT_OK(ckfmt::Load(path, &sd));
    EXPECT_TRUE(ValuesBitwiseEqual(old_value, sd)) << what;
    EXPECT_TRUE(TempNames(dir.List()).empty())
        << what << ": temporary files left: " << ::testing::PrintToString(dir.List());
    EXPECT_EQ(dir.List().size(), 1u) << ::testing::PrintToString(dir.List());
  }

  // Starts a writer over `path` and streams a few entries into it.
  std::unique_ptr<CheckpointWriter> StartWriter() {
    auto w = CheckpointWriter::Create(path, SmallSaveOptions());
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    if (!w.ok()) return nullptr;
    auto writer = std::move(*w);
    EXPECT_TRUE(writer->AddContainer({"model"}, EntryKind::kDict).ok());
    Tensor t = RandomTensor(DType::kF32, {100, 100}, 5);
    EXPECT_TRUE(writer->AddTensorPiece({"model", "w"}, DType::kF32, {100, 100},
                                       Region::Whole({100, 100}), 0, t.data())
                    .ok());
    return writer;
  }

  ScopedTempDir dir;
  std::string path, old_bytes;
  Value old_value;
};

TEST_F(AtomicCommitTest, TemporaryFileWhileWritingFinalNameUntouched) {
  auto w = StartWriter();
  ASSERT_TRUE(w);
  auto temps = TempNames(dir.List());
  ASSERT_EQ(temps.size(), 1u) << ::testing::PrintToString(dir.List());
  EXPECT_EQ(temps[0].rfind("ckpt.ckfmt.tmp.", 0), 0u) << temps[0];
  EXPECT_TRUE(ReadFileBytes(path) == old_bytes);
  // A reader of the final name sees the old checkpoint meanwhile.
  Value sd = Dict{};
  CKFMT_EXPECT_OK(ckfmt::Load(path, &sd));
  EXPECT_TRUE(ValuesBitwiseEqual(old_value, sd));
  CKFMT_ASSERT_OK(w->Commit());
  EXPECT_TRUE(TempNames(dir.List()).empty());
  EXPECT_EQ(w->stats().file_bytes, FileSize(path));
  auto r = CheckpointReader::Open(path);
  CKFMT_ASSERT_OK(r);
  EXPECT_NE((*r)->Find({"model", "w"}), nullptr);
  EXPECT_EQ((*r)->Find({"optim"}), nullptr);
}

TEST_F(AtomicCommitTest, AbortLeavesOldFile) {
  auto w = StartWriter();
  ASSERT_TRUE(w);
  w->Abort();
  ExpectOldCheckpointIntact("after Abort");
  w->Abort();  // idempotent
  EXPECT_FALSE(w->Commit().ok()) << "committed after Abort";
  ExpectOldCheckpointIntact("after Commit following Abort");
}

TEST_F(AtomicCommitTest, DestructionWithoutCommitLeavesOldFile) {
  StartWriter().reset();
  ExpectOldCheckpointIntact("after destruction");
}

TEST_F(AtomicCommitTest, DtypeDisagreementBetweenPiecesPoisonsTheWriter) {
  auto w = StartWriter();
  ASSERT_TRUE(w);
  Tensor a = RandomTensor(DType::kF32, {10, 4}, 1);
  Tensor b = RandomTensor(DType::kI32, {10, 4}, 2);
  CKFMT_ASSERT_OK(w->AddTensorPiece({"model", "s"}, DType::kF32, {20, 4},
                                    Region::Box({0, 0}, {10, 4}), 0, a.data()));
  Status st = w->AddTensorPiece({"model", "s"}, DType::kI32, {20, 4},
                                Region::Box({10, 0}, {10, 4}), 0, b.data());
  EXPECT_FALSE(st.ok()) << "pieces of one tensor with different dtypes";
  EXPECT_FALSE(w->Commit().ok()) << "committed after a failed AddTensorPiece";
  ExpectOldCheckpointIntact("after dtype disagreement");
}

TEST_F(AtomicCommitTest, ShapeDisagreementBetweenPiecesPoisonsTheWriter) {
  auto w = StartWriter();
  ASSERT_TRUE(w);
  Tensor a = RandomTensor(DType::kF32, {10, 4}, 1);
  CKFMT_ASSERT_OK(w->AddTensorPiece({"model", "s"}, DType::kF32, {20, 4},
                                    Region::Box({0, 0}, {10, 4}), 0, a.data()));
  Status st = w->AddTensorPiece({"model", "s"}, DType::kF32, {20, 5},
                                Region::Box({10, 0}, {10, 4}), 0, a.data());
  EXPECT_FALSE(st.ok()) << "pieces of one tensor with different global shapes";
  w.reset();
  ExpectOldCheckpointIntact("after shape disagreement");
}

// BUG (engine/src/writer.cc): only I/O errors poison a CheckpointWriter
// (Guard); a call refused for its arguments (a region outside the tensor, a
// duplicate path, a parent that was never added, ...) leaves it usable, so a
// caller that goes on to Commit() replaces the good checkpoint with one that
// silently lacks the refused entries. A failed Add* must make Commit() fail
// (kAborted, as status.h describes for "a previous failure poisoned the
// operation"), like Save() does by stopping at the first error.
TEST_F(AtomicCommitTest, AnyFailedCallPreventsCommit) {
  Tensor a = RandomTensor(DType::kF32, {10, 4}, 1);
  struct Case {
    const char* what;
    std::function<Status(CheckpointWriter&)> bad_call;
  };
  const std::vector<Case> cases = {
      {"region outside the tensor",
       [&](CheckpointWriter& w) {
         return w.AddTensorPiece({"model", "s"}, DType::kF32, {10, 4},
                                 Region::Box({5, 0}, {10, 4}), 0, a.data());
       }},
      {"duplicate path",
       [](CheckpointWriter& w) { return w.AddScalar({"model", "w"}, Value(int64_t{1})); }},
      {"parent never added",
       [](CheckpointWriter& w) { return w.AddScalar({"optim", "lr"}, Value(1e-3)); }},
      {"AddScalar of a tensor",
       [&](CheckpointWriter& w) { return w.AddScalar({"model", "t"}, Value(a)); }},
  };
  for (const auto& c : cases) {
    auto w = StartWriter();
    ASSERT_TRUE(w);
    EXPECT_FALSE(c.bad_call(*w).ok()) << c.what << ": the call was accepted";
    Status commit = w->Commit();
    EXPECT_FALSE(commit.ok()) << c.what << ": committed after a failed call";
    if (commit.ok()) {
      // Put the old checkpoint back so the next case starts clean.
      WriteFileBytes(path, old_bytes);
      continue;
    }
    w.reset();
    ExpectOldCheckpointIntact(c.what);
  }
}

TEST_F(AtomicCommitTest, OverlappingPiecesAreRefused) {
  auto w = StartWriter();
  ASSERT_TRUE(w);
  Tensor a = RandomTensor(DType::kF32, {6, 4}, 1);
  Status st1 = w->AddTensorPiece({"model", "s"}, DType::kF32, {10, 4},
                                 Region::Box({0, 0}, {6, 4}), 0, a.data());
  Status st2 = st1.ok() ? w->AddTensorPiece({"model", "s"}, DType::kF32, {10, 4},
                                            Region::Box({4, 0}, {6, 4}), 0, a.data())
                        : st1;
  Status commit = st2.ok() ? w->Commit() : st2;
  EXPECT_FALSE(commit.ok()) << "committed overlapping pieces";
  w.reset();
  ExpectOldCheckpointIntact("after overlapping pieces");
}

TEST_F(AtomicCommitTest, FailedSaveLeavesOldFile) {
  // Many good entries, then one Save() must refuse (a non-host tensor).
  Value bad = MakeRichStateDict(22);
  std::vector<float> host(8);
  bad.as_dict().Set("zz_gpu", Tensor::View(DType::kF32, {8}, host.data(), Device{DeviceType::kCUDA, 0}));
  EXPECT_FALSE(ckfmt::Save(path, bad, SmallSaveOptions()).ok());
  ExpectOldCheckpointIntact("after a failed Save");
  // A shard whose region does not match its element count.
  Value bad2 = MakeRichStateDict(23);
  Tensor t = Tensor::Zeros(DType::kF32, {4});
  t.SetShard(ShardSpec{{100}, Region::Flat(0, 5)});
  bad2.as_dict().Set("zz_bad_shard", t);
  EXPECT_FALSE(ckfmt::Save(path, bad2, SmallSaveOptions()).ok());
  ExpectOldCheckpointIntact("after a Save with an inconsistent shard");
}

// BUG (engine/src/read_plan.cc, ReadCached): reads of data re-open the file
// by name (File::OpenRead(direct_file.path(), false)) instead of using the
// descriptor Open() validated. Once a new checkpoint is committed under the
// same name, an open reader applies the old index to the new file: with
// checksums on, loads fail with bogus "checksum mismatch" errors; with
// checksums off they return the wrong bytes silently. A reader must keep
// reading the file it opened (e.g. re-open through /proc/self/fd/N, or clear
// O_DIRECT on a dup()ed descriptor with fcntl).
TEST_F(AtomicCommitTest, OpenReaderKeepsReadingTheOldFileAcrossACommit) {
  for (bool verify : {true, false}) {
    CKFMT_ASSERT_OK(ckfmt::Save(path, old_value, SmallSaveOptions()));
    ReadOptions ro = SmallReadOptions();  // IoBackend::kAuto, direct I/O
    ro.verify_checksums = verify;
    (void)ReadFileBytes(path);  // in the page cache, as a recently written file is
    auto r = CheckpointReader::Open(path, ro);
    CKFMT_ASSERT_OK(r);
    Value fresh = MakeRichStateDict(24);
    CKFMT_ASSERT_OK(ckfmt::Save(path, fresh, SmallSaveOptions()));
    (void)ReadFileBytes(path);
    Value sd = Dict{};
    auto load = (*r)->Load(&sd);
    EXPECT_TRUE(load.ok()) << "verify_checksums=" << verify << ": " << load.status().ToString();
    if (load.ok()) {
      EXPECT_TRUE(ValuesBitwiseEqual(old_value, sd))
          << "verify_checksums=" << verify << ": an open reader returned the replacement's bytes";
    }
    Value sd2 = Dict{};
    CKFMT_ASSERT_OK(ckfmt::Load(path, &sd2));
    EXPECT_TRUE(ValuesBitwiseEqual(fresh, sd2));
  }
}

size_t OpenDescriptors() {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) n += e.exists() ? 1 : 0;
  return n;
}

// A large file replaced by a commit is freed on a background thread (file.h,
// CommitRename): the new checkpoint is in place when Save() returns, and the
// reference that kept the old file alive across the rename is let go.
TEST_F(AtomicCommitTest, ReplacedLargeFileIsReleased) {
  ASSERT_EQ(::truncate(path.c_str(), off_t{64} << 20), 0);  // sparse, 64 MiB
  const size_t before = OpenDescriptors();
  Value fresh = MakeRichStateDict(25);
  CKFMT_ASSERT_OK(ckfmt::Save(path, fresh, SmallSaveOptions()));
  Value sd = Dict{};
  CKFMT_ASSERT_OK(ckfmt::Load(path, &sd));
  EXPECT_TRUE(ValuesBitwiseEqual(fresh, sd));
  EXPECT_EQ(dir.List().size(), 1u) << ::testing::PrintToString(dir.List());
  size_t now = OpenDescriptors();
  for (int i = 0; i < 500 && now > before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    now = OpenDescriptors();
  }
  EXPECT_EQ(now, before) << "the replaced file is still held open";
}

TEST_F(AtomicCommitTest, SaveOntoADirectoryIsRefusedBeforeWriting) {
  // rename(2) cannot replace a directory: found at the start, not after
  // the whole state has been written.
  const std::string target = dir.File("a_directory");
  std::filesystem::create_directory(target);
  auto w = CheckpointWriter::Create(target, SmallSaveOptions());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument) << w.status().ToString();
  EXPECT_NE(w.status().message().find(target + " is a directory"), std::string::npos)
      << w.status().ToString();
  EXPECT_EQ(ckfmt::Save(target, old_value, SmallSaveOptions()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::filesystem::is_directory(target));
  EXPECT_TRUE(TempNames(dir.List()).empty()) << ::testing::PrintToString(dir.List());
}

// A save through "latest -> step_1000" must not overwrite step_1000: the
// link itself is replaced, as rename(2) does, whether it names a file or a
// directory.
TEST_F(AtomicCommitTest, SaveOntoASymlinkReplacesTheLinkNotWhatItNames) {
  const std::string link = dir.File("latest.ckfmt");
  std::filesystem::create_symlink(path, link);
  const Value new_value = MakeRichStateDict(22);
  CKFMT_ASSERT_OK(ckfmt::Save(link, new_value, SmallSaveOptions()));
  EXPECT_FALSE(std::filesystem::is_symlink(link));
  EXPECT_TRUE(ReadFileBytes(path) == old_bytes) << "the file the link named changed";
  Value back = Dict{};
  CKFMT_ASSERT_OK(ckfmt::Load(link, &back).status());
  EXPECT_TRUE(ValuesBitwiseEqual(new_value, back));

  const std::string to_dir = dir.File("to_dir.ckfmt");
  std::filesystem::create_directory(dir.File("a_directory"));
  std::filesystem::create_symlink(dir.File("a_directory"), to_dir);
  CKFMT_ASSERT_OK(ckfmt::Save(to_dir, new_value, SmallSaveOptions()));
  EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::symlink_status(to_dir)));
  EXPECT_TRUE(std::filesystem::is_directory(dir.File("a_directory")));
}

// Writes `name` in the test directory with `bytes` bytes, last modified
// `age_seconds` ago.
void MakeFile(const ScopedTempDir& dir, const std::string& name, size_t bytes, int age_seconds) {
  WriteFileBytes(dir.File(name), std::string(bytes, 'x'));
  SetModifiedSecondsAgo(dir.File(name), age_seconds);
}

TEST_F(AtomicCommitTest, StaleTemporariesOfInterruptedSavesAreRemoved) {
  const int old_enough = kStaleTemporarySeconds + 5;
  MakeFile(dir, "ckpt.ckfmt.tmp.0123456789abcdef", 100000, old_enough);  // stale
  MakeFile(dir, "ckpt.ckfmt.tmp.00000000000000ff", 100, old_enough);     // stale
  MakeFile(dir, "ckpt.ckfmt.tmp.fedcba9876543210", 100, 0);           // too young
  MakeFile(dir, "ckpt.ckfmt.tmp.1111111111111111", 100, old_enough);  // held, below
  MakeFile(dir, "other.ckfmt.tmp.0123456789abcdef", 100, old_enough); // another file's
  MakeFile(dir, "ckpt.ckfmt.tmp.notarandomname!", 100, old_enough);   // not our name
  // A live save's lock, as another process would hold it.
  const int held = ::open(dir.File("ckpt.ckfmt.tmp.1111111111111111").c_str(), O_RDONLY);
  ASSERT_GE(held, 0);
  HoldTemporary(held);

  LogCapture log;
  CKFMT_ASSERT_OK(ckfmt::Save(path, old_value, SmallSaveOptions()));
  ::close(held);
  EXPECT_EQ(dir.List(), (std::vector<std::string>{
                            "ckpt.ckfmt", "ckpt.ckfmt.tmp.1111111111111111",
                            "ckpt.ckfmt.tmp.fedcba9876543210", "ckpt.ckfmt.tmp.notarandomname!",
                            "other.ckfmt.tmp.0123456789abcdef"}));
  EXPECT_EQ(log.CountContaining(LogLevel::kWarning, "ckpt.ckfmt.tmp.0123456789abcdef (100000 bytes)"),
            1u);
  EXPECT_EQ(log.CountContaining(LogLevel::kWarning, "that did not finish"), 2u);
}

// `ckfmt convert --to dcp` writes a temporary directory; one that a killed
// conversion left goes too, with what it holds.
TEST_F(AtomicCommitTest, StaleTemporaryDirectoriesAreRemovedWithTheirFiles) {
  const int old_enough = kStaleTemporarySeconds + 5;
  auto make_dir = [&](const std::string& name, int age) {
    std::filesystem::create_directory(dir.File(name));
    WriteFileBytes(dir.File(name) + "/__0_0.distcp", "data");
    SetModifiedSecondsAgo(dir.File(name), age);
  };
  make_dir("ckpt.ckfmt.tmp.00000000000000aa", old_enough);  // stale
  make_dir("ckpt.ckfmt.tmp.00000000000000bb", 0);           // too young
  make_dir("ckpt.ckfmt.tmp.00000000000000cc", old_enough);  // held, below
  const int held = ::open(dir.File("ckpt.ckfmt.tmp.00000000000000cc").c_str(),
                          O_RDONLY | O_DIRECTORY);
  ASSERT_GE(held, 0);
  HoldTemporary(held);

  LogCapture log;
  RemoveStaleTemporaries(path);
  ::close(held);
  EXPECT_EQ(dir.List(), (std::vector<std::string>{"ckpt.ckfmt", "ckpt.ckfmt.tmp.00000000000000bb",
                                                  "ckpt.ckfmt.tmp.00000000000000cc"}));
  EXPECT_EQ(log.CountContaining(LogLevel::kWarning,
                                "the directory " + dir.File("ckpt.ckfmt.tmp.00000000000000aa") +
                                    " (2 entries)"),
            1u);
}

TEST_F(AtomicCommitTest, AStalledLiveSaveKeepsItsTemporary) {
  // A save that has written nothing for longer than the stale age (an
  // async save waiting on a slow disk, say) still holds its temporary.
  auto first = StartWriter();
  ASSERT_NE(first, nullptr);
  auto temps = TempNames(dir.List());
  ASSERT_EQ(temps.size(), 1u);
  SetModifiedSecondsAgo(dir.File(temps[0]), kStaleTemporarySeconds + 5);

  CKFMT_ASSERT_OK(ckfmt::Save(path, MakeRichStateDict(26), SmallSaveOptions()));
  EXPECT_TRUE(FileExists(dir.File(temps[0])));
  CKFMT_ASSERT_OK(first->Commit());
  Value sd = Dict{};
  CKFMT_ASSERT_OK(ckfmt::Load(path, &sd));
  EXPECT_TRUE(sd.as_dict().Find("model") != nullptr);
  EXPECT_TRUE(TempNames(dir.List()).empty()) << ::testing::PrintToString(dir.List());
}

TEST_F(AtomicCommitTest, NewPathLeavesNothingOnFailure) {
  const std::string other = dir.File("new.ckfmt");
  {
    auto w = CheckpointWriter::Create(other, SmallSaveOptions());
    CKFMT_ASSERT_OK(w);
    CKFMT_ASSERT_OK((*w)->AddScalar({"x"}, Value(int64_t{1})));
  }
  EXPECT_FALSE(FileExists(other));
  EXPECT_TRUE(TempNames(dir.List()).empty()) << ::testing::PrintToString(dir.List());
}

}  // namespace
