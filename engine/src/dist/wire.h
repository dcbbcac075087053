// A small binary encoding for the messages ranks exchange (plans, piece
// records). Little-endian; the decoder checks every bound and reports
// malformed input as an error naming the sender, never trusting a length.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "ckfmt/file_layout.h"
#include "ckfmt/key_path.h"
#include "ckfmt/region.h"

namespace ckfmt::dist {

class WireWriter {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U64(uint64_t v) {
    uint8_t b[8];
    PutU64(b, v);
    out_.append(reinterpret_cast<char*>(b), 8);
  }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void F64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    U64(bits);
  }
  void Str(const std::string& s) {
    U64(s.size());
    out_ += s;
  }
  void Dims(const std::vector<uint64_t>& v) {
    U64(v.size());
    for (uint64_t x : v) U64(x);
  }
  void Path(const KeyPath& p);
  void Reg(const Region& r);
  std::string& str() { return out_; }

 private:
  std::string out_;
};

class WireReader {
 public:
  WireReader(const std::string& in, std::string who) : in_(in), who_(std::move(who)) {}
  bool ok() const { return ok_; }
  bool done() const { return pos_ == in_.size(); }
  // Non-OK once any read ran past the end or met an impossible value.
  Status status() const;

  uint8_t U8();
  uint64_t U64();
  int64_t I64() { return static_cast<int64_t>(U64()); }
  double F64() {
    uint64_t bits = U64();
    double v;
    std::memcpy(&v, &bits, 8);
    return v;
  }
  std::string Str();
  std::vector<uint64_t> Dims();
  KeyPath Path();
  Region Reg();
  // A count of items each at least `min_item` bytes long, checked against
  // what remains (so a corrupt count cannot make the caller allocate).
  uint64_t Count(uint64_t min_item);
  void Fail() { ok_ = false; }

 private:
  bool Need(uint64_t n);
  const std::string& in_;
  std::string who_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace ckfmt::dist
