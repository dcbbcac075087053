// Saving a state dict that is spread over the ranks of a communicator into
// one ckfmt file.
//
// Every rank calls DistSave with its local state (sharded_state.h
// describes what a rank passes). Modes:
//
//  - kFlattened (default): rank 0 writes the file. Tensors are gathered
//    from their owners bucket by bucket and written as whole, unsharded
//    tensors keyed by parameter path, with each rank's original region in
//    the entry's saved_layout. Rank 0 holds at most memory_budget bytes of
//    gathered data (two buckets: one being gathered while the previous one
//    is written by a writer thread); a tensor larger than a bucket is
//    gathered in slices (row blocks, or flat ranges when one row is too
//    large) and written as consecutive pieces of the same entry. The
//    writer's memory is budget + staging (SaveOptions::io.staging_bytes) +
//    plan and index; the other ranks send straight from their tensors
//    (GPU tensors without a device communicator: from one bucket of
//    pinned host memory, see device_comm).
//  - kParallel: every rank writes its own pieces into the same file at
//    offsets agreed collectively (all-gather of piece sizes, prefix sums;
//    each chunk 4096-aligned); rank 0 writes the header and, once every
//    rank's data is durable (fsync + agreement), the index of all ranks'
//    pieces and the footer, then commits. REQUIRES: the directory is on a
//    file system all ranks share. With a codec, a rank encodes its chunks
//    in memory before the offsets are agreed (extra memory: its encoded
//    shards). GPU tensors need no device communicator here: each rank
//    copies its own device -> staging slot (pinned) -> disk, and with a
//    codec encodes from pinned bounce buffers (one chunk per worker); a
//    chunk that does not shrink is copied from the device again when
//    written, so the host holds only the encoded ones. A tensor's shards
//    may be on GPUs on some ranks and on the host on others.
//
// Failure: every step ends with an agreement (Communicator::AgreeOnStatus),
// every wait is bounded by the communicator's timeout (a rank waiting for
// rank 0's verdict waits up to twice that). If any rank fails, stops or
// dies before rank 0 commits, nothing appears at `path` (an older file
// there stays intact): rank 0 removes the temporary file
// "<path>.tmp.<random>", or, when rank 0 itself dies, it is left under that
// temporary name. Every surviving rank returns an error: while rank 0
// lives, all that reached the agreement return its verdict naming the
// failing rank(s); without rank 0, each reports that rank 0 did not answer.
// (A rank that fails after rank 0's rename leaves the new, complete file in
// place, and the survivors still report the failure.) Temporary names are
// random and chosen by rank 0, so stale temporary files of an interrupted
// save never disturb a later one.
//
// Rank 0 also holds the plan: every rank's entry list and regions,
// O(entries x ranks), like the saved_layout it records in the index.
#pragma once

#include <functional>
#include <string>

#include "ckfmt/dist/communicator.h"
#include "ckfmt/state_dict.h"
#include "ckfmt/writer.h"

namespace ckfmt::dist {

enum class SaveMode : uint8_t { kFlattened, kParallel };
std::string_view SaveModeName(SaveMode m);  // "flattened", "parallel"

enum class ReplicaCheck : uint8_t {
  kMetadata,  // replicated entries agree on kind, dtype, shape (and content type)
  kChecksum,  // and on their contents (XXH3 of the data; scalar values)
};

struct DistSaveOptions {
  // Codec, chunk size, I/O, fsync and user metadata of the file.
  // world_size and save_mode are set by DistSave.
  SaveOptions save;
  SaveMode mode = SaveMode::kFlattened;
  // kFlattened: bytes of gathered tensor data rank 0 holds at once (two
  // buckets of half this size). Byte blobs are never sliced: a blob larger
  // than a bucket is gathered whole.
  uint64_t memory_budget = 512ull << 20;
  ReplicaCheck replica_check = ReplicaCheck::kMetadata;
  // GPU tensors in `local_state`, kFlattened: a device communicator
  // (MakeNcclCommunicator) over the same ranks in the same order as the
  // host `comm`, on the CUDA device that holds this rank's GPU tensors.
  // Their data is gathered over it to rank 0 into device buffers (two
  // buckets; the communicator adds scratch of one bucket on every rank) and
  // goes from there device -> pinned staging slot -> disk. Agreement,
  // plans, host tensors and byte blobs stay on `comm`. Either every rank
  // passes one or none does. nullptr: GPU tensors on any device are
  // gathered over `comm` like host ones, each rank copying what it sends
  // of a bucket into pinned host memory first (at most memory_budget / 2
  // bytes per rank). kParallel does not use it (it is still checked when
  // given).
  Communicator* device_comm = nullptr;
  // Testing only: called on every rank at named points ("plan", "bucket"
  // with the bucket number, "data", "commit"); a non-OK result is that
  // rank's failure at that point. A hook may also kill or stall the process.
  std::function<Status(const std::string& point, uint64_t index)> fault_hook;
};

struct DistSaveStats {
  SaveMode mode = SaveMode::kFlattened;
  uint64_t entries = 0;            // entries of the file
  uint64_t file_bytes = 0;         // rank 0: size of the committed file
  uint64_t raw_bytes = 0;          // rank 0: logical tensor and blob bytes in the file
  uint64_t local_raw_bytes = 0;    // bytes this rank contributed (sent or wrote)
  uint64_t buckets = 0;            // kFlattened: number of buckets
  uint64_t bucket_bytes = 0;       // kFlattened: capacity of one bucket
  uint64_t peak_gather_bytes = 0;  // kFlattened, rank 0: host gather buffers held
  uint64_t device_gather_bytes = 0;  // kFlattened, rank 0: device gather buffers held
  // kFlattened without device_comm: pinned host memory this rank held to
  // send its GPU data from (at most one bucket).
  uint64_t gpu_send_staging_bytes = 0;
  double seconds = 0;              // wall time of the call on this rank
  std::string io_path;             // how this rank wrote (empty if it wrote nothing)
};

// Saves the union of every rank's `local_state` to `path`. Collective.
// REQUIRES: a host communicator; `local_state` a dict of host and GPU
// tensors (with options.device_comm in kFlattened, GPU tensors on its
// device only); all ranks pass the same path and options (rank 0's are
// used where they differ). Returns the same status on every rank that
// survives.
Result<DistSaveStats> DistSave(Communicator& comm, const std::string& path,
                               const Value& local_state, const DistSaveOptions& options = {});

}  // namespace ckfmt::dist
