// Helpers for GPU-tensor tests on the simulated device backend: moving
// state dicts between host and (simulated) device memory, and a fixture
// that installs the backend and checks it was used cleanly.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "ckfmt/reader.h"
#include "ckfmt/state_dict.h"
#include "device/simulated_device_ops.h"
#include "util/value_util.h"  // SmallReadOptions

namespace ckfmt_test {

// `v` with every tensor replaced by f(tensor); the rest copied.
ckfmt::Value MapTensors(const ckfmt::Value& v,
                        const std::function<ckfmt::Tensor(const ckfmt::Tensor&)>& f);
// A copy of `t` in device memory of `ops` on cuda:`device` (shard kept).
ckfmt::Tensor ToDevice(ckfmt::SimulatedDeviceOps& ops, const ckfmt::Tensor& t, int device);
// A host copy of a device tensor (shard kept); host tensors are copied too.
ckfmt::Tensor ToHost(ckfmt::SimulatedDeviceOps& ops, const ckfmt::Tensor& t);
// `v` with every tensor replaced by ToDevice / ToHost of it.
ckfmt::Value ToDevice(ckfmt::SimulatedDeviceOps& ops, const ckfmt::Value& v, int device);
// Likewise, but tensors for which `stays` is true stay on the host (as a
// trainer's step counters do).
ckfmt::Value ToDevice(ckfmt::SimulatedDeviceOps& ops, const ckfmt::Value& v, int device,
                      const std::function<bool(const ckfmt::Tensor&)>& stays);
ckfmt::Value ToHost(ckfmt::SimulatedDeviceOps& ops, const ckfmt::Value& v);
// The file at `path` loaded into an empty dict on the host (a test failure
// if the load fails).
ckfmt::Value LoadToHost(const std::string& path, const ckfmt::ReadOptions& ro = SmallReadOptions());
// Why tests on a real CUDA GPU cannot run here, or "" when they can.
std::string NoGpuReason();
// Number of tensors in `v` on a CUDA device / in total.
size_t CountDeviceTensors(const ckfmt::Value& v);

// Installs a SimulatedDeviceOps for kCUDA for the test's duration; at the
// end checks that nothing stayed pinned and nothing was misused.
class SimulatedDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  ckfmt::SimulatedDeviceOps& ops() { return *ops_; }

 private:
  std::unique_ptr<ckfmt::SimulatedDeviceOps> ops_;
};

}  // namespace ckfmt_test
