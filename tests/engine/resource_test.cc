// Repeated saves and loads (a long training run checkpoints thousands of
// times) must not accumulate memory, file descriptors or threads.
#include <dirent.h>
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdio>
#include <string>

#include "ckfmt/reader.h"
#include "ckfmt/verify.h"
#include "ckfmt/writer.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define CKFMT_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CKFMT_UNDER_ASAN 1
#endif
#endif

namespace {

using namespace ckfmt;
using namespace ckfmt_test;

size_t CountEntries(const char* dir) {
  size_t n = 0;
  if (DIR* d = ::opendir(dir)) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n;
}

// Threads of this process, without io_uring's kernel workers (iou-wrk-*,
// iou-sqp-*), which the kernel retires asynchronously after a ring closes.
size_t CountThreads() {
  size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (struct dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::string comm;
      if (FILE* f = std::fopen(("/proc/self/task/" + std::string(e->d_name) + "/comm").c_str(), "r")) {
        char buf[64] = {};
        if (std::fgets(buf, sizeof buf, f)) comm = buf;
        std::fclose(f);
      }
      if (comm.rfind("iou-", 0) != 0) ++n;
    }
    ::closedir(d);
  }
  return n;
}

uint64_t HeapInUse() {
  struct mallinfo2 m = ::mallinfo2();
  return m.uordblks + m.hblkhd;
}

class ResourceTest : public ::testing::TestWithParam<Codec> {
 protected:
  void Cycle() {
    CKFMT_ASSERT_OK(ckfmt::Save(path, value, so));
    Value out = Dict{};
    CKFMT_ASSERT_OK(ckfmt::Load(path, &out, {}, ro));
    auto v = VerifyFile(path, vo);
    CKFMT_ASSERT_OK(v);
  }
  void SetUp() override {
    path = dir.File("r.ckfmt");
    Dict d;
    Tensor t = Tensor::Zeros(DType::kF32, {1 << 19});  // 2 MiB, compressible
    auto* f = static_cast<float*>(t.data());
    for (int i = 0; i < (1 << 19); ++i) f[i] = float(i % 1000) * 0.25f;
    d.Set("t", t);
    value = Value(std::move(d));
    so = SmallSaveOptions(GetParam());
    so.chunk_size = 64 << 10;  // 32 chunks: every worker thread codes some
    so.io.threads = 4;
    so.io.block_size = 1 << 20;
    so.io.staging_bytes = 4 << 20;
    ro = SmallReadOptions();
    ro.io.threads = 4;
    ro.io.backend = IoBackend::kPread;  // the staged, multi-threaded decode path
    vo.io.threads = 4;
    vo.io.block_size = 1 << 20;
    vo.io.staging_bytes = 4 << 20;
  }
  ScopedTempDir dir;
  std::string path;
  Value value;
  SaveOptions so;
  ReadOptions ro;
  VerifyOptions vo;
};

TEST_P(ResourceTest, NoDescriptorOrThreadAccumulates) {
  for (int i = 0; i < 3; ++i) Cycle();
  const size_t fds = CountEntries("/proc/self/fd"), threads = CountThreads();
  for (int i = 0; i < 10; ++i) Cycle();
  EXPECT_EQ(CountEntries("/proc/self/fd"), fds) << "file descriptors leak";
  EXPECT_EQ(CountThreads(), threads) << "threads outlive their save/load";
}

// BUG (format/src/codec.cc EncodeChunk/DecodeChunk, format/src/
// codec_byteplane.cc): zstd contexts are cached in `thread_local ZSTD_CCtx*`
// / `ZSTD_DCtx*` raw pointers that are never freed. Every Save/Load/Verify
// runs codecs on a fresh ThreadPool whose threads exit afterwards, so each
// checkpoint leaks one context per worker thread (about 1.1 MB per
// save+load with 4 threads here; LeakSanitizer reports the same). Use a
// thread_local owner with a destructor (e.g. std::unique_ptr with
// ZSTD_freeCCtx as deleter).
TEST_P(ResourceTest, NoMemoryAccumulates) {
#ifdef CKFMT_UNDER_ASAN
  GTEST_SKIP() << "mallinfo2 is meaningless under AddressSanitizer (its leak check covers this)";
#endif
  for (int i = 0; i < 5; ++i) Cycle();
  const uint64_t before = HeapInUse();
  const int cycles = 25;
  for (int i = 0; i < cycles; ++i) Cycle();
  const int64_t growth = int64_t(HeapInUse()) - int64_t(before);
  EXPECT_LT(growth, 4 << 20) << "heap grew by " << growth / 1024 << " KiB over " << cycles
                             << " save/load/verify cycles";
}

INSTANTIATE_TEST_SUITE_P(Codecs, ResourceTest,
                         ::testing::Values(Codec::kNone, Codec::kZstd, Codec::kBytePlaneZstd),
                         [](const auto& info) {
                           return std::string(info.param == Codec::kNone   ? "none"
                                              : info.param == Codec::kZstd ? "zstd"
                                                                           : "byteplane");
                         });

}  // namespace
