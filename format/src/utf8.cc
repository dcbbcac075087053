#include "ckfmt/utf8.h"

#include <cstdint>
#include <cstdio>

namespace ckfmt {

bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp, min;
    if ((c & 0xe0) == 0xc0) {
      len = 2, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return false;  // a continuation byte or 0xf8..0xff where a sequence starts
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return false;
      cp = cp << 6 | (p[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
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
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      hex(c);
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<uint8_t>(s[i + 1]) >= 0x80 &&
               static_cast<uint8_t>(s[i + 1]) <= 0x9f) {
      hex(c);
      hex(static_cast<uint8_t>(s[++i]));
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace ckfmt
