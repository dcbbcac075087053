#include "range_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ckfmt/file_layout.h"

namespace ckfmt::dist {

Result<std::unique_ptr<SharedFile>> SharedFile::Open(const std::string& path, bool create,
                                                     bool direct) {
  std::unique_ptr<SharedFile> f(new SharedFile);
  int flags = O_WRONLY | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);
  if (direct) {
    f->fd_ = ::open(path.c_str(), flags | O_DIRECT, 0644);
    f->direct_ = f->fd_ >= 0;
    if (f->fd_ < 0 && errno != EINVAL) {
      return Status::FromErrno(errno, std::string("cannot ") + (create ? "create " : "open ") + path);
    }
  }
  if (f->fd_ < 0) f->fd_ = ::open(path.c_str(), flags, 0644);
  if (f->fd_ < 0) {
    return Status::FromErrno(errno, std::string("cannot ") + (create ? "create " : "open ") + path);
  }
  f->path_ = path;
  return f;
}

SharedFile::~SharedFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status SharedFile::WriteAt(uint64_t offset, const void* data, size_t n) const {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "write to " + path_ + " at offset " + std::to_string(offset));
    }
    if (w == 0) return Status::IOError("write to " + path_ + " made no progress");
    p += w;
    offset += static_cast<uint64_t>(w);
    n -= static_cast<size_t>(w);
  }
  return Status::OK();
}

Status SharedFile::Sync() const {
  if (::fsync(fd_) != 0) return Status::FromErrno(errno, "fsync of " + path_);
  return Status::OK();
}

Status SharedFile::Close() {
  if (fd_ < 0) return Status::OK();
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) return Status::FromErrno(errno, "close of " + path_);
  return Status::OK();
}

RangeWriter::RangeWriter(const SharedFile& file, uint64_t base, size_t block, size_t slots)
    : file_(file), block_(block), slot_offset_(base) {
  for (size_t i = 0; i < slots; ++i) {
    slots_.emplace_back(block);
    free_.push_back(static_cast<int>(i));
  }
  current_ = free_.back();
  free_.pop_back();
  thread_ = std::thread([this] { Loop(); });
}

RangeWriter::~RangeWriter() {
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return queue_.empty() && busy_ == 0; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void RangeWriter::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    auto [slot, offset, len] = queue_.front();
    queue_.pop_front();
    ++busy_;
    bool skip = !error_.ok();
    l.unlock();
    Status s = skip ? Status::OK() : file_.WriteAt(offset, slots_[slot].data(), len);
    l.lock();
    if (error_.ok()) error_ = s;
    --busy_;
    free_.push_back(slot);
    cv_.notify_all();
  }
}

Status RangeWriter::Submit() {
  std::unique_lock<std::mutex> l(mu_);
  if (fill_ > 0) {
    queue_.emplace_back(current_, slot_offset_, fill_);
    slot_offset_ += fill_;
    fill_ = 0;
    current_ = -1;
    cv_.notify_all();
    cv_.wait(l, [&] { return !free_.empty(); });
    current_ = free_.back();
    free_.pop_back();
  }
  return error_;
}

Status RangeWriter::Append(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    size_t take = std::min(n, block_ - fill_);
    std::memcpy(slots_[current_].data() + fill_, p, take);
    fill_ += take;
    p += take;
    n -= take;
    if (fill_ == block_) CKFMT_RETURN_IF_ERROR(Submit());
  }
  return Status::OK();
}

Status RangeWriter::PadToAlignment() {
  size_t pad = AlignUp(fill_) - fill_;
  if (pad == 0) return Status::OK();
  std::memset(slots_[current_].data() + fill_, 0, pad);
  fill_ += pad;
  if (fill_ == block_) return Submit();
  return Status::OK();
}

Status RangeWriter::Finish() {
  if (!IsAligned(fill_)) return Status::Internal("range writer ends unaligned");
  CKFMT_RETURN_IF_ERROR(Submit());
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return queue_.empty() && busy_ == 0; });
  return error_;
}

}  // namespace ckfmt::dist
