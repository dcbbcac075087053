// Resharding load: every rank reads its own target layout from a file
// saved in any mode, by any world size, with any layout.
//
// A rank's state dict says what it wants: a tensor with a ShardSpec is
// filled with exactly its region (CheckpointReader::Load reads only the
// chunks that overlap it), an unsharded tensor with the whole tensor.
// Entries the file has and the dict lacks are reconstructed under the load
// policies (LoadOptions::unexpected); with a `layout`, a reconstructed
// tensor becomes this rank's shard (a tensor of LocalShape(region) marked
// with ShardSpec) instead of the whole tensor - so optimizer state created
// lazily by the trainer comes back already sharded, on the GPU where
// LoadOptions::reconstruct_device says so (allocated as Load allocates).
#pragma once

#include <string>

#include "ckfmt/dist/communicator.h"
#include "ckfmt/dist/sharded_state.h"
#include "ckfmt/reader.h"

namespace ckfmt::dist {

struct ShardedLoadOptions {
  LoadOptions load;
  // For entries the state dict lacks: this rank's region of each tensor
  // (nullopt: the whole tensor). Empty: every reconstructed tensor whole.
  LayoutFn layout;
};

// Loads into `state_dict` (see above). On failure the dict is unchanged.
// Reconstructed shards are reported in LoadReport::reconstructed.
Result<LoadReport> LoadSharded(CheckpointReader& reader, Value* state_dict,
                               const ShardedLoadOptions& options = {});

// The inverse of a flattened save: this rank's sharded state for every
// entry of the file (optimizer state included), laid out by `layout`.
Result<Value> LoadRankState(CheckpointReader& reader, const LayoutFn& layout,
                            const ShardedLoadOptions& options = {});

// Collective form: every rank opens `path` and runs LoadSharded, then the
// ranks agree, so that all of them fail (naming the failing ranks) if one
// does; a rank whose own load succeeded keeps what it loaded even then.
// REQUIRES: a host communicator.
Result<LoadReport> DistLoad(Communicator& comm, const std::string& path, Value* state_dict,
                            const ShardedLoadOptions& options = {},
                            const ReadOptions& read_options = {});

}  // namespace ckfmt::dist
