#include "ckfmt/writer.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "ckfmt/checksum.h"
#include "ckfmt/commit.h"
#include "ckfmt/file_layout.h"
#include "ckfmt/log.h"
#include "ckfmt/utf8.h"
#include "device/device_staging.h"
#include "encode_pipeline.h"
#include "io/file.h"
#include "io/staged_output.h"
#include "io/sync_behind.h"
#include "thread_pool.h"

namespace ckfmt {

inline constexpr const char* kWriterVersion = "0.1.0";
// An uncompressed chunk is copied into staging in pieces of this size, the
// disk polled between them (a 4 MiB chunk: about 0.1 ms per piece).
inline constexpr uint64_t kPollBytes = 1 << 20;

class CheckpointWriter::Impl {
 public:
  Impl(std::string path, const SaveOptions& options)
      : path_(std::move(path)), opts_(options),
        pool_(options.io.threads) {}
  ~Impl() { Abort(); }

  Status Open();
  Status AddContainer(const KeyPath& path, EntryKind kind);
  Status AddScalar(const KeyPath& path, const Value& value);
  Status AddBytes(const KeyPath& path, const std::string& content_type, const void* data,
                  size_t size);
  Status AddTensorPiece(const KeyPath& path, DType dtype, const Shape& shape, const Region& region,
                        uint32_t rank, const void* data, Device device);
  Status AddSavedLayout(const KeyPath& path, ShardRecord shard);
  Status MarkPartial(const KeyPath& path);
  void DeferReads() { defer_reads_ = true; }
  void ExpectBytes(uint64_t bytes) {
    // Each chunk, and each piece's last one, is padded to 4096.
    const uint64_t chunk = std::min<uint64_t>(opts_.chunk_size, kMaxChunkRawSize);
    if (out_) out_->ExpectMore(bytes + (bytes / chunk + 1) * kAlignment);
  }
  Status Flush() {
    CKFMT_RETURN_IF_ERROR(CheckUsable());
    return FlushChunks();
  }
  Status Commit();
  // Records the first error of any call; later calls and Commit() refuse.
  Status Guard(Status s);
  void Abort();
  const WriteStats& stats() const { return stats_; }

 private:
  Status CheckUsable() const;
  Result<EntryRecord*> FindTensor(const KeyPath& path);
  Result<EntryRecord*> NewEntry(const KeyPath& path, EntryKind kind);
  // Appends `piece` to entry `entry` and queues its data (on `device`) as
  // chunks of `chunk_raw` bytes; writes every full batch, and the rest too
  // unless reads are deferred.
  Status AddPieceData(size_t entry, PieceRecord piece, const uint8_t* data, uint64_t size,
                      uint64_t chunk_raw, size_t element_size, Device device = {});
  // The raw size of the next uncompressed chunk, at most `n`: one that
  // would cross a multiple of the chunk size in the file ends there.
  uint64_t FitToChunkGrid(uint64_t n, size_t element_size) const;
  // Writes every queued chunk.
  Status FlushChunks();
  Status WriteBatch(const std::vector<ChunkJob>& batch);
  // The sink of pipeline_: stores one encoded chunk.
  Status PutEncoded(const ChunkJob& job, const StoredChunk& stored);
  // pipeline_'s fetch: a device chunk's raw bytes, in a pinned bounce buffer.
  Result<FetchedChunk> FetchChunk(const ChunkJob& job);
  // pipeline_'s errors: a device chunk's names its key and device.
  Status ChunkError(const ChunkJob& job, const Status& error) const;
  void Record(const ChunkJob& job, const ChunkRecord& rec);
  // The stream for data on `device`, setting up device staging first.
  Result<DeviceStream*> DeviceStreamFor(Device device);
  // Enqueues device -> host copies of the batch's chunks into dst[i] (pinned
  // staging slots) and a fence after each; on failure, waits until nothing
  // is in flight.
  Status FetchFromDevice(const std::vector<ChunkJob>& batch, const std::vector<uint8_t*>& dst,
                         std::vector<uint64_t>* fences);

