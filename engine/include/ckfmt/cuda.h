// GPU tensors (Device{DeviceType::kCUDA, i}).
//
// Save(), AsyncSaver and Load() accept CUDA tensors when ckfmt is built
// with the CUDA toolkit: data streams device -> pinned staging slot -> disk
// on save and the reverse on load, the copies overlapping the I/O. This
// header exists in every build; without CUDA, or without a GPU, the
// functions below return errors saying so, and saving or loading a CUDA
// tensor fails with the same message.
#pragma once

#include "ckfmt/tensor.h"

namespace ckfmt {

// Whether this build was compiled with CUDA support.
bool CudaBuildEnabled();

// The number of CUDA devices. Fails (kUnsupported) when the build has no
// CUDA or no device is present, or with the driver's error.
Result<int> CudaDeviceCount();

// An Allocator (see tensor.h) making device tensors with cudaMalloc, freed
// when the last copy of the tensor goes. `device` >= 0 fixes the device;
// -1 takes the device of the hint when it is a CUDA device, else cuda:0.
// Use it as LoadOptions::allocator together with
// LoadOptions::reconstruct_device.
Allocator CudaAllocator(int device = -1);

}  // namespace ckfmt
