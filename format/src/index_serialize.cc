// IndexRecord -> FlatBuffers bytes.
#include <flatbuffers/flatbuffers.h>

#include "ckfmt/index.h"
#include "ckfmt_index_generated.h"

namespace ckfmt {
namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

std::pair<fb::Region, Offset<void>> BuildRegion(FlatBufferBuilder& b, const Region& r) {
  if (r.kind == Region::Kind::kFlat) {
    return {fb::Region::FlatRange, fb::CreateFlatRange(b, r.start, r.length).Union()};
  }
  auto offs = b.CreateVector(r.offsets);
  auto lens = b.CreateVector(r.lengths);
  return {fb::Region::Box, fb::CreateBox(b, offs, lens).Union()};
}

Offset<fb::Entry> BuildEntry(FlatBufferBuilder& b, const EntryRecord& e) {
  std::vector<Offset<fb::PathElem>> path;
  for (const auto& c : e.path) {
    if (const auto* key = std::get_if<std::string>(&c)) {
      path.push_back(fb::CreatePathElem(b, fb::PathKind::Key, b.CreateString(*key)));
    } else {
      path.push_back(fb::CreatePathElem(b, fb::PathKind::Index, 0, std::get<uint64_t>(c)));
    }
  }
  auto path_vec = b.CreateVector(path);
  Offset<flatbuffers::String> string_value, content_type;
  if (e.kind == EntryKind::kString) string_value = b.CreateString(e.string_value);
  if (e.kind == EntryKind::kBytes) content_type = b.CreateString(e.content_type);

  Offset<flatbuffers::Vector<uint64_t>> shape;
  Offset<flatbuffers::Vector<Offset<fb::Piece>>> pieces;
  Offset<flatbuffers::Vector<Offset<fb::Shard>>> layout;
  if (e.HasData()) {
    shape = b.CreateVector(e.shape);
    std::vector<Offset<fb::Piece>> ps;
    for (const auto& p : e.pieces) {
      auto [rtype, region] = BuildRegion(b, p.region);
      std::vector<fb::Chunk> chunks;
      chunks.reserve(p.chunks.size());
      for (const auto& c : p.chunks) {
        chunks.emplace_back(c.offset, c.stored_size, c.raw_size, c.checksum,
                            static_cast<fb::Codec>(c.codec));
      }
      auto chunk_vec = b.CreateVectorOfStructs(chunks);
      ps.push_back(fb::CreatePiece(b, p.rank, rtype, region, chunk_vec));
    }
    pieces = b.CreateVector(ps);
    if (!e.saved_layout.empty()) {
      std::vector<Offset<fb::Shard>> ss;
      for (const auto& s : e.saved_layout) {
        auto [rtype, region] = BuildRegion(b, s.region);
        ss.push_back(fb::CreateShard(b, s.rank, rtype, region));
      }
      layout = b.CreateVector(ss);
    }
  }
  fb::EntryBuilder eb(b);
  eb.add_path(path_vec);
  eb.add_kind(static_cast<fb::EntryKind>(e.kind));
  if (e.kind == EntryKind::kInt) eb.add_int_value(e.int_value);
  if (e.kind == EntryKind::kFloat) {
    // FlatBuffers omits a value equal to the default, and -0.0 == 0.0:
    // force it so the sign survives.
    b.ForceDefaults(true);
    eb.add_float_value(e.float_value);
    b.ForceDefaults(false);
  }
  if (e.kind == EntryKind::kBool) eb.add_bool_value(e.bool_value);
  if (e.kind == EntryKind::kString) eb.add_string_value(string_value);
  if (e.kind == EntryKind::kBytes) eb.add_content_type(content_type);
  if (e.HasData()) {
    eb.add_dtype(static_cast<fb::DType>(e.dtype));
    eb.add_shape(shape);
    eb.add_pieces(pieces);
    if (e.partial) eb.add_partial(true);
    if (!e.saved_layout.empty()) eb.add_saved_layout(layout);
  }
  return eb.Finish();
}

}  // namespace

std::string SerializeIndex(const IndexRecord& index) {
  FlatBufferBuilder b(1 << 16);
  std::vector<Offset<fb::Entry>> entries;
  entries.reserve(index.entries.size());
  for (const auto& e : index.entries) entries.push_back(BuildEntry(b, e));
  // Each object is built in a statement of its own: arguments of one call
  // are evaluated in an order C++ leaves open (GCC and Clang differ), and
  // the order objects are built in decides the bytes. This is the order
  // the golden vectors were written in.
  std::vector<Offset<fb::KeyValue>> meta;
  for (const auto& [k, v] : index.metadata) {
    auto value = b.CreateString(v);
    auto key = b.CreateString(k);
    meta.push_back(fb::CreateKeyValue(b, key, value));
  }
  auto entry_vec = b.CreateVector(entries);
  auto meta_vec = b.CreateVector(meta);
  auto save_mode = b.CreateString(index.save_mode);
  auto writer_version = b.CreateString(index.writer_version);
  auto writer_name = b.CreateString(index.writer_name);
  auto root = fb::CreateIndex(b, writer_name, writer_version, index.world_size, save_mode,
                              meta_vec, entry_vec);
  b.Finish(root, fb::IndexIdentifier());
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
}

}  // namespace ckfmt