  std::string path_, tmp_path_;
  SaveOptions opts_;
  ThreadPool pool_;
  File file_;
  std::unique_ptr<StagedOutput> out_;
  std::unique_ptr<SyncBehind> sync_behind_;  // uses file_: goes before it closes
  size_t batch_max_ = 1;
  // GPU data: set up by the first device piece (pins the slots); stream_ is
  // the stream of the uncompressed piece being written, nullptr for host
  // data. Before pipeline_, which may hold its bounce buffers.
  std::unique_ptr<DeviceStaging> device_;
  DeviceStream* stream_ = nullptr;
  // Compressed chunks, host and device ones, stream through the pipeline;
  // the batches take uncompressed chunks.
  std::unique_ptr<EncodePipeline> pipeline_;
  // Host chunks not yet written. With deferred reads they accumulate across
  // calls, so a state of many small tensors still fills every batch (and
  // every core) instead of writing one chunk per tensor.
  std::vector<ChunkJob> queued_;
  // Deferred chunks for pipeline_, pushed at the next flush in an order
  // that evens out the encoders' work (SpreadElementSizes).
  std::vector<ChunkJob> deferred_;
  bool defer_reads_ = false;
  IndexRecord index_;
  std::map<KeyPath, size_t> entry_pos_;
  WriteStats stats_;
  Status failed_;
  bool open_ = false, done_ = false;
};

Status CheckpointWriter::Impl::Open() {
  if (opts_.chunk_size == 0) return Status::InvalidArgument("chunk_size must be positive");
  CKFMT_ASSIGN_OR_RETURN(tmp_path_, PrepareTemporary(path_));
  CKFMT_ASSIGN_OR_RETURN(file_, File::Create(tmp_path_, opts_.io.direct_io));
  HoldTemporary(file_.fd());
  open_ = true;
  // A slot must hold any chunk as stored, plus its padding; encoding never
  // makes one larger, as chunks that do not shrink are stored raw.
  uint64_t chunk_max = std::min<uint64_t>(opts_.chunk_size, kMaxChunkRawSize);
  size_t block = AlignUp(std::max<uint64_t>(opts_.io.block_size, chunk_max));
  // Uncompressed chunks are filled in batches (compressed ones go through
  // pipeline_); the slots of the batch being filled come on top of the
  // staging budget, so that the budget stays in flight meanwhile: a disk's
  // throughput follows the bytes in flight. The batches leave one core to
  // the kernel: copying on every core takes memory
  // bandwidth the disk's DMA needs, and where the file cannot be allocated
  // ahead, ext4 runs extending O_DIRECT writes one at a time, each issued
  // by an io_uring worker thread that must get a core the moment the
  // previous write ends. On 2 cores, one copying thread saved at 0.90-1.07x
  // (median 1.00) the raw write beside it, two threads at 0.87-1.03x
  // (median 0.91): 9 alternations of ckfmt-bench-e2e --codecs none, 8
  // favouring one thread (before allocating ahead; 6 alternations since
  // showed no gain from the second thread either).
  batch_max_ = std::max<size_t>(1, pool_.size() - 1);
  const size_t budget = std::max<size_t>(2, opts_.io.staging_bytes / block);
  // The budget bounds the writes in flight, and more slots are filled
  // ahead: a virtual disk that ends its whole queue in one burst gets those
  // back at once, where slots filled only after their writes ended leave
  // the queue short by a copy's time per slot. Uncompressed saves fill a
  // whole budget ahead. The virtio disk here ends 8 writes of 4 MiB at
  // once; with a quarter of the budget ahead (2 slots) the other 6 waited
  // for their copies, and the disk had 7.2-7.4 writes in flight on average
  // against the raw write's 8.0 (ckfmt-bench-e2e's QD column). With the
  // whole budget: 7.7-7.8, and save / raw write, paired, 0.95-1.01
  // against 0.87-0.93 (3 alternations of --codecs none --runs 3).
  // Compressed saves did as well with 4 writes in flight while encoding
  // was the bottleneck; once it was not, the whole budget in flight
  // measured 1.13-1.15x the paired raw write against 0.96-1.09x with 4
  // (3 alternations of --codecs byteplane-zstd). Their encoders fill
  // slots while the disk writes, and a quarter of the budget ahead keeps
  // the disk at 8.0 in flight.
  const size_t ahead = opts_.codec == Codec::kNone ? budget : std::max<size_t>(2, budget / 4);
  const size_t write_limit = budget;
  size_t slots;
  if (opts_.codec == Codec::kNone) {
    slots = budget + batch_max_ + ahead;
  } else {
    // Buffers beyond one per encoder hold finished chunks waiting for their
    // turn, while every encoder has a buffer for the next one. A disk that
    // completes writes in bursts keeps the calling thread waiting for
    // staging now and then; six such buffers let encoding run ahead
    // meanwhile (byte-plane e2e save, paired vs raw write, 4 alternations:
    // 0.98-1.19 against 0.93-1.02 with two).
    pipeline_ = std::make_unique<EncodePipeline>(
        pool_, opts_.codec, opts_.level, pool_.size() + 6, chunk_max,
        [this](const ChunkJob& job, const StoredChunk& c) { return PutEncoded(job, c); },
        [this](const ChunkJob& job) { return FetchChunk(job); },
        [this](const ChunkJob& job, const Status& error) { return ChunkError(job, error); });
    slots = budget + 1 + ahead;
  }
  CKFMT_ASSIGN_OR_RETURN(out_, StagedOutput::Create(file_, opts_.io, block, slots));
  out_->LimitWrites(write_limit);
  out_->AllocateAhead();  // this writer owns the whole file
  if (opts_.codec != Codec::kNone && opts_.fsync && opts_.sync_behind_bytes > 0) {
    sync_behind_ = std::make_unique<SyncBehind>(file_, opts_.sync_behind_bytes);
    out_->OnWritten([sb = sync_behind_.get()](uint64_t n) { sb->Written(n); });
  }
  stats_.io_path = out_->io_name();
  index_.writer_name = "ckfmt";
  index_.writer_version = kWriterVersion;
  index_.world_size = opts_.world_size;
  index_.save_mode = opts_.save_mode;
  index_.metadata = opts_.metadata;
  if (!IsValidUtf8(index_.save_mode)) {
    return Status::InvalidArgument(path_ + ": the save mode is not valid UTF-8 (FORMAT.md W5)");
  }
  for (const auto& [key, value] : index_.metadata) {
    if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
      return Status::InvalidArgument(path_ + ": metadata \"" + key + "\": key or value is not "
                                     "valid UTF-8, as every string in a file must be (FORMAT.md W5)");
    }
  }
  CKFMT_ASSIGN_OR_RETURN(auto space, out_->Reserve(kHeaderSize));
  EncodeHeader(FileHeader{}, space.data);
  out_->Commit(kHeaderSize);
  return Status::OK();
}

