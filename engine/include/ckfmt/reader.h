// Reading checkpoints.
//
// CheckpointReader::Open validates the footer, the index checksum, the
// FlatBuffers structure and every semantic rule before returning; nothing
// in a file is trusted before that. Reads verify chunk checksums unless
// told not to.
//
// Load() fills a caller's state dict:
//  - in place where the caller has a tensor of the file's dtype and shape
//    (for a sharded caller tensor: its region of the global tensor);
//  - entries the file has and the caller lacks ("unexpected": e.g. optimizer
//    state created lazily on the first step) are reconstructed by default,
//    allocated through the allocator and inserted at their path;
//  - entries the caller has and the file lacks ("missing") fail by default,
//    listing all of them.
//
// Threads: a CheckpointReader is used by one thread at a time (its calls
// share its staging and workers). Readers of the same file, each its own
// CheckpointReader, may run in different threads at once, beside writers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ckfmt/file_layout.h"
#include "ckfmt/index.h"
#include "ckfmt/io_options.h"
#include "ckfmt/state_dict.h"

namespace ckfmt {

// How reads from an O_DIRECT file fill host memory with uncompressed
// chunks of whole 4096-byte blocks.
enum class HostReads : uint8_t {
  kAuto,    // kDirect, but on a virtio disk (or a dm/md device on one) only into
            // tensors with Tensor::on_huge_pages(), others kStaged
  kDirect,  // straight into the destination where it meets the disk's alignment: no copy
  kStaged,  // into the huge-page staging buffers, then copied (and hashed) into place
};

struct ReadOptions {
  IoOptions io;
  bool verify_checksums = true;
  // A direct read gives the disk one segment per physically contiguous run
  // of the destination's 4 KiB pages, and a virtio disk's host may serve
  // each segment on its own: on the one measured (bench/HISTORY.md, "Host reads"),
  // direct loads into ordinary tensors ran at 0.9-2.0 GiB/s in a fresh
  // process and staged ones at 2.2-3.5, whatever the memory. Staging costs
  // a copy on the worker threads; on NVMe, which takes scattered pages at
  // full speed, direct reads save it. Huge pages reach a virtio disk whole:
  // into tensors a load made (Tensor::Empty), direct reloads ran at 0.80-0.85x
  // the raw read and staged ones at 0.75-0.79x (3 alternations, "Direct reads
  // into huge pages" in bench/HISTORY.md).
  HostReads host_reads = HostReads::kAuto;
};

enum class UnexpectedPolicy { kReconstruct, kWarn, kError, kIgnore };
enum class MissingPolicy { kError, kWarn, kIgnore };

struct LoadOptions {
  UnexpectedPolicy unexpected = UnexpectedPolicy::kReconstruct;
  MissingPolicy missing = MissingPolicy::kError;
  // Load only entries under these prefixes (all when empty). The rules
  // above apply inside the selection; the caller's entries outside it are
  // neither loaded nor reported missing.
  std::vector<KeyPath> prefixes;
  // Where reconstructed tensors belong: the hint given to the allocator.
  // With a CUDA device and no allocator, CudaAllocator() (ckfmt/cuda.h).
  Device reconstruct_device;
  Allocator allocator;  // for reconstructed tensors; HostAllocator() if empty
};

// The allocator a load uses for reconstructed tensors: options.allocator,
// else CudaAllocator() for a CUDA reconstruct_device, else HostAllocator().
Allocator ReconstructionAllocator(const LoadOptions& options);

struct LoadReport {
  std::vector<KeyPath> loaded_in_place;  // tensors filled, scalars assigned
  std::vector<KeyPath> reconstructed;    // created from the file
  std::vector<KeyPath> missing;          // caller has, file lacks
  std::vector<KeyPath> unexpected;       // file has, caller lacks, not reconstructed
  uint64_t bytes_read = 0;
  // Of bytes_read, those read from the disk straight into the destination
  // tensors (uncompressed chunks of whole 4096-byte blocks, into memory
  // aligned as the file's O_DIRECT asks); the rest went through staging.
  uint64_t bytes_read_direct = 0;
  // A readable multi-line summary listing every key by category.
  std::string ToString() const;
};

class CheckpointReader {
 public:
  static Result<std::unique_ptr<CheckpointReader>> Open(const std::string& path,
                                                        const ReadOptions& options = {});
  ~CheckpointReader();

  const std::string& path() const;
  const IndexRecord& index() const;
  uint64_t file_size() const;
  // The validated footer: index location and the file's format version.
  const FileFooter& footer() const;
  // The entry at `path`, or nullptr.
  const EntryRecord* Find(const KeyPath& path) const;

  // Reads `region` of the tensor or bytes entry at `path` into `dst`, which
  // receives the region's row-major stream. Reads only the chunks that
  // overlap the region. `dst` is memory of `device` (CUDA: see cuda.h).
  Status ReadRegion(const KeyPath& path, const Region& region, void* dst, Device device = {});
  // Reads the whole entry into a new tensor from `allocator`. Without one,
  // a host tensor; a size beyond this machine's memory and swap (a hostile
  // file's) is then refused with kIOError before it is allocated, as Load
  // does.
  Result<Tensor> ReadTensor(const KeyPath& path, const Allocator& allocator = {});

  // A refusal found before data is read (kinds, dtypes, shapes, policies)
  // leaves `state_dict` unchanged. So does one for memory: the host memory
  // for what the load creates (reconstructed entries, bytes entries resized
  // to the file's size) is summed first, and more than this machine's
  // memory (or its cgroup's limit) plus swap is refused with kIOError, as a
  // small file whose compressed chunks declare terabytes would need.
  // A failure while reading data (I/O, corruption) leaves reconstructed
  // entries inserted and the tensors being filled in place holding any mix
  // of old and new bytes.
  Result<LoadReport> Load(Value* state_dict, const LoadOptions& options = {});

  class Impl;

 private:
  explicit CheckpointReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Opens `path` and loads it into `state_dict`.
Result<LoadReport> Load(const std::string& path, Value* state_dict,
                        const LoadOptions& options = {}, const ReadOptions& read_options = {});

}  // namespace ckfmt
