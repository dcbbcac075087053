// The C ABI's asynchronous saves, as a binding sees them (libckfmt.so and
// ckfmt/c_api.h only): the file holds the snapshot taken during the call,
// a background failure is returned once and leaves no file, a busy saver
// told not to wait refuses, and what callers get wrong is refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "ckfmt/c_api.h"
#include "util/temp_dir.h"

namespace {

constexpr int kInvalidArgument = 1, kAborted = 9;
constexpr uint8_t kF32 = 2;

class CApiAsyncTest : public ::testing::Test {
 protected:
  void TearDown() override { ckfmt_async_saver_free(saver_); }
  void NewSaver(const ckfmt_async_options* options = nullptr) {
    ASSERT_EQ(ckfmt_async_saver_new(options, &saver_, err_, sizeof err_), 0) << err_;
    ASSERT_NE(saver_, nullptr);
  }
  std::string File(const std::string& name) const { return (dir_ / name).string(); }
  // w: f32 [n] at `data`; step: an int.
  std::vector<ckfmt_entry> Entries(std::vector<float>* w, int64_t step) {
    shape_ = w->size();
    ckfmt_entry t{};
    t.key = "model/w";
    t.kind = CKFMT_KIND_TENSOR;
    t.dtype = kF32;
    t.device = -1;
    t.ndim = 1;
    t.shape = &shape_;
    t.data = w->data();
    ckfmt_entry s{};
    s.key = "step";
    s.kind = CKFMT_KIND_INT;
    s.int_value = step;
    return {t, s};
  }
  int Save(const std::string& path, const std::vector<ckfmt_entry>& e,
           const char* codec = nullptr) {
    return ckfmt_async_save_entries(saver_, path.c_str(), e.data(), e.size(), nullptr, 0, codec,
                                    err_, sizeof err_);
  }
  // The file's model/w and step, loaded into fresh memory.
  std::pair<std::vector<float>, int64_t> Read(const std::string& path, size_t n) {
    std::vector<float> w(n, -1.0f);
    auto into = Entries(&w, 0);
    into.pop_back();  // a declared int is handed back through on_entry; the tensor is enough
    ckfmt_load_options o{};
    o.verify_checksums = 1;
    o.reconstruct_device = -1;
    o.unexpected = CKFMT_UNEXPECTED_RECONSTRUCT;
    int64_t step = -1;
    o.on_entry = [](void* ctx, const ckfmt_entry* e) {
      if (e->kind == CKFMT_KIND_INT) *static_cast<int64_t*>(ctx) = e->int_value;
      return 0;
    };
    o.entry_ctx = &step;
    EXPECT_EQ(ckfmt_load_entries(path.c_str(), into.data(), into.size(), &o, err_, sizeof err_), 0)
        << err_;
    return {w, step};
  }

