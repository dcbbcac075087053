// Sequential output through staging slots: the writer reserves space at
// 4096-aligned positions, fills it (possibly on several threads), and the
// slots stream to disk through BlockIo while later ones are being filled.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "io/block_io.h"

namespace ckfmt {

class ChecksumStream;  // ckfmt/checksum.h

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
  // Without blocking: frees the slots of finished writes and starts
  // released ones in their place. For a caller in the middle of a long
  // copy, so that a disk which ends its whole queue at once gets it back
  // without waiting for the copy to end.
  Status Poll();
  // Copies `n` bytes to the next aligned position, spanning slots as needed,
  // and zero-pads them to alignment; every slot they fill starts writing.
  // With `sum`, also adds the bytes to it, each piece hashed as it is
  // copied. Returns their file offset. REQUIRES: no reservation held back;
  // the position is a multiple of 4096.
  Result<uint64_t> Put(const void* data, size_t n, ChecksumStream* sum = nullptr);
  // Appends bytes at the current position, unaligned (the index and footer);
  // with `sum`, as Put().
  Status Append(const void* data, size_t n, ChecksumStream* sum = nullptr);
  // Writes what remains and waits for every write.
  // REQUIRES: the position is a multiple of 4096.
  Status Finish();

  // At most `n` writes in flight from now on (0: as many as slots).
  void LimitWrites(size_t n) { max_writes_ = n; }
  // Calls `fn` on the writing thread with the length of every write that
  // has finished.
  void OnWritten(std::function<void(uint64_t)> fn) { on_written_ = std::move(fn); }
  // From now on, allocates the file ahead of the writes, in steps that grow
  // from 16 to 256 MiB, so that every write lands inside the file's size;
  // Finish() then trims the file to its end. Where the file system refuses
  // an allocation (unsupported, or no room for a whole step), writes extend
  // the file from there on. Why: ext4 runs writes that extend a file one at
  // a time, each on an io_uring worker thread that waits for it; writes
  // inside the size go to the disk together, from the submitting thread.
  // REQUIRES: the writer owns the file from its base on (trimming would cut
  // another writer's range).
  void AllocateAhead() { allocate_step_ = kFirstAllocateStep; }
  // A hint that about `n` more bytes will follow: the next allocation
  // covers them at once. Each allocation waits for the writes in flight
  // (ext4 drains them), so one is better than many.
  void ExpectMore(uint64_t n) { expected_end_ = position() + n; }

  uint64_t position() const { return slot_offset_ + fill_; }
  // The staging buffers (the writer pins them for device copies).
  const std::vector<AlignedBuffer>& slots() const { return slots_; }
  std::string io_name() const { return io_->name(); }

 private:
  StagedOutput(const File& file, size_t block_size) : file_(file), block_size_(block_size) {}
  Status TakeSlot();          // makes a free slot current
  Status Pump();              // starts released writes while under the limit
  void RetireCurrent();       // current slot -> ready list
  Status Reap();              // waits for one write; frees its slot
  void AllocateFor(uint64_t end);  // under AllocateAhead(): the file covers `end`

  static constexpr uint64_t kFirstAllocateStep = 16ull << 20;
  static constexpr uint64_t kMaxAllocateStep = 256ull << 20;

  const File& file_;
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
  uint64_t allocate_step_ = 0;  // 0: no allocating ahead
  uint64_t allocated_end_ = 0;  // the file is allocated up to here
  uint64_t expected_end_ = 0;   // ExpectMore()'s hint
  bool allocation_tried_ = false;  // even a failed one may grow the file
  std::function<void(uint64_t)> on_written_;
};

}  // namespace ckfmt
