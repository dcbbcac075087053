// What a writer or a read session needs for device data, set up on the
// first device piece or target so that host-only saves and loads pay
// nothing: the backend, one stream per device, the staging slots pinned
// (they are the bounce buffers between device and disk), and a pool of
// pinned buffers for data that cannot sit in a slot (codec input and
// output, page-cache reads).
#pragma once

#include <map>
#include <memory>

#include "device/device_ops.h"

namespace ckfmt {

class DeviceStaging {
 public:
  // For data on `device` (REQUIRES: not kCPU).
  static Result<std::unique_ptr<DeviceStaging>> For(Device device);
  ~DeviceStaging();

  DeviceOps* ops() const { return ops_; }
  // The stream of `device`, created on first use. REQUIRES: `device` uses
  // the same backend as the one given to For().
  Result<DeviceStream*> Stream(Device device);
  // After a failed operation: waits for what is queued on the streams and
  // drops them, so that the next operation starts on fresh ones (a stream
  // may keep failing after an error). REQUIRES: no other thread uses them.
  void DropStreams();
  // Pins `slots` for this object's lifetime (once; later calls do nothing).
  // REQUIRES: the slots outlive this object.
  Status PinSlots(const std::vector<AlignedBuffer>& slots);
  // Makes Bounce() hand out buffers of at least `n` bytes.
  // REQUIRES: no lease outstanding.
  void SetBounceSize(size_t n);
  // A pinned buffer of the size set by SetBounceSize().
  Result<PinnedPool::Lease> Bounce();
  size_t bounce_size() const { return pool_ ? pool_->buffer_size() : 0; }

  // Calls fn(host, n, offset) for consecutive pieces of `n` device bytes
  // at `src`, each copied into a pinned bounce buffer first.
  template <typename F>
  Status ForEachHostPiece(Device device, const void* src, size_t n, const F& fn);
  // Copies `n` bytes of pinned host memory to `dst` on `device` and waits.
  Status CopyToDeviceAndWait(Device device, void* dst, const void* host, size_t n);
  // Copies `n` bytes at `src` on `device` to pinned host memory and waits.
  Status CopyToHostAndWait(Device device, void* host, const void* src, size_t n);
  // A bounce buffer holding a copy of the `n` bytes at `src` on `device`.
  // REQUIRES: n <= bounce_size().
  Result<PinnedPool::Lease> CopyToBounce(Device device, const void* src, size_t n);

 private:
  explicit DeviceStaging(DeviceOps* ops) : ops_(ops) {}

  DeviceOps* ops_;
  std::map<int, std::unique_ptr<DeviceStream>> streams_;
  std::unique_ptr<PinnedPool> pool_;
  PinnedRanges slot_pins_;
  std::mutex mu_;  // streams_
};

template <typename F>
Status DeviceStaging::ForEachHostPiece(Device device, const void* src, size_t n, const F& fn) {
  CKFMT_ASSIGN_OR_RETURN(DeviceStream * stream, Stream(device));
  CKFMT_ASSIGN_OR_RETURN(PinnedPool::Lease buf, Bounce());
  const size_t step = bounce_size();
  for (size_t off = 0; off < n; off += step) {
    size_t len = std::min(step, n - off);
    CKFMT_RETURN_IF_ERROR(stream->CopyToHost(buf.data(), static_cast<const uint8_t*>(src) + off, len));
    CKFMT_RETURN_IF_ERROR(stream->Synchronize());
    CKFMT_RETURN_IF_ERROR(fn(static_cast<const uint8_t*>(buf.data()), len, off));
  }
  return Status::OK();
}

}  // namespace ckfmt
