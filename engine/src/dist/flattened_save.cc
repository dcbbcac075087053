// Flattened save: rank 0 gathers whole tensors bucket by bucket and streams
// them into one file with CheckpointWriter, writing bucket k on a writer
// thread while bucket k+1 is gathered into the other buffer.
//
// Per bucket, on every rank: agree (so a failure anywhere stops everyone
// before data moves), then gather the bucket's slices to rank 0 straight
// into place (GatherSegments: each rank sends the runs of its shards that
// fall into each slice; rank 0 receives them at their offsets). At the end:
// agree, rank 0 commits, agree on the commit.
//
// GPU entries (DistSaveOptions::device_comm) are gathered over the device
// communicator into a pair of GPU buffers on rank 0 and written from there
// device -> pinned staging slot -> disk; host entries keep host buffers.
// A bucket may hold both: each kind sits at its offset in its own buffer.
// Without a device communicator every entry is gathered in host memory:
// each rank copies the GPU data it sends in a bucket into pinned host
// memory first (DeviceSendStaging).
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "ckfmt/log.h"
#include "buckets.h"
#include "device/device_ops.h"
#include "device_sends.h"
#include "save_internal.h"
#include "scalar_value.h"

namespace ckfmt::dist {
namespace {

// Writes buckets on a thread of its own (rank 0 only); one at a time.
class BucketWriter {
 public:
  // `device`: where GPU entries' gather buffers are.
  BucketWriter(CheckpointWriter& writer, const GlobalPlan& plan, Device device)
      : writer_(writer), plan_(plan), device_(device), thread_([this] { Loop(); }) {}
  ~BucketWriter() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // `host` and `device` hold the bucket's host and GPU entries at their
  // offsets. REQUIRES: the previous bucket finished (Wait() returned).
  void Submit(const Bucket* bucket, const uint8_t* host, const uint8_t* device) {
    {
      std::lock_guard<std::mutex> l(mu_);
      job_ = bucket;
      buffer_ = host;
      device_buffer_ = device;
    }
    cv_.notify_all();
  }

  // The first error so far, without waiting.
  Status Peek() {
    std::lock_guard<std::mutex> l(mu_);
    return error_;
  }

  // Waits for the submitted bucket; returns the first error so far.
  Status Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return job_ == nullptr; });
    return error_;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (true) {
      cv_.wait(l, [&] { return stop_ || job_ != nullptr; });
      if (job_ == nullptr) return;
      const Bucket* job = job_;
      const uint8_t* buf = buffer_;
      const uint8_t* dbuf = device_buffer_;
      bool failed = !error_.ok();
      l.unlock();
      Status s = failed ? Status::OK() : Write(*job, buf, dbuf);
      l.lock();
      if (error_.ok()) error_ = s;
      job_ = nullptr;
      cv_.notify_all();
    }
  }

  Status Write(const Bucket& bucket, const uint8_t* buf, const uint8_t* dbuf) {
    for (const WriteOp& op : bucket.ops) {
      const PlanEntry& e = plan_.entries[op.entry];
      if (!op.data) {
        if (e.kind == EntryKind::kDict || e.kind == EntryKind::kList) {
          CKFMT_RETURN_IF_ERROR(writer_.AddContainer(e.path, e.kind));
        } else {
          CKFMT_RETURN_IF_ERROR(writer_.AddScalar(e.path, ScalarValue(e)));
        }
        continue;
      }
      if (e.kind == EntryKind::kBytes) {
        CKFMT_RETURN_IF_ERROR(writer_.AddBytes(e.path, e.content_type, buf + op.offset, op.bytes));
        continue;
      }
      // Rank 0 wrote the piece; the shards' origin goes to saved_layout.
      // GPU data goes device -> pinned staging slot -> disk.
      CKFMT_RETURN_IF_ERROR(writer_.AddTensorPiece(
          e.path, e.dtype, e.shape, op.region, 0, (e.on_device ? dbuf : buf) + op.offset,
          e.on_device ? device_ : Device{}));
      if (op.last && e.sharded) {
        for (const Source& s : e.layout) {
          CKFMT_RETURN_IF_ERROR(writer_.AddSavedLayout(e.path, ShardRecord{s.rank, s.region}));
        }
      }
    }
    return Status::OK();
  }

  CheckpointWriter& writer_;
  const GlobalPlan& plan_;
  const Device device_;
  std::mutex mu_;
  std::condition_variable cv_;
  const Bucket* job_ = nullptr;
  const uint8_t* buffer_ = nullptr;
  const uint8_t* device_buffer_ = nullptr;
  Status error_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

