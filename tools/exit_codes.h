// Exit codes shared by every ckfmt command.
#pragma once

namespace ckfmt::tools {

inline constexpr int kExitOk = 0;       // success; every file valid
inline constexpr int kExitInvalid = 1;  // a file is invalid or corrupt
inline constexpr int kExitError = 2;    // usage error, or a file could not be opened/read

}  // namespace ckfmt::tools
