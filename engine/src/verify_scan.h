// How VerifyFile reads the data region: as items (chunks, and the gaps
// between them, which must be zero) in requests for RunScan.
#pragma once

#include <cstdint>
#include <vector>

#include "ckfmt/index.h"
#include "ckfmt/io_options.h"
#include "staged_scan.h"

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

struct ScanPlan {
  std::vector<ScanItem> items;        // in file order
  std::vector<ScanRequest> requests;  // each holds whole items
  uint64_t span = 0, largest_request = 0;  // for ScanStaging::Create
};

// Requests cover the region end to end, in file order. None is larger than
// half the staging but one that holds a single chunk that large, so no chunk
// straddles two requests.
// `chunks`: in ascending offset order, inside [begin, end), not overlapping.
ScanPlan PlanScan(const std::vector<const ChunkRecord*>& chunks, uint64_t begin, uint64_t end,
                  const IoOptions& io);

// The items' first bytes, for ScanJob::item_begin.
std::vector<uint64_t> ItemBegins(const ScanPlan& plan);

}  // namespace ckfmt
