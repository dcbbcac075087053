// A zip reader for torch.save archives: central directory, ZIP64, stored
// records only. Trusts nothing: every size and offset is checked against the
// archive's bounds, local headers must agree with the central directory, and
// records must not overlap. Errors name the file and the record.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ckfmt/status.h"
#include "file_io.h"

namespace ckfmt::convert {

struct ZipRecord {
  std::string name;
  uint64_t header_offset = 0;  // local header, relative to the archive start
  uint64_t data_offset = 0;    // first data byte, relative to the archive start
  uint64_t size = 0;
  uint32_t crc32 = 0;
};

class ZipArchive {
 public:
  // The archive occupies bytes [base, base + length) of `file` (a DCP item
  // is an archive inside a larger file). `label` names it in messages.
  static Result<std::unique_ptr<ZipArchive>> Open(std::shared_ptr<InputFile> file, uint64_t base,
                                                  uint64_t length, std::string label);
  // Whole file.
  static Result<std::unique_ptr<ZipArchive>> Open(std::shared_ptr<InputFile> file);

  const std::string& label() const { return label_; }
  const std::vector<ZipRecord>& records() const { return records_; }
  const ZipRecord* Find(const std::string& name) const;

  // Reads bytes [offset, offset + n) of the record.
  Status Read(const ZipRecord& r, uint64_t offset, void* dst, uint64_t n) const;
  // Reads a whole record (at most `max_size` bytes) and checks its CRC.
  Result<std::string> ReadAll(const ZipRecord& r, uint64_t max_size) const;
  // "<label>: record <name>"
  std::string Where(const ZipRecord& r) const;

 private:
  ZipArchive() = default;
  Status Parse();

  std::shared_ptr<InputFile> file_;
  uint64_t base_ = 0, length_ = 0;
  std::string label_;
  std::vector<ZipRecord> records_;
  std::unordered_map<std::string, size_t> by_name_;
};

// True if the bytes look like the start of a zip archive ("PK\3\4").
bool LooksLikeZip(const uint8_t* p, size_t n);

}  // namespace ckfmt::convert
