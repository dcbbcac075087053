// The C ABI's GPU tensors (ckfmt_save_device_tensors and
// ckfmt_load_device_tensors; the whole-state and async functions): on the
// simulated device a mixed host/GPU state round-trips bitwise, an async
// save snapshots device memory and a load creates tensors on the device, and its file verifies and
// loads into host memory as a host save's would; a flattened distributed save through the ABI's
// communicator takes GPU tensors; a bad device number is refused naming the tensor;
// without a GPU a GPU tensor is refused saying why; with a real GPU (CUDA build), device pointers
// round-trip. Compiles engine/src/c_api.cc in, so the simulated backend it installs is the one the
// ABI uses.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ckfmt/c_api.h"
#include "gpu/device_test_util.h"
#include "util/file_util.h"

#ifdef CKFMT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

constexpr int kInvalidArgument = 1;
constexpr uint8_t kF32 = 2, kBF16 = 4, kI64 = 7;
namespace fs = std::filesystem;

std::string TempPath(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("ckfmt_c_api_device_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

// model/w: f32 [64, 33]; model/b: bf16 [1000]; step: i64 scalar.
struct State {
  std::vector<float> w = std::vector<float>(64 * 33);
  std::vector<uint16_t> b = std::vector<uint16_t>(1000);
  int64_t step = 0;
  static constexpr uint64_t kWShape[2] = {64, 33};
  static constexpr uint64_t kBShape[1] = {1000};

  static State Made() {
    State s;
    for (size_t i = 0; i < s.w.size(); ++i) s.w[i] = 0.001f * float(i) - 0.5f;
    for (size_t i = 0; i < s.b.size(); ++i) s.b[i] = uint16_t(0x3c00 + 13 * i);
    s.step = 4321;
    return s;
  }
  // The descriptors, with w's and b's data at the given pointers.
  std::vector<ckfmt_tensor> Tensors(void* w_data, void* b_data) {
    return {{"model/w", kF32, 2, kWShape, w_data},
            {"model/b", kBF16, 1, kBShape, b_data},
            {"step", kI64, 0, nullptr, &step}};
  }
  size_t w_bytes() const { return w.size() * sizeof(float); }
  size_t b_bytes() const { return b.size() * sizeof(uint16_t); }
};

class CApiSimulatedDevice : public ckfmt_test::SimulatedDeviceTest {
 public:
  // Device memory for n bytes (a copy of `host` if given), freed after the test.
  void* OnDevice(int device, const void* host, size_t n) {
    void* p = ops().Allocate(device, n).value();
    allocated_.push_back({device, p});
    if (host) ops().Upload(p, host, n);
    return p;
  }

 protected:
  void TearDown() override {
    for (auto [device, p] : allocated_) ops().Free(device, p);
    fs::remove_all(fs::path(TempPath("x")).parent_path());
    SimulatedDeviceTest::TearDown();
  }
  std::vector<std::pair<int, void*>> allocated_;
  char err_[512] = {};
};

TEST_F(CApiSimulatedDevice, AMixedStateRoundTripsBitwise) {
  State src = State::Made();
  const std::string gpu_path = TempPath("gpu.ckfmt");
  // w on cuda:1, b on cuda:0, the step counter on the host.
  void* w_dev = OnDevice(1, src.w.data(), src.w_bytes());
  void* b_dev = OnDevice(0, src.b.data(), src.b_bytes());
  const int32_t devices[3] = {1, 0, -1};
  auto gpu_tensors = src.Tensors(w_dev, b_dev);
  ASSERT_EQ(ckfmt_save_device_tensors(gpu_path.c_str(), gpu_tensors.data(), gpu_tensors.size(),
                                      devices, "byteplane-zstd", err_, sizeof err_),
            0)
      << err_;
  ASSERT_EQ(ckfmt_verify(gpu_path.c_str(), err_, sizeof err_), 0) << err_;

  // Into host memory through the host-only entry point.
  State host;
  auto host_tensors = host.Tensors(host.w.data(), host.b.data());
  ASSERT_EQ(ckfmt_load_tensors(gpu_path.c_str(), host_tensors.data(), host_tensors.size(), 1, err_,
                               sizeof err_),
            0)
      << err_;
  EXPECT_EQ(host.w, src.w);
  EXPECT_EQ(host.b, src.b);
  EXPECT_EQ(host.step, src.step);

  State back;
  void* w_back = OnDevice(1, nullptr, src.w_bytes());
  void* b_back = OnDevice(0, nullptr, src.b_bytes());
  auto into = back.Tensors(w_back, b_back);
  ASSERT_EQ(ckfmt_load_device_tensors(gpu_path.c_str(), into.data(), into.size(), devices, 1, err_,
                                      sizeof err_),
            0)
      << err_;
  ops().Download(back.w.data(), w_back, src.w_bytes());
  ops().Download(back.b.data(), b_back, src.b_bytes());
  EXPECT_EQ(back.w, src.w);
  EXPECT_EQ(back.b, src.b);
  EXPECT_EQ(back.step, src.step);
}

// The whole-state functions with GPU tensors: an async save snapshots
// device memory, and a load creates what the caller lacks on the device
// through its alloc.
TEST_F(CApiSimulatedDevice, WholeStatesSaveAsyncAndLoadOntoTheDevice) {
  State src = State::Made();
  const std::string path = TempPath("entries.ckfmt");
  void* w_dev = OnDevice(1, src.w.data(), src.w_bytes());
  ckfmt_entry w{};
  w.key = "model/w";
  w.kind = CKFMT_KIND_TENSOR;
  w.dtype = kF32;
  w.device = 1;
  w.ndim = 2;
  w.shape = State::kWShape;
  w.data = w_dev;
  ckfmt_entry step{};
  step.key = "step";
  step.kind = CKFMT_KIND_INT;
  step.int_value = 7;
  const ckfmt_entry entries[2] = {w, step};
  ckfmt_async_saver* saver = nullptr;
  ASSERT_EQ(ckfmt_async_saver_new(nullptr, &saver, err_, sizeof err_), 0) << err_;
  ASSERT_EQ(ckfmt_async_save_entries(saver, path.c_str(), entries, 2, nullptr, 0, "byteplane-zstd",
                                     err_, sizeof err_),
            0)
      << err_;
  std::vector<float> changed(src.w.size(), 3.0f);
  ops().Upload(w_dev, changed.data(), src.w_bytes());  // after the snapshot
  ASSERT_EQ(ckfmt_async_wait(saver, err_, sizeof err_), 0) << err_;
  ckfmt_async_saver_free(saver);

  // A caller with nothing: model/w is created on cuda:0 by its alloc.
  struct Ctx {
    CApiSimulatedDevice* test;
    void* made = nullptr;
    int32_t device = -2;
    int64_t step = 0;
  } ctx{this};
  ckfmt_load_options o{};
  o.verify_checksums = 1;
  o.reconstruct_device = 0;
  o.alloc = [](void* c, const ckfmt_entry* e) -> void* {
    auto* x = static_cast<Ctx*>(c);
    x->device = e->device;
    x->made = x->test->OnDevice(e->device, nullptr, 64 * 33 * sizeof(float));
    return x->made;
  };
  o.alloc_ctx = &ctx;
  o.on_entry = [](void* c, const ckfmt_entry* e) {
    auto* x = static_cast<Ctx*>(c);
    if (e->kind == CKFMT_KIND_INT) x->step = e->int_value;
    if (e->kind == CKFMT_KIND_TENSOR && (e->data != x->made || e->device != 0)) return 1;
    return 0;
  };
  o.entry_ctx = &ctx;
  ASSERT_EQ(ckfmt_load_entries(path.c_str(), nullptr, 0, &o, err_, sizeof err_), 0) << err_;
  EXPECT_EQ(ctx.device, 0);
  EXPECT_EQ(ctx.step, 7);
  std::vector<float> back(src.w.size());
  ops().Download(back.data(), ctx.made, src.w_bytes());
  EXPECT_EQ(back, src.w);
}

TEST_F(CApiSimulatedDevice, ADeviceBelowMinusOneIsRefusedNamingTheTensor) {
  State src = State::Made();
  const std::string path = TempPath("bad.ckfmt");
  auto t = src.Tensors(src.w.data(), src.b.data());
  const int32_t devices[3] = {-1, -2, -1};
  EXPECT_EQ(ckfmt_save_device_tensors(path.c_str(), t.data(), t.size(), devices, nullptr, err_,
                                      sizeof err_),
            kInvalidArgument);
  EXPECT_NE(std::string(err_).find("tensor 1 (\"model/b\"): device -2"), std::string::npos) << err_;
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(
      ckfmt_load_device_tensors(path.c_str(), t.data(), t.size(), devices, 1, err_, sizeof err_),
      kInvalidArgument);
}

// One rank's transport for ckfmt_comm_new: a gather of itself, and no
// peers to send to.
ckfmt_comm_ops OneRankTransport() {
  ckfmt_comm_ops ops{};
  ops.size = 1;
  ops.all_gather = [](void*, const void* send, uint64_t bytes, void* recv) {
    if (bytes) std::memcpy(recv, send, bytes);
    return 0;
  };
  ops.broadcast = [](void*, void*, uint64_t, int) { return 0; };
  ops.send = [](void*, const void*, uint64_t, int, int) { return 1; };
  ops.recv = [](void*, void*, uint64_t, int, int) { return 1; };
  return ops;
}

// What a Python job on gloo does: a flattened save through the C ABI's
// communicator, with GPU tensors and no device communicator. They go
// through host memory, and the file is byte for byte a host save's.
TEST_F(CApiSimulatedDevice, AFlattenedDistSaveTakesGpuTensors) {
  State src = State::Made();
  void* w_dev = OnDevice(1, src.w.data(), src.w_bytes());
  void* b_dev = OnDevice(0, src.b.data(), src.b_bytes());
  auto entries_at = [&](void* w, void* b, bool on_device) {
    std::vector<ckfmt_entry> entries(3);
    const auto tensors = src.Tensors(w, b);
    for (size_t i = 0; i < 3; ++i) {
      ckfmt_entry& e = entries[i];
      e.key = tensors[i].key;
      e.kind = CKFMT_KIND_TENSOR;
      e.dtype = tensors[i].dtype;
      e.ndim = tensors[i].ndim;
      e.shape = tensors[i].shape;
      e.data = tensors[i].data;
      e.device = on_device && i < 2 ? int32_t(1 - i) : -1;  // w on cuda:1, b on cuda:0
    }
    return entries;
  };
  const ckfmt_comm_ops transport = OneRankTransport();
  ckfmt_comm* comm = nullptr;
  ASSERT_EQ(ckfmt_comm_new(&transport, &comm, err_, sizeof err_), 0) << err_;
  ckfmt_dist_options o{};
  o.mode = CKFMT_DIST_FLATTENED;
  o.memory_budget = 4096;  // several buckets
  const std::string gpu_path = TempPath("gpu.ckfmt"), host_path = TempPath("host.ckfmt");
  const auto gpu = entries_at(w_dev, b_dev, true);
  const auto host = entries_at(src.w.data(), src.b.data(), false);
  const uint64_t copies = ops().copies();
  ASSERT_EQ(ckfmt_dist_save_entries(comm, gpu_path.c_str(), gpu.data(), gpu.size(), nullptr, 0,
                                    "byteplane-zstd", &o, err_, sizeof err_),
            0)
      << err_;
  EXPECT_GT(ops().copies(), copies);
  ASSERT_EQ(ckfmt_dist_save_entries(comm, host_path.c_str(), host.data(), host.size(), nullptr, 0,
                                    "byteplane-zstd", &o, err_, sizeof err_),
            0)
      << err_;
  ckfmt_comm_free(comm);
  EXPECT_EQ(ckfmt_test::ReadFileBytes(gpu_path), ckfmt_test::ReadFileBytes(host_path));
  State back;
  auto into = back.Tensors(back.w.data(), back.b.data());
  ASSERT_EQ(ckfmt_load_tensors(gpu_path.c_str(), into.data(), into.size(), 1, err_, sizeof err_), 0)
      << err_;
  EXPECT_EQ(back.w, src.w);
  EXPECT_EQ(back.b, src.b);
  EXPECT_EQ(back.step, src.step);
}

// The backends a build has, without the simulated one: without a GPU, a
// GPU tensor is refused before anything is written.
TEST(CApiDevice, WithoutAGpuAGpuTensorIsRefusedSayingWhy) {
  if (ckfmt_test::NoGpuReason().empty()) {
    GTEST_SKIP() << "a GPU is present; this checks the no-GPU error";
  }
  State src = State::Made();
  const std::string path = TempPath("nogpu.ckfmt");
  std::vector<uint8_t> fake(src.w_bytes());
  auto t = src.Tensors(fake.data(), src.b.data());
  const int32_t devices[3] = {0, -1, -1};
  char err[512] = {};
  EXPECT_EQ(ckfmt_save_device_tensors(path.c_str(), t.data(), t.size(), devices, nullptr, err,
                                      sizeof err),
            kInvalidArgument)
      << err;
  EXPECT_NE(std::string(err).find("model/w: tensors on cuda:0 cannot be used here"),
            std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(path));
  fs::remove_all(fs::path(path).parent_path());
}

#ifdef CKFMT_HAVE_CUDA
TEST(CApiDevice, DevicePointersRoundTripOnARealGpu) {
  const std::string why = ckfmt_test::NoGpuReason();
  if (!why.empty()) GTEST_SKIP() << "needs a CUDA GPU: " << why;
  State src = State::Made();
  const std::string path = TempPath("real.ckfmt");
  void *w = nullptr, *b = nullptr, *w2 = nullptr, *b2 = nullptr;
  ASSERT_EQ(cudaMalloc(&w, src.w_bytes()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, src.b_bytes()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&w2, src.w_bytes()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b2, src.b_bytes()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(w, src.w.data(), src.w_bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b, src.b.data(), src.b_bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  const int32_t devices[3] = {0, 0, -1};
  char err[512] = {};
  auto t = src.Tensors(w, b);
  ASSERT_EQ(
      ckfmt_save_device_tensors(path.c_str(), t.data(), t.size(), devices, "zstd", err, sizeof err),
      0)
      << err;
  ASSERT_EQ(ckfmt_verify(path.c_str(), err, sizeof err), 0) << err;
  State back;
  auto into = back.Tensors(w2, b2);
  ASSERT_EQ(ckfmt_load_device_tensors(path.c_str(), into.data(), into.size(), devices, 1, err,
                                      sizeof err),
            0)
      << err;
  ASSERT_EQ(cudaMemcpy(back.w.data(), w2, src.w_bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.b.data(), b2, src.b_bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back.w, src.w);
  EXPECT_EQ(back.b, src.b);
  EXPECT_EQ(back.step, src.step);
  for (void* p : {w, b, w2, b2}) cudaFree(p);
  fs::remove_all(fs::path(path).parent_path());
}
#endif

}  // namespace
