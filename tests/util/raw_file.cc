#include "util/raw_file.h"

#include <algorithm>
#include <cstring>

#include "ckfmt/checksum.h"
#include "ckfmt/codec.h"

namespace ckfmt_test {

using namespace ckfmt;

ChunkRecord RawFileBuilder::AddChunk(const std::string& stored, uint64_t raw_size,
                                     uint8_t codec) {
  data_.resize(AlignUp(data_.size()), '\0');
  ChunkRecord c;
  c.offset = kHeaderSize + data_.size();
  c.stored_size = stored.size();
  c.raw_size = raw_size;
  c.checksum = Checksum(stored.data(), stored.size());
  c.codec = codec;
  data_ += stored;
  return c;
}

PieceRecord RawFileBuilder::AddPiece(const Region& region, uint32_t rank,
                                     const std::string& stream, uint64_t chunk_bytes) {
  PieceRecord p;
  p.rank = rank;
  p.region = region;
  for (uint64_t pos = 0; pos < stream.size(); pos += chunk_bytes) {
    uint64_t n = std::min<uint64_t>(chunk_bytes, stream.size() - pos);
    p.chunks.push_back(AddChunk(stream.substr(pos, n), n, 0));
  }
  return p;
}

std::string RawFileBuilder::Build(const IndexRecord& index, RawLayout* layout) const {
  return BuildWithIndexBytes(SerializeIndex(index), layout);
}

std::string RawFileBuilder::BuildWithIndexBytes(const std::string& index_bytes,
                                                RawLayout* layout,
                                                const RawVersions& versions) const {
  RawLayout l;
  l.index_offset = AlignUp(kHeaderSize + data_.size());
  l.data_end = l.index_offset;
  l.index_length = index_bytes.size();
  l.file_size = AlignUp(l.index_offset + l.index_length + kFooterSize);
  l.footer_offset = l.file_size - kFooterSize;
  std::string out(l.file_size, '\0');
  uint8_t header[kHeaderSize];
  EncodeHeader(FileHeader{versions.header_major, versions.header_minor}, header);
  std::memcpy(out.data(), header, kHeaderSize);
  std::memcpy(out.data() + kHeaderSize, data_.data(), data_.size());
  std::memcpy(out.data() + l.index_offset, index_bytes.data(), index_bytes.size());
  FileFooter f;
  f.index_offset = l.index_offset;
  f.index_length = l.index_length;
  f.index_checksum = Checksum(index_bytes.data(), index_bytes.size());
  f.major = versions.footer_major;
  f.minor = versions.footer_minor;
  uint8_t footer[kFooterSize];
  EncodeFooter(f, footer);
  std::memcpy(out.data() + l.footer_offset, footer, kFooterSize);
  if (layout) *layout = l;
  return out;
}

EntryRecord TensorEntry(const KeyPath& path, DType dtype, const Shape& shape) {
  EntryRecord e;
  e.path = path;
  e.kind = EntryKind::kTensor;
  e.dtype = dtype;
  e.shape = shape;
  return e;
}

EntryRecord ContainerEntry(const KeyPath& path, EntryKind kind) {
  EntryRecord e;
  e.path = path;
  e.kind = kind;
  return e;
}

ckfmt::IndexRecord DeclareHugeEntries(RawFileBuilder& b, int entries, int gib_each,
                                      ckfmt::EntryKind kind, const std::string& prefix) {
  ckfmt::IndexRecord idx;
  const std::string garbage(100, 'z');
  for (int i = 0; i < entries; ++i) {
    ckfmt::EntryRecord e =
        TensorEntry({prefix + std::to_string(i)}, ckfmt::DType::kU8, {uint64_t(gib_each) << 30});
    e.kind = kind;
    ckfmt::PieceRecord p;
    p.region = ckfmt::Region::Whole(e.shape);
    for (int c = 0; c < gib_each; ++c) {
      p.chunks.push_back(b.AddChunk(garbage, uint64_t{1} << 30, uint8_t(ckfmt::Codec::kZstd)));
    }
    e.pieces.push_back(p);
    idx.entries.push_back(e);
  }
  return idx;
}

}  // namespace ckfmt_test
