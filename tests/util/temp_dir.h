// A per-test scratch directory under ::testing::TempDir(), removed on scope
// exit (set CKFMT_KEEP_TEST_FILES=1 to keep it for a post-mortem).
#pragma once

#include <string>
#include <vector>

namespace ckfmt_test {

class ScopedTempDir {
 public:
  // The name includes the running test's suite/name, the pid and a counter,
  // so parallel ctest processes never share a directory.
  ScopedTempDir();
  ~ScopedTempDir();
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + name
  std::string File(const std::string& name) const;
  // Names of the directory's entries (not recursive), sorted.
  std::vector<std::string> List() const;

 private:
  std::string path_;
};

}  // namespace ckfmt_test