Status CheckpointWriter::Impl::CheckUsable() const {
  if (done_) return Status::InvalidArgument(path_ + ": writer already committed or aborted");
  if (!failed_.ok()) {
    return Status::Aborted(path_ + ": an earlier error stopped this save: " + failed_.message());
  }
  return Status::OK();
}

Status CheckpointWriter::Impl::Guard(Status s) {
  if (s.ok()) return s;
  // An error about the temporary file (a failed write, say) names the
  // checkpoint it was to become: the temporary is gone once the save fails.
  if (!tmp_path_.empty() && s.message().find(tmp_path_) != std::string::npos) {
    s = s.WithContext("saving " + path_);
  }
  // "Already committed" is about the call, not the checkpoint.
  if (failed_.ok() && !done_) failed_ = s;
  return s;
}

Status CheckpointWriter::Impl::AddSavedLayout(const KeyPath& p, ShardRecord shard) {
  CKFMT_ASSIGN_OR_RETURN(EntryRecord * e, FindTensor(p));
  if (shard.rank >= opts_.world_size) {
    return Status::InvalidArgument(path_ + ": " + FormatKeyPath(p) + ": saved layout names rank " +
                                   std::to_string(shard.rank) + " but the world size is " +
                                   std::to_string(opts_.world_size));
  }
  if (Status s = ValidateRegion(shard.region, e->shape); !s.ok()) {
    return Status::InvalidArgument(path_ + ": " + FormatKeyPath(p) + ": saved layout: " +
                                   s.message());
  }
  e->saved_layout.push_back(std::move(shard));
  return Status::OK();
}

