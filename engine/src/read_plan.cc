#include "read_plan.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "ckfmt/checksum.h"
#include "ckfmt/file_layout.h"
#include "io/block_device.h"
#include "io/block_io.h"

namespace ckfmt {
namespace {

// One copy out of a decoded chunk.
struct Copy {
  uint64_t src;  // byte offset in the chunk's raw bytes
  uint8_t* dst;
  uint64_t len;
  DeviceStream* stream;  // non-null: dst is device memory
  bool on_huge_pages;    // dst is in a Tensor with on_huge_pages()
};

struct ChunkTask {
  const EntryRecord* entry;
  const ChunkRecord* chunk;
  uint64_t raw_begin;  // the chunk's first byte within its piece's stream
  std::vector<Copy> copies;
  bool device = false;  // some copy goes to device memory
};

constexpr uint64_t kMaxGap = 256 << 10;  // read through gaps up to this size

std::string DescribeChunk(const ChunkTask& t) {
  return FormatKeyPath(t.entry->path) + ": chunk at offset " + std::to_string(t.chunk->offset) +
         " (raw bytes " + std::to_string(t.raw_begin) + ".." +
         std::to_string(t.raw_begin + t.chunk->raw_size) + " of its piece)";
}

std::string Describe(const File& file, const ChunkTask& t) {
  return file.path() + ": " + DescribeChunk(t);
}

// A failed read of `t`'s chunk, saying which it was.
Status WhileReading(const Status& s, const ChunkTask& t) {
  return s.ok() ? s : Status(s.code(), s.message() + ", while reading " + DescribeChunk(t));
}

// Adds the copies that move `target`'s overlap with each piece of its entry.
Status PlanTarget(const File& file, const ReadTarget& target, DeviceStream* stream,
                  std::map<uint64_t, ChunkTask>& tasks) {
  const EntryRecord& e = *target.entry;
  const uint64_t es = DTypeSize(e.dtype);
  uint64_t covered = 0;
  for (const PieceRecord& piece : e.pieces) {
    std::vector<Run> runs;
    ForEachOverlap(e.shape, piece.region, target.region, [&](const Run& r) { runs.push_back(r); });
    if (runs.empty()) continue;
    // Runs and chunks both ascend through the piece's stream: merge them.
    size_t ci = 0;
    uint64_t chunk_begin = 0;
    for (const Run& run : runs) {
      covered += run.count;
      uint64_t lo = run.src_offset * es, hi = lo + run.count * es;
      while (lo < hi) {
        while (ci < piece.chunks.size() && chunk_begin + piece.chunks[ci].raw_size <= lo) {
          chunk_begin += piece.chunks[ci++].raw_size;
        }
        if (ci == piece.chunks.size()) return Status::Internal("run beyond the piece's chunks");
        const ChunkRecord& c = piece.chunks[ci];
        uint64_t take = std::min(hi, chunk_begin + c.raw_size) - lo;
        ChunkTask& t = tasks[c.offset];
        t.entry = &e;
        t.chunk = &c;
        t.raw_begin = chunk_begin;
        t.copies.push_back({lo - chunk_begin,
                            target.dst + (run.dst_offset * es + (lo - run.src_offset * es)), take,
                            stream, target.on_huge_pages});
        t.device = t.device || stream;
        lo += take;
      }
    }
  }
  if (covered != target.region.NumElements()) {
    return Status::NotFound(file.path() + ": " + FormatKeyPath(e.path) + ": the file holds " +
                            std::to_string(covered) + " of the " +
                            std::to_string(target.region.NumElements()) + " elements of " +
                            target.region.ToString() + " (a partial entry)");
  }
  return Status::OK();
}

// Verifies, decodes and scatters one chunk whose stored bytes are at `stored`.
Status ChecksumMismatch(const File& file, const ChunkTask& t, uint64_t computed) {
  char buf[80];
  std::snprintf(buf, sizeof buf, ": checksum mismatch (expected %016llx, computed %016llx)",
                (unsigned long long)t.chunk->checksum, (unsigned long long)computed);
  return Status::Corruption(Describe(file, t) + buf + SpecRule("D1"));
}

// Moves a chunk's raw bytes into place. Device copies are waited for, so
// `raw` (a staging slot or bounce buffer) may be reused once this returns.
Status Scatter(const ChunkTask& t, const uint8_t* raw) {
  DeviceStream* used = nullptr;
  Status s;
  for (const Copy& cp : t.copies) {
    if (!cp.stream) {
      std::memcpy(cp.dst, raw + cp.src, cp.len);
      continue;
    }
    if (used && used != cp.stream) s = used->Synchronize();  // one chunk, two devices
    used = cp.stream;
    if (s.ok()) s = cp.stream->CopyToDevice(cp.dst, raw + cp.src, cp.len);
    if (!s.ok()) break;
  }
  if (used) {
    Status w = used->Synchronize();
    if (s.ok()) s = w;
  }
  return s;
}

// `dev` is set when the chunk has device copies (pinned scratch for decoding).
Status ProcessChunk(const File& file, const ChunkTask& t, const uint8_t* stored, bool verify,
                    DeviceStaging* dev = nullptr) {
  const ChunkRecord& c = *t.chunk;
  // One host copy that takes the whole chunk: no scratch is needed.
  const bool whole = !t.device && t.copies.size() == 1 && t.copies[0].len == c.raw_size;
  if (whole && stored == t.copies[0].dst) {  // read straight into place
    if (!verify) return Status::OK();
    uint64_t sum = Checksum(stored, c.stored_size);
    return sum == c.checksum ? Status::OK() : ChecksumMismatch(file, t, sum);
  }
  if (whole && c.codec == uint8_t(Codec::kNone)) {
    // The common whole-chunk copy: hash while copying (one pass over the
    // staging slot). A mismatch leaves the destination's bytes unspecified,
    // as any failed load does.
    if (!verify) {
      CopyUncached(t.copies[0].dst, stored, c.raw_size);
      return Status::OK();
    }
    uint64_t sum = CopyAndChecksum(t.copies[0].dst, stored, c.raw_size);
    return sum == c.checksum ? Status::OK() : ChecksumMismatch(file, t, sum);
  }
  if (verify) {
    uint64_t sum = Checksum(stored, c.stored_size);
    if (sum != c.checksum) return ChecksumMismatch(file, t, sum);
  }
  const uint8_t* raw = stored;
  thread_local std::vector<uint8_t> scratch;
  std::optional<PinnedPool::Lease> pinned;  // decode target for device copies
  if (c.codec != uint8_t(Codec::kNone)) {
    if (whole) {  // decode straight into place
      Status s = DecodeChunk(c.codec, stored, c.stored_size, t.copies[0].dst, c.raw_size);
      return s.ok() ? s : s.WithContext(Describe(file, t));
    }
    uint8_t* out;
    if (t.device) {
      auto lease = dev->Bounce();
      if (!lease.ok()) return lease.status().WithContext(Describe(file, t));
      pinned.emplace(std::move(*lease));
      out = pinned->data();
    } else {
      scratch.resize(c.raw_size);
      out = scratch.data();
    }
    Status s = DecodeChunk(c.codec, stored, c.stored_size, out, c.raw_size);
    if (!s.ok()) return s.WithContext(Describe(file, t));
    raw = out;
  }
  Status s = Scatter(t, raw);
  return s.ok() ? s : s.WithContext(Describe(file, t));
}

// Where a chunk can be read straight into its destination, with no copy
// out of staging: an uncompressed chunk that one host copy takes whole, of
// whole blocks, into memory aligned as O_DIRECT needs (`mem_align`, 0:
// nothing is read straight into place), on huge pages unless `any_memory`.
// nullptr otherwise.
uint8_t* DirectDestination(const ChunkTask& t, uint32_t mem_align, bool any_memory) {
  const ChunkRecord& c = *t.chunk;
  if (mem_align == 0 || t.device || c.codec != uint8_t(Codec::kNone) || t.copies.size() != 1 ||
      !(any_memory || t.copies[0].on_huge_pages) || t.copies[0].len != c.raw_size ||
      c.raw_size != c.stored_size || c.raw_size == 0 || c.raw_size % kAlignment != 0 ||
      c.offset % kAlignment != 0) {
    return nullptr;
  }
  uint8_t* dst = t.copies[0].dst;
  return reinterpret_cast<uintptr_t>(dst) % mem_align == 0 ? dst : nullptr;
}

// Consecutive chunks share a request up to `block` bytes, reading through
// small gaps, except that a chunk read straight into place is a request of
// its own; `order` lists the tasks as the requests' items, `direct` gets
// each request's destination (see ScanJob::direct).
std::vector<ScanRequest> GroupRequests(const std::map<uint64_t, ChunkTask>& tasks, uint64_t block,
                                       uint32_t mem_align, bool any_memory,
                                       std::vector<const ChunkTask*>* order,
                                       std::vector<uint8_t*>* direct) {
  std::vector<ScanRequest> reqs;
  for (const auto& [offset, t] : tasks) {
    const uint64_t end = AlignUp(offset + t.chunk->stored_size);
    const size_t item = order->size();
    order->push_back(&t);
    uint8_t* dst = DirectDestination(t, mem_align, any_memory);
    if (!reqs.empty() && !dst && !direct->back()) {
      ScanRequest& r = reqs.back();
      if (offset >= r.end && offset - r.end <= kMaxGap && end - r.begin <= block) {
        r.end = end;
        r.end_item = item + 1;
        continue;
      }
    }
    reqs.push_back({offset, end, item, item + 1});
    direct->push_back(dst);
  }
  return reqs;
}

// The page-cache path: when the file is already cached, O_DIRECT would
// re-read it from the disk. Buffered pread straight into the destination
// (one copy), checksummed there piece by piece while each piece is in
// cache, runs near memcpy speed.
// Chunks bound for a device are read into pinned bounce buffers from `dev`.
constexpr uint64_t kCachedPiece = 256 << 10;
Status ReadCached(const File& file, const std::map<uint64_t, ChunkTask>& tasks,
                  const ReadOptions& options, ThreadPool& pool, uint64_t* bytes_read,
                  DeviceStaging* dev) {
  std::vector<const ChunkTask*> list;
  for (const auto& [offset, t] : tasks) list.push_back(&t);
  std::vector<Status> errs(list.size());
  pool.ParallelFor(list.size(), [&](size_t i) {
    const ChunkTask& t = *list[i];
    const ChunkRecord& c = *t.chunk;
    if (!t.device && c.codec == uint8_t(Codec::kNone) && t.copies.size() == 1 &&
        t.copies[0].len == c.raw_size) {
      uint8_t* dst = t.copies[0].dst;
      if (!options.verify_checksums) {
        errs[i] = WhileReading(file.ReadAt(c.offset, dst, c.raw_size), t);
        return;
      }
      ChecksumStream sum;
      for (uint64_t at = 0; at < c.raw_size && errs[i].ok(); at += kCachedPiece) {
        const uint64_t n = std::min<uint64_t>(kCachedPiece, c.raw_size - at);
        errs[i] = WhileReading(file.ReadAt(c.offset + at, dst + at, n), t);
        if (errs[i].ok()) sum.Update(dst + at, n);
      }
      if (!errs[i].ok()) return;
      if (const uint64_t got = sum.Digest(); got != c.checksum) {
        errs[i] = ChecksumMismatch(file, t, got);
      }
      return;
    }
    thread_local std::vector<uint8_t> buf;
    uint8_t* into;
    std::optional<PinnedPool::Lease> pinned;
    if (t.device) {
      auto lease = dev->Bounce();
      if (!lease.ok()) {
        errs[i] = lease.status();
        return;
      }
      pinned.emplace(std::move(*lease));
      into = pinned->data();
    } else {
      buf.resize(c.stored_size);
      into = buf.data();
    }
    errs[i] = WhileReading(file.ReadAt(c.offset, into, c.stored_size), t);
    if (errs[i].ok()) errs[i] = ProcessChunk(file, t, into, options.verify_checksums, dev);
  });
  for (const ChunkTask* t : list) *bytes_read += t->chunk->stored_size;
  for (Status& s : errs) CKFMT_RETURN_IF_ERROR(s);
  return Status::OK();
}

}  // namespace

Status ReadSession::SetUpIo(uint64_t size, uint64_t staged, uint64_t block) {
  if (staging_ && staging_->staged() >= staged && staging_->max_request() >= block) {
    return Status::OK();
  }
  staging_.reset();  // its buffer goes back to the cache for the new one
  CKFMT_ASSIGN_OR_RETURN(staging_, ScanStaging::Create(file_, options_.io, size, staged, block));
  return Status::OK();
}

ReadSession::DirectReads ReadSession::DirectToHost() {
  if (!file_.direct()) return DirectReads::kNone;
  switch (options_.host_reads) {
    case HostReads::kDirect: return DirectReads::kAll;
    case HostReads::kStaged: return DirectReads::kNone;
    case HostReads::kAuto: break;
  }
  if (!on_virtio_) {
    struct stat st;
    on_virtio_ = ::fstat(file_.fd(), &st) == 0 && IsVirtioDisk(st.st_dev);
  }
  // A virtio disk takes a read into huge pages in whole segments.
  return *on_virtio_ ? DirectReads::kHugePages : DirectReads::kAll;
}

Result<DeviceStream*> ReadSession::DeviceStreamFor(Device device) {
  if (!device_) {
    CKFMT_ASSIGN_OR_RETURN(device_, DeviceStaging::For(device));
  }
  return device_->Stream(device);
}

Status ReadSession::Read(const std::vector<ReadTarget>& targets, ThreadPool& pool,
                         uint64_t* bytes_read, uint64_t* bytes_direct) {
  Status s = ReadOnce(targets, pool, bytes_read, bytes_direct);
  // The session outlives the read: the next one starts on fresh streams.
  if (!s.ok() && device_) device_->DropStreams();
  return s;
}

Status ReadSession::ReadOnce(const std::vector<ReadTarget>& targets, ThreadPool& pool,
                             uint64_t* bytes_read, uint64_t* bytes_direct) {
  std::map<uint64_t, ChunkTask> tasks;
  for (const ReadTarget& t : targets) {
    DeviceStream* stream = nullptr;
    if (t.device.type != DeviceType::kCPU && t.region.NumElements() > 0) {
      auto s = DeviceStreamFor(t.device);
      if (!s.ok()) return s.status().WithContext(file_.path() + ": " + FormatKeyPath(t.entry->path));
      stream = *s;
    }
    CKFMT_RETURN_IF_ERROR(PlanTarget(file_, t, stream, tasks));
  }
  if (tasks.empty()) return Status::OK();
  uint64_t bounce = 0;  // the largest chunk bound for a device, stored or raw
  for (const auto& [offset, t] : tasks) {
    if (t.device) bounce = std::max({bounce, t.chunk->stored_size, t.chunk->raw_size});
  }
  if (bounce) device_->SetBounceSize(bounce);
  CKFMT_ASSIGN_OR_RETURN(uint64_t size, file_.Size());
  if (file_.direct() && options_.io.backend == IoBackend::kAuto) {
    // Whether the bytes this read needs are cached, not the whole file:
    // as cheap for one small tensor as its size (a converter reads tens of
    // thousands of them, one call each), and right for a partial load.
    const uint64_t first = tasks.begin()->first;
    const ChunkTask& last = tasks.rbegin()->second;
    const uint64_t end = std::min(size, last.chunk->offset + last.chunk->stored_size);
    if (end > first && CachedFraction(file_, first, end - first) > 0.5) {
      if (buffered_.fd() < 0) {
        // The same inode as the validated file, not whatever the path names now.
        CKFMT_ASSIGN_OR_RETURN(buffered_, file_.Reopen(/*direct=*/false));
      }
      return ReadCached(buffered_, tasks, options_, pool, bytes_read, device_.get());
    }
  }
  // No larger requests than the file could fill: small files stay cheap.
  const uint64_t block =
      AlignUp(std::clamp<uint64_t>(options_.io.block_size, kAlignment, AlignUp(size)));
  ScanJob job;
  std::vector<const ChunkTask*> order;
  const DirectReads direct = DirectToHost();
  const uint32_t mem_align = direct != DirectReads::kNone ? file_.direct_memory_alignment() : 0;
  job.requests =
      GroupRequests(tasks, block, mem_align, direct == DirectReads::kAll, &order, &job.direct);
  for (const ChunkTask* t : order) job.item_begin.push_back(t->chunk->offset);
  uint64_t staged = 0;
  for (size_t r = 0; r < job.requests.size(); ++r) {
    if (!job.direct[r]) staged += job.requests[r].end - job.requests[r].begin;
  }
  // Device copies read straight from staging, so it is pinned, once: it is
  // made for the whole file then and never replaced.
  if (device_) staged = size;
  CKFMT_RETURN_IF_ERROR(SetUpIo(size, staged, block));
  if (bounce) {
    CKFMT_RETURN_IF_ERROR(device_->PinSlots(staging_->ring().buffers()).WithContext(file_.path()));
  }
  job.on_item = [&](size_t i, const uint8_t* stored, unsigned) {
    return ProcessChunk(file_, *order[i], stored, options_.verify_checksums, device_.get());
  };
  job.read_error = [&](size_t i, const Status& s) { return WhileReading(s, *order[i]); };
  if (bounce) {
    job.with_own_buffer = [&](uint8_t* buf, size_t n, const std::function<Status()>& use) {
      PinnedRanges pinned;  // device copies read from it
      CKFMT_RETURN_IF_ERROR(pinned.Add(device_->ops(), buf, n));
      return use();
    };
  }
  CKFMT_RETURN_IF_ERROR(RunScan(file_, *staging_, job, pool));
  for (size_t r = 0; r < job.requests.size(); ++r) {
    const uint64_t n = job.requests[r].end - job.requests[r].begin;
    *bytes_read += n;
    if (job.direct[r]) *bytes_direct += n;
  }
  return Status::OK();
}

}  // namespace ckfmt
