#include "device_sends.h"

#include <new>

namespace ckfmt::dist {

DeviceSendStaging::~DeviceSendStaging() {
  device_.reset();  // waits for queued copies
  pin_.Clear();
  if (comm_.broken() && buffer_.size() > 0) new AlignedBuffer(std::move(buffer_));
}

Status DeviceSendStaging::Stage(Device device, std::vector<ConstSegment>* segs,
                                const std::string& what) {
  uint64_t total = 0;
  for (const ConstSegment& s : *segs) total += s.size;
  if (total == 0) return Status::OK();
  if (used_ + total > capacity_) {
    return Status::Internal(what + ": " + std::to_string(used_ + total) +
                            " bytes to stage in one bucket, room for " + std::to_string(capacity_));
  }
  if (!device_) {
    auto staging = DeviceStaging::For(device);
    if (!staging.ok()) return staging.status().WithContext(what);
    device_ = std::move(*staging);
  }
  if (buffer_.size() == 0) {
    try {
      buffer_ = AlignedBuffer(capacity_);
    } catch (const std::bad_alloc&) {
      return Status::IOError("cannot allocate " + std::to_string(capacity_) +
                             " bytes of host memory to send GPU tensors from");
    }
    // Pinned, so that the copies are DMA transfers straight into it.
    if (Status s = pin_.Add(device_->ops(), buffer_.data(), buffer_.size()); !s.ok()) {
      buffer_ = AlignedBuffer();
      return s.WithContext("pinning " + std::to_string(capacity_) +
                           " bytes of host memory to send GPU tensors from");
    }
  }
  CKFMT_ASSIGN_OR_RETURN(DeviceStream * stream, device_->Stream(device));
  Status s;
  for (ConstSegment& seg : *segs) {
    uint8_t* dst = buffer_.data() + used_;
    s = stream->CopyToHost(dst, seg.data, seg.size);
    if (!s.ok()) break;
    seg.data = dst;
    used_ += seg.size;
  }
  // Waited for even after a failed enqueue: earlier copies write the buffer.
  Status waited = stream->Synchronize();
  if (s.ok()) s = waited;
  return s.ok() ? s : s.WithContext("copying " + what + " to host memory");
}

}  // namespace ckfmt::dist
