// The C ABI as a binding sees it: this test links only libckfmt.so of
// ckfmt and includes only ckfmt/c_api.h (beside test helpers of the
// standard library alone). Round trips, corruption reports, and the
// refusal of what C callers get wrong (NULL pointers, unknown dtypes, a key
// given twice), each with its status code and a message naming the tensor.
#include "ckfmt/c_api.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "util/file_util.h"
#include "util/temp_dir.h"

namespace {

// Status codes of ckfmt/status.h, as the ABI returns them.
constexpr int kInvalidArgument = 1, kCorruption = 3, kMissingKeys = 7, kAborted = 9;
constexpr uint8_t kF32 = 2, kBF16 = 4, kI64 = 7;

class CApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (dir_ / "state.ckfmt").string();
    for (size_t i = 0; i < w_.size(); ++i) w_[i] = 0.25f * float(i) - 1.0f;
    for (size_t i = 0; i < b_.size(); ++i) b_[i] = uint16_t(0x3f80 + 7 * i);
  }

  // model/w: f32 [2, 3]; model/layers/[0]/b: bf16 [5]; step: i64 scalar.
  std::vector<ckfmt_tensor> Tensors(void* w, void* b, void* step) {
    return {{"model/w", kF32, 2, w_shape_, w},
            {"model/layers/[0]/b", kBF16, 1, b_shape_, b},
            {"step", kI64, 0, nullptr, step}};
  }
  int Save(const std::vector<ckfmt_tensor>& t, const char* codec = nullptr) {
    return ckfmt_save_tensors(path_.c_str(), t.data(), t.size(), codec, err_, sizeof err_);
  }

  ckfmt_test::ScopedTempDir tmp_;  // removed after TearDown
  std::filesystem::path dir_ = tmp_.path();
  std::string path_;
  std::vector<float> w_ = std::vector<float>(6);
  std::vector<uint16_t> b_ = std::vector<uint16_t>(5);
  int64_t step_ = 1234;
  const uint64_t w_shape_[2] = {2, 3};
  const uint64_t b_shape_[1] = {5};
  char err_[512] = {};
};

TEST_F(CApiTest, SaveLoadAndVerifyRoundTrip) {
  for (const char* codec : {static_cast<const char*>(nullptr), "none", "zstd", "byteplane-zstd"}) {
    SCOPED_TRACE(codec ? codec : "NULL");
    ASSERT_EQ(Save(Tensors(w_.data(), b_.data(), &step_), codec), 0) << err_;
    ASSERT_EQ(ckfmt_verify(path_.c_str(), err_, sizeof err_), 0) << err_;
    ASSERT_EQ(ckfmt_verify_checksums(path_.c_str(), err_, sizeof err_), 0) << err_;
    std::vector<float> w(6, -7.0f);
    std::vector<uint16_t> b(5, 0xffff);
    int64_t step = 0;
    auto into = Tensors(w.data(), b.data(), &step);
    ASSERT_EQ(ckfmt_load_tensors(path_.c_str(), into.data(), into.size(), 1, err_, sizeof err_), 0)
        << err_;
    EXPECT_EQ(std::memcmp(w.data(), w_.data(), 6 * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(b.data(), b_.data(), 5 * sizeof(uint16_t)), 0);
    EXPECT_EQ(step, step_);
  }
}

TEST_F(CApiTest, ADamagedFileIsReportedAsCorruption) {
  ASSERT_EQ(Save(Tensors(w_.data(), b_.data(), &step_)), 0) << err_;
  {
    // The first chunk follows the 4096-byte header.
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(4096 + 2);
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x40);
    f.seekp(4096 + 2);
    f.write(&c, 1);
  }
  EXPECT_EQ(ckfmt_verify(path_.c_str(), err_, sizeof err_), kCorruption);
  EXPECT_NE(std::string(err_).find(path_), std::string::npos) << err_;
  EXPECT_EQ(ckfmt_verify_checksums(path_.c_str(), err_, sizeof err_), kCorruption);
  EXPECT_NE(std::string(err_).find("checksum mismatch"), std::string::npos) << err_;
  std::vector<float> w(6);
  std::vector<uint16_t> b(5);
  int64_t step = 0;
  auto into = Tensors(w.data(), b.data(), &step);
  EXPECT_EQ(ckfmt_load_tensors(path_.c_str(), into.data(), into.size(), 1, err_, sizeof err_),
            kCorruption);
  EXPECT_NE(std::string(err_).find("model"), std::string::npos) << err_;
}

