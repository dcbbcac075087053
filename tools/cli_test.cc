// The `ckfmt` binary end to end: outputs and exit codes (0 ok, 1 invalid,
// 2 usage or I/O error).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "ckfmt/writer.h"

namespace {

namespace fs = std::filesystem;

const fs::path kVectors = fs::path(CKFMT_SOURCE_DIR) / "spec" / "vectors";

struct CliRun {
  int rc;
  std::string out;  // stdout only
};

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `ckfmt ARGS` in `dir` (the current directory if empty), stderr dropped.
CliRun Ckfmt(const std::string& args, const fs::path& dir = {}) {
  std::string cmd = (dir.empty() ? "" : "cd " + Quote(dir.string()) + " && ") +
                    Quote(CKFMT_CLI) + " " + args + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ckfmt_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    good_ = dir_ / "good.ckfmt";
    fs::copy_file(kVectors / "sharded.ckfmt", good_, fs::copy_options::overwrite_existing);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A copy of good_ with the byte at `offset` changed.
  fs::path Corrupt(uint64_t offset, const std::string& name) {
    fs::path p = dir_ / name;
    std::string bytes = ReadAll(good_);
    bytes[offset] = static_cast<char>(bytes[offset] ^ 0x5a);
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }

  fs::path dir_, good_;
};

TEST_F(CliTest, UsageAndVersion) {
  EXPECT_EQ(Ckfmt("").rc, 2);
  EXPECT_EQ(Ckfmt("frobnicate").rc, 2);
  EXPECT_EQ(Ckfmt("inspect").rc, 2);
  EXPECT_EQ(Ckfmt("verify").rc, 2);
  EXPECT_EQ(Ckfmt("verify --no-such-flag x").rc, 2);
  EXPECT_EQ(Ckfmt("verify -q -v x").rc, 2);
  EXPECT_EQ(Ckfmt("verify -q --json x").rc, 2);
  EXPECT_EQ(Ckfmt("--help").rc, 0);
  EXPECT_EQ(Ckfmt("inspect --help").rc, 0);
  CliRun v = Ckfmt("--version");
  EXPECT_EQ(v.rc, 0);
  EXPECT_EQ(v.out.rfind("ckfmt ", 0), 0u) << v.out;
}

TEST_F(CliTest, VerifyExitCodes) {
  CliRun ok = Ckfmt("verify " + Quote(good_.string()));
  EXPECT_EQ(ok.rc, 0);
  EXPECT_EQ(ok.out, "");  // quiet on success
  CliRun verbose = Ckfmt("verify -v " + Quote(good_.string()));
  EXPECT_EQ(verbose.rc, 0);
  EXPECT_NE(verbose.out.find(": OK (10 entries, 13 chunks, "), std::string::npos) << verbose.out;

  fs::path bad = Corrupt(4096 + 10, "bad.ckfmt");
  CliRun invalid = Ckfmt("verify " + Quote(good_.string()) + " " + Quote(bad.string()));
  EXPECT_EQ(invalid.rc, 1);
  EXPECT_NE(invalid.out.find("bad.ckfmt: chunk @ 4096"), std::string::npos) << invalid.out;
  EXPECT_EQ(invalid.out.find("good.ckfmt"), std::string::npos) << invalid.out;
  CliRun quiet = Ckfmt("verify -q " + Quote(bad.string()));
  EXPECT_EQ(quiet.rc, 1);
  EXPECT_EQ(quiet.out, "");

  const std::string missing = Quote((dir_ / "missing.ckfmt").string());
  EXPECT_EQ(Ckfmt("verify " + missing).rc, 2);
  EXPECT_EQ(Ckfmt("verify " + Quote(bad.string()) + " " + missing).rc, 2);
  EXPECT_EQ(Ckfmt("verify " + Quote(dir_.string())).rc, 2);  // a directory
}

TEST_F(CliTest, ConvertExitCodes) {
  const fs::path fixtures = fs::path(CKFMT_SOURCE_DIR) / "tests" / "fixtures";
  auto convert = [&](const fs::path& src, const std::string& dst) {
    return Ckfmt("convert -q " + Quote(src.string()) + " " + Quote((dir_ / dst).string())).rc;
  };
  EXPECT_EQ(convert(good_, "ok.safetensors"), 0);
  // A chunk's bytes changed: the checksum fails when the tensor is read.
  EXPECT_EQ(convert(Corrupt(4096 + 10, "bad.ckfmt"), "bad.safetensors"), 1);
  EXPECT_EQ(convert(fixtures / "dcp_overlap", "overlap.ckfmt"), 1);  // corrupt metadata
  // Valid, but nested deeper than the converter goes: unsupported.
  EXPECT_EQ(convert(fixtures / "dcp_deep_nesting", "deep.ckfmt"), 3);
  EXPECT_EQ(convert(dir_ / "missing.ckfmt", "missing.safetensors"), 2);
  EXPECT_EQ(Ckfmt("convert " + Quote(good_.string()) + " x.unknown").rc, 2);
}

// --to picks the output format whatever DST is called (in any case), and
// the report names both formats; an unknown one is a usage error that
// writes nothing.
TEST_F(CliTest, ConvertToTheFormatNamedByTo) {
  const fs::path st = dir_ / "weights.data";
  CliRun r = Ckfmt("convert --to SafeTensors " + Quote(good_.string()) + " " + Quote(st.string()));
  ASSERT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find(good_.string() + " (ckfmt) -> " + st.string() + " (safetensors)"),
            std::string::npos)
      << r.out;
  const std::string st_bytes = ReadAll(st);
  ASSERT_GT(st_bytes.size(), 9u);
  EXPECT_EQ(st_bytes[8], '{');  // a header length, then the JSON header
  // (good_ holds a partial tensor, which torch.save cannot take.)
  const fs::path whole = kVectors / "zstd.ckfmt", pt = dir_ / "weights.out";
  ASSERT_EQ(Ckfmt("convert -q --to pt " + Quote(whole.string()) + " " + Quote(pt.string())).rc, 0);
  EXPECT_EQ(ReadAll(pt).substr(0, 2), "PK");  // torch.save's zip
  const fs::path onnx = dir_ / "weights.onnx";
  EXPECT_EQ(Ckfmt("convert --to onnx " + Quote(good_.string()) + " " + Quote(onnx.string())).rc, 2);
  EXPECT_FALSE(fs::exists(onnx));
}

