// BackgroundPrefault: it may run while reads fill the memory, so it must
// never change what they wrote.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cstring>
#include <thread>

#include "prefault.h"
#include "thread_pool.h"

namespace ckfmt {
namespace {

constexpr size_t kBytes = size_t{64} << 20;

struct FreshMemory {
  uint8_t* p = static_cast<uint8_t*>(
      ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ~FreshMemory() { ::munmap(p, kBytes); }
};

TEST(BackgroundPrefaultTest, WritesMeanwhileAreKept) {
  FreshMemory m;
  ASSERT_NE(m.p, MAP_FAILED);
  ThreadPool pool(2);
  {
    // Unaligned ranges, in "file order"; the writer goes forwards as reads
    // do, the prefault backwards.
    BackgroundPrefault prefault(pool, {{m.p + 100, kBytes / 2 - 100}, {m.p + kBytes / 2, kBytes / 2}});
    for (size_t off = 0; off < kBytes; off += 4096) {
      std::memset(m.p + off, int(off / 4096 % 251) + 1, 4096);
    }
  }
  for (size_t off = 0; off < kBytes; off += 4096) {
    const uint8_t want = uint8_t(off / 4096 % 251 + 1);
    ASSERT_EQ(m.p[off], want) << off;
    ASSERT_EQ(m.p[off + 4095], want) << off;
  }
}

TEST(BackgroundPrefaultTest, LeavesUntouchedMemoryZeroAndStopsOnDestruction) {
  FreshMemory m;
  ASSERT_NE(m.p, MAP_FAILED);
  ThreadPool pool(2);
  { BackgroundPrefault prefault(pool, {{m.p, kBytes}}); }  // returns at once, whatever is left
  for (size_t off = 0; off < kBytes; off += 4096) ASSERT_EQ(m.p[off], 0) << off;
  ThreadPool alone(1);  // no worker: nothing to do
  { BackgroundPrefault prefault(alone, {{m.p, kBytes}}); }
  { BackgroundPrefault prefault(pool, {}); }
}

}  // namespace
}  // namespace ckfmt