// ckfmt_describe_json's on_json: appends the document to a std::string.
int AppendText(void* ctx, const char* text, size_t len) {
  static_cast<std::string*>(ctx)->append(text, len);
  return 0;
}

TEST_F(CApiTest, DescribesAFileAsInspectJsonDoes) {
  // A golden vector saved by 4 ranks in parallel: its world size, save mode,
  // pieces and saved layouts are all in the document, byte for byte as
  // `ckfmt inspect --json` prints it ("file" is the path as given).
  const std::filesystem::path vectors = std::filesystem::path(CKFMT_SOURCE_DIR) / "spec/vectors";
  std::filesystem::copy_file(vectors / "sharded.ckfmt", dir_ / "sharded.ckfmt");
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir_);
  std::string json;
  const int rc =
      ckfmt_describe_json("sharded.ckfmt", nullptr, AppendText, &json, err_, sizeof err_);
  std::filesystem::current_path(cwd);
  ASSERT_EQ(rc, 0) << err_;
  EXPECT_EQ(json, ckfmt_test::ReadFileBytes(vectors / "sharded.inspect.json"));
  EXPECT_NE(json.find("\"world_size\": 4"), std::string::npos);
  EXPECT_NE(json.find("\"save_mode\": \"parallel\""), std::string::npos);

  // A prefix keeps the entries at or below it, and says so.
  const std::string file = (dir_ / "sharded.ckfmt").string();
  json.clear();
  ASSERT_EQ(
      ckfmt_describe_json(file.c_str(), "optim/state/[0]", AppendText, &json, err_, sizeof err_), 0)
      << err_;
  EXPECT_NE(json.find("\"prefix\": [\n    \"optim\",\n    \"state\",\n    0\n  ]"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"key\": \"optim/state/[0]/exp_avg\""), std::string::npos) << json;
  EXPECT_EQ(json.find("\"key\": \"model"), std::string::npos) << json;

  // A callback that fails stops it; a damaged index is corruption, nothing handed over.
  auto refuse = [](void*, const char*, size_t) { return 5; };
  EXPECT_EQ(ckfmt_describe_json(file.c_str(), nullptr, refuse, nullptr, err_, sizeof err_),
            kAborted);
  EXPECT_NE(std::string(err_).find("on_json returned 5"), std::string::npos) << err_;
  EXPECT_EQ(ckfmt_describe_json(file.c_str(), nullptr, nullptr, nullptr, err_, sizeof err_),
            kInvalidArgument);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-20, std::ios::end);  // inside the footer's checksummed bytes
    f.put('\x5a');
  }
  json.clear();
  EXPECT_EQ(ckfmt_describe_json(file.c_str(), nullptr, AppendText, &json, err_, sizeof err_),
            kCorruption);
  EXPECT_NE(std::string(err_).find(file), std::string::npos) << err_;
  EXPECT_TRUE(json.empty());
}

