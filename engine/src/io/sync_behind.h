// Flushing a file to stable storage while it is still being written.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "ckfmt/status.h"
#include "io/file.h"

namespace ckfmt {

// A thread that calls fdatasync on `file` each time at least `step` more
// bytes have been written to it, so that the disk's write-back cache
// drains while a save is still producing data, rather than all of it in
// the save's final fsync. (RocksDB's bytes_per_sync does the same for
// buffered writes.) It pays where producing the data is slower than the
// disk takes it in: a compressed save encodes on every core while the
// disk's cache fills; see the SaveOptions::sync_behind_bytes comment.
//
// An fdatasync's error is consumed by whoever sees it first, so the first
// one is kept and Stop() returns it: the save must fail then, as its own
// final fsync may no longer report it.
class SyncBehind {
 public:
  // REQUIRES: step > 0; `file` outlives this object and stays open until
  // Stop() has returned or this object is destroyed.
  SyncBehind(const File& file, uint64_t step);
  ~SyncBehind() { (void)Stop(); }
  SyncBehind(const SyncBehind&) = delete;
  SyncBehind& operator=(const SyncBehind&) = delete;

  // Reports that `bytes` more have reached the file (finished writes).
  void Written(uint64_t bytes);
  // Waits for a sync under way, ends the thread; returns the first error
  // of any sync. Idempotent.
  Status Stop();
  // Syncs done so far (for tests).
  uint64_t syncs() const;

 private:
  void Run();

  const File& file_;
  const uint64_t step_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t unsynced_ = 0;  // bytes written since the last sync began
  uint64_t syncs_ = 0;
  bool stop_ = false;
  Status error_;
  std::thread thread_;
};

}  // namespace ckfmt