  ckfmt_test::ScopedTempDir tmp_;  // removed after TearDown
  std::filesystem::path dir_ = tmp_.path();
  ckfmt_async_saver* saver_ = nullptr;
  uint64_t shape_ = 0;
  char err_[1024] = {};
};

TEST_F(CApiAsyncTest, TheFileHoldsTheSnapshotNotLaterChanges) {
  NewSaver();
  std::vector<float> w(1 << 16);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(i) * 0.5f;
  const std::vector<float> saved = w;
  auto entries = Entries(&w, 41);
  ASSERT_EQ(ckfmt_async_prepare_entries(saver_, entries.data(), entries.size(), err_, sizeof err_),
            0)
      << err_;
  ASSERT_EQ(Save(File("a.ckfmt"), entries, "byteplane-zstd"), 0) << err_;
  std::fill(w.begin(), w.end(), 7.0f);  // the trainer goes on at once
  ASSERT_EQ(ckfmt_async_wait(saver_, err_, sizeof err_), 0) << err_;
  EXPECT_EQ(ckfmt_async_busy(saver_), 0);
  EXPECT_GT(ckfmt_async_last_blocked_seconds(saver_), 0.0);
  auto [back, step] = Read(File("a.ckfmt"), w.size());
  EXPECT_EQ(back, saved);
  EXPECT_EQ(step, 41);
}

TEST_F(CApiAsyncTest, ABackgroundFailureIsReturnedOnceAndLeavesNoFile) {
  NewSaver();
  std::vector<float> w(1024, 1.0f);
  const std::string bad = File("no/such/dir/x.ckfmt");
  ASSERT_EQ(Save(bad, Entries(&w, 1)), 0) << err_;
  EXPECT_NE(ckfmt_async_wait(saver_, err_, sizeof err_), 0);
  EXPECT_NE(std::string(err_).find("no/such/dir"), std::string::npos) << err_;
  EXPECT_FALSE(std::filesystem::exists(bad));
  // Reported once: the next save goes ahead.
  ASSERT_EQ(Save(File("ok.ckfmt"), Entries(&w, 2)), 0) << err_;
  ASSERT_EQ(ckfmt_async_wait(saver_, err_, sizeof err_), 0) << err_;
  EXPECT_EQ(Read(File("ok.ckfmt"), w.size()).second, 2);
}

TEST_F(CApiAsyncTest, ABusySaverToldNotToWaitRefuses) {
  ckfmt_async_options o{};
  o.wait_if_busy = 0;
  NewSaver(&o);
  // 32 MiB of noise through zstd: the write takes a while.
  std::vector<float> w(8 << 20);
  std::mt19937 rng(5);
  for (float& x : w) x = std::uniform_real_distribution<float>(-1, 1)(rng);
  ASSERT_EQ(Save(File("big.ckfmt"), Entries(&w, 1), "zstd"), 0) << err_;
  if (ckfmt_async_busy(saver_)) {
    EXPECT_EQ(Save(File("second.ckfmt"), Entries(&w, 2)), kAborted) << err_;
    EXPECT_FALSE(std::filesystem::exists(File("second.ckfmt")));
  }
  ASSERT_EQ(ckfmt_async_wait(saver_, err_, sizeof err_), 0) << err_;
  EXPECT_EQ(Read(File("big.ckfmt"), w.size()).first, w);
}

TEST_F(CApiAsyncTest, WhatCallersGetWrongIsRefused) {
  std::vector<float> w(16, 1.0f);
  auto entries = Entries(&w, 1);
  EXPECT_EQ(ckfmt_async_saver_new(nullptr, nullptr, err_, sizeof err_), kInvalidArgument);
  EXPECT_EQ(ckfmt_async_save_entries(nullptr, File("x").c_str(), entries.data(), entries.size(),
                                     nullptr, 0, nullptr, err_, sizeof err_),
            kInvalidArgument);
  EXPECT_NE(std::string(err_).find("saver is NULL"), std::string::npos) << err_;
  EXPECT_EQ(ckfmt_async_wait(nullptr, err_, sizeof err_), kInvalidArgument);
  EXPECT_EQ(ckfmt_async_busy(nullptr), 0);
  ckfmt_async_saver_free(nullptr);

  NewSaver();
  EXPECT_NE(ckfmt_async_wait(saver_, err_, sizeof err_), 0) << "nothing was saved";
  EXPECT_EQ(Save(dir_.string(), entries), kInvalidArgument);  // a directory: at once
  EXPECT_NE(std::string(err_).find("is a directory"), std::string::npos) << err_;
  EXPECT_EQ(ckfmt_async_busy(saver_), 0);
  auto bad = entries;
  bad[1].kind = 0;
  EXPECT_EQ(Save(File("y"), bad), kInvalidArgument);
  EXPECT_NE(std::string(err_).find("entry 1 (\"step\"): unknown kind 0"), std::string::npos)
      << err_;
  EXPECT_EQ(Save(File("y"), entries, "lz4"), kInvalidArgument) << err_;
  EXPECT_FALSE(std::filesystem::exists(File("y")));
}

}  // namespace
