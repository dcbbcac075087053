// What a checkpoint holds, as one JSON document: the one `ckfmt inspect
// --json` prints, documented field by field in spec/INSPECT_JSON.md.
#pragma once

#include <optional>
#include <string>

#include "ckfmt/key_path.h"
#include "ckfmt/status.h"

namespace ckfmt {

// Opens `path` (verifying its footer and index, as every reader does; no
// data is read) and describes it: format version, writer, world size and
// save mode, metadata, and every entry in the file's order with its kind,
// value or dtype and shape, partial flag, pieces (rank, region, chunks with
// codec, sizes and checksum), saved layout, and totals. "file" is `label`.
// With `prefix`, only the entries at or below it (and totals of those).
// Deterministic: the same file and arguments give the same bytes.
Result<std::string> DescribeFileJson(const std::string& path, const std::string& label,
                                     const std::optional<KeyPath>& prefix = std::nullopt);

}  // namespace ckfmt
