// Helpers for the fuzz targets that need their input in a file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ckfmt_fuzz {

// Writes `size` bytes to `name` (may hold subdirectories) in this process's
// scratch directory ($TMPDIR or /tmp, one per process, removed at exit);
// returns its path.
// Aborts if it cannot: a fuzz run without its file would test nothing.
std::string WriteScratchFile(const std::string& name, const uint8_t* data, size_t size);

}  // namespace ckfmt_fuzz
