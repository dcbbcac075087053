// The invalid vectors of spec/vectors/invalid are what the generator makes,
// byte for byte, and ckfmt refuses each as invalid.json says: when opening
// (with an error of the listed kind), or when reading the listed entry, and
// for the listed reason: the message cites the rule ("[FORMAT.md C3]").
#include <gtest/gtest.h>
#include <zstd.h>

#include <filesystem>

#include "ckfmt/reader.h"
#include "ckfmt/verify.h"
#include "invalid_vectors.h"
#include "util/file_util.h"
#include "vectors.h"

namespace ckfmt::tools {

// gtest prints a failing parameter with this rather than as raw bytes.
void PrintTo(const InvalidVector& v, std::ostream* os) { *os << v.name; }

namespace {

namespace fs = std::filesystem;

const fs::path kInvalidDir = fs::path(CKFMT_SOURCE_DIR) / "spec" / "vectors" / "invalid";

std::string ReadAll(const fs::path& p) { return ckfmt_test::ReadFileBytes(p.string()); }

TEST(InvalidVectorsTest, BaseIsValid) {
  const fs::path base = kInvalidDir / "base.ckfmt";
  auto report = VerifyFile(base.string());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  for (const auto& p : report->problems) ADD_FAILURE() << p.where << ": " << p.message;
  EXPECT_EQ(report->chunks, 6u);
}

TEST(InvalidVectorsTest, ManifestAndBaseAreWhatTheGeneratorWrites) {
  EXPECT_EQ(ReadAll(kInvalidDir / "invalid.json"), InvalidVectorManifest());
  if (ZSTD_versionNumber() != kGoldenZstdVersion) GTEST_SKIP() << "libzstd differs";
  EXPECT_TRUE(ReadAll(kInvalidDir / "base.ckfmt") == InvalidVectorBase());
}

TEST(InvalidVectorsTest, NoStrayFiles) {
  size_t files = 0;
  for (const auto& f : fs::directory_iterator(kInvalidDir))
    files += f.path().extension() == ".ckfmt";
  EXPECT_EQ(files, InvalidVectors().size() + 1)
      << "a .ckfmt in " << kInvalidDir << " that invalid.json does not list";
}

class InvalidVectorTest : public ::testing::TestWithParam<InvalidVector> {
 protected:
  fs::path File() const { return kInvalidDir / (GetParam().name + ".ckfmt"); }
};

TEST_P(InvalidVectorTest, GeneratorReproducesBytes) {
  const std::string want = ReadAll(File());
  ASSERT_FALSE(want.empty()) << File() << " is missing";
  const std::string got = MakeInvalidVector(GetParam().name);
  if (got != want && ZSTD_versionNumber() != kGoldenZstdVersion) GTEST_SKIP() << "libzstd differs";
  EXPECT_TRUE(got == want) << File() << " is not what ckfmt-make-vectors writes";
}

TEST_P(InvalidVectorTest, Refused) {
  const InvalidVector& v = GetParam();
  const std::string cite = "[FORMAT.md " + v.rule + "]";
  auto reader = CheckpointReader::Open(File().string());
  if (v.entry.empty()) {
    ASSERT_FALSE(reader.ok()) << v.name << " (" << v.rule << ") opened";
    EXPECT_EQ(reader.status().code(), v.refusal) << reader.status().ToString();
    EXPECT_NE(reader.status().message().find(File().string()), std::string::npos)
        << "the message does not name the file: " << reader.status().ToString();
    EXPECT_NE(reader.status().message().find(cite), std::string::npos)
        << "refused, but not for " << v.rule << ": " << reader.status().ToString();
  } else {
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    auto tensor = (*reader)->ReadTensor(v.entry);
    ASSERT_FALSE(tensor.ok()) << v.name << " (" << v.rule << "): the entry was read";
    EXPECT_EQ(tensor.status().code(), v.refusal) << tensor.status().ToString();
    EXPECT_NE(tensor.status().message().find(cite), std::string::npos)
        << "refused, but not for " << v.rule << ": " << tensor.status().ToString();
  }
  // verify finds it too, with the same kind of problem.
  auto report = VerifyFile(File().string());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_FALSE(report->problems.empty()) << v.name << " verifies";
  EXPECT_EQ(report->problems.front().code, v.refusal) << report->problems.front().message;
  bool cited = false;
  for (const auto& p : report->problems) cited |= p.message.find(cite) != std::string::npos;
  EXPECT_TRUE(cited) << "verify does not report " << v.rule << ": "
                     << report->problems.front().message;
}

INSTANTIATE_TEST_SUITE_P(Invalid, InvalidVectorTest, ::testing::ValuesIn(InvalidVectors()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace ckfmt::tools
