#include "verify_scan.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "ckfmt/file_layout.h"
#include "io/block_io.h"

namespace ckfmt {
namespace {

// Every worker runs the same loop: take a ready item and check it, or, when
// nobody else does, drive the ring (submit freed slots, wait for a read).
// So the ring stays full while the checks run, with no extra thread.
class ParallelScan {
 public:
  ParallelScan(const File& file, const ScanPlan& plan, BlockIo& io,
               const std::vector<AlignedBuffer>& slots, const ItemCheck& check)
      : file_(file), plan_(plan), io_(io), slots_(slots), check_(check),
        slot_req_(slots.size()), req_slot_(plan.requests.size(), -1),
        pending_(plan.requests.size()), done_(plan.requests.size()) {
    for (size_t i = 0; i < slots.size(); ++i) free_.push_back(static_cast<int>(i));
  }

  Status Run(ThreadPool& pool, const ScanProgress& progress) {
    const std::thread::id caller = std::this_thread::get_id();
    pool.ParallelFor(pool.size(), [&](size_t w) {
      Loop(static_cast<unsigned>(w), std::this_thread::get_id() == caller ? &progress : nullptr);
    });
    while (io_.in_flight() > 0) (void)io_.Wait();
    return status_;
  }

 private:
  static constexpr size_t kWholeRequest = SIZE_MAX;  // a job that reads a big request itself
  struct Job {
    size_t request, item;
    const uint8_t* bytes;
  };

  bool Big(size_t r) const {
    return plan_.requests[r].end - plan_.requests[r].begin > plan_.slot_size;
  }
  // At most one big request's buffer at a time keeps memory bounded.
  bool CanSubmit() const {
    if (next_ == plan_.requests.size()) return false;
    return Big(next_) ? !big_busy_ : !free_.empty();
  }

  void Loop(unsigned worker, const ScanProgress* progress);
  void DriveRing(std::unique_lock<std::mutex>& lk, bool wait);
  Status RunJob(const Job& j, unsigned worker);
  void FinishJob(const Job& j, const Status& s);
  void QueueItems(size_t r, const uint8_t* base);
  void Fail(const Status& s) {
    if (status_.ok()) status_ = s;
  }

