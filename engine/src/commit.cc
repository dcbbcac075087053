// The commit steps of ckfmt/commit.h.
#include "ckfmt/commit.h"

#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <random>
#include <system_error>
#include <thread>

#include "ckfmt/log.h"
#include "exchange_by_renames.h"

namespace ckfmt {

std::string TemporaryPathFor(const std::string& path) {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ uint64_t(::getpid()) << 32);
  char suffix[17];
  std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(rng()));
  return path + ".tmp." + suffix;
}

Status CheckCommitTarget(const std::string& path) {
  struct stat st;
  // lstat: rename(2) replaces a symbolic link itself, whatever it points to.
  if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(path + " is a directory, which a save cannot replace");
  }
  return Status::OK();
}

void HoldTemporary(int fd) { (void)::flock(fd, LOCK_EX | LOCK_NB); }

namespace {

// Whether `name` is "<base>.tmp." followed by TemporaryPathFor's 16 hex digits.
bool IsTemporaryOf(const std::string& name, const std::string& base) {
  const std::string prefix = base + ".tmp.";
  if (name.size() != prefix.size() + 16 || name.compare(0, prefix.size(), prefix) != 0) {
    return false;
  }
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (!std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
  }
  return true;
}

std::string DirectoryOf(const std::string& path) {
  std::string copy = path;
  return ::dirname(copy.data());
}

std::string BaseOf(const std::string& path) {
  std::string copy = path;
  return ::basename(copy.data());
}

}  // namespace

void RemoveStaleTemporaries(const std::string& path) {
  const std::string dir = DirectoryOf(path), base = BaseOf(path);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const time_t now = std::time(nullptr);
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (!IsTemporaryOf(name, base)) continue;
    int fd = ::openat(::dirfd(d), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st;
    // A live save takes its lock just after creating the file: the age
    // covers that instant, and the clock of a network file system a little
    // off. The lock is tried last, so a young file is never locked here.
    const bool stale = ::fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) &&
                       now - st.st_mtime >= kStaleTemporarySeconds &&
                       ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    const std::string full = dir + "/" + name;
    if (stale && S_ISREG(st.st_mode) && ::unlinkat(::dirfd(d), name.c_str(), 0) == 0) {
      Log(LogLevel::kWarning, "removed " + full + " (" + std::to_string(st.st_size) +
                                  " bytes), left by a save of " + path + " that did not finish");
    } else if (stale && S_ISDIR(st.st_mode)) {
      std::error_code ec;
      const auto removed = std::filesystem::remove_all(full, ec);
      if (!ec) {
        Log(LogLevel::kWarning, "removed the directory " + full + " (" + std::to_string(removed) +
                                    " entries), left by a save of " + path +
                                    " that did not finish");
      }
    }
    ::close(fd);
  }
  ::closedir(d);
}

Result<std::string> PrepareTemporary(const std::string& path) {
  CKFMT_RETURN_IF_ERROR(CheckCommitTarget(path));
  // Said here in the caller's terms; creating the temporary would name only
  // the temporary.
  const std::string dir = DirectoryOf(path);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    const std::string what = "cannot save " + path + ": directory " + dir;
    return err == ENOENT ? Status::NotFound(what + " does not exist")
                         : Status::FromErrno(err, what);
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("cannot save " + path + ": " + dir + " is not a directory");
  }
  RemoveStaleTemporaries(path);  // before this save needs the space
  return TemporaryPathFor(path);
}

namespace {

// Replaced files at least this large are released off the caller's thread.
constexpr off_t kReleaseInBackgroundBytes = off_t{64} << 20;

// A reference that keeps the file at `path`, if it is a large regular
// file, alive across a rename over it; -1 otherwise.
int HoldLargeFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= kReleaseInBackgroundBytes) {
    return fd;
  }
  ::close(fd);
  return -1;
}

// An fsync of the directory holding `path`, which makes a rename there durable.
Status SyncDirectoryOf(const std::string& path) {
  const std::string dir = DirectoryOf(path);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "cannot open directory " + dir + " to fsync it");
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Status::FromErrno(err, "fsync of directory " + dir);
  return Status::OK();
}

}  // namespace

Status CommitRename(const std::string& from, const std::string& to, bool sync_dir) {
  // The file the rename replaces is freed when its last reference goes,
  // and freeing a large one can take long: ext4 mounted with `discard`
  // discards its blocks before unlink returns (1.6-1.8 s for 2 GiB here).
  // Inside rename(2) that would count against the save, so a large
  // replaced file is held across the rename and let go on a thread of its
  // own. The new file is committed either way.
  const int replaced = HoldLargeFile(to);
  if (::rename(from.c_str(), to.c_str()) != 0) {
    const int err = errno;
    if (replaced >= 0) ::close(replaced);
    return Status::FromErrno(err, "cannot rename " + from + " to " + to);
  }
  if (replaced >= 0) {
    try {
      std::thread([replaced] { ::close(replaced); }).detach();
    } catch (const std::system_error&) {
      ::close(replaced);  // no thread to be had: free it here
    }
  }
  return sync_dir ? SyncDirectoryOf(to) : Status::OK();
}

Status ExchangeByRenames(const std::string& from, const std::string& to) {
  const std::string aside = TemporaryPathFor(to);
  if (::rename(to.c_str(), aside.c_str()) != 0) {
    return Status::FromErrno(errno, "cannot rename " + to + " to " + aside);
  }
  if (::rename(from.c_str(), to.c_str()) != 0) {
    const int err = errno;
    (void)::rename(aside.c_str(), to.c_str());  // put the old one back
    return Status::FromErrno(err, "cannot rename " + from + " to " + to);
  }
  if (::rename(aside.c_str(), from.c_str()) != 0) {
    return Status::FromErrno(errno, "cannot rename " + aside + " to " + from);
  }
  return Status::OK();
}

Status CommitExchange(const std::string& from, const std::string& to, bool sync_dir) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) != 0) {
    const int err = errno;
    if (err != EINVAL && err != ENOSYS && err != EOPNOTSUPP) {
      return Status::FromErrno(err, "cannot exchange " + from + " and " + to);
    }
    CKFMT_RETURN_IF_ERROR(ExchangeByRenames(from, to));  // no exchange on this file system
  }
  return sync_dir ? SyncDirectoryOf(to) : Status::OK();
}

}  // namespace ckfmt
