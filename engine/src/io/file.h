// File handles and the pieces of the commit protocol.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ckfmt/status.h"

namespace ckfmt {

// Zeroes `n` bytes at `p`, on up to 8 short-lived threads (whatever
// IoOptions::threads says) when `n` is 32 MiB or more: fresh memory is
// faulted in by it, slowly in some VMs.
void ZeroFill(uint8_t* p, size_t n);

// Memory aligned for O_DIRECT (4096 bytes), zero-initialised. Buffers of a
// huge page or more come from, and go back to, the buffer cache.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t size);
  uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    Free() noexcept : alloc(0) {}
    explicit Free(size_t n) noexcept : alloc(n) {}
    size_t alloc;  // bytes allocated
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t size_ = 0;
};

// An open file descriptor; closes on destruction.
class File {
 public:
  File() = default;
  File(File&& o) noexcept;
  File& operator=(File&& o) noexcept;
  ~File();

  // Creates `path` exclusively (it must not exist), open for reading and
  // writing. With `direct`, tries O_DIRECT and falls back to buffered I/O
  // where the file system refuses.
  static Result<File> Create(const std::string& path, bool direct);
  static Result<File> OpenRead(const std::string& path, bool direct);
  // Opens an existing `path` for writing (no create, no truncate): for a
  // rank writing its range of a file another rank created.
  static Result<File> OpenWrite(const std::string& path, bool direct);
  // A second, independent handle on the same open file (the same inode even
  // if the path has since been replaced), buffered or direct.
  Result<File> Reopen(bool direct) const;

  int fd() const { return fd_; }
  bool direct() const { return direct_align_ != 0; }
  // For a direct file: the alignment O_DIRECT transfers need of memory
  // addresses (statx's dio_mem_align: 512 on a virtio disk, 4 on NVMe),
  // or kAlignment where the kernel does not say; asked when the file was
  // opened. 0 for a buffered file.
  uint32_t direct_memory_alignment() const { return direct_align_; }
  const std::string& path() const { return path_; }
  Result<uint64_t> Size() const;
  // Positioned full read/write (loops over short transfers).
  // REQUIRES for direct files: aligned buffer, offset and length.
  Status ReadAt(uint64_t offset, void* buf, size_t len) const;
  // kCorruption for a read that found the end of the file at `offset`,
  // with the file's size now (it may have shrunk since it was opened).
  Status UnexpectedEnd(uint64_t offset) const;
  Status WriteAt(uint64_t offset, const void* buf, size_t len) const;
  // Allocates [offset, offset + len) (fallocate mode 0): the file's size
  // grows to cover it, and the blocks read as zeros until written.
  Status Allocate(uint64_t offset, uint64_t len) const;
  // Sets the file's size (ftruncate): blocks beyond it are freed.
  Status Truncate(uint64_t size) const;
  Status Sync() const;
  Status Close();

 private:
  int fd_ = -1;
  uint32_t direct_align_ = 0;  // 0: opened buffered
  std::string path_;
};

// The fraction of the file's bytes [offset, offset + length) that sit in
// the page cache (mmap + mincore), estimated from 64 windows of 1 MiB
// spread over them (every page of a smaller range); 0 if it cannot be told.
double CachedFraction(const File& file, uint64_t offset, uint64_t length);

}  // namespace ckfmt
