#include "ckfmt/utf8.h"

#include <cstdint>
#include <cstdio>

namespace ckfmt {

namespace {

// The length of the well-formed UTF-8 sequence at p[0, n) (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), or 0 if none.
size_t SequenceLength(const uint8_t* p, size_t n) {
  const uint8_t c = p[0];
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp, min;
  if ((c & 0xe0) == 0xc0) {
    len = 2, cp = c & 0x1f, min = 0x80;
  } else if ((c & 0xf0) == 0xe0) {
    len = 3, cp = c & 0x0f, min = 0x800;
  } else if ((c & 0xf8) == 0xf0) {
    len = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0;  // a continuation byte or 0xf8..0xff where a sequence starts
  }
  if (n < len) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((p[k] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (p[k] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const size_t len = SequenceLength(p + i, s.size() - i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string EscapeControlCharacters(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto hex = [&out](uint8_t b) {
    char buf[5];
    std::snprintf(buf, sizeof buf, "\\x%02x", b);
    out += buf;
  };
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const size_t len = SequenceLength(p + i, s.size() - i);
    const bool control = len == 1 ? p[i] < 0x20 || p[i] == 0x7f
                                  : len == 2 && p[i] == 0xc2 && p[i + 1] <= 0x9f;  // C1
    if (len == 0) {
      hex(p[i++]);  // not UTF-8: a raw 0x9b is a CSI to 8-bit terminals
    } else if (control) {
      for (size_t k = 0; k < len; ++k) hex(p[i + k]);
      i += len;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

}  // namespace ckfmt
