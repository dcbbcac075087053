// Exchanging two names (ckfmt/commit.h's CommitExchange, which replaces a
// non-empty directory) and its fallback of three renames: afterwards each
// name holds what the other did; a failure leaves both as they were.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ckfmt/commit.h"
#include "exchange_by_renames.h"
#include "util/file_util.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt_test;
namespace fs = std::filesystem;

// dir/name/file holding `contents`.
void MakeDirWithFile(const ScopedTempDir& dir, const std::string& name,
                     const std::string& contents) {
  fs::create_directory(dir.File(name));
  WriteFileBytes(dir.File(name) + "/file", contents);
}

using Exchange = Status (*)(const std::string&, const std::string&);

Status Committed(const std::string& from, const std::string& to) {
  return CommitExchange(from, to, /*sync_dir=*/true);
}

class ExchangeTest : public ::testing::TestWithParam<Exchange> {};

TEST_P(ExchangeTest, SwapsTwoNonEmptyDirectories) {
  ScopedTempDir dir;
  MakeDirWithFile(dir, "new", "new");
  MakeDirWithFile(dir, "old", "old");
  CKFMT_ASSERT_OK(GetParam()(dir.File("new"), dir.File("old")));
  EXPECT_EQ(ReadFileBytes(dir.File("old/file")), "new");
  EXPECT_EQ(ReadFileBytes(dir.File("new/file")), "old");
  EXPECT_EQ(dir.List(), (std::vector<std::string>{"new", "old"}));  // nothing set aside
}

TEST_P(ExchangeTest, AMissingSourceLeavesTheTargetAsItWas) {
  ScopedTempDir dir;
  MakeDirWithFile(dir, "old", "old");
  Status s = GetParam()(dir.File("gone"), dir.File("old"));
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  EXPECT_NE(s.message().find(dir.File("gone")), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("No such file or directory"), std::string::npos) << s.ToString();
  EXPECT_EQ(ReadFileBytes(dir.File("old/file")), "old");
  EXPECT_EQ(dir.List(), std::vector<std::string>{"old"});
}

INSTANTIATE_TEST_SUITE_P(AtomicAndByRenames, ExchangeTest,
                         ::testing::Values(&Committed, &ExchangeByRenames));

}  // namespace
