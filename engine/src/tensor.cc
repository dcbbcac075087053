#include "ckfmt/tensor.h"

#include <cstdlib>
#include <cstring>

namespace ckfmt {

Tensor Tensor::View(DType dtype, Shape shape, void* data, Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.numel_ = 1;
  for (uint64_t d : shape) t.numel_ *= d;
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.device_ = device;
  return t;
}

Tensor Tensor::Owning(DType dtype, Shape shape, void* data, std::shared_ptr<void> owner,
                      Device device) {
  Tensor t = View(dtype, std::move(shape), data, device);
  t.owner_ = std::move(owner);
  return t;
}

Tensor Tensor::Empty(DType dtype, Shape shape) {
  uint64_t bytes = DTypeSize(dtype);
  for (uint64_t d : shape) bytes *= d;
  // Page-aligned when large, so that loads can read into it with O_DIRECT
  // (no copy out of staging).
  const size_t align = bytes >= kPageAlignedFrom ? 4096 : 64;
  size_t alloc = (bytes + align - 1) / align * align;
  void* p = alloc ? std::aligned_alloc(align, alloc) : nullptr;
  if (alloc && !p) throw std::bad_alloc();
  std::shared_ptr<void> owner(p, [](void* q) { std::free(q); });
  return Owning(dtype, std::move(shape), p, std::move(owner));
}

Tensor Tensor::Zeros(DType dtype, Shape shape) {
  Tensor t = Empty(dtype, std::move(shape));
  if (t.data()) std::memset(t.data(), 0, t.nbytes());
  return t;
}

Tensor& Tensor::SetShard(ShardSpec spec) {
  shard_ = std::move(spec);
  return *this;
}

Allocator HostAllocator() {
  return [](DType dtype, const Shape& shape, const KeyPath&, Device) -> Result<Tensor> {
    auto bytes = ShapeBytes(shape, DTypeSize(dtype));
    if (!bytes.ok()) return bytes.status();
    try {
      return Tensor::Empty(dtype, shape);
    } catch (const std::bad_alloc&) {
      return Status::IOError("cannot allocate " + std::to_string(*bytes) + " bytes");
    }
  };
}

}  // namespace ckfmt
