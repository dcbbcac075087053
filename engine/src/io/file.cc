#include "io/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

#include "ckfmt/file_layout.h"
#include "ckfmt/log.h"
#include "io/buffer_cache.h"

namespace ckfmt {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}  // namespace

// Zeroing fresh memory is what faults it in, and that first touch is the
// cost: a VM may back guest memory only then (this one, a Firecracker
// guest, took 125-172 ms for 68 MiB on one thread, 61-104 ms on two; 2.7-4.3
// s for 2 GiB, 1.4-1.6 s on two), and it delays a process's first load,
// verify or async-save Prepare() while the disk waits.
void ZeroFill(uint8_t* p, size_t n) {
  constexpr size_t kPerThread = size_t{16} << 20;
  const size_t threads = std::min<size_t>(
      {std::max(1u, std::thread::hardware_concurrency()), n / kPerThread, 8});
  if (threads <= 1) {
    std::memset(p, 0, n);
    return;
  }
  const size_t share = (n / threads + kHugePage - 1) / kHugePage * kHugePage;
  std::vector<std::thread> helpers;
  size_t begin = share;  // [0, share) is this thread's
  try {
    for (; begin < n; begin += share) {
      helpers.emplace_back([=] { std::memset(p + begin, 0, std::min(share, n - begin)); });
    }
  } catch (...) {
    // No more threads (or room to track them): this one zeroes the rest.
  }
  std::memset(p, 0, std::min(share, n));
  if (begin < n) std::memset(p + begin, 0, n - begin);
  for (std::thread& h : helpers) h.join();
}

void AlignedBuffer::Free::operator()(uint8_t* p) const {
  if (alloc >= kHugePage) return GiveCachedBuffer(p, alloc);
  std::free(p);
}

AlignedBuffer::AlignedBuffer(size_t size) : size_(size) {
  // Buffers of a huge page or more are asked to be backed by huge pages. A
  // transfer from 4 KiB pages scattered in physical memory is split by the
  // block layer into many small requests (virtio: 128 segments, so 512 KiB
  // apiece); physically contiguous 2 MiB pages let a 4 MiB request reach the
  // disk whole, and spare the TLB when copying. Without THP this is a no-op.
  const bool huge = size >= kHugePage;
  const size_t align = huge ? kHugePage : kAlignment;
  size_t alloc = (std::max<size_t>(size, 1) + align - 1) / align * align;
  uint8_t* p = huge ? TakeCachedBuffer(alloc) : nullptr;
  if (p) {
    std::memset(p, 0, alloc);  // resident already: one thread is quick
  } else {
    p = static_cast<uint8_t*>(std::aligned_alloc(align, alloc));
    if (!p) throw std::bad_alloc();
    if (huge) (void)::madvise(p, alloc, MADV_HUGEPAGE);
    ZeroFill(p, alloc);
  }
  data_ = std::unique_ptr<uint8_t, Free>(p, Free(alloc));
}

File::File(File&& o) noexcept { *this = std::move(o); }
File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    direct_align_ = o.direct_align_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}
File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {
// The memory alignment O_DIRECT transfers on `fd` need: statx's
// dio_mem_align, or kAlignment where the kernel does not say.
uint32_t DirectMemoryAlignment(int fd) {
#ifdef STATX_DIOALIGN
  struct statx sx;
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN) &&
      sx.stx_dio_mem_align > 0 && (sx.stx_dio_mem_align & (sx.stx_dio_mem_align - 1)) == 0) {
    return sx.stx_dio_mem_align;
  }
#endif
  return kAlignment;
}

// Opens with O_DIRECT when asked and allowed; sets `*direct_align` to the
// alignment it needs, or 0 if the file was opened buffered.
int OpenMaybeDirect(const std::string& path, int flags, bool direct, uint32_t* direct_align) {
  *direct_align = 0;
  if (direct) {
    int fd = ::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, 0644);
    if (fd >= 0) {
      *direct_align = DirectMemoryAlignment(fd);
      return fd;
    }
    if (errno != EINVAL) return -1;
    Log(LogLevel::kInfo, path + ": the file system refuses O_DIRECT; using buffered I/O");
  }
  return ::open(path.c_str(), flags | O_CLOEXEC, 0644);
}
}  // namespace

Result<File> File::Create(const std::string& path, bool direct) {
  File f;
  // O_RDWR: a writer may read back what it wrote (the converter does).
  f.fd_ = OpenMaybeDirect(path, O_RDWR | O_CREAT | O_EXCL, direct, &f.direct_align_);
  if (f.fd_ < 0) return Status::FromErrno(errno, "cannot create " + path);
  f.path_ = path;
  return f;
}

Result<File> File::OpenWrite(const std::string& path, bool direct) {
  File f;
  f.fd_ = OpenMaybeDirect(path, O_WRONLY, direct, &f.direct_align_);
  if (f.fd_ < 0) return Status::FromErrno(errno, "cannot open " + path + " for writing");
  f.path_ = path;
  return f;
}

