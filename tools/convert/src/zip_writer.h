// A zip writer for torch.save archives: stored records whose data start at
// 64-byte aligned offsets (padding in an "FB" extra field, as torch's own
// writer does), ZIP64 fields where sizes or offsets need them. Sizes are
// declared up front; each record's CRC is patched into its local header
// when the record ends.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckfmt/status.h"
#include "file_io.h"

namespace ckfmt::convert {

class ZipWriter {
 public:
  // The archive starts at byte `base` of `out` (DCP packs many archives
  // into one file); offsets inside it count from there.
  explicit ZipWriter(OutputFile* out, uint64_t base = 0) : out_(out), base_(base) {}
  // Use ZIP64 fields for every record and the end record (for tests).
  void set_force_zip64(bool v) { force_zip64_ = v; }
  // Writes the local header of a record of `size` bytes and returns the
  // offset in `out` where its data goes (64-byte aligned in the archive).
  Result<uint64_t> BeginRecord(const std::string& name, uint64_t size);
  // Closes the current record (its data must be written) with its CRC-32.
  Status EndRecord(uint32_t crc);
  Status AddRecord(const std::string& name, const std::string& data);
  // Central directory and end records. Returns the archive's size.
  Result<uint64_t> Finish();

 private:
  struct Entry {
    std::string name;
    uint64_t header_offset = 0, size = 0;
    uint32_t crc = 0;
  };
  OutputFile* out_;
  uint64_t base_;
  std::vector<Entry> entries_;
  uint64_t pos_ = 0;
  bool open_ = false;
  bool force_zip64_ = false;
};

}  // namespace ckfmt::convert
