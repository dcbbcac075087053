// Save plans: what each rank holds (LocalEntry), and the merged view all
// ranks act on (GlobalPlan): every entry of the file in pre-order, with the
// ranks that own each part of each tensor.
#pragma once

#include <string>
#include <vector>

#include "ckfmt/dist/dist_save.h"
#include "ckfmt/index.h"

namespace ckfmt::dist {

// One entry of a rank's local state dict.
struct LocalEntry {
  KeyPath path;
  EntryKind kind = EntryKind::kNone;
  bool sharded = false;       // a tensor with a ShardSpec
  DType dtype = DType::kU8;   // tensors; U8 for bytes
  Shape shape;                // global shape; {size} for bytes
  Region region;              // tensors and bytes: what this rank holds
  std::string content_type;   // bytes
  int64_t int_value = 0;
  double float_value = 0;
  bool bool_value = false;
  std::string string_value;
  bool has_checksum = false;  // XXH3 of the data (ReplicaCheck::kChecksum)
  uint64_t checksum = 0;
  bool on_device = false;      // a GPU tensor (data is a device pointer)
  const void* data = nullptr;  // local only, never sent
  Device device;               // local only: where `data` is
};

// Which GPU tensors a rank may pass (DescribeLocalState): any, or those on
// one CUDA device (the flattened mode's device communicator's).
struct GpuTensorPolicy {
  enum class Allow : uint8_t { kAny, kOneDevice } allow = Allow::kAny;
  int device = -1;  // kOneDevice
};

// Describes `state` (a dict) in pre-order, checking that every tensor is a
// usable host tensor or a GPU tensor that `gpu` allows. `rank` names this
// rank in messages.
Result<std::vector<LocalEntry>> DescribeLocalState(const Value& state, int rank, bool checksums,
                                                   GpuTensorPolicy gpu = {});

std::string EncodeLocalPlan(const std::vector<LocalEntry>& entries);
Result<std::vector<LocalEntry>> DecodeLocalPlan(const std::string& bytes, int rank);

struct Source {
  uint32_t rank = 0;
  Region region;
  bool on_device = false;  // that rank holds it on its GPU (merging only)
};

struct PlanEntry {
  KeyPath path;
  EntryKind kind = EntryKind::kNone;
  DType dtype = DType::kU8;
  Shape shape;
  std::string content_type;
  int64_t int_value = 0;
  double float_value = 0;
  bool bool_value = false;
  std::string string_value;
  bool sharded = false;
  std::vector<Source> layout;  // sharded: every holding rank's region, by rank
  std::vector<Source> owners;  // data entries: disjoint, covering the tensor once
  bool on_device = false;      // gathered into GPU memory (MergePlans' device_gathers)

  bool HasData() const { return kind == EntryKind::kTensor || kind == EntryKind::kBytes; }
  uint64_t ElementSize() const { return DTypeSize(dtype); }
  uint64_t ByteSize() const;
};

struct GlobalPlan {
  std::vector<PlanEntry> entries;
};

// Merges every rank's local plan (indexed by rank) into the global plan:
// union of the entries in order of first appearance (rank 0 first), kinds,
// dtypes and shapes checked across ranks, replicated entries owned by the
// lowest rank, shards deduplicated and checked to tile each tensor.
// `device_gathers`: the flattened mode with a device communicator, which
// gathers a tensor held on GPUs into GPU memory over it. Then a tensor's
// owners must all hold it on GPUs or all on the host, and on_device says
// which. Otherwise on_device stays false.
Result<GlobalPlan> MergePlans(const std::vector<std::vector<LocalEntry>>& per_rank,
                              ReplicaCheck check, const std::string& file, bool device_gathers);

std::string EncodeGlobalPlan(const GlobalPlan& plan);
Result<GlobalPlan> DecodeGlobalPlan(const std::string& bytes);


}  // namespace ckfmt::dist
