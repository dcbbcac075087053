// GPU tensors on a real GPU through the CUDA backend. Every test needing a
// GPU skips, saying why, when the build has no CUDA or no device is
// present (CI has none); the simulated-backend tests cover the same paths
// there. Without a GPU, what a caller sees is checked instead.
#include <gtest/gtest.h>

#include <cstring>

#include "ckfmt/async_save.h"
#include "ckfmt/cuda.h"
#include "ckfmt/reader.h"
#include "ckfmt/writer.h"
#include "gpu/device_test_util.h"
#include "util/file_util.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

#ifdef CKFMT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using namespace ckfmt;
using namespace ckfmt_test;

using ckfmt_test::NoGpuReason;

#define SKIP_WITHOUT_GPU()                                            \
  do {                                                                \
    std::string why = NoGpuReason();                                  \
    if (!why.empty()) GTEST_SKIP() << "needs a CUDA GPU: " << why;    \
  } while (0)

TEST(CudaTest, WithoutAGpuDeviceTensorsFailClearly) {
  if (NoGpuReason().empty()) GTEST_SKIP() << "a GPU is present; this checks the no-GPU error";
  ScopedTempDir dir;
  Dict d;
  d.Set("w", Tensor::View(DType::kF32, {4}, reinterpret_cast<void*>(4096),
                          Device{DeviceType::kCUDA, 0}));
  auto r = Save(dir.File("a.ckfmt"), Value(d), SmallSaveOptions());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cuda:0"), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(FileExists(dir.File("a.ckfmt")));
  auto a = CudaAllocator()(DType::kF32, {4}, {"w"}, Device{DeviceType::kCUDA, 0});
  EXPECT_FALSE(a.ok());
  if (!CudaBuildEnabled()) {
    EXPECT_NE(r.status().message().find("no CUDA support"), std::string::npos);
  }
}

#ifdef CKFMT_HAVE_CUDA

Tensor ToGpu(const Tensor& t, int device) {
  Tensor g = CudaAllocator(device)(t.dtype(), t.shape(), {}, {}).value();
  EXPECT_EQ(cudaMemcpy(g.data(), t.data(), t.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  if (t.shard()) g.SetShard(*t.shard());
  return g;
}

Tensor ToCpu(const Tensor& t) {
  Tensor h = Tensor::Empty(t.dtype(), t.shape());
  if (t.device().type == DeviceType::kCPU) {
    std::memcpy(h.data(), t.data(), t.nbytes());
  } else {
    EXPECT_EQ(cudaMemcpy(h.data(), t.data(), t.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  if (t.shard()) h.SetShard(*t.shard());
  return h;
}

template <typename F>
Value Map(const Value& v, const F& f) {
  Value out = v;
  VisitValues(v, [&](const KeyPath& p, const Value& x) {
    if (x.is_tensor()) *out.Find(p) = Value(f(x.as_tensor()));
  });
  return out;
}

Value ToGpu(const Value& v) { return Map(v, [](const Tensor& t) { return ToGpu(t, 0); }); }
Value ToCpu(const Value& v) { return Map(v, [](const Tensor& t) { return ToCpu(t); }); }

class CudaCodecTest : public ::testing::TestWithParam<Codec> {};

TEST_P(CudaCodecTest, SaveAndLoadInPlace) {
  SKIP_WITHOUT_GPU();
  ScopedTempDir dir;
  Value host = MakeRichStateDict(21);
  CKFMT_ASSERT_OK(Save(dir.File("a.ckfmt"), ToGpu(host), SmallSaveOptions(GetParam())));
  Value back = ToGpu(ZeroedLike(host));
  CKFMT_ASSERT_OK(Load(dir.File("a.ckfmt"), &back, {}, SmallReadOptions()));
  EXPECT_EQ(DiffValues(ToCpu(back), host), "");
  (void)ReadFileBytes(dir.File("a.ckfmt"));  // the page-cache path too
  Value cached = ToGpu(ZeroedLike(host));
  CKFMT_ASSERT_OK(Load(dir.File("a.ckfmt"), &cached, {}, SmallReadOptions()));
  EXPECT_EQ(DiffValues(ToCpu(cached), host), "");
}

INSTANTIATE_TEST_SUITE_P(Codecs, CudaCodecTest,
                         ::testing::Values(Codec::kNone, Codec::kZstd, Codec::kBytePlaneZstd));

TEST(CudaTest, ReconstructsOnTheGpu) {
  SKIP_WITHOUT_GPU();
  ScopedTempDir dir;
  Value host = MakeRichStateDict(22);
  CKFMT_ASSERT_OK(Save(dir.File("a.ckfmt"), host, SmallSaveOptions()));
  Value v{Dict{}};
  LoadOptions lo;
  lo.reconstruct_device = Device{DeviceType::kCUDA, 0};
  CKFMT_ASSERT_OK(Load(dir.File("a.ckfmt"), &v, lo, SmallReadOptions()));
  VisitValues(v, [](const KeyPath& p, const Value& x) {
    if (x.is_tensor()) {
      EXPECT_EQ(x.as_tensor().device().type, DeviceType::kCUDA) << FormatKeyPath(p);
    }
  });
  EXPECT_EQ(DiffValues(ToCpu(v), host), "");
}

// The trainer's next step: every GPU tensor of `gpu` overwritten (bool
// tensors kept valid).
void OverwriteOnGpu(const Value& gpu) {
  VisitValues(gpu, [](const KeyPath&, const Value& x) {
    if (x.is_tensor() && x.as_tensor().dtype() != DType::kBool) {
      cudaMemset(x.as_tensor().data(), 0x7f, x.as_tensor().nbytes());
    }
  });
}

TEST(CudaTest, AsyncSaveFromTheGpu) {
  SKIP_WITHOUT_GPU();
  ScopedTempDir dir;
  Value host = MakeRichStateDict(23);
  Value gpu = ToGpu(host);
  AsyncSaver saver;
  CKFMT_ASSERT_OK(saver.SaveAsync(dir.File("a.ckfmt"), gpu, SmallSaveOptions(Codec::kZstd)));
  OverwriteOnGpu(gpu);
  CKFMT_ASSERT_OK(saver.Wait());
  Value back{Dict{}};
  CKFMT_ASSERT_OK(Load(dir.File("a.ckfmt"), &back, {}, SmallReadOptions()));
  EXPECT_EQ(DiffValues(back, host), "");
}

// A snapshot budget of a quarter of the state: the rest is written from
// the GPU before SaveAsync returns; the file holds the state of the call.
TEST(CudaTest, AsyncSaveFromTheGpuWithinASnapshotBudget) {
  SKIP_WITHOUT_GPU();
  ScopedTempDir dir;
  Value host = MakeRichStateDict(24);
  const uint64_t total = TotalTensorBytes(host);
  Value gpu = ToGpu(host);
  AsyncSaverOptions o;
  o.snapshot_bytes = total / 4;
  AsyncSaver saver(o);
  CKFMT_ASSERT_OK(saver.SaveAsync(dir.File("a.ckfmt"), gpu, SmallSaveOptions(Codec::kZstd)));
  EXPECT_LE(saver.reserved_bytes(), total / 4);
  OverwriteOnGpu(gpu);
  CKFMT_ASSERT_OK(saver.Wait());
  Value back{Dict{}};
  CKFMT_ASSERT_OK(Load(dir.File("a.ckfmt"), &back, {}, SmallReadOptions()));
  EXPECT_EQ(DiffValues(back, host), "");
}

#endif  // CKFMT_HAVE_CUDA

}  // namespace
