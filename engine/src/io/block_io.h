// Asynchronous positioned I/O on one file through a fixed set of staging
// buffers. The io_uring backend registers the buffers and the file with the
// ring; the pread backend performs each request at submission.
//
// Two ways to address the buffers: as slots (request i uses all of buffer
// i, and its completion names i), or, for reads, at any place inside a
// buffer with a caller-chosen tag (a StagingRing carves one buffer into
// requests of uneven sizes).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ckfmt/io_options.h"
#include "io/file.h"

namespace ckfmt {

class BlockIo {
 public:
  struct Completion {
    int slot;       // the slot, or the tag of a SubmitReadTo
    Status status;  // OK only if the whole request was transferred
  };

  // Picks the backend per `options` (kAuto: io_uring, else pread) and logs
  // which path it took. `buffers` must outlive the BlockIo. `depth` bounds
  // the requests in flight at once (0: one per buffer).
  static std::unique_ptr<BlockIo> Create(const File& file, const IoOptions& options,
                                         const std::vector<AlignedBuffer>& buffers,
                                         size_t depth = 0);
  virtual ~BlockIo() = default;

  // Queue a transfer of `len` bytes between slot `slot` and `offset`.
  // REQUIRES: the slot is idle; for direct files offset and len aligned.
  virtual Status SubmitWrite(int slot, uint64_t offset, size_t len) = 0;
  virtual Status SubmitRead(int slot, uint64_t offset, size_t len) = 0;
  // Queue a read of `len` bytes at `offset` into `dst`: inside one of the
  // buffers (io_uring reads it as a fixed buffer) or any other memory.
  // REQUIRES: [dst, dst + len) overlaps no transfer in flight; 0 <= tag <
  // depth and no request in flight has it; for direct files offset and len
  // aligned, and dst to the file's direct_memory_alignment().
  virtual Status SubmitReadTo(int tag, uint8_t* dst, uint64_t offset, size_t len) = 0;
  // Blocks until one queued transfer finishes. REQUIRES: in_flight() > 0.
  virtual Completion Wait() = 0;
  // True if a transfer has finished, so Wait() would not block (barring a
  // short transfer it has to requeue).
  virtual bool Ready() = 0;
  virtual size_t in_flight() const = 0;
  // True if a Submit call performs its transfer before returning (pread),
  // false if it only queues it.
  virtual bool transfers_at_submit() const = 0;
  // E.g. "io_uring+O_DIRECT", "io_uring", "pread".
  virtual std::string name() const = 0;
};

// Tests: every BlockIo that Create() makes from now on is passed through
// `wrap` (one that injects I/O errors, say); nullptr restores the default.
// REQUIRES: no BlockIo is being created meanwhile.
using BlockIoWrapper =
    std::function<std::unique_ptr<BlockIo>(const File& file, std::unique_ptr<BlockIo> io)>;
void SetBlockIoWrapper(BlockIoWrapper wrap);

std::unique_ptr<BlockIo> MakePreadIo(const File& file, const std::vector<AlignedBuffer>& buffers);
// nullptr when io_uring is unavailable (the reason is logged).
std::unique_ptr<BlockIo> MakeUringIo(const File& file, const std::vector<AlignedBuffer>& buffers,
                                     size_t depth);

}  // namespace ckfmt
