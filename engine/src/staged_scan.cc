#include "staged_scan.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "ckfmt/file_layout.h"

namespace ckfmt {

Result<std::unique_ptr<ScanStaging>> ScanStaging::Create(const File& file, const IoOptions& io,
                                                        uint64_t span, uint64_t staged,
                                                        uint64_t largest_request) {
  const uint64_t largest = AlignUp(std::max<uint64_t>(largest_request, kAlignment));
  const uint64_t budget =
      AlignUp(std::max<uint64_t>(std::min<uint64_t>(io.staging_bytes, span), largest));
  // Staged reads in more than one budget get a second budget of staging
  // (see the class comment); fewer get a request's worth.
  staged = std::min(staged, span);
  const uint64_t held = std::min(budget, AlignUp(staged));
  const uint64_t spare = staged > budget ? budget : largest;
  const uint64_t ring = held + spare + largest;
  std::unique_ptr<ScanStaging> s;
  try {
    s.reset(new ScanStaging(ring, budget, largest, staged));
  } catch (const std::bad_alloc&) {
    return Status::IOError(file.path() + ": cannot allocate " + std::to_string(ring) +
                           " bytes of read staging");
  }
  s->io_ = BlockIo::Create(file, io, s->ring_.buffers(), kDepth);
  return s;
}

namespace {

// Every worker runs the same loop: take a ready item and handle it, or,
// when nobody else does, drive the ring (submit reads while staging is
// free, wait for one). So reads stay queued while items are handled, with
// no extra thread.
class ParallelScan {
 public:
  ParallelScan(const File& file, ScanStaging& staging, const ScanJob& job)
      : file_(file), staging_(staging), ring_(staging.ring()), io_(staging.io()), job_(job),
        tag_req_(ScanStaging::kDepth), req_buf_(job.requests.size(), nullptr),
        pending_(job.requests.size()), done_(job.requests.size()) {
    for (size_t t = ScanStaging::kDepth; t-- > 0;) free_tags_.push_back(static_cast<int>(t));
  }

  Status Run(ThreadPool& pool) {
    const std::thread::id caller = std::this_thread::get_id();
    pool.ParallelFor(pool.size(), [&](size_t w) {
      Loop(static_cast<unsigned>(w), std::this_thread::get_id() == caller);
    });
    while (io_.in_flight() > 0) (void)io_.Wait();
    ring_.Clear();  // after a failure, extents of unfinished requests remain
    return status_;
  }

 private:
  static constexpr size_t kWholeRequest = SIZE_MAX;  // a job that reads a big request itself
  struct Job {
    size_t request, item;
    const uint8_t* bytes;
  };

  size_t Size(size_t r) const { return job_.requests[r].end - job_.requests[r].begin; }
  uint8_t* Direct(size_t r) const { return job_.direct.empty() ? nullptr : job_.direct[r]; }
  bool Big(size_t r) const { return !Direct(r) && Size(r) > staging_.max_request(); }
  // At most one big request's buffer at a time keeps memory bounded.
  bool CanSubmit() const {
    if (next_ == job_.requests.size()) return false;
    if (Big(next_)) return !big_busy_;
    // Under budget, not budget minus a request: whole-chunk requests come in
    // uneven sizes, and stopping short of the budget by up to one of them
    // leaves the disk measurably less busy than a raw QD8 stream.
    return !free_tags_.empty() && bytes_in_flight_ < staging_.in_flight_budget() &&
           (Direct(next_) || ring_.CanTake(Size(next_)));
  }

  void Loop(unsigned worker, bool reports);
  void DriveRing(std::unique_lock<std::mutex>& lk, bool wait);
  void SubmitWhatFits(std::unique_lock<std::mutex>& lk);
  void TakeCompletion(BlockIo::Completion& c);
  Status RunJob(const Job& j, unsigned worker);
  void FinishJob(const Job& j, const Status& s);
  void FinishRequest(size_t r);
  void QueueItems(size_t r, const uint8_t* base);
  void Fail(const Status& s) {
    if (status_.ok()) status_ = s;
  }
  // A failed read of request `r`, as job_.read_error reports it.
  Status WhileReading(const Status& s, size_t r) const {
    const ScanRequest& q = job_.requests[r];
    if (s.ok() || !job_.read_error || q.first_item == q.end_item) return s;
    return job_.read_error(q.first_item, s);
  }