Status CheckpointWriter::Impl::MarkPartial(const KeyPath& p) {
  CKFMT_ASSIGN_OR_RETURN(EntryRecord * e, FindTensor(p));
  e->partial = true;
  return Status::OK();
}

Result<EntryRecord*> CheckpointWriter::Impl::NewEntry(const KeyPath& path, EntryKind kind) {
  CKFMT_RETURN_IF_ERROR(CheckUsable());
  if (path.empty()) return Status::InvalidArgument(path_ + ": an entry needs a non-empty key path");
  for (const PathComponent& c : path) {
    const std::string* key = std::get_if<std::string>(&c);
    if (key && !IsValidUtf8(*key)) {
      return Status::InvalidArgument(path_ + ": " + FormatKeyPath(path) +
                                     ": a key is not valid UTF-8, as every string in a file "
                                     "must be (FORMAT.md W5)");
    }
  }
  KeyPath parent(path.begin(), path.end() - 1);
  if (!parent.empty()) {
    auto it = entry_pos_.find(parent);
    if (it == entry_pos_.end() || !index_.entries[it->second].IsContainer()) {
      return Status::InvalidArgument(path_ + ": " + FormatKeyPath(path) +
                                     ": its parent was not added as a dict or list");
    }
  }
  if (!entry_pos_.emplace(path, index_.entries.size()).second) {
    return Status::InvalidArgument(path_ + ": " + FormatKeyPath(path) + " was added twice");
  }
  EntryRecord& e = index_.entries.emplace_back();
  e.path = path;
  e.kind = kind;
  return &e;
}

Status CheckpointWriter::Impl::AddContainer(const KeyPath& path, EntryKind kind) {
  if (kind != EntryKind::kDict && kind != EntryKind::kList) {
    return Status::InvalidArgument("AddContainer takes kDict or kList");
  }
  return NewEntry(path, kind).status();
}

Status CheckpointWriter::Impl::AddScalar(const KeyPath& path, const Value& v) {
  EntryKind kind;
  switch (v.kind()) {
    case Value::Kind::kNone: kind = EntryKind::kNone; break;
    case Value::Kind::kBool: kind = EntryKind::kBool; break;
    case Value::Kind::kInt: kind = EntryKind::kInt; break;
    case Value::Kind::kFloat: kind = EntryKind::kFloat; break;
    case Value::Kind::kString: kind = EntryKind::kString; break;
    default:
      return Status::InvalidArgument(FormatKeyPath(path) + ": AddScalar got a " +
                                     ValueKindName(v.kind()));
  }
  if (kind == EntryKind::kString && !IsValidUtf8(v.as_string())) {
    return Status::InvalidArgument(path_ + ": " + FormatKeyPath(path) +
                                   ": the string is not valid UTF-8 (FORMAT.md W5)");
  }
  CKFMT_ASSIGN_OR_RETURN(EntryRecord * e, NewEntry(path, kind));
  if (kind == EntryKind::kBool) e->bool_value = v.as_bool();
  if (kind == EntryKind::kInt) e->int_value = v.as_int();
  if (kind == EntryKind::kFloat) e->float_value = v.as_float();
  if (kind == EntryKind::kString) e->string_value = v.as_string();
  return Status::OK();
}

Status CheckpointWriter::Impl::AddBytes(const KeyPath& path, const std::string& content_type,
                                        const void* data, size_t size) {
  if (!IsValidUtf8(content_type)) {
    return Status::InvalidArgument(path_ + ": " + FormatKeyPath(path) +
                                   ": the content type is not valid UTF-8 (FORMAT.md W5)");
  }
  CKFMT_ASSIGN_OR_RETURN(EntryRecord * e, NewEntry(path, EntryKind::kBytes));
  e->content_type = content_type;
  e->dtype = DType::kU8;
  e->shape = {size};
  return AddPieceData(entry_pos_[path], PieceRecord{0, Region::Whole(e->shape), {}},
                      static_cast<const uint8_t*>(data), size,
                      std::min(opts_.chunk_size, kMaxChunkRawSize), 1);
}

