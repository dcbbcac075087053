// Disk errors on demand: while an IoFaults lives, every BlockIo the engine
// makes (engine/src/io/block_io.h) counts its transfers, and the one
// numbered `k` by FailFrom(k) and every later one complete with EIO, as a
// disk with a bad sector or a lost network volume reports them.
#pragma once

#include <atomic>
#include <cstdint>

namespace ckfmt_test {

class IoFaults {
 public:
  // Installs the wrapper. REQUIRES: no other IoFaults lives, and no
  // BlockIo is being made meanwhile.
  IoFaults();
  ~IoFaults();
  IoFaults(const IoFaults&) = delete;
  IoFaults& operator=(const IoFaults&) = delete;

  // Transfer number `k` (counting from 1 since this was made) and every
  // later one fail; 0: none does.
  void FailFrom(uint64_t k) { fail_from_ = k; }
  // Transfers started so far.
  uint64_t transfers() const { return transfers_; }

  // Counts a transfer; true if it is to fail.
  bool Next() {
    const uint64_t k = ++transfers_;
    return fail_from_ != 0 && k >= fail_from_;
  }

 private:
  std::atomic<uint64_t> transfers_{0}, fail_from_{0};
};

}  // namespace ckfmt_test
