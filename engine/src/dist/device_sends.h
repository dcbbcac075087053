// Flattened save without a device communicator: GPU tensors are gathered
// over the host communicator like host tensors, so each rank first copies
// what it sends of them in a bucket into pinned host memory of its own.
// The copy runs at device-to-host speed, far above any host transport's,
// and the memory is bounded by one bucket.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ckfmt/dist/communicator.h"
#include "device/device_staging.h"
#include "io/file.h"

namespace ckfmt::dist {

class DeviceSendStaging {
 public:
  // `capacity`: the most GPU bytes this rank sends in one bucket over
  // `comm`. Nothing is allocated before the first Stage().
  DeviceSendStaging(const Communicator& comm, uint64_t capacity)
      : comm_(comm), capacity_(capacity) {}
  // Leaves the memory allocated when `comm` broke: its transport may still
  // read it.
  ~DeviceSendStaging();
  DeviceSendStaging(const DeviceSendStaging&) = delete;
  DeviceSendStaging& operator=(const DeviceSendStaging&) = delete;

  // Starts a bucket: its staged data may overwrite the previous bucket's.
  // REQUIRES: the previous bucket's gather finished.
  void NewBucket() { used_ = 0; }

  // Copies `segs` (device memory on `device`) into the staging after what
  // this bucket staged so far, waits for the copies, and points `segs` at
  // the copies. `what` names the data in errors ("model/w on cuda:0").
  // REQUIRES: this bucket's segments total at most capacity bytes.
  Status Stage(Device device, std::vector<ConstSegment>* segs, const std::string& what);

  // Host bytes held.
  uint64_t allocated() const { return buffer_.size(); }

 private:
  const Communicator& comm_;
  const uint64_t capacity_;
  uint64_t used_ = 0;
  AlignedBuffer buffer_;                   // empty until the first Stage()
  std::unique_ptr<DeviceStaging> device_;  // the backend and its streams
  PinnedRanges pin_;                       // buffer_
};

}  // namespace ckfmt::dist
