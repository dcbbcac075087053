// HostMemoryNeed: the sum a load checks before it allocates what a file
// declares.
#include "ckfmt/host_memory.h"

#include <gtest/gtest.h>

#include <limits>

namespace ckfmt {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

TEST(HostMemoryNeed, FitsUpToTheLimitExactly) {
  HostMemoryNeed fits(1000), over(999);
  for (HostMemoryNeed* need : {&fits, &over}) {
    need->Add({"a"}, 600);
    need->Add({"b"}, 400);
  }
  EXPECT_TRUE(fits.Check("f.ckfmt").ok());
  Status s = over.Check("f.ckfmt");
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find("f.ckfmt"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("for 2 entries"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("the largest, a, 600 bytes"), std::string::npos) << s.message();
}

TEST(HostMemoryNeed, NamesTheOneEntry) {
  HostMemoryNeed need(1000);
  need.Add({"opt", "m"}, 2000);
  Status s = need.Check("f.ckfmt");
  EXPECT_NE(s.message().find("for opt/m,"), std::string::npos) << s.message();
}

TEST(HostMemoryNeed, SumSaturatesInsteadOfWrapping) {
  HostMemoryNeed need(kMax - 1);
  need.Add({"a"}, kMax / 2 + 2);
  need.Add({"b"}, kMax / 2 + 2);  // wraps to 2 without saturation
  EXPECT_EQ(need.Check("f").code(), StatusCode::kIOError);
}

TEST(HostMemoryNeed, NothingNeededAlwaysFits) {
  EXPECT_TRUE(HostMemoryNeed(1).Check("f").ok());
  HostMemoryNeed zero(1);
  zero.Add({"empty"}, 0);
  EXPECT_TRUE(zero.Check("f").ok());
}

TEST(HostMemoryLimit, IsThisMachinesMemory) {
  // At least what this test process already holds, and not unlimited on a
  // machine whose physical memory sysconf reports.
  EXPECT_GE(HostMemoryLimit(), uint64_t{64} << 20);
  EXPECT_LT(HostMemoryLimit(), kMax);
}

TEST(ResizeOrFail, RefusesWhatCannotBeAllocated) {
  std::string s = "kept";
  Status st = ResizeOrFail(&s, kMax / 2);
  EXPECT_EQ(st.code(), StatusCode::kIOError) << st.ToString();
  EXPECT_EQ(s, "kept");
  EXPECT_TRUE(ResizeOrFail(&s, 10).ok());
  EXPECT_EQ(s.size(), 10u);
}

}  // namespace
}  // namespace ckfmt
