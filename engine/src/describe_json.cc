#include "describe_json.h"

#include <cmath>
#include <cstdio>

#include "ckfmt/describe.h"
#include "ckfmt/reader.h"

namespace ckfmt {

std::string ChecksumHex(uint64_t checksum) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(checksum));
  return buf;
}

std::string CodecLabel(uint8_t codec) {
  if (!IsKnownCodec(codec)) return "unknown(" + std::to_string(codec) + ")";
  return std::string(CodecName(codec));
}

Json PathToJson(const KeyPath& path) {
  Json out = Json::array();
  for (const auto& c : path) {
    if (const auto* key = std::get_if<std::string>(&c)) {
      out.push_back(*key);
    } else {
      out.push_back(std::get<uint64_t>(c));
    }
  }
  return out;
}

Json RegionToJson(const Region& region) {
  Json out = Json::object();
  if (region.kind == Region::Kind::kFlat) {
    Json flat = Json::object();
    flat["start"] = region.start;
    flat["length"] = region.length;
    out["flat"] = std::move(flat);
  } else {
    Json box = Json::object();
    box["offsets"] = region.offsets;
    box["lengths"] = region.lengths;
    out["box"] = std::move(box);
  }
  return out;
}

Json ChunkToJson(const ChunkRecord& c) {
  Json out = Json::object();
  out["offset"] = c.offset;
  out["stored_size"] = c.stored_size;
  out["raw_size"] = c.raw_size;
  out["checksum"] = ChecksumHex(c.checksum);
  out["codec"] = CodecLabel(c.codec);
  return out;
}

namespace {

Json FloatToJson(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

Json ScalarToJson(const EntryRecord& e) {
  switch (e.kind) {
    case EntryKind::kInt: return e.int_value;
    case EntryKind::kFloat: return FloatToJson(e.float_value);
    case EntryKind::kBool: return e.bool_value;
    case EntryKind::kString: return e.string_value;
    default: return nullptr;
  }
}

}  // namespace

uint64_t EntryRawBytes(const EntryRecord& e) {
  uint64_t n = 0;
  for (const auto& p : e.pieces) {
    for (const auto& c : p.chunks) n += c.raw_size;
  }
  return n;
}

uint64_t EntryChunks(const EntryRecord& e) {
  uint64_t n = 0;
  for (const auto& p : e.pieces) n += p.chunks.size();
  return n;
}

Json EntryToJson(const EntryRecord& e) {
  Json out = Json::object();
  out["path"] = PathToJson(e.path);
  out["key"] = FormatKeyPath(e.path);
  out["kind"] = std::string(EntryKindName(e.kind));
  if (!e.HasData()) {
    if (!e.IsContainer()) out["value"] = ScalarToJson(e);
    return out;
  }
  if (e.kind == EntryKind::kBytes) out["content_type"] = e.content_type;
  out["dtype"] = std::string(DTypeName(e.dtype));
  out["shape"] = e.shape;
  out["partial"] = e.partial;
  out["raw_bytes"] = EntryRawBytes(e);
  out["stored_bytes"] = e.StoredSize();
  Json pieces = Json::array();
  for (const auto& p : e.pieces) {
    Json piece = Json::object();
    piece["rank"] = p.rank;
    piece["region"] = RegionToJson(p.region);
    Json chunks = Json::array();
    for (const auto& c : p.chunks) chunks.push_back(ChunkToJson(c));
    piece["chunks"] = std::move(chunks);
    pieces.push_back(std::move(piece));
  }
  out["pieces"] = std::move(pieces);
  Json layout = Json::array();
  for (const auto& s : e.saved_layout) {
    Json shard = Json::object();
    shard["rank"] = s.rank;
    shard["region"] = RegionToJson(s.region);
    layout.push_back(std::move(shard));
  }
  out["saved_layout"] = std::move(layout);
  return out;
}

Json DescribeIndex(const IndexRecord& index, const FileInfo& info,
                   const std::optional<KeyPath>& prefix) {
  Json out = Json::object();
  out["format"] = "ckfmt";
  out["version"] = Json::array({info.version.major, info.version.minor});
  out["file"] = info.file;
  out["file_size"] = info.file_size;
  Json writer = Json::object();
  writer["name"] = index.writer_name;
  writer["version"] = index.writer_version;
  out["writer"] = std::move(writer);
  out["world_size"] = index.world_size;
  out["save_mode"] = index.save_mode;
  Json metadata = Json::object();
  // Duplicate keys are not forbidden by the schema; the last one wins here.
  for (const auto& [k, v] : index.metadata) metadata[k] = v;
  out["metadata"] = std::move(metadata);
  if (prefix) out["prefix"] = PathToJson(*prefix);

  Json entries = Json::array();
  uint64_t n_entries = 0, n_tensors = 0, raw = 0, stored = 0, chunks = 0;
  for (const auto& e : index.entries) {
    if (prefix && !HasPrefix(e.path, *prefix)) continue;
    ++n_entries;
    if (e.kind == EntryKind::kTensor) ++n_tensors;
    if (e.HasData()) {
      raw += EntryRawBytes(e);
      stored += e.StoredSize();
      chunks += EntryChunks(e);
    }
    entries.push_back(EntryToJson(e));
  }
  out["entries"] = std::move(entries);
  Json totals = Json::object();
  totals["entries"] = n_entries;
  totals["tensors"] = n_tensors;
  totals["raw_bytes"] = raw;
  totals["stored_bytes"] = stored;
  totals["chunks"] = chunks;
  out["totals"] = std::move(totals);
  return out;
}

std::string DumpJson(const Json& json) {
  return json.dump(2, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace) + "\n";
}

Result<std::string> DescribeFileJson(const std::string& path, const std::string& label,
                                     const std::optional<KeyPath>& prefix) {
  CKFMT_ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open(path));
  return DumpJson(DescribeIndex(reader->index(), DescribeFileInfo(*reader, label), prefix));
}

FileInfo DescribeFileInfo(const CheckpointReader& reader, const std::string& label) {
  FileInfo info;
  // The reader has checked that header and footer name the same version.
  info.version = FileHeader{reader.footer().major, reader.footer().minor};
  info.file = label;
  info.file_size = reader.file_size();
  return info;
}

}  // namespace ckfmt