Result<File> File::OpenRead(const std::string& path, bool direct) {
  File f;
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
  // writer, forever if none comes; what is not a regular file is refused
  // below, and for a regular file the flag is cleared again.
  f.fd_ = OpenMaybeDirect(path, O_RDONLY | O_NONBLOCK, direct, &f.direct_align_);
  if (f.fd_ < 0) {
    int err = errno;
    Status s = Status::FromErrno(err, "cannot open " + path);
    return err == ENOENT ? Status::NotFound(s.message()) : s;
  }
  f.path_ = path;
  struct stat st;
  if (::fstat(f.fd_, &st) != 0) return Status::FromErrno(errno, "cannot stat " + path);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + " is not a regular file");
  const int fl = ::fcntl(f.fd_, F_GETFL);
  if (fl < 0 || ::fcntl(f.fd_, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    return Status::FromErrno(errno, "cannot set the flags of " + path);
  }
  return f;
}

Result<File> File::Reopen(bool direct) const {
  File f;
  f.fd_ = OpenMaybeDirect("/proc/self/fd/" + std::to_string(fd_), O_RDONLY, direct, &f.direct_align_);
  if (f.fd_ < 0) return Status::FromErrno(errno, "cannot reopen " + path_);
  f.path_ = path_;
  return f;
}

Result<uint64_t> File::Size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) return Status::FromErrno(errno, "cannot stat " + path_);
  return static_cast<uint64_t>(st.st_size);
}

Status File::UnexpectedEnd(uint64_t offset) const {
  std::string m = path_ + ": unexpected end of file at offset " + std::to_string(offset);
  struct stat st;
  if (::fstat(fd_, &st) == 0) m += " (the file is now " + std::to_string(st.st_size) + " bytes)";
  return Status::Corruption(m);
}

Status File::ReadAt(uint64_t offset, void* buf, size_t len) const {
  auto* p = static_cast<uint8_t*>(buf);
  while (len > 0) {
    ssize_t n = ::pread(fd_, p, len, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read of " + path_ + " at offset " + std::to_string(offset));
    }
    if (n == 0) return UnexpectedEnd(offset);
    p += n;
    offset += static_cast<uint64_t>(n);
    len -= static_cast<size_t>(n);
  }
  return Status::OK();
}

Status File::WriteAt(uint64_t offset, const void* buf, size_t len) const {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (len > 0) {
    ssize_t n = ::pwrite(fd_, p, len, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "write to " + path_ + " at offset " + std::to_string(offset));
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    len -= static_cast<size_t>(n);
  }
  return Status::OK();
}

Status File::Allocate(uint64_t offset, uint64_t len) const {
  int rc;
  do {
    rc = ::fallocate(fd_, 0, static_cast<off_t>(offset), static_cast<off_t>(len));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    return Status::FromErrno(errno, "cannot allocate " + std::to_string(len) + " bytes at offset " +
                                        std::to_string(offset) + " of " + path_);
  }
  return Status::OK();
}

Status File::Truncate(uint64_t size) const {
  int rc;
  do {
    rc = ::ftruncate(fd_, static_cast<off_t>(size));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    return Status::FromErrno(errno, "cannot set the size of " + path_ + " to " + std::to_string(size));
  }
  return Status::OK();
}

Status File::Sync() const {
  if (::fsync(fd_) != 0) return Status::FromErrno(errno, "fsync of " + path_);
  return Status::OK();
}

Status File::Close() {
  if (fd_ < 0) return Status::OK();
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) return Status::FromErrno(errno, "close of " + path_);
  return Status::OK();
}

double CachedFraction(const File& file, uint64_t offset, uint64_t length) {
  if (length == 0) return 0;
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  // mmap wants a page-aligned offset: map from the page holding `offset`.
  const uint64_t map_offset = offset / page * page;
  if (length > UINT64_MAX - (offset - map_offset)) return 0;
  const uint64_t size = length + (offset - map_offset);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, file.fd(), off_t(map_offset));
  if (map == MAP_FAILED) return 0;
  // A sample: asking for every page of a 2 GiB file took 22 ms, while the
  // disk waited for the load to begin.
  constexpr uint64_t kWindows = 64, kWindow = uint64_t{1} << 20;
  const uint64_t windows = size <= kWindows * kWindow ? 1 : kWindows;
  const uint64_t len = windows == 1 ? size : kWindow;
  const uint64_t stride = windows == 1 ? 0 : (size - len) / (windows - 1) / page * page;
  std::vector<unsigned char> resident((len + page - 1) / page);
  size_t in = 0, seen = 0;
  for (uint64_t w = 0; w < windows; ++w) {
    if (::mincore(static_cast<uint8_t*>(map) + w * stride, len, resident.data()) != 0) break;
    for (unsigned char r : resident) in += r & 1;
    seen += resident.size();
  }
  ::munmap(map, size);
  return seen == 0 ? 0 : double(in) / double(seen);
}

}  // namespace ckfmt
