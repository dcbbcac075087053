// A device communicator for tests without a GPU: data operations take
// simulated device pointers (SimulatedDeviceOps), copy them to the host,
// run the operation on a host communicator and copy results back. With it
// the distributed save's GPU path (DistSaveOptions::device_comm) runs in
// CI over SingleCommunicator or MPI; the simulated device's PROT_NONE
// memory makes any host access to a device pointer crash.
#pragma once

#include "ckfmt/dist/communicator.h"
#include "device/simulated_device_ops.h"

namespace ckfmt_dist_test {

class SimulatedDeviceComm final : public ckfmt::dist::Communicator {
 public:
  // REQUIRES: `host` and `ops` outlive this object.
  SimulatedDeviceComm(ckfmt::dist::Communicator& host, ckfmt::SimulatedDeviceOps& ops, int device)
      : Communicator(ckfmt::dist::CommOptions{host.timeout()}), host_(host), ops_(ops),
        device_(device) {}

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  std::string name() const override { return "simulated-device"; }
  ckfmt::dist::MemorySpace memory() const override { return ckfmt::dist::MemorySpace::kDevice; }
  int device() const override { return device_; }

  // Bytes this rank sent through GatherSegments so far.
  uint64_t gathered_bytes() const { return gathered_; }

  ckfmt::Status Barrier() override { return host_.Barrier(); }
  ckfmt::Status Broadcast(void* data, size_t bytes, int root) override;
  ckfmt::Status AllGather(const void* send, size_t bytes, void* recv) override;
  ckfmt::Status AllGatherV(const void* send, size_t bytes, void* recv,
                           const std::vector<uint64_t>& counts) override;
  ckfmt::Status Gather(const void* send, size_t bytes, void* recv, int root) override;
  ckfmt::Status GatherV(const void* send, size_t bytes, void* recv,
                        const std::vector<uint64_t>& counts, int root) override;
  ckfmt::Status GatherSegments(const std::vector<ckfmt::dist::ConstSegment>& send,
                               const std::vector<std::vector<ckfmt::dist::Segment>>& recv,
                               int root) override;
  ckfmt::Status Send(const void* data, size_t bytes, int dst, int tag) override;
  ckfmt::Status Recv(void* data, size_t bytes, int src, int tag) override;
  ckfmt::Status AllReduce(int64_t* values, size_t n, ckfmt::dist::ReduceOp op) override {
    return host_.AllReduce(values, n, op);
  }
  ckfmt::Status AgreeOnStatus(const ckfmt::Status& local, const std::string& what) override {
    return host_.AgreeOnStatus(local, what);
  }

 private:
  std::vector<uint8_t> Down(const void* device, size_t n);
  void Up(void* device, const std::vector<uint8_t>& host, size_t offset, size_t n);

  ckfmt::dist::Communicator& host_;
  ckfmt::SimulatedDeviceOps& ops_;
  int device_;
  uint64_t gathered_ = 0;
};

}  // namespace ckfmt_dist_test
