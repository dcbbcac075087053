#include "device/simulated_device_ops.h"

#include <sys/mman.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <thread>

namespace ckfmt {

class SimulatedDeviceOps::Stream final : public DeviceStream {
 public:
  Stream(SimulatedDeviceOps* ops, int device)
      : ops_(ops), device_(device), thread_([this] { Loop(); }) {}
  ~Stream() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  Status CopyToHost(void* host, const void* device, size_t n) override {
    return Enqueue({host, device, n, true});
  }
  Status CopyToDevice(void* device, const void* host, size_t n) override {
    return Enqueue({device, host, n, false});
  }
  Result<uint64_t> Record() override {
    std::lock_guard<std::mutex> l(mu_);
    return enqueued_;  // the fence is "everything enqueued so far has run"
  }
  Status Wait(uint64_t fence) override {
    std::unique_lock<std::mutex> l(mu_);
    done_cv_.wait(l, [&] { return executed_ >= fence; });
    return error_;  // sticky, like a CUDA stream error
  }

 private:
  struct Op {
    void* dst;
    const void* src;
    size_t n;
    bool to_host;
  };

  Status Enqueue(Op op) {
    {
      std::lock_guard<std::mutex> l(mu_);
      queue_.push_back(op);
      ++enqueued_;
    }
    cv_.notify_all();
    return Status::OK();
  }

  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (true) {
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Op op = queue_.front();
      queue_.pop_front();
      bool failed = !error_.ok();
      l.unlock();
      if (ops_->options_.copy_delay.count() > 0) std::this_thread::sleep_for(ops_->options_.copy_delay);
      Status s = failed ? Status::OK() : ops_->RunCopy(op.dst, op.src, op.n, op.to_host);
      l.lock();
      if (!s.ok() && error_.ok()) {
        error_ = s.WithContext("simulated " + DeviceName({DeviceType::kCUDA, device_}));
      }
      ++executed_;
      done_cv_.notify_all();
    }
  }

  SimulatedDeviceOps* ops_;
  int device_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<Op> queue_;
  uint64_t enqueued_ = 0, executed_ = 0;
  Status error_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

SimulatedDeviceOps::~SimulatedDeviceOps() {
  for (auto& [addr, a] : allocs_) {
    ::munmap(reinterpret_cast<void*>(addr), a.size);
    ::munmap(a.shadow, a.size);
  }
}

Result<std::unique_ptr<DeviceStream>> SimulatedDeviceOps::NewStream(int device) {
  if (device < 0 || device >= options_.devices) {
    return Status::InvalidArgument("simulated device " + std::to_string(device) + " does not exist");
  }
  return std::unique_ptr<DeviceStream>(new Stream(this, device));
}

Status SimulatedDeviceOps::Pin(void* p, size_t n) {
  std::lock_guard<std::mutex> l(mu_);
  const uint64_t k = ++pins_;
  if (fail_pins_from_ != 0 && k >= fail_pins_from_) {
    return Status::IOError("injected pin failure (pin " + std::to_string(k) + " of " +
                           std::to_string(n) + " bytes)");
  }
  auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = pinned_.upper_bound(addr);
  bool overlaps = (it != pinned_.end() && it->first < addr + n) ||
                  (it != pinned_.begin() && std::prev(it)->first + std::prev(it)->second > addr);
  // cudaHostRegister refuses memory that is already registered.
  if (overlaps) return Status::InvalidArgument("simulated pin: the range is already pinned");
  pinned_[addr] = n;
  return Status::OK();
}

void SimulatedDeviceOps::Unpin(void* p) {
  std::lock_guard<std::mutex> l(mu_);
  if (pinned_.erase(reinterpret_cast<uintptr_t>(p)) == 0) {
    violations_ += "Unpin of a range that is not pinned; ";
  }
}

bool SimulatedDeviceOps::Pinned(const void* p, size_t n) const {
  auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = pinned_.upper_bound(addr);
  if (it == pinned_.begin()) return false;
  --it;
  return addr + n <= it->first + it->second;
}

Result<void*> SimulatedDeviceOps::Allocate(int device, size_t n) {
  if (device < 0 || device >= options_.devices) {
    return Status::InvalidArgument("simulated device " + std::to_string(device) + " does not exist");
  }
  const uint64_t k = ++allocate_calls_;
  if (fail_allocations_from_ != 0 && k >= fail_allocations_from_) {
    // As the CUDA backend reports a failed cudaMalloc.
    return Status::IOError("allocation of " + std::to_string(n) + " bytes on simulated device " +
                           std::to_string(device) + ": out of memory (injected)");
  }
  size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_t size = std::max<size_t>(page, (n + page - 1) / page * page);
  // Two views of the same pages: the device address, inaccessible to the
  // host, and the alias that simulated copies use.
  void* shadow = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shadow == MAP_FAILED) return Status::FromErrno(errno, "simulated device allocation");
  void* dev = ::mremap(shadow, 0, size, MREMAP_MAYMOVE);
  if (dev == MAP_FAILED || ::mprotect(dev, size, PROT_NONE) != 0) {
    int err = errno;
    ::munmap(shadow, size);
    return Status::FromErrno(err, "simulated device allocation (alias)");
  }
  std::lock_guard<std::mutex> l(mu_);
  allocs_[reinterpret_cast<uintptr_t>(dev)] = {size, static_cast<uint8_t*>(shadow), device};
  return dev;
}

