#include "file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "ckfmt/commit.h"

namespace ckfmt::convert {

Result<std::shared_ptr<InputFile>> InputFile::Open(const std::string& path) {
  // O_NONBLOCK: a FIFO is refused below instead of waiting for a writer.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Status::FromErrno(e, "stat " + path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(path + ": not a regular file");
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    int e = errno;
    ::close(fd);
    return Status::FromErrno(e, "set the flags of " + path);
  }
  return std::shared_ptr<InputFile>(new InputFile(path, fd, static_cast<uint64_t>(st.st_size)));
}

InputFile::~InputFile() {
  if (!owner_) ::close(fd_);
}

Result<std::shared_ptr<InputFile>> InputFile::WithRegionInMemory(std::shared_ptr<InputFile> file,
                                                                 uint64_t offset, uint64_t length,
                                                                 const std::string& what) {
  std::shared_ptr<InputFile> f(new InputFile(file->path_, file->fd_, file->size_));
  f->region_.resize(length);
  CKFMT_RETURN_IF_ERROR(file->ReadAt(offset, f->region_.data(), length, what));
  f->region_offset_ = offset;
  f->owner_ = std::move(file);
  return f;
}

Status InputFile::ReadAt(uint64_t offset, void* dst, uint64_t n, const std::string& what) const {
  if (offset > size_ || n > size_ - offset) {
    return Status::Corruption(path_ + ": " + what + ": needs bytes [" + std::to_string(offset) +
                              ", " + std::to_string(offset + n) + ") but the file has " +
                              std::to_string(size_) + " bytes (truncated?)");
  }
  if (offset >= region_offset_ && offset - region_offset_ <= region_.size() &&
      n <= region_.size() - (offset - region_offset_)) {
    if (n) std::memcpy(dst, region_.data() + (offset - region_offset_), n);
    return Status::OK();
  }
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd_, p, n > (1u << 30) ? (1u << 30) : n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read " + path_ + " (" + what + ")");
    }
    if (r == 0) return Status::Corruption(path_ + ": " + what + ": unexpected end of file");
    p += r;
    offset += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
  return Status::OK();
}

Result<std::unique_ptr<OutputFile>> OutputFile::Create(const std::string& path) {
  CKFMT_ASSIGN_OR_RETURN(std::string tmp, PrepareTemporary(path));
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno(errno, "create " + tmp);
  HoldTemporary(fd);
  return std::unique_ptr<OutputFile>(new OutputFile(path, tmp, fd));
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!done_) ::unlink(tmp_.c_str());
}

Status OutputFile::WriteAt(uint64_t offset, const void* data, uint64_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t r = ::pwrite(fd_, p, n > (1u << 30) ? (1u << 30) : n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "write " + tmp_);
    }
    p += r;
    offset += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
  return Status::OK();
}

Status OutputFile::ReadAt(uint64_t offset, void* dst, uint64_t n) const {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read back " + tmp_);
    }
    if (r == 0) return Status::Internal("read back " + tmp_ + ": short file");
    p += r;
    offset += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
  return Status::OK();
}

Status OutputFile::Commit(bool fsync) {
  if (fsync && ::fsync(fd_) != 0) return Status::FromErrno(errno, "fsync " + tmp_);
  if (::close(fd_) != 0) {
    fd_ = -1;
    return Status::FromErrno(errno, "close " + tmp_);
  }
  fd_ = -1;
  CKFMT_RETURN_IF_ERROR(CommitRename(tmp_, path_, fsync));
  done_ = true;
  return Status::OK();
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string BaseName(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

std::string DirName(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t s = p.rfind('/');
  if (s == std::string::npos) return ".";
  if (s == 0) return "/";
  return p.substr(0, s);
}

}  // namespace ckfmt::convert
