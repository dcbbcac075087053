// How much host memory a read may ask for, checked before it allocates:
// sizes come from the file, and a hostile one can declare any.
#pragma once

#include <cstdint>
#include <string>

#include "ckfmt/key_path.h"
#include "ckfmt/status.h"

namespace ckfmt {

// The most host memory this process could ever hold: physical memory (or
// the cgroup's memory limit, if lower) plus swap.
uint64_t HostMemoryLimit();

// Sums the host memory that a load will allocate for what it creates, so
// that sizes a file declares but no machine of this size could hold are
// refused before anything is allocated. Without it a small hostile file
// (compressed chunks decode to up to 1 GiB each) could declare terabytes:
// each allocation alone may pass the kernel's overcommit check, and the
// process is killed when the reads fill them.
class HostMemoryNeed {
 public:
  // `limit` 0: HostMemoryLimit(), read at the first Check() with anything
  // to check (so that loads creating nothing read no system files).
  explicit HostMemoryNeed(uint64_t limit = 0) : limit_(limit) {}
  // Adds `bytes` for `path` (saturating).
  void Add(const KeyPath& path, uint64_t bytes);
  // OK when the total fits the limit; otherwise an IOError naming `file`,
  // the total, the limit and the largest entry.
  Status Check(const std::string& file);

 private:
  uint64_t limit_;
  uint64_t total_ = 0, largest_ = 0;
  KeyPath largest_path_;
  size_t count_ = 0;
};

// `*s` resized to `n` bytes, or an IOError if that much memory cannot be had.
Status ResizeOrFail(std::string* s, uint64_t n);

}  // namespace ckfmt
