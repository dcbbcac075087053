// FlatBuffers bytes -> IndexRecord, through the verifier and ValidateIndex.
#include <flatbuffers/flatbuffers.h>

#include "ckfmt/file_layout.h"
#include "ckfmt/index.h"
#include "ckfmt_index_generated.h"

namespace ckfmt {
namespace {

struct Ctx {
  const std::string& file;
  const uint8_t* base;  // start of the index buffer
  size_t entry = 0;
  Status Err(const std::string& what, const char* rule) const {
    return Status::Corruption(file + ": index entry " + std::to_string(entry) + ": " + what +
                              SpecRule(rule));
  }
  // FlatBuffers 2.0.8's verifier checks only the 4-byte alignment of a
  // vector's length; 8-byte elements must be naturally aligned (rule X3)
  // before they are read.
  template <typename T>
  Status CheckAligned(const flatbuffers::Vector<T>* v, const char* what) const {
    // Empty vectors hold nothing to read (FlatBuffers does not align them).
    if (v && v->size() > 0 &&
        (reinterpret_cast<const uint8_t*>(v->Data()) - base) % alignof(T) != 0) {
      return Err(std::string(what) + " vector is not " + std::to_string(alignof(T)) +
                 "-byte aligned", "X3");
    }
    return Status::OK();
  }
};

Result<std::vector<uint64_t>> ToVec(const Ctx& ctx, const flatbuffers::Vector<uint64_t>* v,
                                    const char* what) {
  CKFMT_RETURN_IF_ERROR(ctx.CheckAligned(v, what));
  return v ? std::vector<uint64_t>(v->begin(), v->end()) : std::vector<uint64_t>{};
}

Result<Region> ParseRegion(const Ctx& ctx, fb::Region type, const void* value) {
  if (type == fb::Region::FlatRange) {
    const auto* f = static_cast<const fb::FlatRange*>(value);
    return Region::Flat(f->start(), f->length());
  }
  if (type == fb::Region::Box) {
    const auto* b = static_cast<const fb::Box*>(value);
    CKFMT_ASSIGN_OR_RETURN(auto offsets, ToVec(ctx, b->offsets(), "box offsets"));
    CKFMT_ASSIGN_OR_RETURN(auto lengths, ToVec(ctx, b->lengths(), "box lengths"));
    return Region::Box(std::move(offsets), std::move(lengths));
  }
  return ctx.Err("region has unknown type " + std::to_string(int(type)), "G1");
}

Result<EntryRecord> ParseEntry(const Ctx& ctx, const fb::Entry& fe) {
  EntryRecord e;
  for (const fb::PathElem* pe : *fe.path()) {
    if (pe->kind() == fb::PathKind::Key) {
      if (!pe->key()) return ctx.Err("key path component of kind Key has no key", "P2");
      if (pe->index() != 0) return ctx.Err("key path component of kind Key has an index", "P2");
      e.path.emplace_back(pe->key()->str());
    } else if (pe->kind() == fb::PathKind::Index) {
      if (pe->key()) return ctx.Err("key path component of kind Index has a key", "P3");
      e.path.emplace_back(pe->index());
    } else {
      return ctx.Err("key path component has unknown kind " + std::to_string(int(pe->kind())),
                     "P1");
    }
  }
  auto kind = static_cast<uint8_t>(fe.kind());
  if (kind < 1 || kind > static_cast<uint8_t>(EntryKind::kList)) {
    return ctx.Err("unknown entry kind " + std::to_string(kind), "E1");
  }
  e.kind = static_cast<EntryKind>(kind);
  e.int_value = fe.int_value();
  e.float_value = fe.float_value();
  e.bool_value = fe.bool_value();
  if (fe.string_value()) e.string_value = fe.string_value()->str();
  if (fe.content_type()) e.content_type = fe.content_type()->str();
  e.partial = fe.partial();
  if (!e.HasData()) {
    if (fe.shape() || fe.pieces() || fe.saved_layout() || fe.partial() ||
        fe.dtype() != fb::DType::Invalid) {
      return ctx.Err(std::string(EntryKindName(e.kind)) + " entry carries tensor fields", "E2");
    }
    if ((e.kind != EntryKind::kString && fe.string_value()) ||
        fe.content_type() || (e.kind != EntryKind::kInt && fe.int_value() != 0) ||
        (e.kind != EntryKind::kFloat && fe.float_value() != 0) ||
        (e.kind != EntryKind::kBool && fe.bool_value())) {
      return ctx.Err(std::string(EntryKindName(e.kind)) + " entry carries another kind's value",
                     "E3");
    }
    if (e.kind == EntryKind::kString && !fe.string_value()) {
      return ctx.Err("string entry has no string_value", "E4");
    }
    return e;
  }
  if (fe.string_value() || fe.int_value() != 0 || fe.float_value() != 0 || fe.bool_value()) {
    return ctx.Err(std::string(EntryKindName(e.kind)) + " entry carries a scalar value", "E5");
  }
  if (e.kind == EntryKind::kBytes && !fe.content_type()) {
    return ctx.Err("bytes entry has no content_type", "E6");
  }
  if (e.kind == EntryKind::kTensor && fe.content_type()) {
    return ctx.Err("tensor entry carries a content_type", "E6");
  }
  auto dtype = DTypeFromId(static_cast<uint8_t>(fe.dtype()));
  if (!dtype) return ctx.Err("unknown dtype id " + std::to_string(int(fe.dtype())), "E7");
  e.dtype = *dtype;
  if (!fe.shape()) return ctx.Err(std::string(EntryKindName(e.kind)) + " entry has no shape", "E8");
  CKFMT_ASSIGN_OR_RETURN(e.shape, ToVec(ctx, fe.shape(), "shape"));
  if (fe.pieces()) {
    for (const fb::Piece* fp : *fe.pieces()) {
      PieceRecord p;
      p.rank = fp->rank();
      CKFMT_ASSIGN_OR_RETURN(p.region, ParseRegion(ctx, fp->region_type(), fp->region()));
      CKFMT_RETURN_IF_ERROR(ctx.CheckAligned(fp->chunks(), "chunks"));
      if (fp->chunks()) {
        for (const fb::Chunk* fc : *fp->chunks()) {
          p.chunks.push_back({fc->offset(), fc->stored_size(), fc->raw_size(), fc->checksum(),
                              static_cast<uint8_t>(fc->codec())});
        }
      }
      e.pieces.push_back(std::move(p));
    }
  }
  if (fe.saved_layout()) {
    for (const fb::Shard* fs : *fe.saved_layout()) {
      ShardRecord s;
      s.rank = fs->rank();
      CKFMT_ASSIGN_OR_RETURN(s.region, ParseRegion(ctx, fs->region_type(), fs->region()));
      e.saved_layout.push_back(std::move(s));
    }
  }
  return e;
}

// FlatBuffers 2.0.8's verifier follows the offsets in a vector of tables
// without the check VerifyOffset makes of other offsets, that they are not
// zero (X3): an element of 0 makes a table overlap its own offset.
template <typename T>
bool HasZeroOffset(const flatbuffers::Vector<flatbuffers::Offset<T>>* v) {
  if (!v) return false;
  const auto* p = reinterpret_cast<const uint8_t*>(v->Data());
  for (flatbuffers::uoffset_t i = 0; i < v->size(); ++i) {
    if (GetU32(p + 4 * i) == 0) return true;
  }
  return false;
}

// A pass of its own, before any entry is parsed, so that this X3 failure
// is found before any entry's P or E rule, as the verifier's are.
// REQUIRES: `fi` passed the verifier.
bool AnyZeroTableOffset(const fb::Index* fi) {
  if (HasZeroOffset(fi->metadata()) || HasZeroOffset(fi->entries())) return true;
  if (!fi->entries()) return false;
  for (const fb::Entry* fe : *fi->entries()) {
    if (HasZeroOffset(fe->path()) || HasZeroOffset(fe->pieces()) ||
        HasZeroOffset(fe->saved_layout())) {
      return true;
    }
  }
  return false;
}

}  // namespace

Result<IndexRecord> ParseIndex(const uint8_t* data, size_t size, uint64_t data_begin,
                               uint64_t data_end, const std::string& file) {
  if (size < 8 || !flatbuffers::BufferHasIdentifier(data, fb::IndexIdentifier())) {
    return Status::Corruption(file + ": index lacks the \"CKIX\" identifier" + SpecRule("X2"));
  }
  // Depth and table limits are generous for real checkpoints (millions of
  // chunks) but bound a hostile file's verification cost.
  flatbuffers::Verifier verifier(data, size, /*max_depth=*/16, /*max_tables=*/1u << 28);
  if (!fb::VerifyIndexBuffer(verifier)) {
    return Status::Corruption(file + ": index fails FlatBuffers verification" + SpecRule("X3"));
  }
  const fb::Index* fi = fb::GetIndex(data);
  if (AnyZeroTableOffset(fi)) {
    return Status::Corruption(file + ": index fails FlatBuffers verification (a vector of "
                              "tables holds a zero offset)" + SpecRule("X3"));
  }
  IndexRecord index;
  if (fi->writer_name()) index.writer_name = fi->writer_name()->str();
  if (fi->writer_version()) index.writer_version = fi->writer_version()->str();
  index.world_size = fi->world_size();
  // Absent reads as "" (as writer_name does), not as the model's default
  // "single": inspect must show what the file holds (INSPECT_JSON.md).
  index.save_mode = fi->save_mode() ? fi->save_mode()->str() : "";
  if (fi->metadata()) {
    for (const fb::KeyValue* kv : *fi->metadata()) {
      index.metadata.emplace_back(kv->key()->str(), kv->value()->str());
    }
  }
  if (fi->entries()) {
    Ctx ctx{file, data};
    index.entries.reserve(fi->entries()->size());
    for (const fb::Entry* fe : *fi->entries()) {
      CKFMT_ASSIGN_OR_RETURN(EntryRecord e, ParseEntry(ctx, *fe));
      index.entries.push_back(std::move(e));
      ++ctx.entry;
    }
  }
  CKFMT_RETURN_IF_ERROR(ValidateIndex(index, data_begin, data_end, file));
  return index;
}

}  // namespace ckfmt
