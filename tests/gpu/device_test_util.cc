#include "gpu/device_test_util.h"

#include <cstring>

#include "ckfmt/cuda.h"

namespace ckfmt_test {

using namespace ckfmt;

Tensor ToDevice(SimulatedDeviceOps& ops, const Tensor& t, int device) {
  void* p = ops.Allocate(device, t.nbytes()).value();
  if (t.nbytes()) ops.Upload(p, t.data(), t.nbytes());
  std::shared_ptr<void> owner(p, [&ops, device](void* q) { ops.Free(device, q); });
  Tensor d = Tensor::Owning(t.dtype(), t.shape(), p, std::move(owner),
                            Device{DeviceType::kCUDA, device});
  if (t.shard()) d.SetShard(*t.shard());
  return d;
}

Tensor ToHost(SimulatedDeviceOps& ops, const Tensor& t) {
  Tensor h = Tensor::Empty(t.dtype(), t.shape());
  if (t.nbytes()) {
    if (t.device().type == DeviceType::kCPU) {
      std::memcpy(h.data(), t.data(), t.nbytes());
    } else {
      ops.Download(h.data(), t.data(), t.nbytes());
    }
  }
  if (t.shard()) h.SetShard(*t.shard());
  return h;
}

Value MapTensors(const Value& v, const std::function<Tensor(const Tensor&)>& f) {
  switch (v.kind()) {
    case Value::Kind::kTensor: return Value(f(v.as_tensor()));
    case Value::Kind::kDict: {
      Dict d;
      for (size_t i = 0; i < v.as_dict().size(); ++i) {
        d.Set(v.as_dict().key(i), MapTensors(v.as_dict().value(i), f));
      }
      return Value(std::move(d));
    }
    case Value::Kind::kList: {
      List l;
      for (const Value& c : v.as_list()) l.push_back(MapTensors(c, f));
      return Value(std::move(l));
    }
    default: return v;
  }
}

Value ToDevice(SimulatedDeviceOps& ops, const Value& v, int device) {
  return MapTensors(v, [&](const Tensor& t) { return ToDevice(ops, t, device); });
}

Value ToDevice(SimulatedDeviceOps& ops, const Value& v, int device,
               const std::function<bool(const Tensor&)>& stays) {
  return MapTensors(v, [&](const Tensor& t) { return stays(t) ? t : ToDevice(ops, t, device); });
}

Value ToHost(SimulatedDeviceOps& ops, const Value& v) {
  return MapTensors(v, [&](const Tensor& t) { return ToHost(ops, t); });
}

Value LoadToHost(const std::string& path, const ReadOptions& ro) {
  Value v{Dict{}};
  auto r = Load(path, &v, {}, ro);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return v;
}

std::string NoGpuReason() {
  auto n = CudaDeviceCount();
  if (!n.ok()) return n.status().ToString();
  if (*n == 0) return "no CUDA device is present";
  return "";
}

size_t CountDeviceTensors(const Value& v) {
  size_t n = 0;
  VisitValues(v, [&](const KeyPath&, const Value& x) {
    if (x.is_tensor() && x.as_tensor().device().type == DeviceType::kCUDA) ++n;
  });
  return n;
}

void SimulatedDeviceTest::SetUp() {
  ops_ = std::make_unique<SimulatedDeviceOps>();
  SetDeviceOps(ops_.get());
}

void SimulatedDeviceTest::TearDown() {
  SetDeviceOps(nullptr);
  EXPECT_EQ(ops_->pinned_ranges(), 0u) << "host memory left pinned";
  EXPECT_EQ(ops_->violations(), "");
  EXPECT_EQ(ops_->allocations(), 0u) << "device memory leaked";
  // Tensors the test still holds free into ops_ on destruction: keep it.
  static std::vector<std::unique_ptr<SimulatedDeviceOps>> graveyard;
  graveyard.push_back(std::move(ops_));
}

}  // namespace ckfmt_test
