#include "zip_writer.h"

#include "crc32.h"

namespace ckfmt::convert {
namespace {

constexpr uint64_t kAlign = 64;
constexpr uint32_t k32 = 0xffffffffu;

void P16(std::string& s, uint16_t v) {
  s.push_back(char(v & 0xff));
  s.push_back(char(v >> 8));
}
void P32(std::string& s, uint32_t v) {
  P16(s, uint16_t(v & 0xffff));
  P16(s, uint16_t(v >> 16));
}
void P64(std::string& s, uint64_t v) {
  P32(s, uint32_t(v & k32));
  P32(s, uint32_t(v >> 32));
}

bool NeedsZip64(uint64_t size, uint64_t offset) { return size >= k32 || offset >= k32; }

}  // namespace

Result<uint64_t> ZipWriter::BeginRecord(const std::string& name, uint64_t size) {
  if (open_) return Status::Internal("zip record already open");
  Entry e{name, pos_, size, 0};
  bool z64 = force_zip64_ || NeedsZip64(size, pos_);
  std::string extra;
  if (z64) {
    P16(extra, 0x0001);
    P16(extra, 16);
    P64(extra, size);
    P64(extra, size);
  }
  uint64_t base = pos_ + 30 + name.size() + extra.size() + 4;
  uint64_t pad = (kAlign - base % kAlign) % kAlign;
  P16(extra, 0x4246);  // "FB": padding
  P16(extra, uint16_t(pad));
  extra.append(pad, 'Z');
  std::string h;
  P32(h, 0x04034b50);
  P16(h, z64 ? 45 : 20);  // version needed
  P16(h, 0);              // flags
  P16(h, 0);              // stored
  P16(h, 0);              // time
  P16(h, 0x21);           // date: 1980-01-01
  P32(h, 0);              // CRC, patched by EndRecord
  P32(h, z64 ? k32 : uint32_t(size));
  P32(h, z64 ? k32 : uint32_t(size));
  P16(h, uint16_t(name.size()));
  P16(h, uint16_t(extra.size()));
  h += name;
  h += extra;
  CKFMT_RETURN_IF_ERROR(out_->WriteAt(base_ + pos_, h.data(), h.size()));
  uint64_t data = pos_ + h.size();
  entries_.push_back(e);
  pos_ = data + size;
  open_ = true;
  return base_ + data;
}

Status ZipWriter::EndRecord(uint32_t crc) {
  if (!open_) return Status::Internal("no zip record open");
  open_ = false;
  Entry& e = entries_.back();
  e.crc = crc;
  std::string c;
  P32(c, crc);
  return out_->WriteAt(base_ + e.header_offset + 14, c.data(), 4);
}

Status ZipWriter::AddRecord(const std::string& name, const std::string& data) {
  CKFMT_ASSIGN_OR_RETURN(uint64_t off, BeginRecord(name, data.size()));
  CKFMT_RETURN_IF_ERROR(out_->WriteAt(off, data.data(), data.size()));
  return EndRecord(Crc32(0, data.data(), data.size()));
}

Result<uint64_t> ZipWriter::Finish() {
  if (open_) return Status::Internal("zip record still open");
  std::string cd;
  for (const Entry& e : entries_) {
    bool big_size = force_zip64_ || e.size >= k32;
    bool big_off = force_zip64_ || e.header_offset >= k32;
    std::string extra;
    if (big_size || big_off) {
      P16(extra, 0x0001);
      P16(extra, uint16_t((big_size ? 16 : 0) + (big_off ? 8 : 0)));
      if (big_size) {
        P64(extra, e.size);
        P64(extra, e.size);
      }
      if (big_off) P64(extra, e.header_offset);
    }
    P32(cd, 0x02014b50);
    P16(cd, (big_size || big_off) ? 45 : 20);  // version made by
    P16(cd, (big_size || big_off) ? 45 : 20);  // version needed
    P16(cd, 0);
    P16(cd, 0);
    P16(cd, 0);
    P16(cd, 0x21);
    P32(cd, e.crc);
    P32(cd, big_size ? k32 : uint32_t(e.size));
    P32(cd, big_size ? k32 : uint32_t(e.size));
    P16(cd, uint16_t(e.name.size()));
    P16(cd, uint16_t(extra.size()));
    P16(cd, 0);  // comment
    P16(cd, 0);  // disk
    P16(cd, 0);  // internal attributes
    P32(cd, 0);  // external attributes
    P32(cd, big_off ? k32 : uint32_t(e.header_offset));
    cd += e.name;
    cd += extra;
  }
  uint64_t cd_offset = pos_, cd_size = cd.size(), n = entries_.size();
  std::string tail;
  bool z64 = force_zip64_ || n >= 0xffff || cd_offset >= k32 || cd_size >= k32;
  if (z64) {
    uint64_t eocd64 = cd_offset + cd_size;
    P32(tail, 0x06064b50);
    P64(tail, 44);
    P16(tail, 45);
    P16(tail, 45);
    P32(tail, 0);
    P32(tail, 0);
    P64(tail, n);
    P64(tail, n);
    P64(tail, cd_size);
    P64(tail, cd_offset);
    P32(tail, 0x07064b50);  // locator
    P32(tail, 0);
    P64(tail, eocd64);
    P32(tail, 1);
  }
  P32(tail, 0x06054b50);
  P16(tail, 0);
  P16(tail, 0);
  P16(tail, z64 ? 0xffff : uint16_t(n));
  P16(tail, z64 ? 0xffff : uint16_t(n));
  P32(tail, z64 ? k32 : uint32_t(cd_size));
  P32(tail, z64 ? k32 : uint32_t(cd_offset));
  P16(tail, 0);
  cd += tail;
  CKFMT_RETURN_IF_ERROR(out_->WriteAt(base_ + cd_offset, cd.data(), cd.size()));
  pos_ = cd_offset + cd.size();
  return pos_;
}

}  // namespace ckfmt::convert
