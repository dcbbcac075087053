// Builds ckfmt files byte by byte from format/ primitives alone (header,
// chunks, index, footer), independent of the engine's writer. Used to hand
// a reader files whose only defect is the one a test puts there.
#pragma once

#include <cstdint>
#include <string>

#include "ckfmt/file_layout.h"
#include "ckfmt/index.h"

namespace ckfmt_test {

struct RawLayout {
  uint64_t data_begin = ckfmt::kHeaderSize;
  uint64_t data_end = 0;      // == index_offset
  uint64_t index_offset = 0;
  uint64_t index_length = 0;
  uint64_t footer_offset = 0;
  uint64_t file_size = 0;
};

struct RawVersions {
  uint16_t header_major = ckfmt::kMajorVersion, header_minor = ckfmt::kMinorVersion;
  uint16_t footer_major = ckfmt::kMajorVersion, footer_minor = ckfmt::kMinorVersion;
};

class RawFileBuilder {
 public:
  // Places `stored` at the next 4096-aligned offset of the data region and
  // returns its chunk record (checksum computed over `stored`).
  ckfmt::ChunkRecord AddChunk(const std::string& stored, uint64_t raw_size,
                              uint8_t codec = 0);
  // Appends a tensor/bytes entry whose single piece is `region`, holding
  // `stream` (the region's row-major bytes) in uncompressed chunks of at
  // most `chunk_bytes`.
  ckfmt::PieceRecord AddPiece(const ckfmt::Region& region, uint32_t rank,
                              const std::string& stream, uint64_t chunk_bytes);

  // The whole file for `index` (chunks already added), with a correct
  // index checksum, footer and padding.
  std::string Build(const ckfmt::IndexRecord& index, RawLayout* layout = nullptr) const;
  // Same, with the index bytes given verbatim.
  std::string BuildWithIndexBytes(const std::string& index_bytes, RawLayout* layout = nullptr,
                                  const RawVersions& versions = {}) const;

  uint64_t data_end() const { return ckfmt::kHeaderSize + data_.size(); }

 private:
  std::string data_;  // bytes from kHeaderSize on
};

// An index entry helper: a tensor (or bytes) entry with no pieces yet.
ckfmt::EntryRecord TensorEntry(const ckfmt::KeyPath& path, ckfmt::DType dtype,
                               const ckfmt::Shape& shape);
ckfmt::EntryRecord ContainerEntry(const ckfmt::KeyPath& path, ckfmt::EntryKind kind);

// `entries` u8 entries of `kind` (tensor or bytes), keys <prefix>0, <prefix>1,
// ..., each declaring `gib_each` GiB in 1 GiB zstd chunks whose stored bytes
// are 100 bytes of garbage: a file of a few MiB that declares far more than
// any machine holds (and never decodes).
ckfmt::IndexRecord DeclareHugeEntries(RawFileBuilder& b, int entries, int gib_each,
                                      ckfmt::EntryKind kind, const std::string& prefix = "e");

}  // namespace ckfmt_test
