// IndexRecord -> JSON, as `ckfmt inspect --json` prints it and
// DescribeFileJson (ckfmt/describe.h) returns it (spec/INSPECT_JSON.md
// documents every field). Internal: the CLI builds its outputs from these.
//
// Output is deterministic: entries in file order, object keys in a fixed
// order, no absolute paths or times. Golden files compare byte for byte.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "ckfmt/file_layout.h"
#include "ckfmt/index.h"

namespace ckfmt {

using Json = nlohmann::ordered_json;

// What describes the file itself rather than its index.
struct FileInfo {
  std::string file;        // as given on the command line
  uint64_t file_size = 0;
  FileHeader version;      // the file's format version
};

// "0123456789abcdef": 16 lower-case hex digits.
std::string ChecksumHex(uint64_t checksum);
// "none", "zstd", or "unknown(N)" for an id this build does not know.
std::string CodecLabel(uint8_t codec);

// Strings for dict keys, integers for list indices.
Json PathToJson(const KeyPath& path);
// {"box": {"offsets", "lengths"}} or {"flat": {"start", "length"}}.
Json RegionToJson(const Region& region);
Json ChunkToJson(const ChunkRecord& chunk);
Json EntryToJson(const EntryRecord& entry);

// Sum of the raw sizes of an entry's chunks (the tensor's byte size unless
// the entry is partial).
uint64_t EntryRawBytes(const EntryRecord& entry);
uint64_t EntryChunks(const EntryRecord& entry);

class CheckpointReader;
// What DescribeIndex shows of the file `reader` has open, named `label`.
FileInfo DescribeFileInfo(const CheckpointReader& reader, const std::string& label);

// The whole document. With `prefix`, only entries at or below it (totals
// count those only) and a "prefix" field records the filter.
Json DescribeIndex(const IndexRecord& index, const FileInfo& info,
                   const std::optional<KeyPath>& prefix = std::nullopt);

// Serializes as the CLI prints: 2-space indent, UTF-8 (invalid sequences
// replaced by U+FFFD), trailing newline.
std::string DumpJson(const Json& json);

}  // namespace ckfmt
