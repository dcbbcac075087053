#include "device/device_ops.h"

#include <atomic>

namespace ckfmt {
namespace {

std::atomic<DeviceOps*> g_override{nullptr};

}  // namespace

Status DeviceStream::Synchronize() {
  CKFMT_ASSIGN_OR_RETURN(uint64_t fence, Record());
  return Wait(fence);
}

void SetDeviceOps(DeviceOps* ops) { g_override.store(ops); }

std::string DeviceName(Device device) {
  return device.type == DeviceType::kCPU ? "cpu" : "cuda:" + std::to_string(device.index);
}

Result<DeviceOps*> DeviceOpsFor(Device device) {
  if (device.type != DeviceType::kCUDA) {
    return Status::InvalidArgument("no device backend for " + DeviceName(device));
  }
  DeviceOps* ops = g_override.load();
  if (!ops) {
    auto cuda = CudaDeviceOps();
    if (!cuda.ok()) {
      return Status::InvalidArgument("tensors on " + DeviceName(device) +
                                     " cannot be used here: " + cuda.status().message());
    }
    ops = *cuda;
  }
  CKFMT_ASSIGN_OR_RETURN(int count, ops->DeviceCount());
  if (device.index < 0 || device.index >= count) {
    return Status::InvalidArgument(DeviceName(device) + ": no such device (" + ops->name() +
                                   " sees " + std::to_string(count) + ")");
  }
  return ops;
}

Status PinnedRanges::Add(DeviceOps* ops, void* p, size_t n) {
  if (n == 0) return Status::OK();
  CKFMT_RETURN_IF_ERROR(ops->Pin(p, n));
  ranges_.emplace_back(ops, p);
  return Status::OK();
}

void PinnedRanges::Clear() {
  for (auto& [ops, p] : ranges_) ops->Unpin(p);
  ranges_.clear();
}

PinnedPool::~PinnedPool() { pins_.Clear(); }

PinnedPool::Lease::~Lease() {
  if (!pool_) return;
  std::lock_guard<std::mutex> l(pool_->mu_);
  pool_->free_.push_back(index_);
}

Result<PinnedPool::Lease> PinnedPool::Acquire() {
  std::lock_guard<std::mutex> l(mu_);
  if (free_.empty()) {
    std::unique_ptr<AlignedBuffer> buf;
    try {
      buf = std::make_unique<AlignedBuffer>(size_);
    } catch (const std::bad_alloc&) {
      return Status::IOError("cannot allocate a " + std::to_string(size_) +
                             "-byte pinned bounce buffer");
    }
    CKFMT_RETURN_IF_ERROR(
        pins_.Add(ops_, buf->data(), buf->size())
            .WithContext("pinning a " + std::to_string(size_) + "-byte bounce buffer"));
    free_.push_back(buffers_.size());
    buffers_.push_back(std::move(buf));
  }
  size_t i = free_.back();
  free_.pop_back();
  return Lease(this, i, buffers_[i]->data());
}

}  // namespace ckfmt
