// Exit codes shared by every ckfmt command.
#pragma once

namespace ckfmt::tools {

inline constexpr int kExitOk = 0;       // success; every file valid
inline constexpr int kExitInvalid = 1;  // a file is invalid or corrupt
inline constexpr int kExitError = 2;    // usage error, or a file could not be opened/read
// convert: the input is valid, but the converter or the output format
// cannot hold something in it (kUnsupported: a partial tensor for
// torch.save, an unknown pickle global, nesting beyond the converter's limit).
inline constexpr int kExitUnsupported = 3;

}  // namespace ckfmt::tools
