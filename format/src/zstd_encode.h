// Coding a run of bytes as one zstd frame, the way codecs 1 and 2 share
// (spec/FORMAT.md §5.3): a sample decides whether the run is worth coding
// and whether zstd's match search can find anything in it; at fast levels
// a run without repeats becomes a frame of Huffman-coded literals only,
// written by ckfmt's own writer (zstd_literals.h).
//
// Why: the bytes of trained floating-point values have no matches worth
// the name, and at levels 1 and 2 libzstd spends most of its time looking
// for them. Skipping the search gives the same or smaller frames, coded
// several times faster; either way the result is an ordinary frame.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace ckfmt {

// Elements of each plane a sample holds at most: GatherSample's `out` has
// room for kSampleMax bytes per plane.
constexpr size_t kSampleMax = 16384;

// The widest element, in bytes, whose planes are sampled and coded apart
// (codec 2's element size E, spec/FORMAT.md §5.3.1).
constexpr size_t kMaxElement = 16;

// Copies a sample of each of the `e` byte planes of `n` elements of `e`
// bytes at `raw` to out + p * kSampleMax (plane p): all of a small run,
// else runs of 256 elements spread evenly over it. Returns the sample's
// length per plane.
// REQUIRES: 1 <= e <= kMaxElement; `out` holds e * kSampleMax bytes.
size_t GatherSample(const uint8_t* raw, size_t e, size_t n, uint8_t* out);

// What a sample of a run of bytes says about coding that run.
struct FramePlan {
  std::array<uint32_t, 256> counts{};  // of each byte value in the sample
  bool worth_coding = false;           // false: near-random bytes, best stored raw
  bool literal_only = false;           // code without matches (fast levels, no repeats)
};

// Plans the coding of a run at zstd `level` from `sample[0, len)`.
FramePlan PlanFrame(int level, const uint8_t* sample, size_t len);

// Codes `in[0, n)` as one zstd frame into `out` (`cap` bytes) as `plan`
// says: literals only through ckfmt's writer where it takes them, else
// through libzstd. Returns the frame's size or a libzstd error code
// (ZSTD_isError).
size_t CompressFrame(int level, const FramePlan& plan, const uint8_t* in, size_t n, uint8_t* out,
                     size_t cap);

// Codec 1's stored bytes for `raw[0, n)`: one frame at `level`, planned
// from a sample of the run; at fast levels, a run of high-entropy bytes
// whose 4-byte values recur is coded with zstd's shortest matches (or as
// literals, if smaller).
// Returns the frame's size or a libzstd error code.
size_t CompressZstdChunk(int level, const uint8_t* raw, size_t n, uint8_t* out, size_t cap);

}  // namespace ckfmt
