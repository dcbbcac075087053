#include "raw_index.h"

#include <flatbuffers/flatbuffers.h>

#include <cmath>

namespace ckfmt::tools {

uint8_t RawRegionType(const Region& r) { return r.kind == Region::Kind::kFlat ? 2 : 1; }

namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;
using flatbuffers::uoffset_t;

// The vtable slot of field `id` (FlatBuffers: 4 bytes of header, then one
// u16 per field).
constexpr flatbuffers::voffset_t Slot(int id) {
  return static_cast<flatbuffers::voffset_t>(4 + 2 * id);
}

// FORMAT.md §6.3's Chunk struct: four u64 and the codec byte, 8-aligned.
struct alignas(8) ChunkStruct {
  uint64_t offset, stored_size, raw_size, checksum;
  uint8_t codec;
  uint8_t padding[7];
};
static_assert(sizeof(ChunkStruct) == 40);

Offset<void> Table(FlatBufferBuilder& b, uoffset_t start) {
  return Offset<void>(b.EndTable(start));
}

Offset<void> BuildRegion(FlatBufferBuilder& b, const RawRegion& r) {
  if (r.region.kind == Region::Kind::kFlat) {
    const uoffset_t start = b.StartTable();
    b.AddElement<uint64_t>(Slot(0), r.region.start, 0);
    b.AddElement<uint64_t>(Slot(1), r.region.length, 0);
    return Table(b, start);
  }
  Offset<flatbuffers::Vector<uint64_t>> offsets;
  if (!r.omit_box_offsets) offsets = b.CreateVector(r.region.offsets);
  const auto lengths = b.CreateVector(r.region.lengths);
  const uoffset_t start = b.StartTable();
  if (!r.omit_box_offsets) b.AddOffset(Slot(0), offsets);
  b.AddOffset(Slot(1), lengths);
  return Table(b, start);
}

// Piece and Shard share their first three fields: rank, region_type, region.
uoffset_t StartRegionTable(FlatBufferBuilder& b, uint32_t rank, const RawRegion& r,
                           Offset<void> region) {
  const uoffset_t start = b.StartTable();
  b.AddElement<uint32_t>(Slot(0), rank, 0);
  b.AddElement<uint8_t>(Slot(1), r.type, 0);
  b.AddOffset(Slot(2), region);
  return start;
}

Offset<void> BuildPiece(FlatBufferBuilder& b, const RawPiece& p) {
  const Offset<void> region = BuildRegion(b, p.region);
  Offset<flatbuffers::Vector<const ChunkStruct*>> chunks;
  if (p.chunks) {
    std::vector<ChunkStruct> structs;
    for (const ChunkRecord& c : *p.chunks) {
      structs.push_back({c.offset, c.stored_size, c.raw_size, c.checksum, c.codec, {}});
    }
    chunks = b.CreateVectorOfStructs(structs);
  }
  const uoffset_t start = StartRegionTable(b, p.rank, p.region, region);
  if (p.chunks) b.AddOffset(Slot(3), chunks);
  return Table(b, start);
}

Offset<void> BuildShard(FlatBufferBuilder& b, const RawShard& s) {
  const Offset<void> region = BuildRegion(b, s.region);
  return Table(b, StartRegionTable(b, s.rank, s.region, region));
}

template <typename T, typename Build>
std::optional<Offset<flatbuffers::Vector<Offset<void>>>> BuildTables(
    FlatBufferBuilder& b, const std::optional<std::vector<T>>& items, Build build) {
  if (!items) return std::nullopt;
  std::vector<Offset<void>> offsets;
  for (const T& item : *items) offsets.push_back(build(b, item));
  return b.CreateVector(offsets);
}

std::optional<Offset<flatbuffers::String>> MaybeString(FlatBufferBuilder& b,
                                                       const std::optional<std::string>& s) {
  if (!s) return std::nullopt;
  return b.CreateString(*s);
}

Offset<void> BuildPathElem(FlatBufferBuilder& b, const RawPathElem& c) {
  const auto key = MaybeString(b, c.key);
  const uoffset_t start = b.StartTable();
  b.AddElement<uint8_t>(Slot(0), c.kind, 0);
  if (key) b.AddOffset(Slot(1), *key);
  b.AddElement<uint64_t>(Slot(2), c.index, 0);
  return Table(b, start);
}

Offset<void> BuildEntry(FlatBufferBuilder& b, const RawEntry& e) {
  std::vector<Offset<void>> path;
  for (const RawPathElem& c : e.path) path.push_back(BuildPathElem(b, c));
  const auto path_vec = b.CreateVector(path);
  const auto string_value = MaybeString(b, e.string_value);
  const auto content_type = MaybeString(b, e.content_type);
  std::optional<Offset<flatbuffers::Vector<uint64_t>>> shape;
  if (e.shape) shape = b.CreateVector(*e.shape);
  const auto pieces = BuildTables(b, e.pieces, BuildPiece);
  const auto layout = BuildTables(b, e.saved_layout, BuildShard);

  const uoffset_t start = b.StartTable();
  b.AddOffset(Slot(0), path_vec);
  b.AddElement<uint8_t>(Slot(1), e.kind, 0);
  b.AddElement<int64_t>(Slot(2), e.int_value, 0);
  if (e.float_value != 0 || std::signbit(e.float_value)) {
    b.ForceDefaults(true);  // -0.0 equals the default and would be left out
    b.AddElement<double>(Slot(3), e.float_value, 0);
    b.ForceDefaults(false);
  }
  b.AddElement<uint8_t>(Slot(4), e.bool_value, 0);
  if (string_value) b.AddOffset(Slot(5), *string_value);
  if (content_type) b.AddOffset(Slot(6), *content_type);
  b.AddElement<uint8_t>(Slot(7), e.dtype, 0);
  if (shape) b.AddOffset(Slot(8), *shape);
  if (pieces) b.AddOffset(Slot(9), *pieces);
  b.AddElement<uint8_t>(Slot(10), e.partial, 0);
  if (layout) b.AddOffset(Slot(11), *layout);
  return Table(b, start);
}

std::optional<std::vector<RawShard>> RawLayout(const EntryRecord& e) {
  if (e.saved_layout.empty()) return std::nullopt;
  std::vector<RawShard> out;
  for (const ShardRecord& s : e.saved_layout)
    out.push_back({s.rank, {RawRegionType(s.region), s.region}});
  return out;
}

}  // namespace

