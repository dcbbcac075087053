// A deliberately naive reference for region arithmetic: every region is
// expanded to the list of global flat indices of its stream, element by
// element. Only for small shapes.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ckfmt/region.h"

namespace ckfmt_test {

uint64_t RefNumElements(const ckfmt::Shape& shape);

// Global row-major flat index of each element of `region`'s stream, in stream order.
std::vector<uint64_t> RefGlobalIndices(const ckfmt::Shape& shape, const ckfmt::Region& region);

// The maximal runs (contiguous in both streams) of elements shared by
// `src` and `dst`, in increasing source order.
std::vector<ckfmt::Run> RefRuns(const ckfmt::Shape& shape, const ckfmt::Region& src,
                                const ckfmt::Region& dst);

// Copies `region`'s stream out of a whole tensor's bytes (row-major).
std::string RefExtract(const ckfmt::Shape& shape, const ckfmt::Region& region,
                       const std::string& whole, size_t elem_size);

// Random shapes/regions for property tests. Dims may be 0.
ckfmt::Shape RandomShape(std::mt19937_64& rng, size_t max_rank, uint64_t max_dim);
ckfmt::Region RandomBox(std::mt19937_64& rng, const ckfmt::Shape& shape);
ckfmt::Region RandomFlat(std::mt19937_64& rng, const ckfmt::Shape& shape);

std::string RunsToString(const std::vector<ckfmt::Run>& runs);

}  // namespace ckfmt_test