Status CheckpointWriter::Impl::AddTensorPiece(const KeyPath& path, DType dtype, const Shape& shape,
                                              const Region& region, uint32_t rank,
                                              const void* data, Device device) {
  CKFMT_RETURN_IF_ERROR(CheckUsable());
  std::string where = path_ + ": " + FormatKeyPath(path);
  if (Status s = ValidateRegion(region, shape); !s.ok()) {
    return Status::InvalidArgument(where + ": " + s.message());
  }
  if (!ShapeBytes(shape, DTypeSize(dtype)).ok()) {
    return Status::InvalidArgument(where + ": tensor size overflows 64 bits");
  }
  if (rank >= opts_.world_size) {
    return Status::InvalidArgument(where + ": piece from rank " + std::to_string(rank) +
                                   " but the save's world size is " +
                                   std::to_string(opts_.world_size));
  }
  if (!data && region.NumElements() > 0) {
    return Status::InvalidArgument(where + ": piece " + region.ToString() + " has no data");
  }
  size_t pos;
  if (auto it = entry_pos_.find(path); it != entry_pos_.end()) {
    const EntryRecord& e = index_.entries[it->second];
    if (e.kind != EntryKind::kTensor || e.dtype != dtype || e.shape != shape) {
      return Status::InvalidArgument(where + ": a piece disagrees with the entry's kind, dtype "
                                     "or shape given by an earlier piece");
    }
    pos = it->second;
  } else {
    CKFMT_ASSIGN_OR_RETURN(EntryRecord * e, NewEntry(path, EntryKind::kTensor));
    e->dtype = dtype;
    e->shape = shape;
    pos = index_.entries.size() - 1;
  }
  const uint64_t esize = DTypeSize(dtype);
  uint64_t chunk_raw =
      std::max<uint64_t>(esize, std::min(opts_.chunk_size, kMaxChunkRawSize) / esize * esize);
  DeviceStream* stream = nullptr;
  if (device.type != DeviceType::kCPU && data && region.NumElements() > 0) {
    auto s = DeviceStreamFor(device);
    if (!s.ok()) return s.status().WithContext(where);
    stream = *s;
  }
  if (dtype == DType::kBool && data) {
    // Spec rule W6: bool elements are the bytes 0 and 1.
    auto check = [&](const uint8_t* b, size_t n, uint64_t base) {
      const uint8_t* bad = std::find_if(b, b + n, [](uint8_t v) { return v > 1; });
      if (bad == b + n) return Status::OK();
      return Status::InvalidArgument("bool element " + std::to_string(base + (bad - b)) +
                                     " is the byte " + std::to_string(*bad) + ", expected 0 or 1");
    };
    // Device bool tensors (masks, rare and small) are checked in a bounce
    // buffer; a failed copy or pin there names the tensor too.
    CKFMT_RETURN_IF_ERROR(
        stream
            ? device_->ForEachHostPiece(device, data, region.NumElements(), check)
                  .WithContext(where + " on " + DeviceName(device))
            : check(static_cast<const uint8_t*>(data), region.NumElements(), 0).WithContext(where));
  }
  const auto* bytes = static_cast<const uint8_t*>(data);
  const uint64_t size = region.NumElements() * esize;
  if (pipeline_) {
    // Compressed: device chunks are queued like host ones (ChunkError names them).
    return AddPieceData(pos, PieceRecord{rank, region, {}}, bytes, size, chunk_raw, esize,
                        stream ? device : Device{});
  }
  // Uncompressed device batches stay per piece, copied straight into staging.
  if (stream) CKFMT_RETURN_IF_ERROR(FlushChunks());
  stream_ = stream;
  Status written = AddPieceData(pos, PieceRecord{rank, region, {}}, bytes, size, chunk_raw, esize);
  stream_ = nullptr;
  if (!written.ok()) return stream ? written.WithContext(where + " on " + DeviceName(device)) : written;
  return Status::OK();
}

Result<EntryRecord*> CheckpointWriter::Impl::FindTensor(const KeyPath& path) {
  CKFMT_RETURN_IF_ERROR(CheckUsable());
  auto it = entry_pos_.find(path);
  if (it == entry_pos_.end() || !index_.entries[it->second].HasData()) {
    return Status::InvalidArgument(path_ + ": " + FormatKeyPath(path) + " is not a tensor entry");
  }
  return &index_.entries[it->second];
}

