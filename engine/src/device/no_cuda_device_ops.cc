// Builds without the CUDA toolkit: device tensors need an installed backend
// (SetDeviceOps), which only tests do.
#include "device/device_ops.h"

namespace ckfmt {

Result<DeviceOps*> CudaDeviceOps() {
  return Status::Unsupported("this build of ckfmt has no CUDA support (built without the "
                             "CUDA toolkit)");
}

}  // namespace ckfmt
