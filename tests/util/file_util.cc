#include "util/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ckfmt_test {

namespace {
[[noreturn]] void Fail(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}
}  // namespace

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail("cannot open", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) Fail("cannot create", path);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) Fail("cannot write", path);
}

uint64_t FileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) Fail("cannot stat", path);
  return static_cast<uint64_t>(st.st_size);
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

void SetModifiedSecondsAgo(const std::string& path, int seconds) {
  struct timespec times[2];
  ::clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= seconds;
  times[1] = times[0];
  if (::utimensat(AT_FDCWD, path.c_str(), times, 0) != 0) Fail("cannot set the times of", path);
}

void XorByte(const std::string& path, uint64_t offset, uint8_t mask) {
  int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) Fail("cannot open", path);
  uint8_t b = 0;
  if (::pread(fd, &b, 1, static_cast<off_t>(offset)) != 1) {
    ::close(fd);
    Fail("cannot read byte of", path);
  }
  b ^= mask;
  if (::pwrite(fd, &b, 1, static_cast<off_t>(offset)) != 1) {
    ::close(fd);
    Fail("cannot write byte of", path);
  }
  ::close(fd);
}

uint8_t ReadByte(const std::string& path, uint64_t offset) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) Fail("cannot open", path);
  uint8_t b = 0;
  ssize_t n = ::pread(fd, &b, 1, static_cast<off_t>(offset));
  ::close(fd);
  if (n != 1) Fail("cannot read byte of", path);
  return b;
}

void TruncateFile(const std::string& path, uint64_t size) {
  if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0) Fail("cannot truncate", path);
}

void DropFileCache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) Fail("cannot open", path);
  const bool ok = ::fdatasync(fd) == 0 && ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  if (!ok) Fail("cannot drop the cached pages of", path);
}

void MakeFifo(const std::string& path) {
  if (::mkfifo(path.c_str(), 0600) != 0) Fail("cannot make the FIFO", path);
}

}  // namespace ckfmt_test
