// UTF-8 validity, as the format requires of every string (spec/FORMAT.md,
// W5): well-formed sequences only, no overlong forms, no surrogates, no
// code point above U+10FFFF. NUL bytes are allowed.
#pragma once

#include <string>
#include <string_view>

namespace ckfmt {

bool IsValidUtf8(std::string_view s);

// `s` with every control character written as \xNN: C0 (below 0x20, line
// breaks included), DEL, and C1 (U+0080 to U+009F, whose UTF-8 form is
// C2 80 to C2 9F; as \xc2\xNN), and every byte that is not part of
// well-formed UTF-8 likewise. For printing text that comes from a file
// (keys, names, messages quoting them): it stays one line, is valid UTF-8
// and cannot send a terminal escape sequence. Other characters are kept.
std::string EscapeControlCharacters(std::string_view s);

}  // namespace ckfmt
