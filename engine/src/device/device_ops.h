// Device memory operations the engine needs for GPU tensors, behind one
// small interface so that the writer, the reader and the async saver never
// call CUDA directly:
//  - asynchronous copies device <-> host on a stream owned by the engine,
//    ordered with fences (CUDA events);
//  - pinning of existing host memory (cudaHostRegister), so that the
//    staging slots that io_uring uses as fixed buffers are also the pinned
//    bounce buffers of the copies: device -> pinned slot -> disk, no extra
//    host memcpy;
//  - device allocation, for reconstructed entries.
//
// Backends: CUDA (cuda_device_ops.cc, only in builds with the toolkit) and
// a host-simulated one (simulated_device_ops.h) that tests install to run
// every device path, including its ordering, on machines without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ckfmt/tensor.h"
#include "io/file.h"

namespace ckfmt {

// An in-order queue of copies on one device. Thread-safe.
class DeviceStream {
 public:
  virtual ~DeviceStream() = default;
  // Enqueue a copy and return at once. Both ranges must stay valid and
  // untouched until a later fence has been waited for. `host` must be
  // pinned (DeviceOps::Pin) for the copy to be truly asynchronous.
  virtual Status CopyToHost(void* host, const void* device, size_t n) = 0;
  virtual Status CopyToDevice(void* device, const void* host, size_t n) = 0;
  // A fence after everything enqueued so far.
  virtual Result<uint64_t> Record() = 0;
  // Blocks until `fence` is reached. Fails if a copy enqueued before it
  // failed. REQUIRES: each fence is waited for at most once.
  // After a failure a stream may fail every later wait (a CUDA stream does
  // after an error that breaks its context; the simulator's after any), so
  // an owner that outlives a failed operation uses fresh streams after it.
  virtual Status Wait(uint64_t fence) = 0;
  // Record() + Wait().
  Status Synchronize();
};

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  // "cuda", "simulated".
  virtual std::string name() const = 0;
  // Number of devices visible; an error if the driver or runtime refuses.
  virtual Result<int> DeviceCount() = 0;
  virtual Result<std::unique_ptr<DeviceStream>> NewStream(int device) = 0;
  // Page-locks `n` bytes of existing host memory at `p` for every device.
  virtual Status Pin(void* p, size_t n) = 0;
  // REQUIRES: `p` was pinned and no copy uses it any more.
  virtual void Unpin(void* p) = 0;
  virtual Result<void*> Allocate(int device, size_t n) = 0;
  virtual void Free(int device, void* p) = 0;
};

// The backend that handles tensors on `device` (REQUIRES: not kCPU): the
// one installed by SetDeviceOps, else CUDA where this build has it. Fails
// with a message saying why (no CUDA in this build, no device, bad index).
Result<DeviceOps*> DeviceOpsFor(Device device);

// Routes every kCUDA tensor to `ops` (tests: the simulated backend);
// nullptr restores the default. REQUIRES: no save or load in flight, and
// `ops` outlives every use (tensors it allocated included).
void SetDeviceOps(DeviceOps* ops);

// The real CUDA backend, or an Unsupported/IOError status saying why there
// is none (a build without the toolkit, no driver, no GPU).
Result<DeviceOps*> CudaDeviceOps();

// "cuda:1".
std::string DeviceName(Device device);

// Host ranges kept pinned for this object's lifetime.
class PinnedRanges {
 public:
  PinnedRanges() = default;
  PinnedRanges(const PinnedRanges&) = delete;
  PinnedRanges& operator=(const PinnedRanges&) = delete;
  ~PinnedRanges() { Clear(); }

  Status Add(DeviceOps* ops, void* p, size_t n);
  // Unpins everything. REQUIRES: no copy still uses the ranges.
  void Clear();
  bool empty() const { return ranges_.empty(); }

 private:
  std::vector<std::pair<DeviceOps*, void*>> ranges_;
};

// Pinned, 4096-aligned host buffers of one size, handed out one at a time
// and pinned once: bounce buffers for data that cannot go through the
// staging slots (codec input/output, page-cache reads). Thread-safe.
class PinnedPool {
 public:
  PinnedPool(DeviceOps* ops, size_t buffer_size) : ops_(ops), size_(buffer_size) {}
  ~PinnedPool();

  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept : pool_(o.pool_), index_(o.index_), data_(o.data_) {
      o.pool_ = nullptr;
    }
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    uint8_t* data() const { return data_; }

   private:
    friend class PinnedPool;
    Lease(PinnedPool* pool, size_t index, uint8_t* data)
        : pool_(pool), index_(index), data_(data) {}
    PinnedPool* pool_ = nullptr;
    size_t index_ = 0;
    uint8_t* data_ = nullptr;
  };
  // A free buffer, allocating and pinning a new one if none is free.
  Result<Lease> Acquire();
  size_t buffer_size() const { return size_; }

 private:
  DeviceOps* ops_;
  size_t size_;
  std::mutex mu_;
  std::vector<std::unique_ptr<AlignedBuffer>> buffers_;
  std::vector<size_t> free_;
  PinnedRanges pins_;
};

}  // namespace ckfmt