Result<DeviceStream*> CheckpointWriter::Impl::DeviceStreamFor(Device device) {
  if (!device_) {
    CKFMT_ASSIGN_OR_RETURN(auto staging, DeviceStaging::For(device));
    CKFMT_RETURN_IF_ERROR(staging->PinSlots(out_->slots()));
    staging->SetBounceSize(std::min(opts_.chunk_size, kMaxChunkRawSize));
    device_ = std::move(staging);
  }
  return device_->Stream(device);
}

Status CheckpointWriter::Impl::FetchFromDevice(const std::vector<ChunkJob>& batch,
                                               const std::vector<uint8_t*>& dst,
                                               std::vector<uint64_t>* fences) {
  fences->resize(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    Status s = stream_->CopyToHost(dst[i], batch[i].src, batch[i].size);
    auto fence = s.ok() ? stream_->Record() : Result<uint64_t>(s);
    if (!fence.ok()) {
      (void)stream_->Synchronize();  // nothing may still write into dst
      return fence.status();
    }
    (*fences)[i] = *fence;
  }
  return Status::OK();
}

Status CheckpointWriter::Impl::AddPieceData(size_t entry, PieceRecord piece, const uint8_t* data,
                                            uint64_t size, uint64_t chunk_raw, size_t element_size,
                                            Device device) {
  std::vector<PieceRecord>& pieces = index_.entries[entry].pieces;
  pieces.push_back(std::move(piece));
  for (uint64_t off = 0; off < size;) {
    uint64_t n = std::min(chunk_raw, size - off);
    if (opts_.codec == Codec::kNone) n = FitToChunkGrid(n, element_size);
    ChunkJob job{data + off, n, element_size, entry, pieces.size() - 1, device};
    off += n;
    if (pipeline_) {
      if (defer_reads_) {
        deferred_.push_back(job);
      } else {
        CKFMT_RETURN_IF_ERROR(pipeline_->Push(job));
      }
      continue;
    }
    queued_.push_back(job);
    if (queued_.size() == batch_max_) {
      CKFMT_RETURN_IF_ERROR(WriteBatch(queued_));
      queued_.clear();
    }
  }
  // Uncompressed device chunks are written before the piece's call returns.
  return defer_reads_ && !stream_ ? Status::OK() : FlushChunks();
}

// Uncompressed chunks do not cross multiples of the chunk size in the file,
// so that with the default sizes (4 MiB chunks and I/O blocks) every full
// staging slot starts at a multiple of 4 MiB and goes to the disk as one
// aligned request. The header alone would otherwise put every write 4 KiB
// off: this virtual disk took 0.73-0.80 s to accept 2 GiB of 4 MiB O_DIRECT
// writes placed 4 KiB off a 4 MiB multiple, against 0.44-0.50 s aligned
// (io_uring, depth 8, 3 alternations). A piece that starts between two
// multiples gets a shorter first chunk. The grid follows the chunk size, not
// the I/O options, so that a file's bytes do not depend on the latter.
// Stored sizes equal raw sizes here, so where a chunk will land is known
// before it is reserved.
uint64_t CheckpointWriter::Impl::FitToChunkGrid(uint64_t n, size_t element_size) const {
  uint64_t at = out_->position();
  for (const ChunkJob& queued : queued_) at += AlignUp(queued.size);
  return CutAtGrid(at, n, std::min<uint64_t>(opts_.chunk_size, kMaxChunkRawSize), element_size);
}

Status CheckpointWriter::Impl::FlushChunks() {
  if (pipeline_) {
    for (size_t i : SpreadElementSizes(deferred_)) {
      CKFMT_RETURN_IF_ERROR(pipeline_->Push(deferred_[i]));
    }
    deferred_.clear();
    CKFMT_RETURN_IF_ERROR(pipeline_->Drain());
  }
  if (queued_.empty()) return Status::OK();
  Status s = WriteBatch(queued_);
  queued_.clear();
  return s;
}

