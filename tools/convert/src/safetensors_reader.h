// safetensors files and sharded safetensors repos. Headers are checked
// strictly: duplicate keys, unknown dtypes, shapes that disagree with the
// byte ranges, ranges out of bounds or overlapping are refused.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ckfmt/status.h"
#include "tree.h"

namespace ckfmt::convert {

class InputFile;

struct SafetensorsReadOptions {
  bool split_dotted = true;  // "a.b.c" -> nested dicts a/b/c
};

using Metadata = std::vector<std::pair<std::string, std::string>>;

// Appends the file's __metadata__ pairs to `metadata` (REQUIRES: not null),
// and notes tensors that DCP_SHARDING_INFO there calls chunks of larger ones.
Result<Node> ReadSafetensors(const std::string& path, const SafetensorsReadOptions& options,
                             ConvertLog* log, Metadata* metadata);

// `path` is model.safetensors.index.json or a directory holding it.
Result<Node> ReadSafetensorsSharded(const std::string& path,
                                    const SafetensorsReadOptions& options, ConvertLog* log,
                                    Metadata* metadata);

// A safetensors blob inside a larger file, from `offset` to the file's end:
// DCP's FileSystemWriter(serialization_format=SAFETENSORS) appends one to
// each data file, holding that file's tensor items by fqn. Its header is
// checked as a safetensors file's is.
class SafetensorsBlob {
 public:
  static Result<std::shared_ptr<const SafetensorsBlob>> Open(std::shared_ptr<InputFile> file,
                                                            uint64_t offset);
  ~SafetensorsBlob();
  // The tensor stored under `key`, or null if there is none.
  Result<std::shared_ptr<TensorSource>> Find(const std::string& key) const;
  const Metadata& metadata() const { return metadata_; }  // __metadata__, in file order

 private:
  struct Parsed;
  SafetensorsBlob(std::unique_ptr<Parsed> p, Metadata m);
  std::unique_ptr<Parsed> parsed_;
  Metadata metadata_;
};

// The value of DCP_SHARDING_INFO, which DCP's safetensors serialization
// (and its HuggingFace writer) puts in __metadata__: each fqn's chunk
// offsets, {"<fqn>": {"saved_offsets": [<int>, ...]}, ...}.
// Read from `metadata`: nullopt where it has no DCP_SHARDING_INFO.
using DcpShardingInfo = std::unordered_map<std::string, std::vector<uint64_t>>;
Result<std::optional<DcpShardingInfo>> DcpShardingInfoOf(const Metadata& metadata,
                                                         const std::string& where);

// The safetensors dtype name for a ckfmt dtype ("F32", "F8_E4M3", ...).
std::string SafetensorsDTypeName(DType t);

// True if the first bytes look like a safetensors file.
bool LooksLikeSafetensors(const uint8_t* p, size_t n, uint64_t file_size);

std::string ShardedIndexPath(const std::string& path);  // "" if none

}  // namespace ckfmt::convert
