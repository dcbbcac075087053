#include "util/temp_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <cstdlib>
#include <filesystem>

namespace ckfmt_test {

namespace fs = std::filesystem;

namespace {
std::string Sanitize(std::string s) {
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') c = '_';
  }
  return s;
}
}  // namespace

ScopedTempDir::ScopedTempDir() {
  static std::atomic<int> counter{0};
  std::string name = "ckfmt_test";
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
    name += "_" + Sanitize(info->test_suite_name()) + "_" + Sanitize(info->name());
  }
  name += "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  std::string base = ::testing::TempDir();
  if (base.empty() || base.back() != '/') base += '/';
  path_ = base + name;
  std::error_code ec;
  fs::remove_all(path_, ec);
  fs::create_directories(path_);
}

ScopedTempDir::~ScopedTempDir() {
  const char* keep = std::getenv("CKFMT_KEEP_TEST_FILES");
  if (keep && *keep && std::string(keep) != "0") return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string ScopedTempDir::File(const std::string& name) const { return path_ + "/" + name; }

std::vector<std::string> ScopedTempDir::List() const {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ckfmt_test
