// Sequential output through staging slots: the writer reserves space at
// 4096-aligned positions, fills it (possibly on several threads), and the
// slots stream to disk through BlockIo while later ones are being filled.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "io/block_io.h"

namespace ckfmt {

class StagedOutput {
 public:
  // `block_size` (a multiple of 4096) bounds one reservation; `slots` >= 3.
  // Output starts at file offset `base` (a multiple of 4096).
  static Result<std::unique_ptr<StagedOutput>> Create(const File& file, const IoOptions& options,
                                                      size_t block_size, size_t slots,
                                                      uint64_t base = 0);
  ~StagedOutput();

  struct Space {
    uint8_t* data;
    uint64_t file_offset;
  };
  // Space for `n` <= block_size bytes at the next aligned position. Must be
  // followed by Commit() before the next Reserve(). A slot that fills up is
  // held back until SubmitReady(), so several reservations can be filled in
  // parallel. REQUIRES: at most slots-2 reservations between SubmitReady()s.
  Result<Space> Reserve(size_t n);
  // Keeps `used` bytes of the last reservation and zero-pads to alignment.
  void Commit(size_t used);
  // Starts writing every full slot that Reserve() held back, or, under a
  // write limit, as many as it allows; the rest follow as writes finish.
  Status SubmitReady();
  // Copies `n` bytes to the next aligned position, spanning slots as needed,
  // and zero-pads them to alignment; every slot they fill starts writing.
  // Returns their file offset. REQUIRES: no reservation held back; the
  // position is a multiple of 4096.
  Result<uint64_t> Put(const void* data, size_t n);
  // Appends bytes at the current position, unaligned (the index and footer).
  Status Append(const void* data, size_t n);
  // Writes what remains and waits for every write.
  // REQUIRES: the position is a multiple of 4096.
  Status Finish();

  // At most `n` writes in flight from now on (0: as many as slots).
  void LimitWrites(size_t n) { max_writes_ = n; }

  uint64_t position() const { return slot_offset_ + fill_; }
  // The staging buffers (the writer pins them for device copies).
  const std::vector<AlignedBuffer>& slots() const { return slots_; }
  std::string io_name() const { return io_->name(); }

 private:
  StagedOutput(size_t block_size) : block_size_(block_size) {}
  Status TakeSlot();          // makes a free slot current
  Status Pump();              // starts released writes while under the limit
  void RetireCurrent();       // current slot -> ready list
  Status Reap();              // waits for one write; frees its slot

  size_t block_size_;
  std::vector<AlignedBuffer> slots_;
  std::unique_ptr<BlockIo> io_;
  std::vector<int> free_;
  std::deque<std::pair<int, uint64_t>> ready_;  // (slot, file offset), filled
  size_t released_ = 0;   // how many of ready_, from the front, may be written
  size_t max_writes_ = 0;
  std::vector<size_t> ready_len_;               // per slot: bytes to write
  int current_ = -1;
  uint64_t slot_offset_ = 0;  // file offset of the current slot's byte 0
  size_t fill_ = 0;           // bytes used in the current slot
  size_t reserved_ = 0;
};

}  // namespace ckfmt
