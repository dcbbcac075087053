#include "convert_test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ckfmt/checksum.h"
#include "ckfmt/reader.h"
#include "util/raw_file.h"

namespace ckfmt::convert::testing {

std::string FixturesDir() { return CKFMT_FIXTURES_DIR; }
std::string Fixture(const std::string& name) { return FixturesDir() + "/" + name; }

namespace {
std::vector<std::string>& CreatedDirs() {
  static std::vector<std::string> dirs;
  return dirs;
}
// Removes the test directories at the end unless CKFMT_KEEP_TEST_FILES=1.
class CleanupEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    const char* keep = std::getenv("CKFMT_KEEP_TEST_FILES");
    if (keep && std::string(keep) == "1") return;
    for (const auto& d : CreatedDirs()) {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  }
};
[[maybe_unused]] ::testing::Environment* const kCleanup =
    ::testing::AddGlobalTestEnvironment(new CleanupEnvironment);
}  // namespace

std::string MakeTempDir(const std::string& tag) {
  static std::atomic<int> n{0};
  std::string base = ::testing::TempDir();
  if (base.empty()) base = "/tmp/";
  if (base.back() != '/') base += '/';
  std::string dir = base + "ckfmt_convert_" + std::to_string(::getpid()) + "_" + tag + "_" +
                    std::to_string(n++);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  CreatedDirs().push_back(dir);
  return dir;
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

FileSummary SummarizeCkfmt(const std::string& path) {
  FileSummary s;
  auto r = CheckpointReader::Open(path);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return s;
  auto& reader = **r;
  s.metadata = reader.index().metadata;
  s.world_size = reader.index().world_size;
  for (const auto& e : reader.index().entries) {
    std::string key = DottedKeyPath(e.path);
    switch (e.kind) {
      case EntryKind::kTensor: {
        std::string buf(e.ByteSize(), '\0');
        if (!buf.empty()) {
          Status st = reader.ReadRegion(e.path, Region::Whole(e.shape), buf.data());
          EXPECT_TRUE(st.ok()) << st.ToString();
        }
        s.tensors[key] = {std::string(DTypeName(e.dtype)), e.shape,
                          Hex64(Checksum(buf.data(), buf.size()))};
        break;
      }
      case EntryKind::kBytes: s.bytes[key] = e.content_type; break;
      case EntryKind::kInt: s.values[key] = {{"type", "int"}, {"value", e.int_value}}; break;
      case EntryKind::kFloat: s.values[key] = {{"type", "float"}, {"value", e.float_value}}; break;
      case EntryKind::kBool: s.values[key] = {{"type", "bool"}, {"value", e.bool_value}}; break;
      case EntryKind::kString:
        s.values[key] = {{"type", "str"}, {"value", e.string_value}};
        break;
      case EntryKind::kNone: s.values[key] = {{"type", "none"}, {"value", nullptr}}; break;
      default: break;
    }
  }
  return s;
}

nlohmann::json LoadManifest(const std::string& fixture) {
  std::ifstream f(Fixture(fixture + ".manifest.json"));
  EXPECT_TRUE(f.good()) << "missing manifest for " << fixture;
  return nlohmann::json::parse(f);
}

ConvertReport ConvertOrDie(const std::string& src, const std::string& dst, ConvertOptions o) {
  o.src = src;
  o.dst = dst;
  o.fsync = false;
  auto r = Run(o);
  EXPECT_TRUE(r.ok()) << src << " -> " << dst << ": " << r.status().ToString();
  return r.ok() ? *r : ConvertReport{};
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
}

void WriteCkfmtWithPartialBytes(const std::string& path) {
  ckfmt_test::RawFileBuilder b;
  IndexRecord idx;
  EntryRecord t = ckfmt_test::TensorEntry({"t"}, DType::kU8, {2});
  t.pieces.push_back(b.AddPiece(Region::Whole({2}), 0, "xy", 4096));
  idx.entries.push_back(t);
  EntryRecord blob = ckfmt_test::TensorEntry({"blob"}, DType::kU8, {8});
  blob.kind = EntryKind::kBytes;
  blob.content_type = "bytes";
  blob.partial = true;
  blob.pieces.push_back(b.AddPiece(Region::Flat(0, 4), 0, "abcd", 4096));
  idx.entries.push_back(blob);
  WriteFile(path, b.Build(idx));
}

}  // namespace ckfmt::convert::testing
