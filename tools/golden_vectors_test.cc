// The golden vectors of spec/vectors stay readable, keep their inspect
// output, and are what the current writer produces, byte for byte.
//
// A failure here means the on-disk format or the writer's output changed.
// If that is intended, regenerate with `ckfmt-make-vectors spec/vectors`,
// review the diff, and update spec/FORMAT.md if the format changed.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zstd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ckfmt/describe.h"
#include "ckfmt/verify.h"
#include "inspect.h"
#include "util/file_util.h"
#include "vectors.h"

namespace ckfmt::tools {
namespace {

namespace fs = std::filesystem;

const fs::path kVectorDir = fs::path(CKFMT_SOURCE_DIR) / "spec" / "vectors";

std::string ReadAll(const fs::path& p) { return ckfmt_test::ReadFileBytes(p.string()); }

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ckfmt_golden_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Index of the first differing byte, for a useful failure message.
size_t FirstDifference(const std::string& a, const std::string& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

class GoldenVectorTest : public ::testing::TestWithParam<GoldenVector> {
 protected:
  fs::path File() const { return kVectorDir / (GetParam().name + ".ckfmt"); }
  fs::path Json() const { return kVectorDir / (GetParam().name + ".inspect.json"); }
};

TEST_P(GoldenVectorTest, Verifies) {
  ASSERT_TRUE(fs::exists(File())) << File();
  auto report = VerifyFile(File().string());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  for (const auto& p : report->problems) {
    ADD_FAILURE() << p.where << ": " << StatusCodeName(p.code) << ": " << p.message;
  }
  EXPECT_EQ(report->file_size, fs::file_size(File()));
}

TEST_P(GoldenVectorTest, InspectJsonMatches) {
  const std::string label = GetParam().name + ".ckfmt";
  auto json = DescribeFileJson(File().string(), label);
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  const std::string want = ReadAll(Json());
  ASSERT_FALSE(want.empty()) << Json() << " is missing or empty";
  EXPECT_TRUE(*json == want) << Json() << " differs from `ckfmt inspect --json " << label
                             << "` at byte " << FirstDifference(*json, want) << "; got:\n"
                             << *json;
}

TEST_P(GoldenVectorTest, WriterReproducesBytes) {
  TempDir dir;
  const fs::path out = dir.path() / (GetParam().name + ".ckfmt");
  Status s = WriteGoldenVector(GetParam().name, out.string());
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::string got = ReadAll(out), want = ReadAll(File());
  const bool uses_zstd = GetParam().name == "zstd" || GetParam().name == "byteplane";
  if (got != want && uses_zstd && ZSTD_versionNumber() != kGoldenZstdVersion) {
    GTEST_SKIP() << "libzstd " << ZSTD_versionString() << " compresses differently from the "
                 << "version the vector was made with; byte comparison skipped";
  }
  ASSERT_EQ(got.size(), want.size()) << "regenerated " << GetParam().name << ".ckfmt has a "
                                     << "different size: the format or the writer changed";
  EXPECT_TRUE(got == want) << "regenerated " << GetParam().name << ".ckfmt differs at byte "
                           << FirstDifference(got, want)
                           << ": the format or the writer changed";
}

// The writer's output does not depend on the I/O path or the thread count.
TEST_P(GoldenVectorTest, SameBytesWithDefaultIo) {
  TempDir dir;
  const fs::path a = dir.path() / "golden_io.ckfmt", b = dir.path() / "default_io.ckfmt";
  IoOptions defaults;  // io_uring + O_DIRECT where available, all cores
  defaults.block_size = 64 << 10;
  ASSERT_TRUE(WriteGoldenVector(GetParam().name, a.string()).ok());
  Status s = WriteGoldenVector(GetParam().name, b.string(), defaults);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(ReadAll(a) == ReadAll(b)) << "the bytes depend on the I/O options";
}

TEST_P(GoldenVectorTest, SmallEnough) { EXPECT_LT(fs::file_size(File()), 100u * 1024); }

INSTANTIATE_TEST_SUITE_P(Vectors, GoldenVectorTest, ::testing::ValuesIn(GoldenVectors()),
                         [](const auto& info) { return info.param.name; });

// The hex dumps of spec/FORMAT.md §3.4 and Appendix B (lines like
// "00001fc0  00 10 00 00 ...") as (file offset, bytes).
std::vector<std::pair<size_t, std::string>> SpecHexDumps() {
  std::istringstream in(ReadAll(fs::path(CKFMT_SOURCE_DIR) / "spec" / "FORMAT.md"));
  std::vector<std::pair<size_t, std::string>> out;
  bool in_section = false, in_code = false;
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("#")) {
      in_section = line.starts_with("### 3.4 ") || line.starts_with("### B.2 ") ||
                   line.starts_with("### B.3 ");
      continue;
    }
    if (line.starts_with("```")) {
      in_code = !in_code;
      continue;
    }
    if (!in_section || !in_code || line.size() < 12 || line.compare(8, 2, "  ") != 0) continue;
    size_t offset = 0;
    try {
      size_t used = 0;
      offset = std::stoul(line.substr(0, 8), &used, 16);
      if (used != 8) continue;
    } catch (...) {
      continue;
    }
    // Byte pairs separated by single spaces, up to the first double space.
    std::string bytes;
    for (size_t i = 10; i + 2 <= line.size() && std::isxdigit(static_cast<unsigned char>(line[i])) &&
                        std::isxdigit(static_cast<unsigned char>(line[i + 1]));
         i += 3) {
      bytes.push_back(static_cast<char>(std::stoi(line.substr(i, 2), nullptr, 16)));
      if (i + 2 < line.size() && line[i + 2] != ' ') break;
      if (i + 3 < line.size() && line[i + 3] == ' ') break;
    }
    if (!bytes.empty()) out.emplace_back(offset, bytes);
  }
  return out;
}

// empty.ckfmt is the file spec/FORMAT.md shows in §3.4 and Appendix B.3,
// byte for byte (the spec's dumps are parsed, so the two cannot drift).
TEST(GoldenVectors, EmptyMatchesFormatSpec) {
  const std::string file = ReadAll(kVectorDir / "empty.ckfmt");
  ASSERT_EQ(file.size(), 8192u);
  size_t checked = 0;
  auto hex = [](const std::string& b) {
    std::string out;
    char buf[4];
    for (unsigned char c : b) {
      std::snprintf(buf, sizeof buf, "%02x ", c);
      out += buf;
    }
    return out;
  };
  for (const auto& [offset, bytes] : SpecHexDumps()) {
    ASSERT_LE(offset + bytes.size(), file.size()) << "spec dump line at " << std::hex << offset;
    const std::string got = file.substr(offset, bytes.size());
    char at[16];
    std::snprintf(at, sizeof at, "%08zx", offset);
    EXPECT_EQ(hex(got), hex(bytes)) << "empty.ckfmt (left) differs from the spec/FORMAT.md dump "
                                       "line at " << at;
    checked += bytes.size();
  }
  // Header line, 96 index bytes, 64 footer bytes (a line may repeat in B.2).
  EXPECT_GE(checked, 16u + 96u + 64u) << "spec/FORMAT.md hex dumps not found";
}

TEST(GoldenVectors, NoStrayFiles) {
  // Every .ckfmt in spec/vectors is a known vector (a stale one would go untested).
  for (const auto& e : fs::directory_iterator(kVectorDir)) {
    if (e.path().extension() != ".ckfmt") continue;
    bool known = false;
    for (const auto& v : GoldenVectors()) known |= e.path().stem() == v.name;
    EXPECT_TRUE(known) << e.path() << " is not produced by ckfmt-make-vectors";
  }
}

}  // namespace
}  // namespace ckfmt::tools