  const File& file_;
  const ScanPlan& plan_;
  BlockIo& io_;  // used only by the thread with ring_busy_ set
  const std::vector<AlignedBuffer>& slots_;
  const ItemCheck& check_;
  std::vector<size_t> slot_req_;  // the request a slot holds (ring thread only)

  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  Status status_;
  std::deque<Job> jobs_;
  std::vector<int> free_;
  std::vector<int> req_slot_;
  std::vector<size_t> pending_;  // items of a request not yet checked
  std::vector<bool> done_;
  size_t next_ = 0;      // next request to submit
  size_t finished_ = 0;  // requests fully checked
  size_t prefix_ = 0;    // requests [0, prefix_) are all done
  size_t in_flight_ = 0;
  bool ring_busy_ = false, big_busy_ = false;
};

void ParallelScan::Loop(unsigned worker, const ScanProgress* progress) {
  const size_t n = plan_.requests.size();
  size_t reported = 0;
  std::unique_lock<std::mutex> lk(mu_);
  while (status_.ok() && finished_ < n) {
    if (progress && *progress && prefix_ > reported) {
      reported = prefix_;
      lk.unlock();
      (*progress)(plan_.requests[reported - 1].end);
      lk.lock();
      continue;
    }
    // Reads first: a freed slot goes back to the disk before more checking.
    if (!ring_busy_ && CanSubmit()) {
      DriveRing(lk, /*wait=*/jobs_.empty());
    } else if (!jobs_.empty()) {
      Job j = jobs_.front();
      jobs_.pop_front();
      lk.unlock();
      Status s = RunJob(j, worker);
      lk.lock();
      FinishJob(j, s);
    } else if (!ring_busy_ && in_flight_ > 0) {
      DriveRing(lk, /*wait=*/true);
    } else {
      cv_.wait(lk);
    }
  }
  if (progress && *progress && status_.ok() && n > 0 && reported < n) {
    lk.unlock();
    (*progress)(plan_.requests[n - 1].end);
    lk.lock();
  }
  cv_.notify_all();  // a failure ends every loop
}

// Submits what the free slots allow and, if `wait`, takes one completed read.
void ParallelScan::DriveRing(std::unique_lock<std::mutex>& lk, bool wait) {
  ring_busy_ = true;
  std::vector<std::pair<int, size_t>> batch;  // (slot, request)
  while (CanSubmit()) {
    if (Big(next_)) {
      big_busy_ = true;
      jobs_.push_back({next_++, kWholeRequest, nullptr});
      cv_.notify_all();
      continue;
    }
    batch.push_back({free_.back(), next_++});
    free_.pop_back();
  }
  // Outside the lock: the pread backend reads at submission.
  lk.unlock();
  Status st;
  size_t submitted = 0;
  for (auto [slot, r] : batch) {
    const ScanRequest& q = plan_.requests[r];
    slot_req_[slot] = r;
    st = io_.SubmitRead(slot, q.begin, q.end - q.begin);
    if (!st.ok()) break;
    ++submitted;
  }
  BlockIo::Completion c{-1, Status::OK()};
  bool got = st.ok() && wait && io_.in_flight() > 0;
  if (got) c = io_.Wait();
  lk.lock();
  in_flight_ += submitted;
  Fail(st);
  if (got) {
    --in_flight_;
    if (c.status.ok() && c.slot < 0) c.status = Status::Internal("read completed without a slot");
    Fail(c.status);
    if (c.status.ok()) {
      size_t r = slot_req_[c.slot];
      req_slot_[r] = c.slot;
      QueueItems(r, slots_[c.slot].data());
    }
  }
  ring_busy_ = false;
  cv_.notify_all();
}

void ParallelScan::QueueItems(size_t r, const uint8_t* base) {
  const ScanRequest& q = plan_.requests[r];
  pending_[r] = q.end_item - q.first_item;
  for (size_t k = q.first_item; k < q.end_item; ++k) {
    jobs_.push_back({r, k, base + (plan_.items[k].begin - q.begin)});
  }
}

// A check may allocate up to a chunk's raw size, on any thread.
Status ParallelScan::RunJob(const Job& j, unsigned worker) {
  try {
    if (j.item != kWholeRequest) {
      check_(j.item, j.bytes, worker);
      return Status::OK();
    }
    // A chunk larger than a slot: read on its own, into its own buffer.
    const ScanRequest& q = plan_.requests[j.request];
    AlignedBuffer buf(q.end - q.begin);
    CKFMT_RETURN_IF_ERROR(file_.ReadAt(q.begin, buf.data(), q.end - q.begin));
    for (size_t k = q.first_item; k < q.end_item; ++k) {
      check_(k, buf.data() + (plan_.items[k].begin - q.begin), worker);
    }
    return Status::OK();
  } catch (const std::bad_alloc&) {
    return Status::IOError(file_.path() + ": out of memory while verifying the data region");
  }
}

void ParallelScan::FinishJob(const Job& j, const Status& s) {
  Fail(s);
  if (j.item == kWholeRequest) {
    big_busy_ = false;
  } else if (--pending_[j.request] == 0) {
    free_.push_back(req_slot_[j.request]);
  } else {
    return;
  }
  done_[j.request] = true;
  ++finished_;
  while (prefix_ < done_.size() && done_[prefix_]) ++prefix_;
  cv_.notify_all();
}

}  // namespace

ScanPlan PlanScan(const std::vector<const ChunkRecord*>& chunks, uint64_t begin, uint64_t end,
                  const IoOptions& io) {
  ScanPlan plan;
  // No more staging than the region could fill: small files stay cheap.
  const uint64_t span = end - begin;
  uint64_t slot =
      AlignUp(std::clamp<uint64_t>(io.block_size, kAlignment, std::max(span, kAlignment)));
  // A slot grows to hold the largest chunk (an incompressible chunk stores
  // a little more than the chunk size) while two slots fit the staging.
  uint64_t largest = 0;
  for (const ChunkRecord* c : chunks) largest = std::max(largest, AlignUp(c->stored_size));
  slot = std::max(slot, std::min(largest, io.staging_bytes / 2 / kAlignment * kAlignment));
  plan.slot_size = slot;
  plan.slots =
      std::clamp<size_t>(io.staging_bytes / slot, 2, std::max<uint64_t>(2, span / slot + 1));

  auto& reqs = plan.requests;
  auto& items = plan.items;
  // Extends the last request to `to` if it stays within a slot, else opens one.
  auto extend = [&](uint64_t from, uint64_t to) {
    if (!reqs.empty() && reqs.back().end == from && to - reqs.back().begin <= slot) {
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
      uint64_t stop = std::min(to, head + slot);
      const ScanRequest* last = reqs.empty() ? nullptr : &reqs.back();
      if (last && last->end == head && head - last->begin < slot) {
        stop = std::min(to, last->begin + slot);
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

Status RunScan(const File& file, const IoOptions& io, const ScanPlan& plan, ThreadPool& pool,
               const ItemCheck& check, const ScanProgress& progress) {
  if (plan.requests.empty()) return Status::OK();
  std::vector<AlignedBuffer> slots;
  try {
    for (size_t i = 0; i < plan.slots; ++i) slots.emplace_back(plan.slot_size);
  } catch (const std::bad_alloc&) {
    return Status::IOError(file.path() + ": cannot allocate verify staging");
  }
  auto ring = BlockIo::Create(file, io, slots);
  return ParallelScan(file, plan, *ring, slots, check).Run(pool, progress);
}

}  // namespace ckfmt
