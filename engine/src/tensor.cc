#include "ckfmt/tensor.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

namespace ckfmt {

namespace {

// A mapping of its own for a large tensor, starting on a 2 MiB boundary
// and asking for huge pages as a whole (madvise on part of a malloc'd
// mapping would split it in three, and a process may hold only
// vm.max_map_count mappings). Its length, `len`, is a multiple of 4096:
// the tail short of a whole huge page keeps small pages, so nothing is
// resident beyond the tensor. Returns nullptr if the mapping fails.
void* MapHugeAligned(size_t len) {
  constexpr size_t kHuge = Tensor::kHugePageAlignedFrom;
  const size_t span = len + kHuge;
  void* base = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  const uintptr_t b = reinterpret_cast<uintptr_t>(base);
  const uintptr_t a = (b + kHuge - 1) / kHuge * kHuge;
  if (a > b) ::munmap(base, a - b);
  if (b + span > a + len) ::munmap(reinterpret_cast<void*>(a + len), b + span - (a + len));
  (void)::madvise(reinterpret_cast<void*>(a), len, MADV_HUGEPAGE);  // a no-op without THP
  return reinterpret_cast<void*>(a);
}

// Whether madvise(MADV_HUGEPAGE) can give a mapping huge pages: the
// kernel's transparent huge pages are "always" or "madvise", not "never"
// (or absent). Read once.
bool HugePagesOnRequest() {
  static const bool enabled = [] {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string modes;
    std::getline(f, modes);
    return modes.find("[always]") != std::string::npos ||
           modes.find("[madvise]") != std::string::npos;
  }();
  return enabled;
}

}  // namespace

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
  // Rounding it up below must not wrap (no machine holds this much anyway).
  if (bytes > std::numeric_limits<size_t>::max() - kHugePageAlignedFrom) throw std::bad_alloc();
  // Page-aligned when large, so that loads can read into it with O_DIRECT
  // (no copy out of staging). From 2 MiB on, on huge pages: the block
  // layer splits a direct read into 4 KiB pages scattered in physical
  // memory into requests of 512 KiB (virtio's 128 segments), and faults
  // each page in on its own; 2 MiB pages take a 4 MiB read whole. A raw
  // O_DIRECT read into tensors a load made ran at 0.67-0.90x the raw read
  // into staging with small pages, 0.99-1.01x with huge ones; a load into
  // an empty dict (every tensor made here) at 0.77-0.87x against
  // 0.92-0.95x (2 alternations of ckfmt-bench-e2e --codecs none --runs 3).
  if (bytes >= kHugePageAlignedFrom) {
    const size_t len = (bytes + 4095) / 4096 * 4096;
    void* p = MapHugeAligned(len);
    if (!p) throw std::bad_alloc();
    std::shared_ptr<void> owner(p, [len](void* q) { ::munmap(q, len); });
    Tensor t = Owning(dtype, std::move(shape), p, std::move(owner));
    t.on_huge_pages_ = HugePagesOnRequest();
    return t;
  }
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