TEST_F(CApiTest, WhatCallersGetWrongIsRefusedNamingTheTensor) {
  ASSERT_EQ(Save(Tensors(w_.data(), b_.data(), &step_)), 0) << err_;
  const std::string good = ckfmt_test::ReadFileBytes(path_);
  auto expect_refused = [&](int rc, const std::string& words) {
    EXPECT_EQ(rc, kInvalidArgument) << err_;
    EXPECT_NE(std::string(err_).find(words), std::string::npos) << err_;
  };
  auto t = Tensors(w_.data(), b_.data(), &step_);

  expect_refused(ckfmt_save_tensors(nullptr, t.data(), t.size(), nullptr, err_, sizeof err_),
                 "path is NULL");
  expect_refused(ckfmt_load_tensors(nullptr, t.data(), t.size(), 1, err_, sizeof err_),
                 "path is NULL");
  expect_refused(ckfmt_verify(nullptr, err_, sizeof err_), "path is NULL");
  expect_refused(ckfmt_verify_checksums(nullptr, err_, sizeof err_), "path is NULL");
  expect_refused(ckfmt_save_tensors(path_.c_str(), nullptr, 2, nullptr, err_, sizeof err_),
                 "tensors is NULL");

  auto bad = t;
  bad[0].shape = nullptr;
  expect_refused(Save(bad), "tensor 0 (\"model/w\"): shape is NULL");
  bad = t;
  bad[1].data = nullptr;
  expect_refused(Save(bad), "tensor 1 (\"model/layers/[0]/b\"): data is NULL");
  bad = t;
  bad[2].dtype = 250;
  expect_refused(Save(bad), "tensor 2 (\"step\"): unknown dtype id 250");
  bad = t;
  bad[0].key = nullptr;
  expect_refused(Save(bad), "tensor 0: no key");
  bad = t;
  bad[2].key = "model/w";  // would replace tensor 0 on save, skip it on load
  expect_refused(Save(bad), "tensor 2 (\"model/w\"): the same key as tensor 0");
  expect_refused(ckfmt_load_tensors(path_.c_str(), bad.data(), bad.size(), 1, err_, sizeof err_),
                 "the same key as tensor 0");
  bad = t;
  bad[2].key = "model";  // would replace the dict holding tensors 0 and 1
  expect_refused(Save(bad), "tensor 2 (\"model\"): a key that earlier tensors are under");
  EXPECT_NE(Save(t, "lz4-please"), 0);

  // An empty tensor needs no data.
  const uint64_t empty_shape[1] = {0};
  std::vector<ckfmt_tensor> empty = {{"e", kF32, 1, empty_shape, nullptr}};
  EXPECT_EQ(ckfmt_save_tensors((dir_ / "empty.ckfmt").c_str(), empty.data(), 1, nullptr, err_,
                               sizeof err_),
            0)
      << err_;

  // No refused save touched the checkpoint.
  EXPECT_EQ(ckfmt_test::ReadFileBytes(path_), good);
}

// The entry points that take a device per tensor, exported by the library
// as a binding finds them, with every tensor on the host (-1) and with no
// device array at all. GPU tensors: c_api_device_test.cc.
TEST_F(CApiTest, TheDeviceEntryPointsTakeHostTensors) {
  const int32_t on_host[3] = {-1, -1, -1};
  for (const int32_t* devices : {on_host, static_cast<const int32_t*>(nullptr)}) {
    SCOPED_TRACE(devices ? "devices -1" : "devices NULL");
    auto t = Tensors(w_.data(), b_.data(), &step_);
    ASSERT_EQ(ckfmt_save_device_tensors(path_.c_str(), t.data(), t.size(), devices, "zstd", err_,
                                        sizeof err_),
              0)
        << err_;
    std::vector<float> w(6, -7.0f);
    std::vector<uint16_t> b(5, 0xffff);
    int64_t step = 0;
    auto into = Tensors(w.data(), b.data(), &step);
    ASSERT_EQ(ckfmt_load_device_tensors(path_.c_str(), into.data(), into.size(), devices, 1, err_,
                                        sizeof err_),
              0)
        << err_;
    EXPECT_EQ(w, w_);
    EXPECT_EQ(b, b_);
    EXPECT_EQ(step, step_);
  }
}

TEST_F(CApiTest, KeysTheFileLacksAreNamed) {
  ASSERT_EQ(Save(Tensors(w_.data(), b_.data(), &step_)), 0) << err_;
  std::vector<float> other(6);
  std::vector<ckfmt_tensor> into = {{"model/other", kF32, 2, w_shape_, other.data()}};
  EXPECT_EQ(ckfmt_load_tensors(path_.c_str(), into.data(), 1, 1, err_, sizeof err_), kMissingKeys);
  EXPECT_NE(std::string(err_).find("model/other"), std::string::npos) << err_;
}

TEST_F(CApiTest, MessagesFitTheCallersBuffer) {
  char small[8];
  std::memset(small, 'x', sizeof small);
  EXPECT_EQ(ckfmt_verify(nullptr, small, sizeof small), kInvalidArgument);
  EXPECT_EQ(std::strlen(small), sizeof small - 1);
  EXPECT_EQ(ckfmt_verify(nullptr, nullptr, 0), kInvalidArgument);  // no buffer at all
  char none[1] = {'x'};
  EXPECT_EQ(ckfmt_verify(nullptr, none, 1), kInvalidArgument);
  EXPECT_EQ(none[0], '\0');
}

}  // namespace