// Copies and checksums a batch of uncompressed chunks into their places in
// staging while earlier slots are being written, then hands the filled
// slots to the I/O backend. (Compressed chunks go through pipeline_.)
Status CheckpointWriter::Impl::WriteBatch(const std::vector<ChunkJob>& batch) {
  const size_t n = batch.size();
  std::vector<ChunkRecord> recs(n);
  // Sizes are known: reserve every chunk's place first, then copy and
  // checksum all of them in parallel.
  std::vector<uint8_t*> dst(n);
  for (size_t i = 0; i < n; ++i) {
    CKFMT_ASSIGN_OR_RETURN(auto space, out_->Reserve(batch[i].size));
    dst[i] = space.data;
    recs[i] = {space.file_offset, batch[i].size, batch[i].size, 0, uint8_t(Codec::kNone)};
    out_->Commit(batch[i].size);
  }
  if (stream_) {
    // Device data lands straight in its place in the pinned slots; each
    // chunk is checksummed as soon as its copy is done.
    std::vector<uint64_t> fences;
    std::vector<Status> errors(n);
    CKFMT_RETURN_IF_ERROR(FetchFromDevice(batch, dst, &fences));
    pool_.ParallelFor(n, [&](size_t i) {
      errors[i] = stream_->Wait(fences[i]);
      if (errors[i].ok()) recs[i].checksum = Checksum(dst[i], batch[i].size);
    });
    for (const Status& s : errors) CKFMT_RETURN_IF_ERROR(s);
  } else if (n == 1) {
    // One copying thread (see Open()): this one, in pieces, polling the
    // disk between them, so that writes the disk ended while it copied
    // are replaced at once by slots filled ahead, not after the copy.
    ChecksumStream sum;
    for (uint64_t off = 0; off < batch[0].size; off += kPollBytes) {
      const uint64_t len = std::min<uint64_t>(kPollBytes, batch[0].size - off);
      sum.CopyAndUpdate(dst[0] + off, batch[0].src + off, len);
      CKFMT_RETURN_IF_ERROR(out_->Poll());
    }
    recs[0].checksum = sum.Digest();
  } else {
    pool_.ParallelFor(n, [&](size_t i) {
      recs[i].checksum = CopyAndChecksum(dst[i], batch[i].src, batch[i].size);
    });
  }
  CKFMT_RETURN_IF_ERROR(out_->SubmitReady());
  for (size_t i = 0; i < n; ++i) Record(batch[i], recs[i]);
  return Status::OK();
}

// On an encoder: a chunk's bytes copied device -> pinned bounce buffer,
// held until the chunk is stored (a chunk stored raw points at them).
Result<FetchedChunk> CheckpointWriter::Impl::FetchChunk(const ChunkJob& job) {
  // device_ was set up on the calling thread when the piece was added.
  CKFMT_ASSIGN_OR_RETURN(PinnedPool::Lease lease,
                         device_->CopyToBounce(job.device, job.src, job.size));
  auto held = std::make_shared<PinnedPool::Lease>(std::move(lease));
  return FetchedChunk{held->data(), held};
}

Status CheckpointWriter::Impl::ChunkError(const ChunkJob& job, const Status& error) const {
  if (job.device.type == DeviceType::kCPU) return error;
  return error.WithContext(path_ + ": " + FormatKeyPath(index_.entries[job.entry].path) + " on " +
                           DeviceName(job.device));
}

Status CheckpointWriter::Impl::PutEncoded(const ChunkJob& job, const StoredChunk& c) {
  // Chunks may span slots here: every write is a whole slot. They are
  // hashed as they are copied (StoredChunk says why).
  ChecksumStream sum;
  CKFMT_ASSIGN_OR_RETURN(uint64_t offset, out_->Put(c.data, c.size, &sum));
  Record(job, {offset, c.size, job.size, sum.Digest(), uint8_t(c.codec)});
  return Status::OK();
}

void CheckpointWriter::Impl::Record(const ChunkJob& job, const ChunkRecord& rec) {
  stats_.raw_bytes += rec.raw_size;
  stats_.stored_bytes += rec.stored_size;
  ++stats_.chunks;
  index_.entries[job.entry].pieces[job.piece].chunks.push_back(rec);
}

