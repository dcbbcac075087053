// The CUDA backend of DeviceOps (builds with the toolkit: CKFMT_HAVE_CUDA).
// Every call selects its device and restores the caller's current device,
// so the engine never changes a trainer thread's CUDA state.
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>

#include "device/device_ops.h"

namespace ckfmt {
namespace {

Status CudaError(cudaError_t e, const std::string& what) {
  return Status::IOError(what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

// Makes `device` current for the scope, then restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    status_ = previous_ == device ? cudaSuccess : cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

class CudaStream final : public DeviceStream {
 public:
  CudaStream(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~CudaStream() override {
    DeviceScope scope(device_);
    cudaStreamSynchronize(stream_);
    for (auto& [seq, ev] : events_) cudaEventDestroy(ev);
    cudaStreamDestroy(stream_);
  }

  Status CopyToHost(void* host, const void* device, size_t n) override {
    return Copy(host, device, n, cudaMemcpyDeviceToHost, "device->host");
  }
  Status CopyToDevice(void* device, const void* host, size_t n) override {
    return Copy(device, host, n, cudaMemcpyHostToDevice, "host->device");
  }

  Result<uint64_t> Record() override {
    DeviceScope scope(device_);
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess) return CudaError(e, Where("cudaEventCreate"));
    std::lock_guard<std::mutex> l(mu_);
    e = cudaEventRecord(ev, stream_);
    if (e != cudaSuccess) {
      cudaEventDestroy(ev);
      return CudaError(e, Where("cudaEventRecord"));
    }
    events_[++seq_] = ev;
    return seq_;
  }

  Status Wait(uint64_t fence) override {
    cudaEvent_t ev;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = events_.find(fence);
      if (it == events_.end()) return Status::Internal(Where("wait for an unknown fence"));
      ev = it->second;
    }
    cudaError_t e = cudaEventSynchronize(ev);
    {
      std::lock_guard<std::mutex> l(mu_);
      events_.erase(fence);
    }
    cudaEventDestroy(ev);
    return e == cudaSuccess ? Status::OK() : CudaError(e, Where("copy"));
  }

 private:
  std::string Where(const std::string& what) const {
    return what + " on cuda:" + std::to_string(device_);
  }

  Status Copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, const char* dir) {
    DeviceScope scope(device_);
    std::lock_guard<std::mutex> l(mu_);  // keeps copies and events in one order
    cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, stream_);
    if (e != cudaSuccess) {
      return CudaError(e, Where(std::string("cudaMemcpyAsync ") + dir + " of " +
                                std::to_string(n) + " bytes"));
    }
    return Status::OK();
  }

  int device_;
  cudaStream_t stream_;
  std::mutex mu_;
  std::map<uint64_t, cudaEvent_t> events_;
  uint64_t seq_ = 0;
};

class CudaOps final : public DeviceOps {
 public:
  std::string name() const override { return "cuda"; }

  Result<int> DeviceCount() override {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return CudaError(e, "cudaGetDeviceCount");
    return n;
  }

  Result<std::unique_ptr<DeviceStream>> NewStream(int device) override {
    DeviceScope scope(device);
    if (scope.status() != cudaSuccess) {
      return CudaError(scope.status(), "cudaSetDevice(" + std::to_string(device) + ")");
    }
    cudaStream_t s;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) return CudaError(e, "cudaStreamCreate on cuda:" + std::to_string(device));
    return std::unique_ptr<DeviceStream>(new CudaStream(device, s));
  }

  Status Pin(void* p, size_t n) override {
    cudaError_t e = cudaHostRegister(p, n, cudaHostRegisterPortable);
    if (e != cudaSuccess) return CudaError(e, "cudaHostRegister of " + std::to_string(n) + " bytes");
    return Status::OK();
  }
  void Unpin(void* p) override { cudaHostUnregister(p); }

  Result<void*> Allocate(int device, size_t n) override {
    DeviceScope scope(device);
    if (scope.status() != cudaSuccess) {
      return CudaError(scope.status(), "cudaSetDevice(" + std::to_string(device) + ")");
    }
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, std::max<size_t>(n, 1));
    if (e != cudaSuccess) {
      return CudaError(e, "cudaMalloc of " + std::to_string(n) + " bytes on cuda:" +
                              std::to_string(device));
    }
    return p;
  }
  void Free(int device, void* p) override {
    DeviceScope scope(device);
    cudaFree(p);
  }
};

}  // namespace

Result<DeviceOps*> CudaDeviceOps() {
  static CudaOps ops;
  static Status usable = [] {
    // No driver or no device is what a CPU machine has: not an I/O error.
    auto n = ops.DeviceCount();
    if (!n.ok()) return Status::Unsupported("no usable CUDA device: " + n.status().message());
    if (*n == 0) return Status::Unsupported("no CUDA device is present");
    return Status::OK();
  }();
  if (!usable.ok()) return usable;
  return static_cast<DeviceOps*>(&ops);
}

}  // namespace ckfmt
