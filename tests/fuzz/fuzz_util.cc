#include "fuzz_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace ckfmt_fuzz {
namespace {

// One directory per process, removed when the process exits normally.
struct ScratchDir {
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    path = std::string(tmp && *tmp ? tmp : "/tmp") + "/ckfmt-fuzz-" + std::to_string(getpid());
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string path;
};

}  // namespace

std::string WriteScratchFile(const std::string& name, const uint8_t* data, size_t size) {
  static ScratchDir dir;
  const std::string path = dir.path + "/" + name;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    std::perror(path.c_str());
    std::abort();
  }
  for (size_t done = 0; done < size;) {
    ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) {
      std::perror(path.c_str());
      std::abort();
    }
    done += size_t(n);
  }
  close(fd);
  return path;
}

}  // namespace ckfmt_fuzz
