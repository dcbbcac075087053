// ckfmt/cuda.h on top of the DeviceOps registry, so that tests with the
// simulated backend exercise the same allocator as a GPU build.
#include "ckfmt/cuda.h"

#include "device/device_ops.h"

namespace ckfmt {

bool CudaBuildEnabled() {
#ifdef CKFMT_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

Result<int> CudaDeviceCount() {
  CKFMT_ASSIGN_OR_RETURN(DeviceOps * ops, CudaDeviceOps());
  return ops->DeviceCount();
}

Allocator CudaAllocator(int device) {
  return [device](DType dtype, const Shape& shape, const KeyPath& /*path*/,
                  Device hint) -> Result<Tensor> {
    Device d{DeviceType::kCUDA,
             device >= 0 ? device : (hint.type == DeviceType::kCUDA ? hint.index : 0)};
    CKFMT_ASSIGN_OR_RETURN(DeviceOps * ops, DeviceOpsFor(d));
    CKFMT_ASSIGN_OR_RETURN(uint64_t numel, NumElements(shape));
    CKFMT_ASSIGN_OR_RETURN(uint64_t bytes, CheckedBytes(numel, DTypeSize(dtype)));
    // The caller names the key in errors (as for any allocator).
    CKFMT_ASSIGN_OR_RETURN(void* p, ops->Allocate(d.index, bytes));
    std::shared_ptr<void> owner(p, [ops, d](void* q) { ops->Free(d.index, q); });
    return Tensor::Owning(dtype, shape, p, std::move(owner), d);
  };
}

}  // namespace ckfmt
