// Layouts of common sharding schemes: which region of each parameter a
// rank holds, as ShardSpec regions and as LayoutFn callbacks for the
// resharding load.
//
// FSDP1 (flat parameters): the parameters are concatenated in order into
// one flat buffer of T elements, padded to a multiple of the world size N,
// and split evenly: rank r holds flat elements [r*S, (r+1)*S) with
// S = ceil(T / N). A rank's slice of one parameter is a flat range of that
// parameter (possibly empty); a slice may span several parameters.
//
// FSDP2 (per-parameter dim-0 shards, torch.chunk semantics): a tensor with
// d0 rows is cut into chunks of C = ceil(d0 / N) rows; rank r holds rows
// [min(r*C, d0), min((r+1)*C, d0)), so trailing ranks may hold fewer rows
// or none. 0-d tensors are not sharded.
#pragma once

#include <map>
#include <vector>

#include "ckfmt/dist/sharded_state.h"

namespace ckfmt::dist {

struct ParamInfo {
  KeyPath path;
  Shape shape;
};

// A rank's part of one parameter of an FSDP1 flat parameter.
struct FlatSlice {
  KeyPath path;
  Shape shape;            // the parameter's global shape
  Region region;          // a flat range of the parameter (length 0: none)
  uint64_t local_offset;  // where it starts in the rank's flat shard (elements)
};

// The slices of every parameter held by `rank`, in parameter order (empty
// slices included, so the result always has one entry per parameter).
// REQUIRES: world_size >= 1, 0 <= rank < world_size.
std::vector<FlatSlice> Fsdp1RankSlices(const std::vector<ParamInfo>& params, int world_size,
                                       int rank);

// Elements per rank of the padded flat parameter: ceil(total / world_size).
uint64_t Fsdp1ShardElements(const std::vector<ParamInfo>& params, int world_size);

// The dim-0 chunk of `shape` held by `rank` (an empty box when the rank
// holds no rows). REQUIRES: shape.size() >= 1.
Region Fsdp2ChunkRegion(const Shape& shape, int world_size, int rank);

// Maps a state-dict path to the parameter whose layout it follows (e.g.
// optimizer state "optim/state/layers.0.w/exp_avg" -> "model/layers.0.w"),
// or nullopt for entries that follow no parameter.
using ParamOf = std::function<std::optional<KeyPath>(const KeyPath& path)>;

// These layouts never fail.
//
// FSDP1: an entry following a parameter (per `param_of`; identity if
// empty) whose shape equals the parameter's gets the rank's flat slice of
// that parameter; every other entry is unsharded (nullopt).
LayoutFn Fsdp1Layout(const std::vector<ParamInfo>& params, int world_size, int rank,
                     ParamOf param_of = {});

// FSDP2: every tensor of rank >= 1 gets Fsdp2ChunkRegion; 0-d tensors are
// unsharded. With `filter`, only paths it accepts are sharded.
LayoutFn Fsdp2Layout(int world_size, int rank,
                     std::function<bool(const KeyPath&)> filter = {});

// A fixed table: path -> region; other paths unsharded.
LayoutFn TableLayout(std::map<KeyPath, Region> table);

}  // namespace ckfmt::dist
