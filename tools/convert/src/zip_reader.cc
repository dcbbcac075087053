#include "zip_reader.h"

#include <algorithm>
#include <cstring>

#include "crc32.h"

namespace ckfmt::convert {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kEocd64Sig = 0x06064b50;
constexpr uint32_t kLocator64Sig = 0x07064b50;
constexpr uint64_t kEocdSize = 22;
constexpr uint64_t kMaxCentralDirectory = 1ull << 30;

uint16_t U16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t U32(const uint8_t* p) { return uint32_t(U16(p)) | (uint32_t(U16(p + 2)) << 16); }
uint64_t U64(const uint8_t* p) { return uint64_t(U32(p)) | (uint64_t(U32(p + 4)) << 32); }

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// ZIP64 extended information (id 0x0001): the fields whose 32-bit values
// are saturated appear, in this order.
Status ParseZip64Extra(const uint8_t* extra, size_t len, bool need_usize, bool need_csize,
                       bool need_offset, uint64_t* usize, uint64_t* csize, uint64_t* offset,
                       const std::string& where) {
  size_t pos = 0;
  while (pos + 4 <= len) {
    uint16_t id = U16(extra + pos), sz = U16(extra + pos + 2);
    if (pos + 4 + sz > len) break;
    if (id == 0x0001) {
      const uint8_t* q = extra + pos + 4;
      size_t avail = sz, at = 0;
      auto take = [&](uint64_t* out) -> bool {
        if (at + 8 > avail) return false;
        *out = U64(q + at);
        at += 8;
        return true;
      };
      if ((need_usize && !take(usize)) || (need_csize && !take(csize)) ||
          (need_offset && !take(offset))) {
        return Status::Corruption(where + ": ZIP64 extra field too short for the saturated sizes");
      }
      return Status::OK();
    }
    pos += 4 + sz;
  }
  if (need_usize || need_csize || need_offset) {
    return Status::Corruption(where + ": sizes are 0xffffffff but there is no ZIP64 extra field");
  }
  return Status::OK();
}

}  // namespace

bool LooksLikeZip(const uint8_t* p, size_t n) { return n >= 4 && U32(p) == kLocalSig; }

Result<std::unique_ptr<ZipArchive>> ZipArchive::Open(std::shared_ptr<InputFile> file, uint64_t base,
                                                     uint64_t length, std::string label) {
  if (base > file->size() || length > file->size() - base) {
    return Status::Corruption(label + ": archive [" + std::to_string(base) + ", " +
                              std::to_string(base + length) + ") lies past the end of " +
                              file->path() + " (" + std::to_string(file->size()) + " bytes)");
  }
  std::unique_ptr<ZipArchive> z(new ZipArchive());
  z->file_ = std::move(file);
  z->base_ = base;
  z->length_ = length;
  z->label_ = std::move(label);
  CKFMT_RETURN_IF_ERROR(z->Parse());
  return z;
}

Result<std::unique_ptr<ZipArchive>> ZipArchive::Open(std::shared_ptr<InputFile> file) {
  uint64_t n = file->size();
  std::string label = file->path();
  return Open(std::move(file), 0, n, std::move(label));
}

