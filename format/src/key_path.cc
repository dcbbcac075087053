#include "ckfmt/key_path.h"

#include <cctype>

namespace ckfmt {

std::string FormatKeyPath(const KeyPath& path) {
  if (path.empty()) return "<root>";
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (i) out += '/';
    if (const auto* key = std::get_if<std::string>(&path[i])) {
      if (key->empty()) {
        out += "\"\"";  // the empty key; a key starting with '"' is escaped below
        continue;
      }
      if (key->front() == '"') out += '\\';
      for (char c : *key) {
        if (c == '/' || c == '\\' || c == '[') out += '\\';
        out += c;
      }
    } else {
      out += '[' + std::to_string(std::get<uint64_t>(path[i])) + ']';
    }
  }
  return out;
}

std::string DottedKeyPath(const KeyPath& path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (i) out += '.';
    if (const auto* key = std::get_if<std::string>(&path[i])) {
      out += *key;
    } else {
      out += std::to_string(std::get<uint64_t>(path[i]));
    }
  }
  return out;
}

bool HasPrefix(const KeyPath& path, const KeyPath& prefix) {
  if (prefix.size() > path.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (path[i] != prefix[i]) return false;
  }
  return true;
}

namespace {
bool IsIndexComponent(const std::string& s) {
  // At most 19 digits: always fits in 64 bits.
  if (s.size() < 3 || s.size() > 21 || s.front() != '[' || s.back() != ']') return false;
  for (size_t i = 1; i + 1 < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}
}  // namespace

KeyPath ParseKeyPath(const std::string& text) {
  KeyPath path;
  if (text.empty()) return path;
  std::string cur;
  bool escaped_any = false;
  auto flush = [&] {
    if (!escaped_any && cur == "\"\"") {
      path.emplace_back(std::string());
    } else if (!escaped_any && IsIndexComponent(cur)) {
      path.emplace_back(static_cast<uint64_t>(std::stoull(cur.substr(1, cur.size() - 2))));
    } else {
      path.emplace_back(cur);
    }
    cur.clear();
    escaped_any = false;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      cur += text[++i];
      escaped_any = true;
    } else if (c == '/') {
      flush();
    } else {
      cur += c;
    }
  }
  flush();
  return path;
}

}  // namespace ckfmt
