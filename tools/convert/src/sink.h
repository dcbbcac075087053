// What every writer (ckfmt, safetensors, torch zip, DCP) takes and reports.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ckfmt/convert/convert.h"
#include "tree.h"

namespace ckfmt::convert {

struct SinkOptions {
  uint64_t budget = 256ull << 20;         // bytes per tensor piece
  uint64_t staging = 64ull << 20;         // ckfmt writer staging
  bool fsync = true;
  ProgressFn progress;
  uint64_t total_bytes = 0;               // for progress
  std::vector<std::pair<std::string, std::string>> metadata;
  uint32_t world_size = 1;
  std::string save_mode = "single";
};

struct SinkStats {
  uint64_t tensors = 0, scalars = 0, containers = 0, blobs = 0;
  uint64_t data_bytes = 0;    // tensor and blob bytes written
  uint64_t output_bytes = 0;  // file size
};

// Metadata keys the converter uses to carry Python typing through ckfmt:
// JSON arrays of FormatKeyPath strings.
inline constexpr const char* kIntKeyDictsMeta = "convert.torch.int_key_dicts";
inline constexpr const char* kTuplesMeta = "convert.torch.tuples";
inline constexpr const char* kOrderedDictsMeta = "convert.torch.ordered_dicts";
// [path, JSON object of the dict's attributes] pairs (a state dict's _metadata).
inline constexpr const char* kDictAttributesMeta = "convert.torch.dict_attributes";
inline constexpr const char* kSourceFormatMeta = "convert.source_format";

Result<SinkStats> WriteCkfmt(const Node& root, const std::string& path, const SinkOptions& options,
                             ConvertLog* log);
Result<SinkStats> WriteSafetensors(const Node& root, const std::string& path,
                                   const SinkOptions& options, ConvertLog* log);
Result<SinkStats> WriteTorchZip(const Node& root, const std::string& path,
                                const SinkOptions& options, ConvertLog* log);
// A DCP directory at `dir`, which must not exist, be empty, or hold only a
// DCP checkpoint's files (which it replaces); anything else is refused.
Result<SinkStats> WriteDcp(const Node& root, const std::string& dir, const SinkOptions& options,
                           ConvertLog* log);

// Reads a ckfmt file into a tree (tensors read lazily through the reader).
Result<Node> ReadCkfmt(const std::string& path, ConvertLog* log,
                       std::vector<std::pair<std::string, std::string>>* metadata,
                       uint32_t* world_size);

}  // namespace ckfmt::convert
