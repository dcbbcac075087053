#include "prefault.h"

#include <sys/mman.h>
#include <unistd.h>

namespace ckfmt {
namespace {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// Small enough to stop soon after the reads are done, large enough that a
// system call per piece is noise.
constexpr size_t kPiece = size_t{4} << 20;

bool CanPopulate() {
  static const bool can = [] {
    const size_t page = size_t(::sysconf(_SC_PAGESIZE));
    void* p = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    const bool ok = ::madvise(p, page, MADV_POPULATE_WRITE) == 0;
    ::munmap(p, page);
    return ok;
  }();
  return can;
}

}  // namespace

BackgroundPrefault::BackgroundPrefault(ThreadPool& pool,
                                       std::vector<std::pair<uint8_t*, size_t>> ranges) {
  if (ranges.empty() || pool.size() < 2 || !CanPopulate()) return;
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  // Whole pages only (a partial first or last page may hold other data),
  // from the end backwards.
  for (auto r = ranges.rbegin(); r != ranges.rend(); ++r) {
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(r->first) + page - 1) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(r->first) + r->second) / page * page;
    for (uintptr_t p = end; p > begin;) {
      const uintptr_t from = p - begin > kPiece ? p - kPiece : begin;
      pieces_.emplace_back(reinterpret_cast<uint8_t*>(from), p - from);
      p = from;
    }
  }
  if (pieces_.empty()) return;
  running_ = true;
  pool.Submit([this] { Run(); });
}

void BackgroundPrefault::Run() {
  for (const auto& [p, n] : pieces_) {
    if (stop_.load(std::memory_order_relaxed)) break;
    (void)::madvise(p, n, MADV_POPULATE_WRITE);  // a failure leaves the faults to the reads
  }
  std::lock_guard<std::mutex> lock(mu_);
  running_ = false;
  cv_.notify_all();
}

BackgroundPrefault::~BackgroundPrefault() {
  stop_ = true;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !running_; });
}

}  // namespace ckfmt