RawIndex ToRaw(const IndexRecord& index) {
  RawIndex raw;
  raw.writer_name = index.writer_name;
  raw.writer_version = index.writer_version;
  raw.world_size = index.world_size;
  raw.save_mode = index.save_mode;
  raw.metadata = index.metadata;
  for (const EntryRecord& e : index.entries) {
    RawEntry r;
    for (const PathComponent& c : e.path) {
      if (const auto* key = std::get_if<std::string>(&c)) {
        r.path.push_back({0, *key, 0});
      } else {
        r.path.push_back({1, std::nullopt, std::get<uint64_t>(c)});
      }
    }
    r.kind = static_cast<uint8_t>(e.kind);
    if (e.kind == EntryKind::kInt) r.int_value = e.int_value;
    if (e.kind == EntryKind::kFloat) r.float_value = e.float_value;
    if (e.kind == EntryKind::kBool) r.bool_value = e.bool_value;
    if (e.kind == EntryKind::kString) r.string_value = e.string_value;
    if (e.kind == EntryKind::kBytes) r.content_type = e.content_type;
    if (e.HasData()) {
      r.dtype = static_cast<uint8_t>(e.dtype);
      r.shape = e.shape;
      r.pieces.emplace();
      for (const PieceRecord& p : e.pieces) {
        r.pieces->push_back({p.rank, {RawRegionType(p.region), p.region}, p.chunks});
      }
      r.partial = e.partial;
      r.saved_layout = RawLayout(e);
    }
    raw.entries.push_back(std::move(r));
  }
  return raw;
}

std::string SerializeRawIndex(const RawIndex& index) {
  FlatBufferBuilder b(1 << 14);
  std::vector<Offset<void>> entries;
  for (const RawEntry& e : index.entries) entries.push_back(BuildEntry(b, e));
  std::vector<Offset<void>> metadata;
  for (const auto& [k, v] : index.metadata) {
    const auto key = b.CreateString(k);
    const auto value = b.CreateString(v);
    const uoffset_t start = b.StartTable();
    b.AddOffset(Slot(0), key);
    b.AddOffset(Slot(1), value);
    metadata.push_back(Table(b, start));
  }
  const auto entry_vec = b.CreateVector(entries);
  const auto meta_vec = b.CreateVector(metadata);
  const auto save_mode = MaybeString(b, index.save_mode);
  const auto writer_version = MaybeString(b, index.writer_version);
  const auto writer_name = MaybeString(b, index.writer_name);

  const uoffset_t start = b.StartTable();
  if (writer_name) b.AddOffset(Slot(0), *writer_name);
  if (writer_version) b.AddOffset(Slot(1), *writer_version);
  if (index.world_size) {
    b.ForceDefaults(true);  // an explicit 0 is still written
    b.AddElement<uint32_t>(Slot(2), *index.world_size, 0);
    b.ForceDefaults(false);
  }
  if (save_mode) b.AddOffset(Slot(3), *save_mode);
  b.AddOffset(Slot(4), meta_vec);
  b.AddOffset(Slot(5), entry_vec);
  b.Finish(Table(b, start), "CKIX");
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
}

}  // namespace ckfmt::tools