Status CheckpointWriter::Impl::Commit() {
  if (Status s = CheckUsable(); !s.ok()) {
    Abort();  // after a failure nothing here can ever be committed
    return s;
  }
  auto fail = [&](Status s) {
    s = Guard(s);
    Abort();
    return s;
  };
  if (Status s = FlushChunks(); !s.ok()) return fail(s);
  uint64_t index_offset = out_->position();
  if (Status s = ValidateIndex(index_, kHeaderSize, index_offset, tmp_path_); !s.ok()) {
    return fail(Status::InvalidArgument("refusing to commit " + path_ + ": " + s.message()));
  }
  std::string index = SerializeIndex(index_);
  FileFooter footer;
  footer.index_offset = index_offset;
  footer.index_length = index.size();
  footer.index_checksum = Checksum(index.data(), index.size());
  uint64_t file_size = AlignUp(index_offset + index.size() + kFooterSize);
  uint8_t footer_bytes[kFooterSize];
  EncodeFooter(footer, footer_bytes);
  std::vector<uint8_t> zeros(file_size - kFooterSize - index_offset - index.size(), 0);
  Status s = out_->Append(index.data(), index.size());
  if (s.ok()) s = out_->Append(zeros.data(), zeros.size());
  if (s.ok()) s = out_->Append(footer_bytes, kFooterSize);
  if (s.ok()) s = out_->Finish();
  if (s.ok() && sync_behind_) s = sync_behind_->Stop();
  if (s.ok() && opts_.fsync) s = file_.Sync();
  if (s.ok()) s = file_.Close();
  if (s.ok()) s = CommitRename(tmp_path_, path_, opts_.fsync);
  if (!s.ok()) return fail(s);
  stats_.file_bytes = file_size;
  done_ = true;
  Log(LogLevel::kInfo, path_ + ": committed " + std::to_string(file_size) + " bytes via " +
                           stats_.io_path);
  return Status::OK();
}

void CheckpointWriter::Impl::Abort() {
  if (done_) return;
  done_ = true;
  // Encoders may still read the caller's data, which may go once we return.
  if (pipeline_) pipeline_->Cancel();
  device_.reset();  // waits for device copies, unpins the slots before they go
  out_.reset();  // waits for queued writes
  sync_behind_.reset();
  (void)file_.Close();
  if (open_) ::unlink(tmp_path_.c_str());
}

CheckpointWriter::CheckpointWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointWriter::~CheckpointWriter() = default;

Result<std::unique_ptr<CheckpointWriter>> CheckpointWriter::Create(const std::string& path,
                                                                   const SaveOptions& options) {
  auto impl = std::make_unique<Impl>(path, options);
  CKFMT_RETURN_IF_ERROR(impl->Open());
  return std::unique_ptr<CheckpointWriter>(new CheckpointWriter(std::move(impl)));
}

// Every refused call poisons the writer: a checkpoint missing what a
// caller tried to add must never be committed over a good one.
Status CheckpointWriter::AddContainer(const KeyPath& p, EntryKind k) {
  return impl_->Guard(impl_->AddContainer(p, k));
}
Status CheckpointWriter::AddScalar(const KeyPath& p, const Value& v) {
  return impl_->Guard(impl_->AddScalar(p, v));
}
Status CheckpointWriter::AddBytes(const KeyPath& p, const std::string& ct, const void* d, size_t n) {
  return impl_->Guard(impl_->AddBytes(p, ct, d, n));
}
Status CheckpointWriter::AddTensorPiece(const KeyPath& p, DType t, const Shape& s, const Region& r,
                                        uint32_t rank, const void* d, Device device) {
  return impl_->Guard(impl_->AddTensorPiece(p, t, s, r, rank, d, device));
}
Status CheckpointWriter::AddSavedLayout(const KeyPath& p, ShardRecord shard) {
  return impl_->Guard(impl_->AddSavedLayout(p, std::move(shard)));
}
void CheckpointWriter::DeferReads() { impl_->DeferReads(); }
void CheckpointWriter::ExpectBytes(uint64_t bytes) { impl_->ExpectBytes(bytes); }
Status CheckpointWriter::Flush() { return impl_->Guard(impl_->Flush()); }
Status CheckpointWriter::MarkPartial(const KeyPath& p) {
  return impl_->Guard(impl_->MarkPartial(p));
}
Status CheckpointWriter::Commit() { return impl_->Commit(); }
void CheckpointWriter::Abort() { impl_->Abort(); }
const WriteStats& CheckpointWriter::stats() const { return impl_->stats(); }

}  // namespace ckfmt
