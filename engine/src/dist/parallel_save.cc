// Parallel save: every rank writes the pieces it owns into one shared file.
//
//   1. Each rank cuts its pieces into chunks (encoding them in memory when a
//      codec is set, so stored sizes are known) and the ranks all-gather
//      their byte totals; prefix sums give each rank its aligned range after
//      the 4096-byte header. Ranks' ranges are contiguous, so the data
//      region follows the canonical layout. Uncompressed chunks are then
//      cut again on the grid of the chunk size in the file, as a
//      single-process save cuts them, which leaves each range's size as it
//      was.
//   2. Rank 0 creates "<path>.tmp.<random>", writes the header and
//      broadcasts the name; the others open it.
//   3. Every rank writes its chunks, fsyncs and closes; agreement.
//   4. Rank 0 gathers every rank's piece records, builds and validates the
//      index, writes index and footer, fsyncs, renames, fsyncs the
//      directory; agreement on the outcome.
// Any failure before the rename: rank 0 removes the temporary file.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>

#include "ckfmt/checksum.h"
#include "ckfmt/commit.h"
#include "ckfmt/dist/comm_util.h"
#include "ckfmt/file_layout.h"
#include "ckfmt/log.h"
#include "device/device_staging.h"
#include "encode_pipeline.h"
#include "io/file.h"
#include "io/staged_output.h"
#include "save_internal.h"
#include "thread_pool.h"
#include "wire.h"

