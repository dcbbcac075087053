// Byte layout of a ckfmt file outside the index (spec/FORMAT.md §2-3).
//
//   [header: 4096 bytes][data chunks, each at a 4096-aligned offset]
//   [index (FlatBuffer) at a 4096-aligned offset][zeros][footer: last 64 bytes]
//
// The file size is a multiple of 4096, so every write and read can use
// O_DIRECT. All integers are little-endian.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ckfmt/status.h"

namespace ckfmt {

inline constexpr uint64_t kAlignment = 4096;
inline constexpr uint64_t kHeaderSize = 4096;
inline constexpr uint64_t kFooterSize = 64;
inline constexpr uint16_t kMajorVersion = 1;
inline constexpr uint16_t kMinorVersion = 0;

inline constexpr std::array<uint8_t, 8> kHeaderMagic = {0x89, 'C', 'K', 'F', '\r', '\n', 0x1a, '\n'};
inline constexpr std::array<uint8_t, 8> kFooterMagic = {0x89, 'C', 'K', 'F', 'E', 'N', 'D', '\n'};

// Upper bounds a reader enforces before allocating anything.
inline constexpr uint64_t kMaxIndexSize = (1ull << 31) - 2;  // FlatBuffers needs < 2^31-1
inline constexpr uint64_t kMaxChunkRawSize = 1ull << 30;   // 1 GiB

inline constexpr uint64_t AlignUp(uint64_t n) { return (n + kAlignment - 1) & ~(kAlignment - 1); }
inline constexpr bool IsAligned(uint64_t n) { return (n & (kAlignment - 1)) == 0; }

// The reference writer's cut of uncompressed chunks (FORMAT.md §5.2): the
// raw size of a chunk of at most `n` bytes that will be stored at file
// offset `at`, ended at the next multiple of `grid` (the chunk size) where
// it would cross one. Only for a grid of whole 4096-byte blocks and an
// element size that divides 4096: then every chunk but a piece's last stays
// a whole number of blocks, and a piece takes the same room in the file,
// cut or not. REQUIRES: `at` and `n` multiples of kAlignment and of the
// element size respectively.
inline constexpr uint64_t CutAtGrid(uint64_t at, uint64_t n, uint64_t grid,
                                    uint64_t element_size) {
  if (grid == 0 || !IsAligned(grid) || element_size == 0 || kAlignment % element_size != 0) {
    return n;
  }
  const uint64_t room = grid - at % grid;
  return room < n ? room : n;
}

struct FileHeader {
  uint16_t major = kMajorVersion;
  uint16_t minor = kMinorVersion;
};

struct FileFooter {
  uint64_t index_offset = 0;
  uint64_t index_length = 0;
  uint64_t index_checksum = 0;  // XXH3-64 of the index bytes
  uint16_t major = kMajorVersion;
  uint16_t minor = kMinorVersion;
};

// Writes the 4096-byte header into `out` (zero padded).
void EncodeHeader(const FileHeader& h, uint8_t out[kHeaderSize]);
// Checks magic, version and that reserved bytes are zero.
// `file` names the file in messages.
Result<FileHeader> DecodeHeader(const uint8_t in[kHeaderSize], const std::string& file);

void EncodeFooter(const FileFooter& f, uint8_t out[kFooterSize]);
// Checks magic, footer checksum, version, reserved bytes, and that the index
// lies inside [kHeaderSize, file_size - kFooterSize) at an aligned offset.
Result<FileFooter> DecodeFooter(const uint8_t in[kFooterSize], uint64_t file_size,
                                const std::string& file);

// The header and the footer must name the same version (else a change to
// the header's version bytes would go unnoticed).
Status CheckVersionsAgree(const FileHeader& h, const FileFooter& f, const std::string& file);

// A whole number of blocks, at least a header and a footer block (L1).
// DecodeFooter checks it too; readers call it before reading either end.
Status CheckFileSize(uint64_t file_size, const std::string& file);

// The index bytes `index` (f.index_length of them) hash to the footer's
// index_checksum (X1). Nothing in the index is read before this holds.
Status CheckIndexChecksum(const uint8_t* index, const FileFooter& f, const std::string& file);

// Little-endian helpers.
void PutU16(uint8_t* p, uint16_t v);
void PutU32(uint8_t* p, uint32_t v);
void PutU64(uint8_t* p, uint64_t v);
uint16_t GetU16(const uint8_t* p);
uint32_t GetU32(const uint8_t* p);
uint64_t GetU64(const uint8_t* p);

}  // namespace ckfmt
