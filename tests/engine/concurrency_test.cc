// Distinct readers, writers and async savers used from different threads
// at once (a trainer saving while an evaluation thread loads, say): they
// share the process-wide staging cache and log, and nothing else.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "ckfmt/async_save.h"
#include "ckfmt/reader.h"
#include "ckfmt/verify.h"
#include "ckfmt/writer.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt_test;

// Records the first failure of a thread (gtest assertions are for the
// main thread).
class Failures {
 public:
  void Check(bool ok, const std::string& what) {
    if (!ok && !failed_.exchange(true)) first_ = what;
  }
  void Check(const Status& s, const std::string& what) { Check(s.ok(), what + ": " + s.ToString()); }
  bool any() const { return failed_; }
  const std::string& first() const { return first_; }

 private:
  std::atomic<bool> failed_{false};
  std::string first_;
};

TEST(Concurrency, ReadersWritersAndAsyncSaversInThreadsDoNotInterfere) {
  ScopedTempDir dir;
  const std::string shared = dir.File("shared.ckfmt");
  const Value shared_value = MakeRichStateDict(40);
  CKFMT_ASSERT_OK(ckfmt::Save(shared, shared_value, SmallSaveOptions()));

  Failures failures;
  std::vector<std::thread> threads;
  // Savers, each of its own file, loading and verifying what it saved.
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      const std::string path = dir.File("own" + std::to_string(t) + ".ckfmt");
      for (int round = 0; round < 3; ++round) {
        const Value v = MakeRichStateDict(100 + 10 * t + round);
        const Codec codec = (t + round) % 2 ? Codec::kBytePlaneZstd : Codec::kNone;
        failures.Check(ckfmt::Save(path, v, SmallSaveOptions(codec)).status(), path + ": save");
        Value back = Dict{};
        failures.Check(ckfmt::Load(path, &back, {}, SmallReadOptions()).status(), path + ": load");
        failures.Check(bool(ValuesBitwiseEqual(v, back)), path + ": loaded other values");
        auto report = VerifyFile(path);
        failures.Check(report.ok() && report->ok(), path + ": verify");
      }
    });
  }
  // Readers of one file, each with its own reader.
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int round = 0; round < 4; ++round) {
        Value back = Dict{};
        failures.Check(ckfmt::Load(shared, &back, {}, SmallReadOptions()).status(), "shared load");
        failures.Check(bool(ValuesBitwiseEqual(shared_value, back)), "shared: other values");
      }
    });
  }
  // An async saver on this thread meanwhile.
  AsyncSaver saver;
  const std::string async_path = dir.File("async.ckfmt");
  const Value async_value = MakeRichStateDict(50);
  for (int round = 0; round < 3; ++round) {
    CKFMT_EXPECT_OK(saver.SaveAsync(async_path, async_value, SmallSaveOptions()));
  }
  CKFMT_EXPECT_OK(saver.Wait().status());
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(failures.any()) << failures.first();

  Value back = Dict{};
  CKFMT_ASSERT_OK(ckfmt::Load(async_path, &back));
  EXPECT_TRUE(ValuesBitwiseEqual(async_value, back));
  EXPECT_TRUE(TempNames(dir.List()).empty()) << ::testing::PrintToString(dir.List());
}

}  // namespace
