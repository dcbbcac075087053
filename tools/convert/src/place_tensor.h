// Writes a tensor's pieces at their row-major positions in an output file
// (for the formats whose tensors are contiguous byte ranges).
#pragma once

#include <cstdint>
#include <functional>

#include "ckfmt/status.h"
#include "file_io.h"
#include "tree.h"

namespace ckfmt::convert {

// Streams `t` into `out` at byte offset `base`, through `memory`. If `crc` is set, it
// receives the CRC-32 of the tensor's bytes (computed on the fly when the
// pieces arrive in order, else by reading the bytes back).
// `on_piece(bytes)` is called after each piece.
Status PlaceTensor(OutputFile* out, uint64_t base, TensorSource& t, PieceMemory& memory,
                   uint32_t* crc, const std::function<void(uint64_t)>& on_piece);

}  // namespace ckfmt::convert
