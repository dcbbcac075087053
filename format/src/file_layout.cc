#include "ckfmt/file_layout.h"

#include <cstring>

#include "ckfmt/checksum.h"

namespace ckfmt {

void PutU16(uint8_t* p, uint16_t v) { for (int i = 0; i < 2; ++i) p[i] = uint8_t(v >> (8 * i)); }
void PutU32(uint8_t* p, uint32_t v) { for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i)); }
void PutU64(uint8_t* p, uint64_t v) { for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i)); }
uint16_t GetU16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | p[i];
  return v;
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

namespace {

// Header fields (offsets within the 4096-byte header).
constexpr size_t kHdrMagic = 0, kHdrMajor = 8, kHdrMinor = 10, kHdrFlags = 12, kHdrEnd = 16;
// Footer fields (offsets within the 64-byte footer).
constexpr size_t kFtIndexOffset = 0, kFtIndexLength = 8, kFtIndexChecksum = 16, kFtMajor = 24,
                 kFtMinor = 26, kFtFlags = 28, kFtReserved = 32, kFtChecksum = 48, kFtMagic = 56;

bool AllZero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i]) return false;
  }
  return true;
}

Status CheckMajor(uint16_t major, uint16_t minor, const std::string& file, const char* where,
                  const char* rule) {
  if (major != kMajorVersion) {
    return Status::Unsupported(file + ": " + where + " says format version " +
                               std::to_string(major) + "." + std::to_string(minor) +
                               "; this reader reads major version " +
                               std::to_string(kMajorVersion) + " only" + SpecRule(rule));
  }
  return Status::OK();
}

// The rule the footer's index placement breaks (F5-F7), or nullptr.
// REQUIRES: file_size passed CheckFileSize.
const char* MisplacedIndexRule(const FileFooter& f, uint64_t file_size) {
  const uint64_t index_space = file_size - kFooterSize;
  if (!IsAligned(f.index_offset) || f.index_offset < kHeaderSize) return "F5";
  if (f.index_offset > index_space || f.index_length > index_space - f.index_offset) return "F6";
  if (f.index_length > kMaxIndexSize) return "F7";
  return nullptr;
}

}  // namespace

void EncodeHeader(const FileHeader& h, uint8_t out[kHeaderSize]) {
  std::memset(out, 0, kHeaderSize);
  std::memcpy(out + kHdrMagic, kHeaderMagic.data(), kHeaderMagic.size());
  PutU16(out + kHdrMajor, h.major);
  PutU16(out + kHdrMinor, h.minor);
  PutU32(out + kHdrFlags, 0);
}

Result<FileHeader> DecodeHeader(const uint8_t in[kHeaderSize], const std::string& file) {
  if (std::memcmp(in + kHdrMagic, kHeaderMagic.data(), kHeaderMagic.size()) != 0) {
    return Status::Corruption(file + ": not a ckfmt file (header magic mismatch)" + SpecRule("H1"));
  }
  FileHeader h;
  h.major = GetU16(in + kHdrMajor);
  h.minor = GetU16(in + kHdrMinor);
  CKFMT_RETURN_IF_ERROR(CheckMajor(h.major, h.minor, file, "header", "H2"));
  if (GetU32(in + kHdrFlags) != 0) {
    return Status::Corruption(file + ": header flags must be zero, found " +
                              std::to_string(GetU32(in + kHdrFlags)) + SpecRule("H3"));
  }
  if (!AllZero(in + kHdrEnd, kHeaderSize - kHdrEnd)) {
    return Status::Corruption(file + ": header reserved bytes 16..4095 are not zero" +
                              SpecRule("H4"));
  }
  return h;
}

