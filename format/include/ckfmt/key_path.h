// Key paths: where an entry sits in a nested state dict.
//
// A path is a list of components, each a dict key (any UTF-8, dots and
// slashes included) or a list index. {"optim", "state", 0u, "exp_avg"} is
// state["optim"]["state"][0]["exp_avg"] when "state" is a list.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace ckfmt {

using PathComponent = std::variant<std::string, uint64_t>;
using KeyPath = std::vector<PathComponent>;

// Human-readable form for messages and CLI filters: model/layers/[0]/weight.
// List indices are written [3]; '/', '\' and '[' in keys are escaped with
// '\', so a key "[3]" prints as \[3]. The empty key prints as "" (and a key
// starting with '"' gets a '\'). The root prints as <root>.
std::string FormatKeyPath(const KeyPath& path);

// The dotted name torch state dicts use ("layers.0.weight").
std::string DottedKeyPath(const KeyPath& path);

// True if `path` starts with every component of `prefix`.
bool HasPrefix(const KeyPath& path, const KeyPath& prefix);

// Parses the form FormatKeyPath writes (used by CLI filters). Components
// of the form [N] become indices.
KeyPath ParseKeyPath(const std::string& text);

}  // namespace ckfmt
