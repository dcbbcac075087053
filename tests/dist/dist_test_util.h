// Helpers for the distributed tests: a deterministic transformer-shaped
// training state with awkward shapes (uneven and empty shards), the
// FSDP1/FSDP2/2-D layouts of it, and bitwise comparison of a (possibly
// sharded) state dict against the unsharded original.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ckfmt/dist/layout.h"
#include "ckfmt/state_dict.h"

namespace ckfmt_dist_test {

// model/..., optim/state/<dotted param>/{exp_avg, exp_avg_sq, step},
// optim/param_groups, step, loader (bytes). Same seed, same bytes.
ckfmt::Value MakeFullState(uint64_t seed);
// The model's parameters (every tensor under "model"), in order.
std::vector<ckfmt::dist::ParamInfo> ModelParams(const ckfmt::Value& full);
// Only the "model" subtree (a trainer before its optimizer's first step).
ckfmt::Value ModelOnly(const ckfmt::Value& full);

enum class LayoutKind { kFsdp1, kFsdp2, kGrid2D };
const char* LayoutName(LayoutKind k);
// The layout of `rank` of `world` ranks: FSDP1 flat slices (optimizer state
// follows its parameter), FSDP2 dim-0 chunks, or a 2-D grid of boxes over
// the first two dims (rows split over ceil(world/2) ranks, columns over 2,
// clamped so every region is valid, possibly empty).
ckfmt::dist::LayoutFn MakeLayout(LayoutKind kind, const ckfmt::Value& full, int world, int rank);

// Bitwise comparison: every entry of `got` exists in `full` with the same
// kind and value; a sharded tensor equals its region of the full tensor.
// With `complete`, every entry of `full` must be in `got` too.
::testing::AssertionResult MatchesFull(const ckfmt::Value& got, const ckfmt::Value& full,
                                       bool complete);

// `path` passes full verification and loads (into an empty dict) as
// MatchesFull(loaded, full, complete = true).
::testing::AssertionResult FileHoldsFull(const std::string& path, const ckfmt::Value& full);

// Names in `dir` (not recursive), sorted.
std::vector<std::string> ListDir(const std::string& dir);

}  // namespace ckfmt_dist_test
