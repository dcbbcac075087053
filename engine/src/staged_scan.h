// The read pipeline shared by loads and verify: file ranges read in order
// through a StagingRing, and the items each range holds (chunks, gaps)
// handed to the pool's workers while later reads are in flight.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "io/block_io.h"
#include "io/file.h"
#include "io/staging_ring.h"
#include "thread_pool.h"

namespace ckfmt {

// Staging and the I/O ring bound to it, for scans of one file. Made once
// and kept across scans by a caller that scans the same file often.
//
// A disk's throughput follows the bytes in flight, so those are what the
// budget governs: reads are submitted while fewer than min(io.staging_bytes,
// the span to read) bytes are in flight, direct reads included. The ring
// holds the staged part of that budget, as much again for the reads whose
// items are being handled, and one largest request for the overshoot of the
// last submission: a virtio disk here completes its queue in bursts (32 MiB
// at once, every ~12 ms), and with only two requests of headroom the next
// reads waited 1-2 ms for the burst to be copied out, the disk idle
// meanwhile.
class ScanStaging {
 public:
  // `span`: bytes the scans will cover; `staged`: how many of them go
  // through staging (the rest are read straight into place, see
  // ScanJob::direct); `largest_request`: the size of the largest request
  // the ring serves (larger ones get a buffer of their own). Fails only
  // when the memory cannot be had.
  static Result<std::unique_ptr<ScanStaging>> Create(const File& file, const IoOptions& io,
                                                     uint64_t span, uint64_t staged,
                                                     uint64_t largest_request);
  // The `staged` bytes the ring was sized for.
  uint64_t staged() const { return staged_; }
  StagingRing& ring() { return ring_; }
  BlockIo& io() { return *io_; }
  size_t max_request() const { return max_request_; }
  size_t in_flight_budget() const { return in_flight_budget_; }
  // Requests in flight at once, at most.
  static constexpr size_t kDepth = 32;

 private:
  ScanStaging(size_t ring, size_t budget, size_t max_request, uint64_t staged)
      : ring_(ring), in_flight_budget_(budget), max_request_(max_request), staged_(staged) {}
  StagingRing ring_;
  size_t in_flight_budget_, max_request_;
  uint64_t staged_;
  std::unique_ptr<BlockIo> io_;
};

// One read: an aligned file range and the items it holds.
struct ScanRequest {
  uint64_t begin, end;
  size_t first_item, end_item;  // [first_item, end_item)
};

struct ScanJob {
  std::vector<ScanRequest> requests;  // ascending, not overlapping
  std::vector<uint64_t> item_begin;   // file offset of each item's first byte
  // Optional, one per request: non-null reads the request straight into
  // that memory instead of staging (no copy out of staging afterwards). Such
  // a request holds one item, at its start; the memory takes the whole
  // request and meets the file's direct_memory_alignment().
  std::vector<uint8_t*> direct;
  // Called once per item with its bytes, on any thread; `worker` <
  // pool.size() and no two calls with the same worker run at once. A
  // failure stops the scan and is returned.
  std::function<Status(size_t item, const uint8_t* bytes, unsigned worker)> on_item;
  // Given the error of a failed read and the request's first item, returns
  // the error to report (e.g. naming the key the item belongs to). Optional.
  std::function<Status(size_t item, const Status& error)> read_error;
  // Called on the calling thread with the end of the prefix of requests
  // done so far (non-decreasing). Optional.
  std::function<void(uint64_t done_up_to)> on_progress;
  // A request larger than the ring serves gets a buffer of its own; this
  // wraps its use (`use` reads into it and handles its items), e.g. to pin
  // the buffer for device copies meanwhile. Optional.
  std::function<Status(uint8_t* buf, size_t n, const std::function<Status()>& use)>
      with_own_buffer;
};

// Runs `job`; returns the first failure of a read or of on_item.
Status RunScan(const File& file, ScanStaging& staging, const ScanJob& job, ThreadPool& pool);

}  // namespace ckfmt
