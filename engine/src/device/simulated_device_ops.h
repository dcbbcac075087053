// A DeviceOps backend without a GPU, strict enough to expose the bugs a
// real GPU would:
//  - "device" memory is mapped PROT_NONE at the address handed out (a
//    second, private mapping of the same pages is what copies use), so any
//    host access to a device pointer crashes instead of silently working;
//  - copies run later, in order, on one thread per stream, optionally after
//    a delay, so reading a destination before waiting for its fence, or
//    reusing a source before its copy ran, gives wrong bytes;
//  - a copy whose host side is not pinned fails (no pageable memory on the
//    path), as does a copy whose device side is not device memory;
//  - a copy, a pin or an allocation can be made to fail, to test error
//    paths.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>

#include "device/device_ops.h"

namespace ckfmt {

class SimulatedDeviceOps final : public DeviceOps {
 public:
  struct Options {
    int devices = 2;
    std::chrono::microseconds copy_delay{0};  // before each copy runs
    bool require_pinned = true;
  };
  SimulatedDeviceOps() : SimulatedDeviceOps(Options{}) {}
  explicit SimulatedDeviceOps(Options options) : options_(options) {}
  ~SimulatedDeviceOps() override;

  std::string name() const override { return "simulated"; }
  Result<int> DeviceCount() override { return options_.devices; }
  Result<std::unique_ptr<DeviceStream>> NewStream(int device) override;
  Status Pin(void* p, size_t n) override;
  void Unpin(void* p) override;
  Result<void*> Allocate(int device, size_t n) override;
  void Free(int device, void* p) override;

  // Test access to device memory, synchronous. REQUIRES: [p, p+n) inside
  // one allocation.
  void Upload(void* device, const void* host, size_t n);
  void Download(void* host, const void* device, size_t n);

  // The copy number `k` (counting from 1 over all streams) and every later
  // one fail with an error; 0 disables.
  void FailCopiesFrom(uint64_t k) { fail_from_ = k; }
  void set_copy_delay(std::chrono::microseconds d) { options_.copy_delay = d; }
  // The Allocate() call number `k` (counting from 1) and every later one
  // fail as on a full GPU; 0 disables.
  void FailAllocationsFrom(uint64_t k) { fail_allocations_from_ = k; }
  // The pin number `k` (counting from 1) and every later one fail, as
  // cudaHostRegister does when the host cannot lock more memory; 0
  // disables.
  void FailPinsFrom(uint64_t k) { fail_pins_from_ = k; }

  uint64_t copies() const { return copies_; }
  uint64_t pins() const { return pins_; }
  uint64_t allocate_calls() const { return allocate_calls_; }
  uint64_t bytes_to_host() const { return to_host_; }
  uint64_t bytes_to_device() const { return to_device_; }
  size_t pinned_ranges() const;
  size_t allocations() const;
  // Misuse seen (Unpin of an unpinned range, Free of a foreign pointer...).
  std::string violations() const;

  class Stream;

 private:
  struct Alloc {
    size_t size;
    uint8_t* shadow;
    int device;
  };
  // The writable alias of device range [p, p+n), or nullptr.
  uint8_t* Shadow(const void* p, size_t n) const;
  bool Pinned(const void* p, size_t n) const;
  // Runs one copy; called on a stream thread.
  Status RunCopy(void* dst, const void* src, size_t n, bool to_host);
  void Violation(const std::string& what);

  Options options_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Alloc> allocs_;   // by device address
  std::map<uintptr_t, size_t> pinned_;  // by host address
  std::string violations_;
  std::atomic<uint64_t> copies_{0}, to_host_{0}, to_device_{0}, fail_from_{0};
  std::atomic<uint64_t> pins_{0}, fail_pins_from_{0};
  std::atomic<uint64_t> allocate_calls_{0}, fail_allocations_from_{0};
};

}  // namespace ckfmt
