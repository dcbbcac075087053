// Small file helpers for the converter: positioned reads of an input and an
// output file written with pwrite, made visible by rename when complete.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ckfmt/status.h"
#include "io/file.h"

namespace ckfmt::convert {

class InputFile {
 public:
  // Refuses what is not a regular file (a FIFO without waiting for a writer).
  static Result<std::shared_ptr<InputFile>> Open(const std::string& path);
  const std::string& path() const { return file_->path(); }
  uint64_t size() const { return size_; }
  // Reads exactly `n` bytes at `offset`; a short file is Corruption naming
  // `what` (e.g. the zip record).
  Status ReadAt(uint64_t offset, void* dst, uint64_t n, const std::string& what) const;
  // The same file, with bytes [offset, offset + length) read once now and
  // served from memory: for a small region read piecemeal (a DCP item is a
  // whole zip archive of a few KiB, which parsing reads in ~20 pieces).
  // Reads outside the region go to the file.
  static Result<std::shared_ptr<InputFile>> WithRegionInMemory(std::shared_ptr<InputFile> file,
                                                               uint64_t offset, uint64_t length,
                                                               const std::string& what);

 private:
  InputFile(std::shared_ptr<const File> file, uint64_t size)
      : file_(std::move(file)), size_(size) {}
  std::shared_ptr<const File> file_;  // shared with the copies WithRegionInMemory makes
  uint64_t size_;
  std::string region_;  // bytes from region_offset_ on
  uint64_t region_offset_ = 0;
};

// Writes a temporary beside `path` and renames it over `path` on Commit
// (ckfmt/commit.h): `path` keeps its old file until then.
class OutputFile {
 public:
  static Result<std::unique_ptr<OutputFile>> Create(const std::string& path);
  ~OutputFile();  // removes the temporary unless committed
  Status WriteAt(uint64_t offset, const void* data, uint64_t n);
  Status ReadAt(uint64_t offset, void* dst, uint64_t n) const;
  Status Commit(bool fsync);
  const std::string& path() const { return path_; }

 private:
  OutputFile(std::string path, std::string tmp, File file)
      : path_(std::move(path)), tmp_(std::move(tmp)), file_(std::move(file)) {}
  std::string path_, tmp_;
  File file_;
  bool done_ = false;
};

bool IsDirectory(const std::string& path);
bool PathExists(const std::string& path);
std::string JoinPath(const std::string& dir, const std::string& name);
std::string BaseName(const std::string& path);
std::string DirName(const std::string& path);

}  // namespace ckfmt::convert