void SimulatedDeviceOps::Free(int device, void* p) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = allocs_.find(reinterpret_cast<uintptr_t>(p));
  if (it == allocs_.end() || it->second.device != device) {
    violations_ += "Free of a pointer that is not a device allocation of that device; ";
    return;
  }
  ::munmap(p, it->second.size);
  ::munmap(it->second.shadow, it->second.size);
  allocs_.erase(it);
}

uint8_t* SimulatedDeviceOps::Shadow(const void* p, size_t n) const {
  auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = allocs_.upper_bound(addr);
  if (it == allocs_.begin()) return nullptr;
  --it;
  if (addr + n > it->first + it->second.size) return nullptr;
  return it->second.shadow + (addr - it->first);
}

Status SimulatedDeviceOps::RunCopy(void* dst, const void* src, size_t n, bool to_host) {
  uint64_t k = ++copies_;
  if (fail_from_ != 0 && k >= fail_from_) {
    return Status::IOError("injected copy failure (copy " + std::to_string(k) + ")");
  }
  std::lock_guard<std::mutex> l(mu_);
  const void* host = to_host ? dst : src;
  const void* dev = to_host ? src : dst;
  uint8_t* shadow = Shadow(dev, n);
  if (!shadow) return Status::InvalidArgument("copy of " + std::to_string(n) +
                                              " bytes: the device side is not device memory");
  if (options_.require_pinned && !Pinned(host, n)) {
    return Status::InvalidArgument("copy of " + std::to_string(n) +
                                   " bytes: the host side is not pinned memory");
  }
  if (to_host) {
    std::memcpy(dst, shadow, n);
    to_host_ += n;
  } else {
    std::memcpy(shadow, src, n);
    to_device_ += n;
  }
  return Status::OK();
}

void SimulatedDeviceOps::Upload(void* device, const void* host, size_t n) {
  std::lock_guard<std::mutex> l(mu_);
  if (uint8_t* s = Shadow(device, n)) std::memcpy(s, host, n);
}

void SimulatedDeviceOps::Download(void* host, const void* device, size_t n) {
  std::lock_guard<std::mutex> l(mu_);
  if (const uint8_t* s = Shadow(device, n)) std::memcpy(host, s, n);
}

size_t SimulatedDeviceOps::pinned_ranges() const {
  std::lock_guard<std::mutex> l(mu_);
  return pinned_.size();
}

size_t SimulatedDeviceOps::allocations() const {
  std::lock_guard<std::mutex> l(mu_);
  return allocs_.size();
}

std::string SimulatedDeviceOps::violations() const {
  std::lock_guard<std::mutex> l(mu_);
  return violations_;
}

}  // namespace ckfmt
