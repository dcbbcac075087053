// Staging buffers kept between operations, and the page-cache probe that
// picks a load's read path.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ckfmt/io_options.h"
#include "io/buffer_cache.h"
#include "io/file.h"
#include "util/temp_dir.h"

namespace ckfmt {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(BufferCacheTest, AHugeBufferIsReusedAndZeroedAgain) {
  ReleaseStagingCache();
  uint8_t* first;
  {
    AlignedBuffer a(4 * kMiB);
    first = a.data();
    std::memset(a.data(), 0xab, a.size());
  }
  AlignedBuffer b(4 * kMiB);
  EXPECT_EQ(b.data(), first) << "the freed buffer was not reused";
  const std::vector<uint8_t> zeros(b.size(), 0);
  EXPECT_EQ(std::memcmp(b.data(), zeros.data(), b.size()), 0) << "a reused buffer must be zeroed";
  // Another size does not take it; small buffers are never kept.
  AlignedBuffer c(6 * kMiB);
  EXPECT_NE(c.data(), first);
  ReleaseStagingCache();
}

TEST(ZeroFillTest, ZeroesExactlyTheRangeWhateverItsSize) {
  // Sizes on both sides of the one-thread limit and of the shares' 2 MiB
  // rounding; the guard bytes after the range must survive.
  for (size_t n : {size_t{1}, size_t{4097}, 16 * kMiB, 32 * kMiB + 4097, 100 * kMiB + 3}) {
    const size_t guard = 64;
    std::vector<uint8_t> buf(n + guard);
    std::memset(buf.data(), 0xab, buf.size());
    ZeroFill(buf.data(), n);
    const uint8_t* nonzero =
        std::find_if(buf.data(), buf.data() + n, [](uint8_t b) { return b != 0; });
    EXPECT_EQ(nonzero, buf.data() + n) << n << ": byte " << (nonzero - buf.data()) << " not zeroed";
    for (size_t i = n; i < buf.size(); ++i) ASSERT_EQ(buf[i], 0xab) << n << ": wrote past the end";
  }
}

TEST(BufferCacheTest, KeepsTheNewestWithinItsCapAndReleasesOnRequest) {
  ReleaseStagingCache();
  // Two fit, three do not; a multiple of the alignment, as aligned_alloc
  // requires.
  const size_t big = kBufferCacheBytes / 2 - 2 * kMiB;
  std::vector<uint8_t*> given;
  for (int i = 0; i < 3; ++i) {
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(2 * kMiB, big));  // never touched
    ASSERT_NE(p, nullptr);
    given.push_back(p);
    GiveCachedBuffer(p, big);
  }
  EXPECT_EQ(TakeCachedBuffer(big), given[2]);
  EXPECT_EQ(TakeCachedBuffer(big), given[1]);
  EXPECT_EQ(TakeCachedBuffer(big), nullptr) << "the oldest should have been freed";
  GiveCachedBuffer(given[1], big);
  GiveCachedBuffer(given[2], big);
  // A buffer over the cap is freed at once.
  GiveCachedBuffer(static_cast<uint8_t*>(std::aligned_alloc(2 * kMiB, 2 * kBufferCacheBytes)),
                   2 * kBufferCacheBytes);
  EXPECT_EQ(TakeCachedBuffer(2 * kBufferCacheBytes), nullptr);
  ReleaseStagingCache();
  EXPECT_EQ(TakeCachedBuffer(big), nullptr);
}

// A test file of `size` bytes, written through the page cache and synced
// (so its pages stay cached until dropped), opened for buffered reads.
// Skips on tmpfs, which keeps every page in memory.
class CachedFractionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    struct statfs fs{};
    if (::statfs(dir.path().c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC) {
      GTEST_SKIP() << "tmpfs keeps every page in memory";
    }
  }
  File CachedFile(size_t size) {
    const std::string path = dir.File("f" + std::to_string(size));
    auto f = File::Create(path, /*direct=*/false);
    EXPECT_TRUE(f.ok());
    std::vector<uint8_t> bytes(size, 7);
    EXPECT_TRUE(f->WriteAt(0, bytes.data(), size).ok());
    EXPECT_TRUE(f->Sync().ok());
    auto r = File::OpenRead(path, /*direct=*/false);
    EXPECT_TRUE(r.ok());
    return std::move(*r);
  }
  ckfmt_test::ScopedTempDir dir;
};

TEST_F(CachedFractionTest, TellsACachedFileFromADroppedOne) {
  for (size_t size : {size_t{3} * kMiB, size_t{80} * kMiB}) {  // every page; sampled windows
    File r = CachedFile(size);
    EXPECT_GT(CachedFraction(r, 0, size), 0.9) << size;
    ASSERT_EQ(::posix_fadvise(r.fd(), 0, 0, POSIX_FADV_DONTNEED), 0);
    EXPECT_LT(CachedFraction(r, 0, size), 0.1) << size;
  }
}

// A read asks about the bytes it needs, not the whole file (a converter
// reads tensors one by one): a range from an unaligned offset, half cached.
TEST_F(CachedFractionTest, AsksAboutARange) {
  const size_t size = 8 * kMiB, half = size / 2;
  File r = CachedFile(size);
  ASSERT_EQ(::posix_fadvise(r.fd(), 0, half, POSIX_FADV_DONTNEED), 0);
  EXPECT_LT(CachedFraction(r, 100, half - 200), 0.1);
  EXPECT_GT(CachedFraction(r, half + 100, half - 200), 0.9);
  EXPECT_EQ(CachedFraction(r, 100, 0), 0);
}

}  // namespace
}  // namespace ckfmt
