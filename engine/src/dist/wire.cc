#include "wire.h"

namespace ckfmt::dist {

void WireWriter::Path(const KeyPath& p) {
  U64(p.size());
  for (const auto& c : p) {
    if (const auto* key = std::get_if<std::string>(&c)) {
      U8(0);
      Str(*key);
    } else {
      U8(1);
      U64(std::get<uint64_t>(c));
    }
  }
}

void WireWriter::Reg(const Region& r) {
  U8(r.kind == Region::Kind::kFlat ? 1 : 0);
  if (r.kind == Region::Kind::kFlat) {
    U64(r.start);
    U64(r.length);
  } else {
    Dims(r.offsets);
    Dims(r.lengths);
  }
}

Status WireReader::status() const {
  if (ok_) return Status::OK();
  return Status::Internal("malformed message from " + who_ + " (" + std::to_string(in_.size()) +
                          " bytes)");
}

bool WireReader::Need(uint64_t n) {
  if (!ok_ || n > in_.size() - pos_) {
    ok_ = false;
    return false;
  }
  return true;
}

uint8_t WireReader::U8() {
  if (!Need(1)) return 0;
  return static_cast<uint8_t>(in_[pos_++]);
}

uint64_t WireReader::U64() {
  if (!Need(8)) return 0;
  uint64_t v = GetU64(reinterpret_cast<const uint8_t*>(in_.data() + pos_));
  pos_ += 8;
  return v;
}

uint64_t WireReader::Count(uint64_t min_item) {
  uint64_t n = U64();
  if (ok_ && min_item > 0 && n > (in_.size() - pos_) / min_item) ok_ = false;
  return ok_ ? n : 0;
}

std::string WireReader::Str() {
  uint64_t n = Count(1);
  if (!Need(n)) return {};
  std::string s = in_.substr(pos_, n);
  pos_ += n;
  return s;
}

std::vector<uint64_t> WireReader::Dims() {
  uint64_t n = Count(8);
  std::vector<uint64_t> v;
  v.reserve(n);
  for (uint64_t i = 0; i < n && ok_; ++i) v.push_back(U64());
  return v;
}

KeyPath WireReader::Path() {
  uint64_t n = Count(2);
  KeyPath p;
  for (uint64_t i = 0; i < n && ok_; ++i) {
    uint8_t tag = U8();
    if (tag == 0) {
      p.emplace_back(Str());
    } else if (tag == 1) {
      p.emplace_back(U64());
    } else {
      ok_ = false;
    }
  }
  return p;
}

Region WireReader::Reg() {
  uint8_t kind = U8();
  if (kind == 1) {
    uint64_t start = U64();
    return Region::Flat(start, U64());
  }
  if (kind != 0) ok_ = false;
  auto offsets = Dims();
  auto lengths = Dims();
  if (offsets.size() != lengths.size()) ok_ = false;
  return Region::Box(std::move(offsets), std::move(lengths));
}

}  // namespace ckfmt::dist
