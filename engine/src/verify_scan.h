// VerifyFile's pass over the data region: reads it in file order through
// the staging slots and runs the per-piece checks on a thread pool while
// further reads are in flight.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ckfmt/index.h"
#include "ckfmt/io_options.h"
#include "io/file.h"
#include "thread_pool.h"

namespace ckfmt {

// A piece of the data region checked as a unit: one chunk's stored extent,
// or a stretch of a gap between chunks (which must be zero).
struct ScanItem {
  uint64_t begin, end;  // file range
  // A chunk's index in the chunk list; for a gap, the index of the chunk
  // after it (the list's size for the gap that ends the region).
  size_t chunk;
  bool is_chunk;
};

// File ranges read with one request, aligned, in file order and covering
// the region end to end. None is larger than a slot but one that holds a
// single chunk larger than a slot, so no chunk straddles two requests.
struct ScanRequest {
  uint64_t begin, end;
  size_t first_item, end_item;  // its items, [first_item, end_item)
};

struct ScanPlan {
  uint64_t slot_size = 0;
  size_t slots = 0;
  std::vector<ScanItem> items;  // in file order
  std::vector<ScanRequest> requests;
};

// `chunks`: in ascending offset order, inside [begin, end), not overlapping.
ScanPlan PlanScan(const std::vector<const ChunkRecord*>& chunks, uint64_t begin, uint64_t end,
                  const IoOptions& io);

// Called once per item, on any thread, with the item's bytes; `worker` <
// pool.size() and no two calls with the same worker run at once.
using ItemCheck = std::function<void(size_t item, const uint8_t* bytes, unsigned worker)>;
// Called on the calling thread with the end of the prefix of the region
// checked so far (non-decreasing).
using ScanProgress = std::function<void(uint64_t done_up_to)>;

// Fails only when the file cannot be read.
Status RunScan(const File& file, const IoOptions& io, const ScanPlan& plan, ThreadPool& pool,
               const ItemCheck& check, const ScanProgress& progress);

}  // namespace ckfmt
