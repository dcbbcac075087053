// Tensors as the engine sees them: a dtype, a shape, contiguous row-major
// bytes, and a device. A Tensor is either a view of the caller's memory (the
// caller keeps it alive) or owns its memory through a shared handle.
//
// A Tensor may be a shard: it then holds `region` of a global tensor of
// `global_shape` (a box or a flat range, see region.h), its bytes being that
// region's row-major stream. An unsharded tensor's region is the whole.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "ckfmt/dtype.h"
#include "ckfmt/key_path.h"
#include "ckfmt/region.h"
#include "ckfmt/status.h"

namespace ckfmt {

enum class DeviceType : uint8_t { kCPU = 0, kCUDA = 1 };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  bool operator==(const Device&) const = default;
};

// Where a shard sits in its global tensor.
struct ShardSpec {
  Shape global_shape;
  Region region;  // REQUIRES: region.NumElements() == the tensor's element count
};

class Tensor {
 public:
  Tensor() = default;

  // A view of `data`, which must hold NumElements(shape) * DTypeSize(dtype)
  // bytes and outlive every use of the view.
  static Tensor View(DType dtype, Shape shape, void* data, Device device = {});
  // A tensor that keeps `owner` alive as long as any copy of it exists.
  static Tensor Owning(DType dtype, Shape shape, void* data, std::shared_ptr<void> owner,
                       Device device = {});
  // Host tensors of at least this many bytes are page-aligned (4096), so
  // that loads can read into them directly; smaller ones 64-byte aligned.
  static constexpr uint64_t kPageAlignedFrom = 64 << 10;
  // From this size on they start on a 2 MiB boundary and ask for huge pages
  // (madvise; a no-op without transparent huge pages).
  static constexpr uint64_t kHugePageAlignedFrom = 2 << 20;
  // A zero-filled host tensor (aligned as above).
  static Tensor Zeros(DType dtype, Shape shape);
  // An uninitialised host tensor (aligned as above).
  static Tensor Empty(DType dtype, Shape shape);

  bool defined() const { return data_ != nullptr || numel_ == 0; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  void* data() const { return data_; }
  Device device() const { return device_; }
  uint64_t numel() const { return numel_; }
  uint64_t nbytes() const { return numel_ * DTypeSize(dtype_); }

  // Marks this tensor as holding `spec.region` of a larger tensor.
  Tensor& SetShard(ShardSpec spec);
  const std::optional<ShardSpec>& shard() const { return shard_; }
  // The global shape: the shard's if set, else the tensor's own shape.
  const Shape& global_shape() const { return shard_ ? shard_->global_shape : shape_; }
  // The region of the global tensor this tensor holds.
  Region region() const { return shard_ ? shard_->region : Region::Whole(shape_); }
  // Whether the memory is a mapping of its own that Empty() or Zeros() asked
  // huge pages for, with transparent huge pages enabled. Loads read straight
  // into such memory even where they stage other reads (HostReads::kAuto).
  bool on_huge_pages() const { return on_huge_pages_; }

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  void* data_ = nullptr;
  uint64_t numel_ = 0;
  Device device_;
  std::shared_ptr<void> owner_;
  std::optional<ShardSpec> shard_;
  bool on_huge_pages_ = false;
};

// Allocates a tensor for an entry that the caller's state dict lacks. A
// trainer installs one to have reconstructed entries become its framework's
// own tensors. `path` is the entry's key path; `device` is a hint.
using Allocator =
    std::function<Result<Tensor>(DType dtype, const Shape& shape, const KeyPath& path, Device)>;

// Allocates host memory aligned as Tensor::Empty(), uninitialised: a load
// overwrites every element of what it reconstructs (or fails).
Allocator HostAllocator();

}  // namespace ckfmt
