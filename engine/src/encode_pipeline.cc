#include "encode_pipeline.h"

#include <algorithm>
#include <map>

#include "device/device_ops.h"  // DeviceName

namespace ckfmt {

EncodePipeline::EncodePipeline(ThreadPool& pool, Codec codec, int level, size_t ring,
                               size_t max_chunk, Sink sink, Fetch fetch, OnError on_error)
    : pool_(pool), codec_(codec), level_(level), sink_(std::move(sink)), fetch_(std::move(fetch)),
      on_error_(std::move(on_error)),
      capacity_(MaxEncodedSize(codec, max_chunk)), ring_(std::max<size_t>(1, ring)) {
  for (Slot& s : ring_) s.scratch.reset(new uint8_t[capacity_]);
}

EncodePipeline::~EncodePipeline() {
  Cancel();
  // Tasks still queued in the pool find nothing to do, but they touch this.
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return tasks_ == 0; });
}

Result<StoredChunk> EncodeForStorage(Codec codec, int level, const ChunkJob& job,
                                     uint8_t* scratch, size_t capacity) {
  // Byte planes of 1-byte elements are the bytes themselves.
  if (codec == Codec::kBytePlaneZstd && job.element_size == 1) codec = Codec::kZstd;
  CKFMT_ASSIGN_OR_RETURN(size_t n, EncodeChunk(codec, level, job.element_size, job.src, job.size,
                                               scratch, capacity));
  // Chunks that do not shrink are stored raw: decoding them costs nothing.
  if (n >= job.size) return StoredChunk{job.src, job.size, Codec::kNone};
  return StoredChunk{scratch, n, codec};
}

std::vector<size_t> SpreadElementSizes(const std::vector<ChunkJob>& jobs) {
  struct Group {
    std::vector<size_t> jobs;
    size_t next = 0;
    uint64_t placed = 0, total = 0;
  };
  std::map<size_t, Group> by_size;  // ordered: ties go to the smaller size
  for (size_t i = 0; i < jobs.size(); ++i) {
    Group& g = by_size[jobs[i].element_size];
    g.jobs.push_back(i);
    g.total += jobs[i].size;
  }
  std::vector<size_t> order;
  order.reserve(jobs.size());
  while (order.size() < jobs.size()) {
    Group* behind = nullptr;
    for (auto& [size, g] : by_size) {
      if (g.next == g.jobs.size()) continue;
      // g.placed / g.total < behind->placed / behind->total, in integers
      // (a group of empty jobs has total 0 and counts as not started).
      using Wide = unsigned __int128;
      if (!behind ||
          Wide{g.placed} * std::max<uint64_t>(behind->total, 1) <
              Wide{behind->placed} * std::max<uint64_t>(g.total, 1)) {
        behind = &g;
      }
    }
    const size_t i = behind->jobs[behind->next++];
    behind->placed += jobs[i].size;
    order.push_back(i);
  }
  return order;
}

Status EncodePipeline::Encode(Slot& slot) const {
  ChunkJob job = slot.job;
  if (job.device.type != DeviceType::kCPU) {
    if (!fetch_) return Status::Internal("a chunk on " + DeviceName(job.device) + " to encode");
    CKFMT_ASSIGN_OR_RETURN(FetchedChunk fetched, fetch_(job));
    slot.hold = std::move(fetched.hold);
    job.src = fetched.data;
  }
  CKFMT_ASSIGN_OR_RETURN(slot.stored,
                         EncodeForStorage(codec_, level_, job, slot.scratch.get(), capacity_));
  return Status::OK();
}

bool EncodePipeline::EncodeNext(std::unique_lock<std::mutex>& lock) {
  if (claimed_ == queued_) return false;
  Slot& slot = At(claimed_++);
  ++encoding_;
  lock.unlock();
  slot.error = Encode(slot);
  lock.lock();
  slot.done = true;
  --encoding_;
  cv_.notify_all();
  return true;
}

Status EncodePipeline::Deliver(std::unique_lock<std::mutex>& lock) {
  Slot& slot = At(delivered_);
  // The slot is ours until delivered_ moves on: no encoder claims it.
  lock.unlock();
  Status s = slot.error.ok() ? sink_(slot.job, slot.stored)
             : on_error_     ? on_error_(slot.job, slot.error)
                             : slot.error;
  slot.hold.reset();
  lock.lock();
  if (s.ok()) ++delivered_;
  return s;
}

Status EncodePipeline::Step(std::unique_lock<std::mutex>& lock) {
  if (At(delivered_).done) return Deliver(lock);
  // The next chunk is with a worker: rather than wait, encode a later one.
  if (!EncodeNext(lock)) cv_.wait(lock);
  return Status::OK();
}

Status EncodePipeline::Push(const ChunkJob& job) {
  std::unique_lock<std::mutex> lock(mu_);
  Status s;
  while (s.ok() && queued_ - delivered_ == ring_.size()) s = Step(lock);
  if (s.ok()) {
    Slot& slot = At(queued_++);
    slot.job = job;
    slot.done = false;
    slot.error = Status::OK();
    if (pool_.size() > 1) {
      ++tasks_;
      pool_.Submit([this] {
        std::unique_lock<std::mutex> l(mu_);
        (void)EncodeNext(l);  // a chunk the caller took meanwhile leaves nothing
        --tasks_;
        cv_.notify_all();
      });
    }
    // Whatever is ready goes on at once, so that the disk never waits.
    while (s.ok() && delivered_ < queued_ && At(delivered_).done) s = Deliver(lock);
  }
  return CancelOnError(lock, s);
}

Status EncodePipeline::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  Status s;
  while (s.ok() && delivered_ < queued_) s = Step(lock);
  return CancelOnError(lock, s);
}

Status EncodePipeline::CancelOnError(std::unique_lock<std::mutex>& lock, Status s) {
  if (s.ok()) return s;
  lock.unlock();
  Cancel();
  return s;
}

void EncodePipeline::Cancel() {
  std::unique_lock<std::mutex> lock(mu_);
  queued_ = claimed_;
  cv_.wait(lock, [&] { return encoding_ == 0; });
  delivered_ = claimed_ = queued_;
  for (Slot& slot : ring_) slot.hold.reset();
}

}  // namespace ckfmt
