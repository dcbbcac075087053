// Writing checkpoints.
//
// Save() writes a whole state dict. CheckpointWriter is the streaming layer
// underneath, for callers that produce pieces themselves (the distributed
// gatherers): entries are streamed to disk as they are added, so memory is
// bounded by the staging budget, not by the checkpoint.
//
// Commit protocol: data goes to "<path>.tmp.<random>" in the same directory;
// Commit() fsyncs it, renames it to `path` and fsyncs the directory. Until
// Commit() returns OK nothing exists at `path` that was not there before: an
// error, Abort(), destruction without Commit(), or a crash leaves any older
// file at `path` untouched.
//
// Threads: a CheckpointWriter is used by one thread at a time. Distinct
// writers, readers and AsyncSavers may run in different threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ckfmt/codec.h"
#include "ckfmt/index.h"
#include "ckfmt/io_options.h"
#include "ckfmt/state_dict.h"

namespace ckfmt {

struct SaveOptions {
  IoOptions io;
  uint64_t chunk_size = 4ull << 20;  // raw bytes per chunk (rounded down to elements)
  // kBytePlaneZstd for floating-point state: on trained weights and Adam
  // moments 1.17-1.58x smaller, and at level 1 its saves and loads moved
  // more logical bytes a second than the raw disk on the README's 2-core
  // VMs (README, "Measured"). kZstd suits bytes, patterned tensors and
  // values from a small set (a fixed basis); it takes more CPU per byte to
  // load and verify. Chunks that a codec does not shrink are stored
  // uncompressed.
  Codec codec = Codec::kNone;
  int level = 1;                      // zstd level
  bool fsync = true;                  // fsync file and directory on commit
  // Compressed saves with fsync: a thread fdatasyncs the file each time
  // this many more bytes have been written, so that the disk's write-back
  // cache drains while the cores are still encoding instead of all in the
  // final fsync (0: never). On the VM of the README, when its disk wrote
  // at 0.9 GiB/s, byte-plane saves of a 2 GiB state ran at a median 0.92
  // GiB/s against 0.83 without (5 alternations, 64 MiB steps). Each sync
  // also commits ext4's journal (small writes, a cache flush); with the
  // disk at 4 GiB/s, 256 MiB steps saved at 1.02-1.17x the paired raw write
  // (median 1.11) against 0.98-1.15x (1.055) with 64 MiB and 1.03-1.05x
  // with 512 MiB (6, 6 and 3 runs of ckfmt-bench-e2e --codecs
  // byteplane-zstd --runs 3). Uncompressed saves make their data faster
  // than the disk takes it in and do not use it: there it cost about a
  // tenth, and with the disk at 4 GiB/s gained nothing either.
  uint64_t sync_behind_bytes = 256ull << 20;
  std::vector<std::pair<std::string, std::string>> metadata;  // user metadata
  uint32_t world_size = 1;
  std::string save_mode = "single";
};

struct WriteStats {
  uint64_t raw_bytes = 0;      // logical bytes of tensor and blob data
  uint64_t stored_bytes = 0;   // bytes of chunks on disk
  uint64_t file_bytes = 0;     // final file size
  uint64_t chunks = 0;
  std::string io_path;         // e.g. "io_uring+O_DIRECT", "io_uring", "pwrite"
};

class CheckpointWriter {
 public:
  // Creates the temporary file next to `path`.
  static Result<std::unique_ptr<CheckpointWriter>> Create(const std::string& path,
                                                          const SaveOptions& options);
  ~CheckpointWriter();  // aborts unless committed

  // Entries must arrive in pre-order: a container before its children, list
  // children in index order. The root is an implicit dict.
  Status AddContainer(const KeyPath& path, EntryKind kind);  // kDict or kList
  // `value` is none, bool, int, float or string.
  Status AddScalar(const KeyPath& path, const Value& value);
  Status AddBytes(const KeyPath& path, const std::string& content_type, const void* data,
                  size_t size);
  // Streams one piece of a tensor: `data` holds `region`'s row-major stream
  // (see region.h) and needs to stay valid only during the call. The first
  // piece of a path creates the entry; later ones must agree on dtype and
  // global shape. A whole tensor is one piece with Region::Whole(shape).
  // Data on a CUDA `device` (see cuda.h) is copied device -> pinned staging
  // slot and written from there; with a codec, device -> pinned bounce
  // buffer, encoded from there. Either way the file is the one the same
  // data in host memory makes. REQUIRES for device data: the caller's own
  // stream work that writes it has completed.
  Status AddTensorPiece(const KeyPath& path, DType dtype, const Shape& global_shape,
                        const Region& region, uint32_t rank, const void* data,
                        Device device = {});
  // From now on, data given to AddBytes/AddTensorPiece (host data, and with
  // a codec device data too) may be read until the next Flush() or Commit()
  // instead of during the call, so chunks of many small tensors are encoded
  // and checksummed in parallel. An error in such data's write surfaces at
  // a later call or at Commit(). REQUIRES: that data stays valid and
  // unchanged until then.
  void DeferReads();
  // Optional: about `bytes` of tensor and blob data will follow. Where the
  // file system can, the file is allocated for them at once (and trimmed on
  // commit), so that its writes go to the disk side by side. Save() says.
  void ExpectBytes(uint64_t bytes);
  // Writes all deferred data; afterwards the caller may reuse its buffers.
  Status Flush();
  // Records where `path`'s data lived at save time (informational).
  Status AddSavedLayout(const KeyPath& path, ShardRecord shard);
  // Marks `path` as partial: its pieces need not cover the whole tensor.
  Status MarkPartial(const KeyPath& path);

  // Writes index and footer, makes the file durable and visible at `path`.
  Status Commit();
  // Discards everything written; `path` is untouched. Idempotent.
  void Abort();

  const WriteStats& stats() const;

  class Impl;

 private:
  explicit CheckpointWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Saves `state_dict` (REQUIRES: a dict) to `path` atomically. Tensors may
// be on the host or, in a CUDA build, on a GPU; sharded tensors are stored
// as pieces of their global tensor. Returns the statistics of the write.
// A symbolic link at `path` is replaced by the new file, not written
// through: the checkpoint it named (say latest -> step_1000) is kept.
Result<WriteStats> Save(const std::string& path, const Value& state_dict,
                        const SaveOptions& options = {});

}  // namespace ckfmt