// The switches that turn a default off are listed by their names alone
// and do turn it off: --no-split-keys keeps a dotted key whole.
TEST_F(CliTest, ConvertOffSwitches) {
  CliRun help = Ckfmt("convert --help");
  ASSERT_EQ(help.rc, 0);
  for (const char* name : {"--no-sharding-metadata", "--no-split-keys", "--no-crc", "--no-fsync"}) {
    EXPECT_NE(help.out.find(std::string(name) + " "), std::string::npos) << name << "\n"
                                                                         << help.out;
  }
  EXPECT_EQ(help.out.find('{'), std::string::npos) << help.out;
  const fs::path st = fs::path(CKFMT_SOURCE_DIR) / "tests" / "fixtures" / "model.safetensors";
  const fs::path split = dir_ / "split.ckfmt", whole = dir_ / "whole.ckfmt";
  ASSERT_EQ(Ckfmt("convert -q " + Quote(st.string()) + " " + Quote(split.string())).rc, 0);
  ASSERT_EQ(Ckfmt("convert -q --no-split-keys --no-fsync --no-crc " + Quote(st.string()) + " " +
                  Quote(whole.string()))
                .rc,
            0);
  const std::string nested = Ckfmt("inspect " + Quote(split.string())).out;
  const std::string flat = Ckfmt("inspect " + Quote(whole.string())).out;
  EXPECT_EQ(nested.find("  dtypes.i64 "), std::string::npos) << nested;
  EXPECT_NE(flat.find("  dtypes.i64 "), std::string::npos) << flat;
}

TEST_F(CliTest, VerifyJson) {
  fs::path bad = Corrupt(4096 + 10, "bad.ckfmt");
  CliRun r = Ckfmt("verify --json " + Quote(good_.string()) + " " + Quote(bad.string()) + " " +
                Quote((dir_ / "missing.ckfmt").string()));
  EXPECT_EQ(r.rc, 2);
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_FALSE(doc["ok"].get<bool>());
  ASSERT_EQ(doc["files"].size(), 3u);
  EXPECT_TRUE(doc["files"][0]["ok"].get<bool>());
  EXPECT_TRUE(doc["files"][0]["error"].is_null());
  EXPECT_EQ(doc["files"][0]["file_size"], 61440);
  EXPECT_FALSE(doc["files"][1]["ok"].get<bool>());
  ASSERT_EQ(doc["files"][1]["problems"].size(), 1u);
  EXPECT_EQ(doc["files"][1]["problems"][0]["code"], "Corruption");
  EXPECT_EQ(doc["files"][1]["problems"][0]["rule"], "D1");  // a chunk's checksum
  EXPECT_FALSE(doc["files"][2]["ok"].get<bool>());
  EXPECT_EQ(doc["files"][2]["error"]["code"], "NotFound");

  EXPECT_TRUE(doc["files"][0]["decoded"].get<bool>());
  EXPECT_FALSE(doc["files"][2]["decoded"].get<bool>());

  CliRun good = Ckfmt("verify --json " + Quote(good_.string()));
  EXPECT_EQ(good.rc, 0);
  EXPECT_TRUE(nlohmann::json::parse(good.out)["ok"].get<bool>());
}