// A gather buffer. Left allocated when the communicator broke: the
// transport may still write into it.
class GatherBuffer {
 public:
  explicit GatherBuffer(const Communicator& comm) : comm_(comm) {}
  GatherBuffer(const GatherBuffer&) = delete;
  GatherBuffer& operator=(const GatherBuffer&) = delete;
  ~GatherBuffer() {
    if (!comm_.broken()) std::free(data_);
  }
  Status Reserve(uint64_t bytes) {
    if (data_ || bytes == 0) return Status::OK();
    // Not zeroed: pages are touched only as data arrives.
    data_ = static_cast<uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) & ~uint64_t{4095}));
    if (!data_) return Status::IOError("cannot allocate a gather buffer of " + std::to_string(bytes) + " bytes");
    size_ = bytes;
    return Status::OK();
  }
  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  const Communicator& comm_;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// A gather buffer in GPU memory (rank 0, for GPU entries), allocated
// through the device layer. Left allocated when the device communicator
// broke, like GatherBuffer.
class DeviceGatherBuffer {
 public:
  DeviceGatherBuffer(const Communicator* comm, Device device) : comm_(comm), device_(device) {}
  DeviceGatherBuffer(const DeviceGatherBuffer&) = delete;
  DeviceGatherBuffer& operator=(const DeviceGatherBuffer&) = delete;
  ~DeviceGatherBuffer() {
    if (data_ && !comm_->broken()) ops_->Free(device_.index, data_);
  }
  Status Reserve(uint64_t bytes) {
    if (data_ || bytes == 0) return Status::OK();
    CKFMT_ASSIGN_OR_RETURN(ops_, DeviceOpsFor(device_));
    auto p = ops_->Allocate(device_.index, bytes);
    if (!p.ok()) {
      return p.status().WithContext("a gather buffer of " + std::to_string(bytes) + " bytes on " +
                                    DeviceName(device_));
    }
    data_ = static_cast<uint8_t*>(*p);
    size_ = bytes;
    return Status::OK();
  }
  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  const Communicator* comm_;
  Device device_;
  DeviceOps* ops_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// The end of the last slice of each memory space in a bucket: what its
// host and its device buffer must hold.
struct Extents {
  uint64_t host = 0, device = 0;
};
Extents BucketExtents(const GlobalPlan& plan, const Bucket& bucket) {
  Extents x;
  for (const WriteOp& op : bucket.ops) {
    if (!op.data) continue;
    uint64_t& end = plan.entries[op.entry].on_device ? x.device : x.host;
    end = std::max(end, op.offset + op.bytes);
  }
  return x;
}

// This rank's contribution to `bucket` in one memory space (`device`: its
// GPU entries, else its host ones): the runs of its owned regions that
// fall into each slice, in op order and source order. GPU data bound for
// host memory (no device communicator) goes through `staging`, one slice
// at a time, so that a failed copy names its key.
Status SendSegments(const SaveContext& ctx, const Bucket& bucket, bool device,
                    DeviceSendStaging* staging, std::vector<ConstSegment>* segs, uint64_t* bytes) {
  segs->clear();
  std::vector<ConstSegment> runs;
  for (const WriteOp& op : bucket.ops) {
    if (!op.data || !ctx.local_data[op.entry]) continue;
    const PlanEntry& e = ctx.plan.entries[op.entry];
    if (e.on_device != device) continue;
    const uint64_t es = e.ElementSize();
    const uint8_t* base = ctx.local_data[op.entry];
    runs.clear();
    ForEachOverlap(e.shape, *ctx.local_region[op.entry], op.region, [&](const Run& r) {
      runs.push_back({base + r.src_offset * es, r.count * es});
      *bytes += r.count * es;
    });
    const Device where = ctx.local_device[op.entry];
    if (!device && where.type != DeviceType::kCPU) {
      CKFMT_RETURN_IF_ERROR(
          staging->Stage(where, &runs, FormatKeyPath(e.path) + " on " + DeviceName(where)));
    }
    segs->insert(segs->end(), runs.begin(), runs.end());
  }
  return Status::OK();
}

// The most bytes of GPU data this rank sends in one bucket over the host
// communicator: a rank's runs in a bucket are disjoint parts of its slices.
uint64_t DeviceSendCapacity(const SaveContext& ctx, uint64_t host_extent) {
  uint64_t held = 0;
  for (size_t i = 0; i < ctx.plan.entries.size(); ++i) {
    const PlanEntry& e = ctx.plan.entries[i];
    if (!ctx.local_data[i] || e.on_device || ctx.local_device[i].type == DeviceType::kCPU) continue;
    held += ctx.local_region[i]->NumElements() * e.ElementSize();
  }
  return std::min(held, host_extent);
}

// Where every rank's contribution in one memory space lands in rank 0's
// buffer of that space.
std::vector<std::vector<Segment>> RecvSegments(const SaveContext& ctx, const Bucket& bucket,
                                               bool device, uint8_t* buf) {
  std::vector<std::vector<Segment>> segs(ctx.comm.size());
  for (const WriteOp& op : bucket.ops) {
    if (!op.data) continue;
    const PlanEntry& e = ctx.plan.entries[op.entry];
    if (e.on_device != device) continue;
    const uint64_t es = e.ElementSize();
    for (const Source& o : e.owners) {
      ForEachOverlap(e.shape, o.region, op.region, [&](const Run& r) {
        segs[o.rank].push_back({buf + op.offset + r.dst_offset * es, r.count * es});
      });
    }
  }
  return segs;
}

}  // namespace

