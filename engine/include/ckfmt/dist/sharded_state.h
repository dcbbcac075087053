// Describing a rank's local state for the distributed save and load.
//
// A rank describes what it holds with an ordinary state dict (a Value dict):
//
//  - A sharded entry is a host Tensor marked with
//    Tensor::SetShard(ShardSpec{global_shape, region}). The region is a box
//    (DTensor / FSDP2 / tensor-parallel shards) or a flat range of the
//    row-major flattened tensor (FSDP1 flat-parameter slices); the tensor's
//    bytes are the region's row-major stream (region.h).
//  - Everything else is replicated: tensors without a ShardSpec, bytes,
//    scalars and containers. A replicated entry is written once, from the
//    lowest rank that has it; the ranks that have it must agree on its kind,
//    dtype and shape (and, with ReplicaCheck::kChecksum, on its contents).
//
// An entry is sharded as soon as one rank's tensor at its path carries a
// ShardSpec; a rank whose tensor at that path has none holds the whole
// tensor. Ranks need not have the same keys: a rank holding no part of a
// tensor may omit the key or hold an empty shard. Identical regions on
// several ranks (replicated shards, e.g. HSDP) are written once, from the
// lowest of those ranks; otherwise the ranks' regions must be disjoint and
// cover the global tensor exactly once, or the save fails naming the key
// and the ranks.
#pragma once

#include <functional>
#include <optional>

#include "ckfmt/region.h"
#include "ckfmt/state_dict.h"
#include "ckfmt/tensor.h"

namespace ckfmt::dist {

// Where a rank's part of the tensor at `path` (of `global_shape`) sits, or
// nullopt for "this rank holds the whole tensor, unsharded"; an error
// stops what asked (a layout a caller computes may fail).
using LayoutFn =
    std::function<Result<std::optional<Region>>(const KeyPath& path, const Shape& global_shape)>;

// The local shape of a shard holding `region`: a box's lengths, or
// {length} for a flat range.
Shape LocalShape(const Region& region);

// Copies `region` of the unsharded host tensor `whole` into a new host
// tensor of LocalShape(region), marked with ShardSpec{whole.shape(), region}.
// REQUIRES: `whole` is unsharded; `region` lies within its shape.
Result<Tensor> ExtractRegion(const Tensor& whole, const Region& region);

// A rank's sharded view of an unsharded state dict: every tensor for which
// `layout` returns a region becomes ExtractRegion(tensor, region); the rest
// is shared with `full` (tensor memory is not copied).
Result<Value> ShardStateDict(const Value& full, const LayoutFn& layout);

}  // namespace ckfmt::dist
