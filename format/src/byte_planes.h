// The transpose between elements and byte planes that codec 2 is built on
// (spec/FORMAT.md §5.3): plane p of n elements of e bytes holds byte p of
// every element, in order. Neither direction knows about compression.
//
// 2- and 4-byte elements (bf16, fp16, fp32: nearly every byte of a
// training state) have vector paths; other sizes go a byte at a time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckfmt {

// The instructions SplitPlanes uses for 2- and 4-byte elements. kBest is
// the widest this CPU has; tests name the others to check each against
// kScalar on any machine that has them.
enum class SplitPath { kScalar, kSse2, kAvx2, kAvx512Vbmi, kBest };

// Whether this build and this CPU can run `path`. kScalar and kBest always
// can.
bool SplitPathAvailable(SplitPath path);

// Byte p of element i goes to dst[p][i], for i < n and p < e. The planes
// need not be contiguous (a codec writes raw planes straight to its
// output).
// REQUIRES: in[0, n * e) and the e planes of n bytes do not overlap;
// SplitPathAvailable(path).
void SplitPlanes(const uint8_t* in, size_t e, size_t n, uint8_t* const* dst,
                 SplitPath path = SplitPath::kBest);

// The inverse: out[i * e + p] = src[p][i]. A large output of 2- or 4-byte
// elements (a chunk decoded into a caller's tensor, not read again soon)
// is stored around the cache.
// REQUIRES: out[0, n * e) overlaps none of the planes.
void JoinPlanes(const uint8_t* const* src, size_t e, size_t n, uint8_t* out);

}  // namespace ckfmt
