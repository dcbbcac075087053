"""Key paths as spec/FORMAT.md Appendix C writes them ("optim/state/0"),
and the metadata keys that record Python containers ckfmt has no kind for."""

# Typing of Python containers that ckfmt has no kind for: the metadata keys
# `ckfmt convert` writes and reads (JSON arrays of key paths; null: root).
INT_KEY_DICTS = "convert.torch.int_key_dicts"
TUPLES = "convert.torch.tuples"
ORDERED_DICTS = "convert.torch.ordered_dicts"


def _format_component(c):
    if isinstance(c, int):
        return "[%d]" % c
    if c == "":
        return '""'
    out = "\\" if c.startswith('"') else ""
    for ch in c:
        out += "\\" + ch if ch in "/\\[" else ch
    return out


def _format_path(path):
    return "/".join(_format_component(c) for c in path)


def _component(cur, escaped):
    """One component's text: '""' is the empty key, [N] an index, unless
    an escape made them literal."""
    if not escaped and cur == '""':
        return ""
    if (not escaped and 3 <= len(cur) <= 21 and cur[0] == "[" and cur[-1] == "]"
            and cur[1:-1].isdigit() and cur[1:-1].isascii()):
        return int(cur[1:-1])
    return cur


def _parse_path(text):
    if "\\" not in text:  # no escapes: the common case, at C speed
        return [_component(c, False) for c in text.split("/")] if text else []
    path, cur, escaped = [], "", False
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cur, escaped, i = cur + text[i + 1], True, i + 2
            continue
        if ch == "/":
            path.append(_component(cur, escaped))
            cur, escaped = "", False
        else:
            cur += ch
        i += 1
    path.append(_component(cur, escaped))
    return path
