#include "verify_scan.h"

#include <algorithm>

#include "ckfmt/file_layout.h"

namespace ckfmt {

ScanPlan PlanScan(const std::vector<const ChunkRecord*>& chunks, uint64_t begin, uint64_t end,
                  const IoOptions& io) {
  ScanPlan plan;
  const uint64_t span = end - begin;
  uint64_t most =
      AlignUp(std::clamp<uint64_t>(io.block_size, kAlignment, std::max(span, kAlignment)));
  // A request grows to hold the largest chunk (an incompressible chunk
  // stores a little more than the chunk size) while two fit the staging.
  uint64_t largest = 0;
  for (const ChunkRecord* c : chunks) largest = std::max(largest, AlignUp(c->stored_size));
  most = std::max(most, std::min(largest, io.staging_bytes / 2 / kAlignment * kAlignment));
  plan.span = span;
  plan.largest_request = most;

  auto& reqs = plan.requests;
  auto& items = plan.items;
  // Extends the last request to `to` if it stays within `most`, else opens one.
  auto extend = [&](uint64_t from, uint64_t to) {
    if (!reqs.empty() && reqs.back().end == from && to - reqs.back().begin <= most) {
      reqs.back().end = to;
    } else {
      reqs.push_back({from, to, items.size(), items.size()});
    }
  };
  auto add = [&](const ScanItem& it) {
    items.push_back(it);
    reqs.back().end_item = items.size();
  };
  auto gap = [&](uint64_t from, uint64_t to, size_t next_chunk) {
    // The unaligned head shares its page, so its request, with the chunk before.
    uint64_t head = std::min(AlignUp(from), to);
    if (head > from) add({from, head, next_chunk, false});
    while (head < to) {
      uint64_t stop = std::min(to, head + most);
      const ScanRequest* last = reqs.empty() ? nullptr : &reqs.back();
      if (last && last->end == head && head - last->begin < most) {
        stop = std::min(to, last->begin + most);
      }
      extend(head, stop);
      add({head, stop, next_chunk, false});
      head = stop;
    }
  };
  uint64_t pos = begin;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkRecord& c = *chunks[i];
    gap(pos, c.offset, i);
    extend(c.offset, AlignUp(c.offset + c.stored_size));
    add({c.offset, c.offset + c.stored_size, i, true});
    pos = c.offset + c.stored_size;
  }
  gap(pos, end, chunks.size());
  return plan;
}

std::vector<uint64_t> ItemBegins(const ScanPlan& plan) {
  std::vector<uint64_t> begins;
  begins.reserve(plan.items.size());
  for (const ScanItem& it : plan.items) begins.push_back(it.begin);
  return begins;
}

}  // namespace ckfmt