void EncodeFooter(const FileFooter& f, uint8_t out[kFooterSize]) {
  std::memset(out, 0, kFooterSize);
  PutU64(out + kFtIndexOffset, f.index_offset);
  PutU64(out + kFtIndexLength, f.index_length);
  PutU64(out + kFtIndexChecksum, f.index_checksum);
  PutU16(out + kFtMajor, f.major);
  PutU16(out + kFtMinor, f.minor);
  PutU32(out + kFtFlags, 0);
  PutU64(out + kFtChecksum, Checksum(out, kFtChecksum));
  std::memcpy(out + kFtMagic, kFooterMagic.data(), kFooterMagic.size());
}

Result<FileFooter> DecodeFooter(const uint8_t in[kFooterSize], uint64_t file_size,
                                const std::string& file) {
  if (std::memcmp(in + kFtMagic, kFooterMagic.data(), kFooterMagic.size()) != 0) {
    return Status::Corruption(file + ": footer magic mismatch (file truncated or not ckfmt)" +
                              SpecRule("F1"));
  }
  uint64_t want = Checksum(in, kFtChecksum), found = GetU64(in + kFtChecksum);
  if (want != found) {
    return Status::Corruption(file + ": footer checksum mismatch (expected " +
                              std::to_string(want) + ", found " + std::to_string(found) + ")" +
                              SpecRule("F2"));
  }
  FileFooter f;
  f.index_offset = GetU64(in + kFtIndexOffset);
  f.index_length = GetU64(in + kFtIndexLength);
  f.index_checksum = GetU64(in + kFtIndexChecksum);
  f.major = GetU16(in + kFtMajor);
  f.minor = GetU16(in + kFtMinor);
  CKFMT_RETURN_IF_ERROR(CheckMajor(f.major, f.minor, file, "footer", "F3"));
  if (GetU32(in + kFtFlags) != 0 || !AllZero(in + kFtReserved, kFtChecksum - kFtReserved)) {
    return Status::Corruption(file + ": footer flags or reserved bytes are not zero" +
                              SpecRule("F4"));
  }
  CKFMT_RETURN_IF_ERROR(CheckFileSize(file_size, file));
  if (const char* rule = MisplacedIndexRule(f, file_size)) {
    return Status::Corruption(file + ": footer places the index at [" +
                              std::to_string(f.index_offset) + ", +" +
                              std::to_string(f.index_length) + ") outside the file's " +
                              std::to_string(file_size) + " bytes or unaligned" + SpecRule(rule));
  }
  if (AlignUp(f.index_offset + f.index_length + kFooterSize) != file_size) {
    return Status::Corruption(file + ": " + std::to_string(file_size - f.index_offset -
                                                           f.index_length - kFooterSize) +
                              " bytes between index and footer; expected fewer than 4096 (the "
                              "footer ends the first aligned block after the index)" +
                              SpecRule("F8"));
  }
  return f;
}

Status CheckVersionsAgree(const FileHeader& h, const FileFooter& f, const std::string& file) {
  if (h.major != f.major || h.minor != f.minor) {
    return Status::Corruption(file + ": header says version " + std::to_string(h.major) + "." +
                              std::to_string(h.minor) + ", footer says " +
                              std::to_string(f.major) + "." + std::to_string(f.minor) +
                              SpecRule("H5"));
  }
  return Status::OK();
}

Status CheckFileSize(uint64_t file_size, const std::string& file) {
  if (!IsAligned(file_size) || file_size < kHeaderSize + kAlignment) {
    return Status::Corruption(file + ": file size " + std::to_string(file_size) +
                              " is not a multiple of 4096 of at least 8192 (truncated or not "
                              "ckfmt)" + SpecRule("L1"));
  }
  return Status::OK();
}

Status CheckIndexChecksum(const uint8_t* index, const FileFooter& f, const std::string& file) {
  const uint64_t sum = Checksum(index, f.index_length);
  if (sum != f.index_checksum) {
    return Status::Corruption(file + ": index checksum mismatch (the footer records " +
                              std::to_string(f.index_checksum) + ", the index hashes to " +
                              std::to_string(sum) + ")" + SpecRule("X1"));
  }
  return Status::OK();
}

}  // namespace ckfmt
