// An index written field by field, rules unchecked: for making files that
// break spec/FORMAT.md on purpose (the invalid vectors). The format
// library's SerializeIndex writes only valid models and decides itself
// which fields are present; here the caller decides.
//
// Presence follows the model: an optional field is written exactly when it
// has a value; a scalar is written when it differs from the schema's
// default (absent and default read the same). Field ids are those of
// FORMAT.md §6.3, written with FlatBuffers' generic builder, so an enum
// byte may hold any value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckfmt/index.h"

namespace ckfmt::tools {

struct RawRegion {
  uint8_t type = 1;               // union tag: 1 Box, 2 FlatRange; any byte
  Region region;                  // the table written, whatever `type` says
  bool omit_box_offsets = false;  // drop the required Box.offsets
};

struct RawPathElem {
  uint8_t kind = 0;  // 0 Key, 1 Index
  std::optional<std::string> key;
  uint64_t index = 0;
};

struct RawPiece {
  uint32_t rank = 0;
  RawRegion region;
  std::optional<std::vector<ChunkRecord>> chunks;
};

struct RawShard {
  uint32_t rank = 0;
  RawRegion region;
};

struct RawEntry {
  std::vector<RawPathElem> path;
  uint8_t kind = 0;
  int64_t int_value = 0;
  double float_value = 0;
  uint8_t bool_value = 0;
  std::optional<std::string> string_value;
  std::optional<std::string> content_type;
  uint8_t dtype = 0;
  std::optional<Shape> shape;
  std::optional<std::vector<RawPiece>> pieces;
  uint8_t partial = 0;
  std::optional<std::vector<RawShard>> saved_layout;
};

struct RawIndex {
  std::optional<std::string> writer_name;
  std::optional<std::string> writer_version;
  std::optional<uint32_t> world_size;
  std::optional<std::string> save_mode;
  std::vector<std::pair<std::string, std::string>> metadata;
  std::vector<RawEntry> entries;
};

// The union tag of `r` (1 Box, 2 FlatRange).
uint8_t RawRegionType(const Region& r);

// The fields a valid writer stores for `index` (FORMAT.md §6).
RawIndex ToRaw(const IndexRecord& index);

// FlatBuffers bytes with file identifier "CKIX". Never fails.
std::string SerializeRawIndex(const RawIndex& index);

}  // namespace ckfmt::tools