TEST_F(CliTest, VerifyChecksumsOnly) {
  const fs::path zstd = kVectors / "zstd.ckfmt";
  CliRun r = Ckfmt("verify --checksums-only --json " + Quote(zstd.string()));
  EXPECT_EQ(r.rc, 0) << r.out;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_TRUE(doc["files"][0]["ok"].get<bool>());
  EXPECT_FALSE(doc["files"][0]["decoded"].get<bool>());
  CliRun v = Ckfmt("verify --checksums-only -v " + Quote(zstd.string()));
  EXPECT_EQ(v.rc, 0);
  EXPECT_NE(v.out.find("bytes checked, checksums only)"), std::string::npos) << v.out;
  fs::path bad = Corrupt(4096 + 10, "bad.ckfmt");
  EXPECT_EQ(Ckfmt("verify --checksums-only -q " + Quote(bad.string())).rc, 1);
}

TEST_F(CliTest, InspectExitCodes) {
  EXPECT_EQ(Ckfmt("inspect " + Quote(good_.string())).rc, 0);
  // Chunk data is not read by inspect.
  EXPECT_EQ(Ckfmt("inspect " + Quote(Corrupt(4096 + 10, "chunk.ckfmt").string())).rc, 0);
  // The footer is.
  uint64_t size = fs::file_size(good_);
  EXPECT_EQ(Ckfmt("inspect " + Quote(Corrupt(size - 1, "footer.ckfmt").string())).rc, 1);
  EXPECT_EQ(Ckfmt("inspect " + Quote((dir_ / "missing.ckfmt").string())).rc, 2);
}

TEST_F(CliTest, InspectText) {
  CliRun r = Ckfmt("inspect sharded.ckfmt", kVectors);
  ASSERT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("file:           sharded.ckfmt (61440 bytes)\n"), std::string::npos);
  EXPECT_NE(r.out.find("world size:     4\n"), std::string::npos);
  EXPECT_NE(r.out.find("r2 box[4:8, 0:3]"), std::string::npos);
  EXPECT_NE(r.out.find("partial"), std::string::npos);
  EXPECT_NE(r.out.find("totals: 10 entries (5 tensors, 0 bytes blobs), 13 chunks"),
            std::string::npos) << r.out;
}

TEST_F(CliTest, InspectJsonIsTheGoldenOutput) {
  for (const char* name : {"sharded", "scalars"}) {
    CliRun r = Ckfmt(std::string("inspect --json ") + name + ".ckfmt", kVectors);
    EXPECT_EQ(r.rc, 0);
    EXPECT_TRUE(r.out == ReadAll(kVectors / (std::string(name) + ".inspect.json"))) << name;
  }
  CliRun p = Ckfmt("inspect --json --prefix 'optim/state/[0]' sharded.ckfmt", kVectors);
  ASSERT_EQ(p.rc, 0);
  auto doc = nlohmann::json::parse(p.out);
  EXPECT_EQ(doc["prefix"].dump(), R"(["optim","state",0])");
  EXPECT_EQ(doc["totals"]["entries"], 3);
  // A key spelled like an index is addressed with an escape.
  CliRun k = Ckfmt("inspect --json --prefix 'keys/\\[0]' scalars.ckfmt", kVectors);
  ASSERT_EQ(k.rc, 0);
  EXPECT_EQ(nlohmann::json::parse(k.out)["totals"]["entries"], 1) << k.out;
}

// Keys, names and messages come from the file; printed raw, one holding
// ESC could drive the terminal (clear it, retitle it, fake lines). Every
// control character is printed as \xNN.
TEST_F(CliTest, TextFromTheFileCannotDriveTheTerminal) {
  const std::string key = "w\x1b[2J\n";
  ckfmt::SaveOptions o;
  o.fsync = false;
  o.save_mode = "m\x1b]0;title\x07";
  o.metadata = {{"note\x1b[31m", "v\r"}};
  ckfmt::Dict d;
  d.Set(key, ckfmt::Value(ckfmt::Tensor::Zeros(ckfmt::DType::kF32, {1024})));
  const fs::path file = dir_ / "hostile.ckfmt";
  ASSERT_TRUE(ckfmt::Save(file.string(), ckfmt::Value(std::move(d)), o).ok());

  CliRun r = Ckfmt("inspect " + Quote(file.string()));
  ASSERT_EQ(r.rc, 0);
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\x07'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << r.out;
  // (FormatKeyPath writes '[' in a key as "\[".)
  EXPECT_NE(r.out.find("w\\x1b\\[2J\\x0a "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("save mode:      m\\x1b]0;title\\x07\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("note\\x1b[31m = v\\x0d\n"), std::string::npos) << r.out;

  // The tensor's only chunk starts at 4096: a changed byte there makes
  // verify name the key.
  fs::path bad = dir_ / "bad.ckfmt";
  std::string bytes = ReadAll(file);
  bytes[4096] = static_cast<char>(bytes[4096] ^ 1);
  std::ofstream(bad, std::ios::binary) << bytes;
  CliRun v = Ckfmt("verify " + Quote(bad.string()));
  EXPECT_EQ(v.rc, 1);
  EXPECT_EQ(v.out.find('\x1b'), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("(w\\x1b\\[2J\\x0a): Corruption: checksum mismatch"), std::string::npos)
      << v.out;
}

}  // namespace