Status ZipArchive::Parse() {
  auto read = [&](uint64_t off, void* dst, uint64_t n, const std::string& what) -> Status {
    if (off > length_ || n > length_ - off) {
      return Status::Corruption(label_ + ": " + what + " at offset " + std::to_string(off) +
                                " (+" + std::to_string(n) + " bytes) lies past the end of the " +
                                std::to_string(length_) + "-byte archive (truncated?)");
    }
    return file_->ReadAt(base_ + off, dst, n, label_ + " " + what);
  };
  if (length_ < kEocdSize) {
    return Status::Corruption(label_ + ": " + std::to_string(length_) +
                              " bytes is too short for a zip archive (truncated?)");
  }
  // End of central directory: the last 22..65557 bytes.
  uint64_t tail_len = std::min<uint64_t>(length_, kEocdSize + 0xffff);
  std::string tail(tail_len, '\0');
  CKFMT_RETURN_IF_ERROR(read(length_ - tail_len, tail.data(), tail_len, "end of archive"));
  const auto* t = reinterpret_cast<const uint8_t*>(tail.data());
  int64_t found = -1;
  for (int64_t i = int64_t(tail_len - kEocdSize); i >= 0; --i) {
    if (U32(t + i) == kEocdSig && uint64_t(i) + kEocdSize + U16(t + i + 20) == tail_len) {
      found = i;
      break;
    }
  }
  if (found < 0) {
    return Status::Corruption(label_ + ": no zip end-of-central-directory record found "
                              "(truncated or not a zip archive)");
  }
  const uint8_t* e = t + found;
  uint64_t eocd_pos = length_ - tail_len + uint64_t(found);
  uint64_t entries = U16(e + 10);
  uint64_t cd_size = U32(e + 12);
  uint64_t cd_offset = U32(e + 16);
  if (U16(e + 4) != 0 || U16(e + 6) != 0 || U16(e + 8) != U16(e + 10)) {
    return Status::Unsupported(label_ + ": multi-disk zip archives are not supported");
  }
  uint64_t cd_limit = eocd_pos;  // the central directory ends before this
  uint8_t loc[20] = {};
  if (eocd_pos >= 20) CKFMT_RETURN_IF_ERROR(read(eocd_pos - 20, loc, 20, "ZIP64 locator"));
  if (eocd_pos >= 20 && U32(loc) == kLocator64Sig) {
    uint64_t eocd64 = U64(loc + 8);
    uint8_t z64[56];
    CKFMT_RETURN_IF_ERROR(read(eocd64, z64, sizeof z64, "ZIP64 end-of-central-directory record"));
    if (U32(z64) != kEocd64Sig) {
      return Status::Corruption(label_ + ": ZIP64 locator points at offset " +
                                std::to_string(eocd64) + ", which holds no ZIP64 record");
    }
    if (eocd64 + 56 > eocd_pos - 20) {
      return Status::Corruption(label_ + ": ZIP64 end record overlaps the locator");
    }
    entries = U64(z64 + 32);
    cd_size = U64(z64 + 40);
    cd_offset = U64(z64 + 48);
    cd_limit = eocd64;
  } else if (entries == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    return Status::Corruption(label_ + ": saturated end-of-central-directory fields but no "
                              "ZIP64 locator");
  }
  if (cd_offset > cd_limit || cd_size > cd_limit - cd_offset) {
    return Status::Corruption(label_ + ": central directory [" + std::to_string(cd_offset) + ", " +
                              std::to_string(cd_offset + cd_size) +
                              ") does not end before the end record at " +
                              std::to_string(cd_limit) + " (truncated or lying sizes)");
  }
  if (cd_size > kMaxCentralDirectory) {
    return Status::Unsupported(label_ + ": central directory of " + std::to_string(cd_size) +
                               " bytes exceeds the converter's limit");
  }
  if (entries > cd_size / 46) {
    return Status::Corruption(label_ + ": " + std::to_string(entries) +
                              " records cannot fit a central directory of " +
                              std::to_string(cd_size) + " bytes");
  }
  std::string cd(cd_size, '\0');
  CKFMT_RETURN_IF_ERROR(read(cd_offset, cd.data(), cd_size, "central directory"));
  const auto* c = reinterpret_cast<const uint8_t*>(cd.data());
  uint64_t pos = 0;
  records_.reserve(entries);
  for (uint64_t i = 0; i < entries; ++i) {
    std::string where = label_ + ": central directory record " + std::to_string(i);
    if (pos + 46 > cd_size || U32(c + pos) != kCentralSig) {
      return Status::Corruption(where + ": bad signature or truncated central directory");
    }
    const uint8_t* h = c + pos;
    uint16_t flags = U16(h + 8), method = U16(h + 10);
    uint32_t crc = U32(h + 16);
    uint64_t csize = U32(h + 20), usize = U32(h + 24);
    uint16_t nlen = U16(h + 28), xlen = U16(h + 30), clen = U16(h + 32);
    uint64_t lho = U32(h + 42);
    if (pos + 46 + nlen + xlen + clen > cd_size) {
      return Status::Corruption(where + ": name/extra fields run past the central directory");
    }
    ZipRecord r;
    r.name.assign(reinterpret_cast<const char*>(h + 46), nlen);
    where = label_ + ": record " + r.name;
    CKFMT_RETURN_IF_ERROR(ParseZip64Extra(h + 46 + nlen, xlen, usize == 0xffffffff,
                                          csize == 0xffffffff, lho == 0xffffffff, &usize, &csize,
                                          &lho, where));
    pos += 46 + nlen + xlen + clen;
    if (flags & 0x1) return Status::Unsupported(where + ": encrypted zip records are not supported");
    if (method != 0) {
      return Status::Unsupported(where + ": compressed with method " + std::to_string(method) +
                                 "; torch.save writes stored (uncompressed) records only, and "
                                 "the converter refuses compressed ones");
    }
    if (csize != usize) {
      return Status::Corruption(where + ": stored record with compressed size " +
                                std::to_string(csize) + " != uncompressed size " +
                                std::to_string(usize) + " (lying sizes)");
    }
    // Local header.
    uint8_t lh[30];
    CKFMT_RETURN_IF_ERROR(read(lho, lh, sizeof lh, "record " + r.name + " local header"));
    if (U32(lh) != kLocalSig) {
      return Status::Corruption(where + ": no local header signature at offset " +
                                std::to_string(lho) + " (found " + Hex(U32(lh)) + ")");
    }
    uint16_t lnlen = U16(lh + 26), lxlen = U16(lh + 28);
    std::string lname_extra(size_t(lnlen) + lxlen, '\0');
    CKFMT_RETURN_IF_ERROR(
        read(lho + 30, lname_extra.data(), lname_extra.size(), "record " + r.name + " local header"));
    if (lname_extra.compare(0, lnlen, r.name) != 0 || lnlen != nlen) {
      return Status::Corruption(where + ": local header names \"" + lname_extra.substr(0, lnlen) +
                                "\" but the central directory names \"" + r.name + "\"");
    }
    if (U16(lh + 8) != method) {
      return Status::Corruption(where + ": local header method " + std::to_string(U16(lh + 8)) +
                                " != central directory method " + std::to_string(method));
    }
    if (!(U16(lh + 6) & 0x8)) {  // sizes are in the local header
      uint64_t lc = U32(lh + 18), lu = U32(lh + 22);
      if (lc == 0xffffffff || lu == 0xffffffff) {
        CKFMT_RETURN_IF_ERROR(ParseZip64Extra(
            reinterpret_cast<const uint8_t*>(lname_extra.data()) + lnlen, lxlen, lu == 0xffffffff,
            lc == 0xffffffff, false, &lu, &lc, nullptr, where + " (local header)"));
      }
      if (lu != usize || lc != csize || U32(lh + 14) != crc) {
        return Status::Corruption(where + ": local header says size " + std::to_string(lu) +
                                  " / crc " + Hex(U32(lh + 14)) + ", central directory says " +
                                  std::to_string(usize) + " / " + Hex(crc) + " (lying sizes)");
      }
    }
    r.header_offset = lho;
    r.data_offset = lho + 30 + lnlen + lxlen;
    r.size = usize;
    r.crc32 = crc;
    if (r.data_offset > cd_offset || r.size > cd_offset - r.data_offset) {
      return Status::Corruption(where + ": data [" + std::to_string(r.data_offset) + ", " +
                                std::to_string(r.data_offset + r.size) +
                                ") runs past the central directory at " +
                                std::to_string(cd_offset) + " (lying sizes or truncated)");
    }
    if (!by_name_.emplace(r.name, records_.size()).second) {
      return Status::Corruption(label_ + ": record " + r.name + " appears twice");
    }
    records_.push_back(std::move(r));
  }
  // Records must not overlap.
  std::vector<const ZipRecord*> order;
  for (const auto& r : records_) order.push_back(&r);
  std::sort(order.begin(), order.end(),
            [](const ZipRecord* a, const ZipRecord* b) { return a->header_offset < b->header_offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const ZipRecord* a = order[i - 1];
    const ZipRecord* b = order[i];
    if (b->header_offset < a->data_offset + a->size) {
      return Status::Corruption(label_ + ": records " + a->name + " and " + b->name +
                                " overlap (lying sizes)");
    }
  }
  return Status::OK();
}

const ZipRecord* ZipArchive::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &records_[it->second];
}

