// Decoding the zstd frames that codecs 1 and 2 store (FORMAT.md §5.3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ckfmt {

// The largest Window_Size a frame may declare (FORMAT.md §5.3): libzstd's
// streaming decoder refuses larger ones by default, so a reader that
// streams (ckfmt verify) and one that decodes whole chunks must agree.
inline constexpr uint64_t kMaxZstdWindow = uint64_t{1} << 27;

// Decodes `in[0, len)` into exactly `n` bytes at `out`. `in` must be
// exactly one regular zstd frame: not a skippable one, nothing after it,
// a window of at most kMaxZstdWindow. libzstd's one-shot decoder alone
// would also take several frames and any window, which the format refuses
// as ambiguous. Returns "" on success, else what is
// wrong, worded to follow the thing's name ("is not a zstd frame").
std::string DecodeOneZstdFrame(const uint8_t* in, size_t len, uint8_t* out, size_t n);

}  // namespace ckfmt
