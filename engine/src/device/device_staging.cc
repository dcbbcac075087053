#include "device/device_staging.h"

#include "ckfmt/file_layout.h"

namespace ckfmt {

Result<std::unique_ptr<DeviceStaging>> DeviceStaging::For(Device device) {
  CKFMT_ASSIGN_OR_RETURN(DeviceOps * ops, DeviceOpsFor(device));
  return std::unique_ptr<DeviceStaging>(new DeviceStaging(ops));
}

DeviceStaging::~DeviceStaging() {
  DropStreams();  // copies still queued (an error path) may use the pinned memory
  pool_.reset();
  slot_pins_.Clear();
}

Result<DeviceStream*> DeviceStaging::Stream(Device device) {
  std::lock_guard<std::mutex> l(mu_);
  std::unique_ptr<DeviceStream>& s = streams_[device.index];
  if (!s) {
    auto made = ops_->NewStream(device.index);
    if (!made.ok()) {
      streams_.erase(device.index);
      return made.status().WithContext(DeviceName(device));
    }
    s = std::move(*made);
  }
  return s.get();
}

void DeviceStaging::DropStreams() {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [index, stream] : streams_) (void)stream->Synchronize();
  streams_.clear();
}

Status DeviceStaging::PinSlots(const std::vector<AlignedBuffer>& slots) {
  if (!slot_pins_.empty()) return Status::OK();
  for (const AlignedBuffer& b : slots) {
    if (Status s = slot_pins_.Add(ops_, b.data(), b.size()); !s.ok()) {
      slot_pins_.Clear();
      return s.WithContext("pinning the staging slots");
    }
  }
  return Status::OK();
}

void DeviceStaging::SetBounceSize(size_t n) {
  if (pool_ && pool_->buffer_size() >= n) return;
  pool_ = std::make_unique<PinnedPool>(ops_, AlignUp(std::max<size_t>(n, kAlignment)));
}

Result<PinnedPool::Lease> DeviceStaging::Bounce() {
  if (!pool_) return Status::Internal("device bounce buffers used before they were sized");
  return pool_->Acquire();
}

Status DeviceStaging::CopyToDeviceAndWait(Device device, void* dst, const void* host, size_t n) {
  CKFMT_ASSIGN_OR_RETURN(DeviceStream * stream, Stream(device));
  CKFMT_RETURN_IF_ERROR(stream->CopyToDevice(dst, host, n));
  return stream->Synchronize();
}

Status DeviceStaging::CopyToHostAndWait(Device device, void* host, const void* src, size_t n) {
  CKFMT_ASSIGN_OR_RETURN(DeviceStream * stream, Stream(device));
  CKFMT_RETURN_IF_ERROR(stream->CopyToHost(host, src, n));
  return stream->Synchronize();
}

Result<PinnedPool::Lease> DeviceStaging::CopyToBounce(Device device, const void* src, size_t n) {
  CKFMT_ASSIGN_OR_RETURN(PinnedPool::Lease lease, Bounce());
  CKFMT_RETURN_IF_ERROR(CopyToHostAndWait(device, lease.data(), src, n));
  return lease;
}

}  // namespace ckfmt