  const File& file_;
  ScanStaging& staging_;
  StagingRing& ring_;  // guarded by mu_
  BlockIo& io_;        // used only by the thread with ring_busy_ set
  const ScanJob& job_;

  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  Status status_;
  std::deque<Job> jobs_;
  std::vector<int> free_tags_;
  std::vector<size_t> tag_req_;           // the request a tag reads
  std::vector<const uint8_t*> req_buf_;   // a request's extent of the ring
  std::vector<size_t> pending_;           // items of a request not yet handled
  std::vector<bool> done_;
  size_t next_ = 0;      // next request to submit
  size_t finished_ = 0;  // requests fully handled
  size_t prefix_ = 0;    // requests [0, prefix_) are all done
  size_t in_flight_ = 0;
  uint64_t bytes_in_flight_ = 0;
  bool ring_busy_ = false, big_busy_ = false;
};

void ParallelScan::Loop(unsigned worker, bool reports) {
  const auto& progress = job_.on_progress;
  reports = reports && progress;
  const size_t n = job_.requests.size();
  size_t reported = 0;
  std::unique_lock<std::mutex> lk(mu_);
  while (status_.ok() && finished_ < n) {
    if (reports && prefix_ > reported) {
      reported = prefix_;
      lk.unlock();
      progress(job_.requests[reported - 1].end);
      lk.lock();
      continue;
    }
    // Reads first: freed staging goes back to the disk before more work,
    // and finished reads are taken before more work too, so that the
    // staging and tags they hold go back to the disk at once (a disk that
    // completes its whole queue in one burst otherwise idles until the
    // jobs queued before run out).
    if (!ring_busy_ && (CanSubmit() || (in_flight_ > 0 && io_.Ready()))) {
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
  if (reports && status_.ok() && n > 0 && reported < n) {
    lk.unlock();
    progress(job_.requests[n - 1].end);
    lk.lock();
  }
  cv_.notify_all();  // a failure ends every loop
}

// Submits what free staging allows and, if `wait`, takes the completed
// reads (at least one), then refills the disk before waking anyone.
void ParallelScan::DriveRing(std::unique_lock<std::mutex>& lk, bool wait) {
  ring_busy_ = true;
  SubmitWhatFits(lk);
  if (status_.ok() && in_flight_ > 0 && (wait || io_.Ready())) {
    // Every read already done is taken at once: this disk completes reads
    // in bursts, and the next ones should go out as soon as staging allows.
    lk.unlock();
    std::vector<BlockIo::Completion> got{io_.Wait()};
    while (got.back().status.ok() && io_.in_flight() > 0 && io_.Ready()) got.push_back(io_.Wait());
    lk.lock();
    for (BlockIo::Completion& c : got) TakeCompletion(c);
    SubmitWhatFits(lk);
  }
  ring_busy_ = false;
  cv_.notify_all();
}

void ParallelScan::SubmitWhatFits(std::unique_lock<std::mutex>& lk) {
  std::vector<std::pair<int, size_t>> batch;  // (tag, request)
  while (status_.ok() && CanSubmit()) {
    if (Big(next_)) {
      big_busy_ = true;
      jobs_.push_back({next_++, kWholeRequest, nullptr});
      continue;
    }
    req_buf_[next_] = Direct(next_) ? Direct(next_) : ring_.Take(Size(next_));
    bytes_in_flight_ += Size(next_);
    tag_req_[free_tags_.back()] = next_;
    batch.push_back({free_tags_.back(), next_++});
    free_tags_.pop_back();
  }
  if (batch.empty()) return;
  // The pread backend reads at submission: not under the lock, and with the
  // items queued so far handed out first. Queueing an io_uring read takes
  // microseconds, so it stays under the lock: releasing the lock wakes a
  // worker that, on two cores, took this thread's CPU for a scheduler slice
  // (2.4 ms measured) before the disk got its next reads.
  const bool unlock = io_.transfers_at_submit();
  if (unlock) {
    cv_.notify_all();
    lk.unlock();
  }
  Status st;
  size_t submitted = 0;
  for (auto [tag, r] : batch) {
    const ScanRequest& q = job_.requests[r];
    st = io_.SubmitReadTo(tag, const_cast<uint8_t*>(req_buf_[r]), q.begin, q.end - q.begin);
    if (!st.ok()) break;
    ++submitted;
  }
  if (unlock) lk.lock();
  in_flight_ += submitted;
  Fail(st);
}

void ParallelScan::TakeCompletion(BlockIo::Completion& c) {
  --in_flight_;
  if (c.status.ok() && (c.slot < 0 || size_t(c.slot) >= tag_req_.size())) {
    c.status = Status::Internal("read completed with an unknown tag");
  }
  if (!c.status.ok() && c.slot >= 0 && size_t(c.slot) < tag_req_.size()) {
    c.status = WhileReading(c.status, tag_req_[c.slot]);
  }
  Fail(c.status);
  if (!c.status.ok()) return;
  free_tags_.push_back(c.slot);
  const size_t r = tag_req_[c.slot];
  bytes_in_flight_ -= Size(r);
  QueueItems(r, req_buf_[r]);
}

void ParallelScan::QueueItems(size_t r, const uint8_t* base) {
  const ScanRequest& q = job_.requests[r];
  pending_[r] = q.end_item - q.first_item;
  if (pending_[r] == 0) {
    if (!Direct(r)) ring_.Release(base);
    return FinishRequest(r);
  }
  for (size_t k = q.first_item; k < q.end_item; ++k) {
    jobs_.push_back({r, k, base + (job_.item_begin[k] - q.begin)});
  }
}

// An item may allocate (e.g. a chunk's decoded size), on any thread.
Status ParallelScan::RunJob(const Job& j, unsigned worker) {
  try {
    if (j.item != kWholeRequest) return job_.on_item(j.item, j.bytes, worker);
    // Larger than the ring serves: read on its own, into its own buffer.
    const ScanRequest& q = job_.requests[j.request];
    AlignedBuffer buf(q.end - q.begin);
    auto use = [&]() -> Status {
      CKFMT_RETURN_IF_ERROR(
          WhileReading(file_.ReadAt(q.begin, buf.data(), q.end - q.begin), j.request));
      for (size_t k = q.first_item; k < q.end_item; ++k) {
        CKFMT_RETURN_IF_ERROR(job_.on_item(k, buf.data() + (job_.item_begin[k] - q.begin), worker));
      }
      return Status::OK();
    };
    return job_.with_own_buffer ? job_.with_own_buffer(buf.data(), buf.size(), use) : use();
  } catch (const std::bad_alloc&) {
    return Status::IOError(file_.path() + ": out of memory while reading " +
                           std::to_string(Size(j.request)) + " bytes at offset " +
                           std::to_string(job_.requests[j.request].begin));
  }
}

void ParallelScan::FinishJob(const Job& j, const Status& s) {
  Fail(s);
  if (j.item == kWholeRequest) {
    big_busy_ = false;
    FinishRequest(j.request);
  } else if (--pending_[j.request] == 0) {
    if (!Direct(j.request)) ring_.Release(req_buf_[j.request]);
    FinishRequest(j.request);
  }
}

void ParallelScan::FinishRequest(size_t r) {
  done_[r] = true;
  ++finished_;
  while (prefix_ < done_.size() && done_[prefix_]) ++prefix_;
  cv_.notify_all();
}

}  // namespace

Status RunScan(const File& file, ScanStaging& staging, const ScanJob& job, ThreadPool& pool) {
  if (job.requests.empty()) return Status::OK();
  if (!job.direct.empty() && job.direct.size() != job.requests.size()) {
    return Status::Internal("scan job: " + std::to_string(job.direct.size()) +
                            " direct destinations for " + std::to_string(job.requests.size()) +
                            " requests");
  }
  return ParallelScan(file, staging, job).Run(pool);
}

}  // namespace ckfmt
