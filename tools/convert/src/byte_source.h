// Sequential bytes for the unpickler: from memory or from a file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "ckfmt/status.h"
#include "file_io.h"

namespace ckfmt::convert {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads exactly n bytes; Corruption at the end of the input.
  virtual Status Read(void* dst, size_t n) = 0;
  virtual uint64_t position() const = 0;
  virtual uint64_t remaining() const = 0;
};

class MemorySource : public ByteSource {
 public:
  MemorySource(const void* data, size_t size, std::string where)
      : p_(static_cast<const uint8_t*>(data)), size_(size), where_(std::move(where)) {}
  Status Read(void* dst, size_t n) override;
  uint64_t position() const override { return pos_; }
  uint64_t remaining() const override { return size_ - pos_; }

 private:
  const uint8_t* p_;
  size_t size_, pos_ = 0;
  std::string where_;
};

// Buffered reads of a file from `offset` on.
class FileSource : public ByteSource {
 public:
  FileSource(std::shared_ptr<InputFile> file, uint64_t offset)
      : file_(std::move(file)), pos_(offset) {}
  Status Read(void* dst, size_t n) override;
  uint64_t position() const override { return pos_; }
  uint64_t remaining() const override { return file_->size() - pos_; }

 private:
  std::shared_ptr<InputFile> file_;
  uint64_t pos_;
  std::string buf_;
  uint64_t buf_start_ = 0;
};

}  // namespace ckfmt::convert
