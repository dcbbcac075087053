// A restricted unpickler: interprets pickle opcodes (protocols 0-5) into
// the object model of pickle_object.h without executing anything. Globals
// are checked against a whitelist of what torch checkpoints use; any other
// global is refused with an error naming it, or - when allow_opaque - kept
// as a symbolic node (see pickle_object.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ckfmt/status.h"
#include "file_io.h"
#include "pickle_object.h"

namespace ckfmt::convert {

// Sequential bytes for the unpickler.
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

struct UnpickleOptions {
  std::string where;  // names the file/record in messages
  bool allow_opaque = false;
  // Resolves a persistent id (BINPERSID/PERSID); none: persistent ids are refused.
  std::function<Result<py::Ref>(const py::Ref& pid)> persistent_load;
};

// Reads one pickle (up to and including STOP) from `src`.
Result<py::Ref> Unpickle(ByteSource& src, const UnpickleOptions& options);
Result<py::Ref> Unpickle(const std::string& bytes, const UnpickleOptions& options);

// True if module.name is on the whitelist.
bool IsAllowedGlobal(const std::string& module, const std::string& name);

// The dtype of a legacy typed storage class ("FloatStorage" -> F32).
std::optional<DType> DTypeOfStorageClass(const std::string& name);
// The dtype a torch.<name> global stands for ("float32", "float", "half" ...).
std::optional<DType> DTypeOfTorchName(const std::string& name);
// The legacy storage class name for a dtype, or "" if it has none.
std::string StorageClassOf(DType t);

}  // namespace ckfmt::convert
