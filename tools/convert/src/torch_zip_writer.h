// torch.save archives, for the torch output and for DCP's items.
#pragma once

#include <cstdint>
#include <string>

#include "file_io.h"
#include "sink.h"
#include "tree.h"

namespace ckfmt::convert {

// Writes what torch.save(value) would, loadable by
// torch.load(weights_only=True), into `out` from byte `base` on, and
// returns the archive's length. `key` names `value` in messages and in the
// log. Adds the tensors written and their bytes to `stats`. Opaque pickle
// bytes inside dicts and lists are dropped (logged); partial tensors and
// bytes are refused (kUnsupported).
Result<uint64_t> WriteTorchArchive(const Node& value, const std::string& key, OutputFile* out,
                                   uint64_t base, PieceMemory& memory, const SinkOptions& options,
                                   ConvertLog* log, SinkStats* stats);

}  // namespace ckfmt::convert
