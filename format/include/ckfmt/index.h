// The index: a plain C++ model of what the FlatBuffers index holds, with
// serialization and a parser that trusts nothing.
//
// ParseIndex runs the FlatBuffers verifier and then every semantic check of
// spec/FORMAT.md §6: paths well formed, unique and parented; kinds and
// dtypes known; shapes and sizes free of overflow; regions inside their
// tensor; pieces covering each tensor exactly once (unless partial); chunks
// aligned, inside the data region, non-overlapping, and adding up to their
// piece's bytes. A model it returns is safe to act on.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ckfmt/codec.h"
#include "ckfmt/dtype.h"
#include "ckfmt/key_path.h"
#include "ckfmt/region.h"
#include "ckfmt/status.h"

namespace ckfmt {

enum class EntryKind : uint8_t {
  kTensor = 1, kBytes = 2, kInt = 3, kFloat = 4, kBool = 5,
  kString = 6, kNone = 7, kDict = 8, kList = 9,
};
std::string_view EntryKindName(EntryKind k);

struct ChunkRecord {
  uint64_t offset = 0;       // absolute, 4096-aligned
  uint64_t stored_size = 0;
  uint64_t raw_size = 0;
  uint64_t checksum = 0;     // XXH3-64 of the stored bytes
  uint8_t codec = 0;         // a Codec id; unknown ids are kept, refused on decode
};

struct PieceRecord {
  uint32_t rank = 0;
  Region region;
  std::vector<ChunkRecord> chunks;  // consecutive slices of the region's stream
};

struct ShardRecord {
  uint32_t rank = 0;
  Region region;
};

struct EntryRecord {
  KeyPath path;
  EntryKind kind = EntryKind::kNone;
  int64_t int_value = 0;
  double float_value = 0;
  bool bool_value = false;
  std::string string_value;
  std::string content_type;            // kBytes
  DType dtype = DType::kU8;            // kTensor, kBytes (always U8)
  Shape shape;                         // kTensor, kBytes ([size])
  std::vector<PieceRecord> pieces;     // kTensor, kBytes
  bool partial = false;
  std::vector<ShardRecord> saved_layout;

  bool HasData() const { return kind == EntryKind::kTensor || kind == EntryKind::kBytes; }
  bool IsContainer() const { return kind == EntryKind::kDict || kind == EntryKind::kList; }
  // Raw bytes of the whole tensor. REQUIRES: HasData() and a parsed model.
  uint64_t ByteSize() const;
  uint64_t StoredSize() const;  // sum of the chunks' stored sizes
};

struct IndexRecord {
  std::string writer_name;
  std::string writer_version;
  uint32_t world_size = 1;
  std::string save_mode = "single";
  std::vector<std::pair<std::string, std::string>> metadata;
  // Pre-order: every container precedes its children; list children appear
  // in index order 0, 1, 2, ...
  std::vector<EntryRecord> entries;
};

// Serializes `index` into FlatBuffers bytes (with file identifier "CKIX").
// REQUIRES: `index` would pass ParseIndex's semantic checks.
std::string SerializeIndex(const IndexRecord& index);

// Parses and checks an index. `data_begin`/`data_end` bound the file's data
// region (chunks must lie within); `file` names the file in messages.
Result<IndexRecord> ParseIndex(const uint8_t* data, size_t size, uint64_t data_begin,
                               uint64_t data_end, const std::string& file);

// The semantic checks alone, for models built in memory (e.g. by a writer
// before it commits). Same guarantees as ParseIndex.
Status ValidateIndex(const IndexRecord& index, uint64_t data_begin, uint64_t data_end,
                     const std::string& file);

// OK if `entry`'s pieces cover every element exactly once (at most once if
// partial). Pairwise region comparisons are charged to `*budget`; a file
// that needs more is refused (kUnsupported) rather than checked for hours.
// REQUIRES: regions validated against entry.shape.
inline constexpr uint64_t kCoverageBudget = 1ull << 26;
Status CheckCoverage(const EntryRecord& entry, uint64_t* budget = nullptr);

}  // namespace ckfmt