std::string ZipArchive::Where(const ZipRecord& r) const { return label_ + ": record " + r.name; }

Status ZipArchive::Read(const ZipRecord& r, uint64_t offset, void* dst, uint64_t n) const {
  if (offset > r.size || n > r.size - offset) {
    return Status::Corruption(Where(r) + ": needs bytes [" + std::to_string(offset) + ", " +
                              std::to_string(offset + n) + ") of a " + std::to_string(r.size) +
                              "-byte record");
  }
  return file_->ReadAt(base_ + r.data_offset + offset, dst, n, "record " + r.name);
}

Result<std::string> ZipArchive::ReadAll(const ZipRecord& r, uint64_t max_size) const {
  if (r.size > max_size) {
    return Status::Unsupported(Where(r) + ": " + std::to_string(r.size) +
                               " bytes exceeds the limit of " + std::to_string(max_size));
  }
  std::string s(r.size, '\0');
  CKFMT_RETURN_IF_ERROR(Read(r, 0, s.data(), s.size()));
  uint32_t crc = Crc32(0, s.data(), s.size());
  if (crc != r.crc32) {
    return Status::Corruption(Where(r) + ": CRC-32 " + Hex(crc) + " != recorded " + Hex(r.crc32));
  }
  return s;
}

}  // namespace ckfmt::convert