Status FlattenedSave(SaveContext& ctx) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const auto t_start = Clock::now();
  double gather_s = 0, writer_wait_s = 0;
  Communicator& comm = ctx.comm;
  const uint64_t cap = std::max<uint64_t>(ctx.options.memory_budget / 2, 16);
  const std::vector<Bucket> buckets = MakeBuckets(ctx.plan, cap);
  ctx.stats.buckets = buckets.size();
  ctx.stats.bucket_bytes = cap;

  std::unique_ptr<CheckpointWriter> writer;
  Status local;
  if (ctx.root()) {
    SaveOptions so = ctx.options.save;
    so.world_size = static_cast<uint32_t>(comm.size());
    so.save_mode = "flattened";
    auto w = CheckpointWriter::Create(ctx.path, so);
    if (w.ok()) {
      writer = std::move(*w);
      ctx.stats.io_path = writer->stats().io_path;
      uint64_t total = 0;
      for (const Bucket& b : buckets) total += b.bytes;
      writer->ExpectBytes(total);  // one allocation of the file for all of it
    } else {
      local = w.status();
    }
  }
  CKFMT_RETURN_IF_ERROR(comm.AgreeOnStatus(local, "creating " + ctx.path));

  // Every rank knows from the plan which buckets hold GPU entries.
  Communicator* device_comm = ctx.options.device_comm;
  const Device device = device_comm ? Device{DeviceType::kCUDA, device_comm->device()} : Device{};
  std::vector<Extents> extents;
  Extents max_extent;
  for (const Bucket& b : buckets) {
    extents.push_back(BucketExtents(ctx.plan, b));
    max_extent.host = std::max(max_extent.host, extents.back().host);
    max_extent.device = std::max(max_extent.device, extents.back().device);
  }
  GatherBuffer buffers[2] = {GatherBuffer(comm), GatherBuffer(comm)};
  DeviceGatherBuffer device_buffers[2] = {DeviceGatherBuffer(device_comm, device),
                                          DeviceGatherBuffer(device_comm, device)};
  DeviceSendStaging send_staging(comm, DeviceSendCapacity(ctx, max_extent.host));
  std::unique_ptr<BucketWriter> bucket_writer;
  if (ctx.root()) bucket_writer = std::make_unique<BucketWriter>(*writer, ctx.plan, device);
  auto fail = [&](Status s) {
    if (bucket_writer) {
      (void)bucket_writer->Wait();
      bucket_writer.reset();
    }
    if (writer) writer->Abort();  // removes the temporary file
    return s;
  };

  for (size_t k = 0; k < buckets.size(); ++k) {
    const Bucket& bucket = buckets[k];
    const bool has_device_data = extents[k].device > 0;
    GatherBuffer& buf = buffers[k % 2];
    DeviceGatherBuffer& dbuf = device_buffers[k % 2];
    local = ctx.Hook("bucket", k);
    if (ctx.root() && local.ok()) local = bucket_writer->Peek();
    if (ctx.root() && local.ok() && extents[k].host > 0) {
      local = buf.Reserve(max_extent.host);
      ctx.stats.peak_gather_bytes = buffers[0].size() + buffers[1].size();
    }
    if (local.ok() && has_device_data && !device_comm) {
      local = Status::Internal("bucket " + std::to_string(k) +
                               " holds GPU entries without a device communicator");
    }
    if (ctx.root() && local.ok() && has_device_data) {
      local = dbuf.Reserve(max_extent.device);
      ctx.stats.device_gather_bytes = device_buffers[0].size() + device_buffers[1].size();
    }
    // What goes over `comm`, GPU data without a device communicator copied
    // to host memory first: a failed copy stops everyone too.
    const auto t_stage = Clock::now();
    uint64_t sent = 0;
    std::vector<ConstSegment> send;
    send_staging.NewBucket();
    if (local.ok()) local = SendSegments(ctx, bucket, false, &send_staging, &send, &sent);
    ctx.stats.gpu_send_staging_bytes = send_staging.allocated();
    gather_s += since(t_stage);
    // Everyone is ready (and rank 0's writer has not failed) before data moves.
    if (Status s = comm.AgreeOnStatus(local, "bucket " + std::to_string(k) + " of " + ctx.path);
        !s.ok()) {
      return fail(s);
    }
    // Host entries over `comm`, GPU entries over the device communicator,
    // each straight into place in rank 0's buffer of its memory space.
    std::vector<std::vector<Segment>> recv;
    if (ctx.root()) recv = RecvSegments(ctx, bucket, false, buf.data());
    auto t_gather = Clock::now();
    Status gathered = comm.GatherSegments(send, recv, 0);
    if (gathered.ok() && has_device_data) {
      // Cannot fail: data gathered on the GPU is sent from where it is.
      (void)SendSegments(ctx, bucket, true, nullptr, &send, &sent);
      recv.clear();
      if (ctx.root()) recv = RecvSegments(ctx, bucket, true, dbuf.data());
      gathered = device_comm->GatherSegments(send, recv, 0);
    }
    gather_s += since(t_gather);
    if (!gathered.ok()) return fail(gathered);
    ctx.stats.local_raw_bytes += sent;
    if (ctx.root()) {
      // Bucket k-1 (the other buffer) must be written before it is reused
      // by k+1; write k meanwhile.
      auto t_wait = Clock::now();
      Status w = bucket_writer->Wait();
      writer_wait_s += since(t_wait);
      if (w.ok()) bucket_writer->Submit(&bucket, buf.data(), dbuf.data());
    }
  }

  local = ctx.Hook("commit");
  if (ctx.root()) {
    auto t_wait = Clock::now();
    Status w = bucket_writer->Wait();
    writer_wait_s += since(t_wait);
    if (local.ok()) local = w;
    bucket_writer.reset();
  }
  if (Status s = comm.AgreeOnStatus(local, "finishing " + ctx.path); !s.ok()) return fail(s);
  local = Status::OK();
  if (ctx.root()) {
    local = writer->Commit();
    ctx.stats.file_bytes = writer->stats().file_bytes;
    ctx.stats.raw_bytes = writer->stats().raw_bytes;
  }
  Status committed = comm.AgreeOnStatus(local, "committing " + ctx.path);
  if (ctx.root()) {
    Log(LogLevel::kInfo, ctx.path + ": flattened save: " + std::to_string(buckets.size()) +
                             " buckets; gathering " + std::to_string(gather_s) +
                             " s, waiting for the writer " + std::to_string(writer_wait_s) +
                             " s, total " + std::to_string(since(t_start)) + " s");
  }
  if (!committed.ok() && local.ok() && ctx.root()) {
    Log(LogLevel::kWarning, ctx.path + ": committed, but a rank failed afterwards: " +
                                committed.message());
  }
  return committed;
}

}  // namespace ckfmt::dist