namespace ckfmt::dist {
namespace {

struct LocalChunk {
  const uint8_t* stored;  // the bytes to write (source data or `encoded`)
  bool on_device = false;  // `stored` is the source data, on the piece's GPU
  uint64_t stored_size = 0;
  uint64_t raw_size = 0;
  uint64_t element_size = 1;
  uint8_t codec = 0;
  uint64_t checksum = 0;
  bool has_checksum = false;
  std::string encoded;  // with a codec, when the chunk shrank
};

struct LocalPiece {
  size_t entry;
  Region region;
  Device device;  // where the source data is
  std::vector<LocalChunk> chunks;
};

// Splits piece `p`'s data into uncompressed chunks of the chunk size, the
// last one shorter. Given `at`, the file offset where the first will land,
// each is also cut where it would cross a multiple of the chunk size, as
// CheckpointWriter cuts (FORMAT.md §5.2), and `at` moves past them.
void SplitPiece(const SaveContext& ctx, LocalPiece* p, uint64_t* at) {
  const SaveOptions& so = ctx.options.save;
  const uint64_t es = ctx.plan.entries[p->entry].ElementSize();
  const uint64_t grid = std::min(so.chunk_size, kMaxChunkRawSize);
  const uint64_t chunk_raw = std::max<uint64_t>(es, grid / es * es);
  const uint64_t bytes = p->region.NumElements() * es;
  p->chunks.clear();
  for (uint64_t off = 0; off < bytes;) {
    LocalChunk c;
    c.stored = ctx.local_data[p->entry] + off;
    c.on_device = p->device.type != DeviceType::kCPU;
    c.raw_size = std::min(chunk_raw, bytes - off);
    if (at) {
      c.raw_size = CutAtGrid(*at, c.raw_size, grid, es);
      *at += AlignUp(c.raw_size);
    }
    c.stored_size = c.raw_size;
    c.element_size = es;
    off += c.raw_size;
    p->chunks.push_back(std::move(c));
  }
}

// "<key> on <device>", for errors about a piece's device data.
std::string PieceName(const SaveContext& ctx, const LocalPiece& p) {
  return FormatKeyPath(ctx.plan.entries[p.entry].path) + " on " + DeviceName(p.device);
}

// Encodes chunk `c` from `raw` (its bytes on the host) into its own
// buffer; a chunk that does not shrink keeps its source and codec 0.
Status EncodeLocalChunk(const SaveOptions& so, const uint8_t* raw, LocalChunk* c) {
  std::string out(MaxEncodedSize(so.codec, c->raw_size), '\0');
  ChunkJob job{raw, c->raw_size, c->element_size, 0, 0};
  CKFMT_ASSIGN_OR_RETURN(StoredChunk s, EncodeForStorage(so.codec, so.level, job,
                                                         reinterpret_cast<uint8_t*>(out.data()),
                                                         out.size()));
  c->checksum = Checksum(s.data, s.size);
  c->has_checksum = true;
  if (s.codec == Codec::kNone) return Status::OK();
  out.resize(s.size);
  c->encoded = std::move(out);
  c->stored = reinterpret_cast<const uint8_t*>(c->encoded.data());
  c->stored_size = s.size;
  c->on_device = false;
  c->codec = static_cast<uint8_t>(s.codec);
  return Status::OK();
}

// Encodes the chunks of GPU pieces on the pool: each task copies its chunk
// into a pinned bounce buffer and encodes it there, so copies overlap other
// workers' encoding instead of waiting for a whole batch to finish. A
// chunk that does not shrink stays on the device (it is copied again when
// written), so the rank holds no more than its encoded chunks and one
// bounce buffer per worker.
Status EncodeDeviceChunks(const SaveContext& ctx, ThreadPool& pool,
                          const std::vector<std::pair<const LocalPiece*, LocalChunk*>>& chunks) {
  if (chunks.empty()) return Status::OK();
  const SaveOptions& so = ctx.options.save;
  CKFMT_ASSIGN_OR_RETURN(auto staging, DeviceStaging::For(chunks.front().first->device));
  uint64_t largest = 0;
  for (const auto& [piece, c] : chunks) largest = std::max(largest, c->raw_size);
  staging->SetBounceSize(largest);
  // The first failure is the one reported; the tasks after it stop (a
  // stream that failed may fail every later copy, for the same cause).
  std::mutex mu;
  Status first_error;
  std::atomic<bool> failed{false};
  auto encode = [&](const LocalPiece& piece, LocalChunk* c) -> Status {
    auto bounce = staging->CopyToBounce(piece.device, c->stored, c->raw_size);
    if (!bounce.ok()) return bounce.status().WithContext(PieceName(ctx, piece));
    return EncodeLocalChunk(so, bounce->data(), c);
  };
  pool.ParallelFor(chunks.size(), [&](size_t i) {
    if (failed.load(std::memory_order_relaxed)) return;
    Status s = encode(*chunks[i].first, chunks[i].second);
    if (s.ok()) return;
    std::lock_guard<std::mutex> l(mu);
    if (!failed.exchange(true)) first_error = std::move(s);
  });
  return first_error;
}

// Cuts this rank's owned pieces into chunks, encoding and checksumming
// them on the pool.
Result<std::vector<LocalPiece>> MakeChunks(const SaveContext& ctx) {
  const SaveOptions& so = ctx.options.save;
  std::vector<LocalPiece> pieces;
  for (size_t i = 0; i < ctx.plan.entries.size(); ++i) {
    if (!ctx.local_data[i]) continue;
    LocalPiece p{i, *ctx.local_region[i], ctx.local_device[i], {}};
    SplitPiece(ctx, &p, nullptr);
    pieces.push_back(std::move(p));
  }
  // Without a codec the sizes are known now and WriteRange checksums each
  // chunk as it copies it; with one, encode (and checksum) on the pool.
  if (so.codec == Codec::kNone) return pieces;
  ThreadPool pool(so.io.threads);
  std::vector<LocalChunk*> host;
  std::vector<std::pair<const LocalPiece*, LocalChunk*>> device;
  for (auto& p : pieces) {
    for (auto& c : p.chunks) {
      if (c.on_device) {
        device.emplace_back(&p, &c);
      } else {
        host.push_back(&c);
      }
    }
  }
  std::vector<Status> errors(host.size());
  pool.ParallelFor(host.size(), [&](size_t k) {
    errors[k] = EncodeLocalChunk(so, host[k]->stored, host[k]);
  });
  for (const Status& s : errors) CKFMT_RETURN_IF_ERROR(s);
  CKFMT_RETURN_IF_ERROR(EncodeDeviceChunks(ctx, pool, device));
  return pieces;
}

uint64_t RangeBytes(const std::vector<LocalPiece>& pieces) {
  uint64_t n = 0;
  for (const auto& p : pieces) {
    for (const auto& c : p.chunks) n += AlignUp(c.stored_size);
  }
  return n;
}

// Copies chunk `c` from `device` into `dst`, a place in `slots`, and waits.
// Sets up `staging` on first use, pinning the slots.
Status CopyFromDevice(Device device, const LocalChunk& c, const std::vector<AlignedBuffer>& slots,
                      uint8_t* dst, std::unique_ptr<DeviceStaging>* staging) {
  if (!*staging) {
    CKFMT_ASSIGN_OR_RETURN(*staging, DeviceStaging::For(device));
    CKFMT_RETURN_IF_ERROR((*staging)->PinSlots(slots));
  }
  return (*staging)->CopyToHostAndWait(device, dst, c.stored, c.stored_size);
}

// Writes the chunks from `base` on, recording each chunk's offset.
// Streams through the engine's staging slots and I/O backend (io_uring
// where available), as a single-process save does; chunks still on a GPU
// are copied device -> staging slot (pinned) -> disk.
Status WriteRange(const SaveContext& ctx, const File& file, uint64_t base,
                  const std::vector<LocalPiece>& pieces, std::vector<PieceRecord>* records,
                  std::string* io_path) {
  const IoOptions& io = ctx.options.save.io;
  const auto rank = static_cast<uint32_t>(ctx.rank());
  uint64_t largest = 0;
  for (const LocalPiece& p : pieces) {
    for (const LocalChunk& c : p.chunks) largest = std::max(largest, c.stored_size);
  }
  const size_t block = AlignUp(std::max<uint64_t>({io.block_size, largest, kAlignment}));
  const size_t slots = std::max<size_t>(3, io.staging_bytes / block);
  CKFMT_ASSIGN_OR_RETURN(auto out, StagedOutput::Create(file, io, block, slots, base));
  *io_path = out->io_name();
  std::unique_ptr<DeviceStaging> device;  // after `out`: unpins its slots first
  for (const LocalPiece& p : pieces) {
    PieceRecord rec{rank, p.region, {}};
    for (const LocalChunk& c : p.chunks) {
      CKFMT_ASSIGN_OR_RETURN(auto space, out->Reserve(c.stored_size));
      if (c.on_device) {
        Status copied = CopyFromDevice(p.device, c, out->slots(), space.data, &device);
        if (!copied.ok()) return copied.WithContext(PieceName(ctx, p));
      } else {
        std::memcpy(space.data, c.stored, c.stored_size);
      }
      uint64_t sum = c.has_checksum ? c.checksum : Checksum(space.data, c.stored_size);
      out->Commit(c.stored_size);
      rec.chunks.push_back({space.file_offset, c.stored_size, c.raw_size, sum, c.codec});
      CKFMT_RETURN_IF_ERROR(out->SubmitReady());
    }
    records->push_back(std::move(rec));
  }
  return out->Finish();
}

std::string EncodeRecords(const std::vector<LocalPiece>& pieces,
                          const std::vector<PieceRecord>& records) {
  WireWriter w;
  w.U64(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    w.U64(pieces[i].entry);
    w.Reg(records[i].region);
    w.U64(records[i].chunks.size());
    for (const ChunkRecord& c : records[i].chunks) {
      w.U64(c.offset);
      w.U64(c.stored_size);
      w.U64(c.raw_size);
      w.U64(c.checksum);
      w.U8(c.codec);
    }
  }
  return std::move(w.str());
}

// Adds rank `rank`'s piece records to `index` (entries in plan order).
Status DecodeRecords(const std::string& bytes, uint32_t rank, IndexRecord* index) {
  WireReader r(bytes, "rank " + std::to_string(rank) + "'s piece records");
  uint64_t n = r.Count(17);
  for (uint64_t i = 0; i < n && r.ok(); ++i) {
    uint64_t entry = r.U64();
    PieceRecord p{rank, r.Reg(), {}};
    uint64_t k = r.Count(33);
    for (uint64_t j = 0; j < k && r.ok(); ++j) {
      ChunkRecord c;
      c.offset = r.U64();
      c.stored_size = r.U64();
      c.raw_size = r.U64();
      c.checksum = r.U64();
      c.codec = r.U8();
      p.chunks.push_back(c);
    }
    if (entry >= index->entries.size()) r.Fail();
    if (r.ok()) index->entries[entry].pieces.push_back(std::move(p));
  }
  if (r.ok() && !r.done()) r.Fail();
  return r.status();
}

EntryRecord EntryFromPlan(const PlanEntry& p) {
  EntryRecord e;
  e.path = p.path;
  e.kind = p.kind;
  e.int_value = p.int_value;
  e.float_value = p.float_value;
  e.bool_value = p.bool_value;
  e.string_value = p.string_value;
  e.content_type = p.content_type;
  if (p.HasData()) {
    e.dtype = p.dtype;
    e.shape = p.shape;
  }
  return e;
}

// Rank 0: index, footer, durability, rename.
Status WriteIndexAndCommit(const SaveContext& ctx, File& file, const std::string& tmp,
                           uint64_t index_offset, const std::vector<std::string>& records,
                           uint64_t* file_bytes, uint64_t* raw_bytes) {
  IndexRecord index;
  index.writer_name = kDistWriterName;
  index.writer_version = kDistWriterVersion;
  index.world_size = static_cast<uint32_t>(ctx.comm.size());
  index.save_mode = "parallel";
  index.metadata = ctx.options.save.metadata;
  for (const PlanEntry& p : ctx.plan.entries) index.entries.push_back(EntryFromPlan(p));
  for (size_t r = 0; r < records.size(); ++r) {
    CKFMT_RETURN_IF_ERROR(DecodeRecords(records[r], static_cast<uint32_t>(r), &index));
  }
  if (Status s = ValidateIndex(index, kHeaderSize, index_offset, tmp); !s.ok()) {
    return Status::Internal("refusing to commit " + ctx.path + ": " + s.message());
  }
  for (const EntryRecord& e : index.entries) {
    for (const PieceRecord& p : e.pieces) {
      for (const ChunkRecord& c : p.chunks) *raw_bytes += c.raw_size;
    }
  }
  std::string bytes = SerializeIndex(index);
  FileFooter footer;
  footer.index_offset = index_offset;
  footer.index_length = bytes.size();
  footer.index_checksum = Checksum(bytes.data(), bytes.size());
  const uint64_t size = AlignUp(index_offset + bytes.size() + kFooterSize);
  AlignedBuffer tail(size - index_offset);  // zeroed
  std::memcpy(tail.data(), bytes.data(), bytes.size());
  EncodeFooter(footer, tail.data() + tail.size() - kFooterSize);
  CKFMT_RETURN_IF_ERROR(file.WriteAt(index_offset, tail.data(), tail.size()));
  if (ctx.options.save.fsync) CKFMT_RETURN_IF_ERROR(file.Sync());
  CKFMT_RETURN_IF_ERROR(file.Close());
  CKFMT_RETURN_IF_ERROR(CommitRename(tmp, ctx.path, ctx.options.save.fsync));
  *file_bytes = size;
  return Status::OK();
}

}  // namespace

Status ParallelSave(SaveContext& ctx) {
  using Clock = std::chrono::steady_clock;
  auto t_start = Clock::now();
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  Communicator& comm = ctx.comm;
  const SaveOptions& so = ctx.options.save;
  // 1. Chunks and offsets.
  std::vector<LocalPiece> pieces;
  Status local;
  if (so.chunk_size == 0) local = Status::InvalidArgument("chunk_size must be positive");
  if (local.ok()) {
    auto made = MakeChunks(ctx);
    if (made.ok()) {
      pieces = std::move(*made);
    } else {
      local = made.status();
    }
  }
  CKFMT_RETURN_IF_ERROR(comm.AgreeOnStatus(local, "preparing the chunks of " + ctx.path));
  uint64_t mine = RangeBytes(pieces);
  std::vector<uint64_t> sizes(comm.size());
  CKFMT_RETURN_IF_ERROR(comm.AllGather(&mine, sizeof mine, sizes.data()));
  uint64_t base = kHeaderSize, index_offset = kHeaderSize;
  for (int r = 0; r < comm.size(); ++r) {
    if (r < ctx.rank()) base += sizes[r];
    index_offset += sizes[r];
  }
  if (so.codec == Codec::kNone) {
    // Now that the range's start is known, cut the chunks on the grid.
    // The range keeps its size (see CutAtGrid), so the others' bases hold.
    uint64_t at = base;
    for (LocalPiece& p : pieces) SplitPiece(ctx, &p, &at);
    if (at - base != mine) {
      local = Status::Internal(ctx.path + ": parallel save: cutting the chunks changed rank " +
                               std::to_string(ctx.rank()) + "'s range from " +
                               std::to_string(mine) + " to " + std::to_string(at - base) +
                               " bytes");
    }
  }

  // 2. The temporary file: created by rank 0, its name broadcast. (A
  // failed cut above fails the agreement on it.)
  std::string tmp;
  std::unique_ptr<File> file;
  if (ctx.root() && local.ok()) {
    auto name = PrepareTemporary(ctx.path);
    auto f = name.ok() ? File::Create(*name, so.io.direct_io) : Result<File>(name.status());
    if (f.ok()) {
      tmp = *name;
      file = std::make_unique<File>(std::move(*f));
      HoldTemporary(file->fd());
      AlignedBuffer header(kHeaderSize);
      EncodeHeader(FileHeader{}, header.data());
      local = file->WriteAt(0, header.data(), kHeaderSize);
    } else {
      local = f.status();
    }
  }
  auto cleanup = [&](Status s) {
    file.reset();
    if (ctx.root() && !tmp.empty()) ::unlink(tmp.c_str());
    return s;
  };
  if (Status s = comm.AgreeOnStatus(local, "creating the temporary file for " + ctx.path);
      !s.ok()) {
    return cleanup(s);
  }
  if (Status s = BroadcastString(comm, &tmp, 0); !s.ok()) return cleanup(s);
  local = Status::OK();
  if (!ctx.root()) {
    auto f = File::OpenWrite(tmp, so.io.direct_io);
    if (f.ok()) {
      file = std::make_unique<File>(std::move(*f));
    } else {
      local = f.status();
    }
  }
  if (Status s = comm.AgreeOnStatus(local, "opening " + tmp); !s.ok()) return cleanup(s);

  // 3. Data, durable on every rank.
  const double t_prepare = since(t_start);
  auto t_write = Clock::now();
  std::vector<PieceRecord> records;
  local = WriteRange(ctx, *file, base, pieces, &records, &ctx.stats.io_path);
  const double write_s = since(t_write);
  if (local.ok()) local = ctx.Hook("data");
  auto t_sync = Clock::now();
  if (local.ok() && so.fsync) local = file->Sync();
  if (local.ok() && !ctx.root()) local = file->Close();
  const double sync_s = since(t_sync);
  for (const auto& p : pieces) {
    for (const auto& c : p.chunks) ctx.stats.local_raw_bytes += c.raw_size;
  }
  if (Status s = comm.AgreeOnStatus(local, "writing the data of " + ctx.path); !s.ok()) {
    return cleanup(s);
  }
  Log(LogLevel::kInfo, ctx.path + ": parallel save, rank " + std::to_string(ctx.rank()) + ": " +
                           std::to_string(mine) + " bytes; setup and checksums " +
                           std::to_string(t_prepare) + " s, writes " + std::to_string(write_s) +
                           " s, fsync " + std::to_string(sync_s) + " s, all durable after " +
                           std::to_string(since(t_start)) + " s");

  // 4. Index from every rank's records; commit on rank 0.
  auto gathered = GatherStrings(comm, EncodeRecords(pieces, records), 0);
  if (!gathered.ok()) return cleanup(gathered.status());
  local = ctx.Hook("commit");
  if (Status s = comm.AgreeOnStatus(local, "finishing " + ctx.path); !s.ok()) return cleanup(s);
  local = Status::OK();
  if (ctx.root()) {
    local = WriteIndexAndCommit(ctx, *file, tmp, index_offset, *gathered, &ctx.stats.file_bytes,
                                &ctx.stats.raw_bytes);
    if (!local.ok()) (void)cleanup(local);
  }
  return comm.AgreeOnStatus(local, "committing " + ctx.path);
}

}  // namespace ckfmt::dist
