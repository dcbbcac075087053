// Signals arriving while a save, load or verify runs, as they do in a
// trainer's process: SIGCHLD from data-loader workers, a sampling
// profiler's timer, a preemption handler's SIGTERM. A handler installed
// without SA_RESTART makes interrupted system calls fail with EINTR; the
// engine must retry them, never report an error or write a damaged file.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "ckfmt/async_save.h"
#include "ckfmt/reader.h"
#include "ckfmt/verify.h"
#include "ckfmt/writer.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt_test;

std::atomic<uint64_t> g_delivered{0};
void CountSignal(int) { g_delivered.fetch_add(1, std::memory_order_relaxed); }

// Installs a SIGUSR1 handler without SA_RESTART and sends the process
// SIGUSR1 every `period` from a thread that blocks it itself, so that the
// kernel delivers each to one of the other threads: the caller's or the
// engine's workers. Restores the old handler when destroyed.
class SignalStorm {
 public:
  explicit SignalStorm(std::chrono::microseconds period) {
    struct sigaction sa {};
    sa.sa_handler = CountSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: blocking calls fail with EINTR
    sigaction(SIGUSR1, &sa, &old_);
    sender_ = std::thread([this, period] {
      sigset_t self;
      sigemptyset(&self);
      sigaddset(&self, SIGUSR1);
      pthread_sigmask(SIG_BLOCK, &self, nullptr);
      while (!stop_.load()) {
        ::kill(::getpid(), SIGUSR1);
        std::this_thread::sleep_for(period);
      }
    });
  }
  ~SignalStorm() {
    stop_ = true;
    sender_.join();
    sigaction(SIGUSR1, &old_, nullptr);
  }

 private:
  struct sigaction old_ {};
  std::atomic<bool> stop_{false};
  std::thread sender_;
};

// A state of a few dozen MiB, enough for many requests in flight.
Value MakeState(uint64_t seed) {
  Value v = MakeRichStateDict(seed);
  v.as_dict().Set("big", Value(RandomTensor(DType::kF32, {6, 1 << 20}, seed + 1)));
  v.as_dict().Set("weights", Value(RandomTensor(DType::kBF16, {4, 1 << 20}, seed + 2)));
  return v;
}

TEST(Signals, SaveLoadAndVerifyRetryInterruptedCalls) {
  ScopedTempDir dir;
  const uint64_t before = g_delivered.load();
  {
    SignalStorm storm(std::chrono::microseconds(50));
    for (IoBackend backend : {IoBackend::kUring, IoBackend::kPread}) {
      for (Codec codec : {Codec::kNone, Codec::kBytePlaneZstd}) {
        SCOPED_TRACE(std::string(IoBackendName(backend)) + ", codec " +
                     std::to_string(int(codec)));
        const std::string path = dir.File("s.ckfmt");
        const Value state = MakeState(7 + int(codec));
        SaveOptions so;
        so.codec = codec;
        so.io.backend = backend;
        so.io.block_size = 256 << 10;
        so.io.staging_bytes = 1 << 20;
        CKFMT_ASSERT_OK(ckfmt::Save(path, state, so));

        ReadOptions ro;
        ro.io = so.io;
        Value rebuilt = Dict{};  // everything reconstructed
        CKFMT_ASSERT_OK(ckfmt::Load(path, &rebuilt, {}, ro));
        EXPECT_TRUE(ValuesBitwiseEqual(state, rebuilt));
        Value in_place = ZeroedLike(state);
        CKFMT_ASSERT_OK(ckfmt::Load(path, &in_place, {}, ro));
        EXPECT_TRUE(ValuesBitwiseEqual(state, in_place));

        VerifyOptions vo;
        vo.io = so.io;
        auto report = VerifyFile(path, vo);
        CKFMT_ASSERT_OK(report);
        EXPECT_TRUE(report->ok());

        AsyncSaver saver;
        CKFMT_ASSERT_OK(saver.SaveAsync(path, in_place, so));
        CKFMT_ASSERT_OK(saver.Wait());
        Value again = Dict{};
        CKFMT_ASSERT_OK(ckfmt::Load(path, &again, {}, ro));
        EXPECT_TRUE(ValuesBitwiseEqual(state, again));
      }
    }
  }
  // The storm did reach the operations: thousands of signals, not a few.
  EXPECT_GT(g_delivered.load() - before, 1000u);
  EXPECT_TRUE(TempNames(dir.List()).empty()) << ::testing::PrintToString(dir.List());
}

}  // namespace
