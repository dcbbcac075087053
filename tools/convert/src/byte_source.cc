#include "byte_source.h"

#include <algorithm>
#include <cstring>

namespace ckfmt::convert {

Status MemorySource::Read(void* dst, size_t n) {
  if (n > size_ - pos_) {
    return Status::Corruption(where_ + ": pickle ends early (needs " + std::to_string(n) +
                              " more bytes at offset " + std::to_string(pos_) + ", has " +
                              std::to_string(size_ - pos_) + ")");
  }
  std::memcpy(dst, p_ + pos_, n);
  pos_ += n;
  return Status::OK();
}

Status FileSource::Read(void* dst, size_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  while (n > 0) {
    if (pos_ >= buf_start_ && pos_ < buf_start_ + buf_.size()) {
      size_t k = std::min<uint64_t>(n, buf_start_ + buf_.size() - pos_);
      std::memcpy(out, buf_.data() + (pos_ - buf_start_), k);
      out += k;
      pos_ += k;
      n -= k;
      continue;
    }
    if (n >= (1u << 16)) {  // large reads bypass the buffer
      CKFMT_RETURN_IF_ERROR(file_->ReadAt(pos_, out, n, "pickle"));
      pos_ += n;
      return Status::OK();
    }
    uint64_t want = std::min<uint64_t>(1u << 16, file_->size() - std::min(pos_, file_->size()));
    if (want < n) {
      return Status::Corruption(file_->path() + ": pickle ends early at offset " +
                                std::to_string(file_->size()) + " (truncated?)");
    }
    buf_.resize(want);
    CKFMT_RETURN_IF_ERROR(file_->ReadAt(pos_, buf_.data(), want, "pickle"));
    buf_start_ = pos_;
  }
  return Status::OK();
}

}  // namespace ckfmt::convert
