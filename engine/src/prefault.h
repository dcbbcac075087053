// Faulting in fresh memory while a load fills it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "thread_pool.h"

namespace ckfmt {

// Smaller fresh tensors are not worth it: the reads fault them in.
inline constexpr uint64_t kMinPrefaultBytes = uint64_t{1} << 20;

// Faults in the pages of `ranges` - fresh memory that reads are about to
// fill whole, in the ranges' order - on a worker of `pool`, from the last
// range backwards, so that it and the reads meet without repeating each
// other's work. The destructor stops it and waits.
//
// Why: the first touch of a fresh page is what costs (the kernel zeroes it,
// and a VM may back it only then), and an O_DIRECT read takes those faults
// one page at a time on the thread that submits it, while the disk waits.
// With it, a process's first load of the main job's 2.4 GB state (1.6 GB
// of it reconstructed) took 1.8-3.1 s (median 2.3) instead of 3.5-4.0 s
// (3.7), and the second 1.24-1.48 s (1.28) instead of 1.33-1.47 (1.39):
// five alternations of build/tools/ckfmt-main-job. Reads through staging
// (ReadOptions::host_reads) take the faults in their copies, on the
// workers, instead; faulting ahead still helped those loads of a 2 GiB
// state into an empty dict: 1.41-1.54 GiB/s against 1.27-1.41 (3 pairs).
//
// Does nothing where the kernel cannot populate pages without writing them
// (MADV_POPULATE_WRITE, Linux 5.14): the reads may write them meanwhile.
// Nor where `pool` has no worker.
class BackgroundPrefault {
 public:
  BackgroundPrefault(ThreadPool& pool, std::vector<std::pair<uint8_t*, size_t>> ranges);
  ~BackgroundPrefault();
  BackgroundPrefault(const BackgroundPrefault&) = delete;
  BackgroundPrefault& operator=(const BackgroundPrefault&) = delete;

 private:
  void Run();

  std::vector<std::pair<uint8_t*, size_t>> pieces_;  // whole pages, in fault order
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool running_ = false;
};

}  // namespace ckfmt
