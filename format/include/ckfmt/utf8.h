// UTF-8 validity, as the format requires of every string (spec/FORMAT.md,
// W5): well-formed sequences only, no overlong forms, no surrogates, no
// code point above U+10FFFF. NUL bytes are allowed.
#pragma once

#include <string_view>

namespace ckfmt {

bool IsValidUtf8(std::string_view s);

}  // namespace ckfmt
