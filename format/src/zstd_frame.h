// Decoding the zstd frames that codecs 1 and 2 store (FORMAT.md §5.3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ckfmt {

// Decodes `in[0, len)` into exactly `n` bytes at `out`. `in` must be
// exactly one regular zstd frame: not a skippable one, nothing after it.
// libzstd's one-shot decoder alone would also take several frames, which
// the format refuses as ambiguous. Returns "" on success, else what is
// wrong, worded to follow the thing's name ("is not a zstd frame").
std::string DecodeOneZstdFrame(const uint8_t* in, size_t len, uint8_t* out, size_t n);

}  // namespace ckfmt
