#include "ckfmt/host_memory.h"

#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <new>
#include <stdexcept>

namespace ckfmt {
namespace {

constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

uint64_t ReadLimitFile(const std::string& file) {
  std::ifstream in(file);
  std::string word;
  if (!(in >> word) || word == "max") return kUnlimited;
  try {
    return std::stoull(word);
  } catch (const std::exception&) {
    return kUnlimited;
  }
}

// The lowest memory limit of this process's cgroup and its ancestors, under
// cgroup v2 (memory.max) or v1 (memory.limit_in_bytes).
uint64_t CgroupMemoryLimit() {
  std::ifstream in("/proc/self/cgroup");
  uint64_t limit = kUnlimited;
  for (std::string line; std::getline(in, line);) {
    // hierarchy-id:controllers:path
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string root, file;
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      root = "/sys/fs/cgroup", file = "/memory.max";
    } else if (controllers == "memory" || controllers.find("memory,") == 0 ||
               controllers.find(",memory") != std::string::npos) {
      root = "/sys/fs/cgroup/memory", file = "/memory.limit_in_bytes";
    } else {
      continue;
    }
    for (std::string path = line.substr(b + 1); !path.empty();) {
      limit = std::min(limit, ReadLimitFile(root + (path == "/" ? "" : path) + file));
      if (path == "/") break;
      const size_t slash = path.rfind('/');
      path = slash == 0 ? "/" : path.substr(0, slash);
    }
  }
  return limit;
}

std::string Size(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(1ull << 30));
  return std::to_string(bytes) + " bytes (" + buf + ")";
}

}  // namespace

uint64_t HostMemoryLimit() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  uint64_t ram = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : kUnlimited;
  ram = std::min(ram, CgroupMemoryLimit());
  struct sysinfo si {};
  const uint64_t swap = ::sysinfo(&si) == 0 ? uint64_t(si.totalswap) * si.mem_unit : 0;
  return ram > kUnlimited - swap ? kUnlimited : ram + swap;
}

void HostMemoryNeed::Add(const KeyPath& path, uint64_t bytes) {
  total_ = bytes > kUnlimited - total_ ? kUnlimited : total_ + bytes;
  ++count_;
  if (bytes > largest_ || count_ == 1) largest_ = bytes, largest_path_ = path;
}

Status HostMemoryNeed::Check(const std::string& file) {
  if (total_ == 0) return Status::OK();
  if (limit_ == 0) limit_ = HostMemoryLimit();
  if (total_ <= limit_) return Status::OK();
  std::string which = count_ == 1 ? " for " + FormatKeyPath(largest_path_)
                                  : " for " + std::to_string(count_) + " entries (the largest, " +
                                        FormatKeyPath(largest_path_) + ", " + Size(largest_) + ")";
  return Status::IOError(file + ": loading needs " + Size(total_) + " of new host memory" + which +
                         ", more than this machine has (" + Size(limit_) + " of memory and swap)");
}

Status ResizeOrFail(std::string* s, uint64_t n) {
  try {
    if (n > s->max_size()) throw std::length_error("too long");
    s->resize(n);
  } catch (const std::exception&) {  // bad_alloc, length_error
    return Status::IOError("cannot allocate " + Size(n));
  }
  return Status::OK();
}

}  // namespace ckfmt
