// Parallel save: one rank's sequential writes into its range of a shared
// file. Bytes are appended through aligned staging slots that a background
// thread writes with pwrite (O_DIRECT where the file system allows it), so
// copying the next slot overlaps writing the previous one.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ckfmt/status.h"
#include "io/file.h"

namespace ckfmt::dist {

// An open file descriptor on the shared file; closes on destruction.
class SharedFile {
 public:
  // create: O_CREAT|O_EXCL (rank 0); else the file must exist.
  static Result<std::unique_ptr<SharedFile>> Open(const std::string& path, bool create,
                                                  bool direct);
  ~SharedFile();
  int fd() const { return fd_; }
  bool direct() const { return direct_; }
  const std::string& path() const { return path_; }
  // Positioned full write. REQUIRES for direct files: aligned buffer,
  // offset and length.
  Status WriteAt(uint64_t offset, const void* data, size_t n) const;
  Status Sync() const;
  Status Close();

 private:
  int fd_ = -1;
  bool direct_ = false;
  std::string path_;
};

class RangeWriter {
 public:
  // Appends start at `base` (4096-aligned). `block` (a 4096 multiple) is
  // the slot size; `slots` >= 2.
  RangeWriter(const SharedFile& file, uint64_t base, size_t block, size_t slots);
  ~RangeWriter();  // waits for queued writes

  Status Append(const void* data, size_t n);
  // Zero-fills up to the next multiple of 4096.
  Status PadToAlignment();
  // Writes what is buffered and waits for every write. REQUIRES: aligned.
  Status Finish();
  uint64_t position() const { return slot_offset_ + fill_; }

 private:
  Status Submit();  // queues the current slot, takes a free one
  void Loop();

  const SharedFile& file_;
  size_t block_;
  std::vector<AlignedBuffer> slots_;
  uint64_t slot_offset_;  // file offset of the current slot's byte 0
  size_t fill_ = 0;
  int current_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> free_;
  std::deque<std::tuple<int, uint64_t, size_t>> queue_;  // slot, offset, length
  size_t busy_ = 0;
  Status error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ckfmt::dist
