// The state-dict value type: nested dicts and lists of tensors and objects.
//
// A Value is one of: none, bool, int, float, string, bytes (an opaque blob
// with a content-type tag, e.g. a pickled data-loader state), tensor, dict,
// list. Dicts keep insertion order; keys are arbitrary UTF-8 strings.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "ckfmt/key_path.h"
#include "ckfmt/status.h"
#include "ckfmt/tensor.h"

namespace ckfmt {

class Value;

// An insertion-ordered map from string to Value.
class Dict {
 public:
  size_t size() const { return keys_.size(); }
  bool empty() const { return keys_.empty(); }
  Value* Find(const std::string& key);
  const Value* Find(const std::string& key) const;
  // Inserts or replaces; returns the stored value.
  Value& Set(const std::string& key, Value value);
  // Removes `key` if present; returns whether it was.
  bool Erase(const std::string& key);
  const std::string& key(size_t i) const { return keys_[i]; }
  // Defined after Value: indexing a vector needs the complete type.
  Value& value(size_t i);
  const Value& value(size_t i) const;

 private:
  std::vector<std::string> keys_;
  std::vector<Value> values_;
  std::unordered_map<std::string, size_t> pos_;
};

using List = std::vector<Value>;

struct Bytes {
  std::string content_type;  // e.g. "pickle", "json", "raw"
  std::string data;
  bool operator==(const Bytes&) const = default;
};

struct None {
  bool operator==(const None&) const = default;
};

class Value {
 public:
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kBytes, kTensor, kDict, kList };

  Value() : v_(None{}) {}
  Value(None) : v_(None{}) {}                         // NOLINT
  Value(bool b) : v_(b) {}                            // NOLINT
  Value(int64_t i) : v_(i) {}                         // NOLINT
  Value(int i) : v_(int64_t{i}) {}                    // NOLINT
  Value(double d) : v_(d) {}                          // NOLINT
  Value(std::string s) : v_(std::move(s)) {}          // NOLINT
  Value(const char* s) : v_(std::string(s)) {}        // NOLINT
  Value(Bytes b) : v_(std::move(b)) {}                // NOLINT
  Value(Tensor t) : v_(std::move(t)) {}               // NOLINT
  Value(Dict d) : v_(std::move(d)) {}                 // NOLINT
  Value(List l) : v_(std::move(l)) {}                 // NOLINT

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_tensor() const { return kind() == Kind::kTensor; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_list() const { return kind() == Kind::kList; }

  // REQUIRES: the matching kind().
  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const Bytes& as_bytes() const { return std::get<Bytes>(v_); }
  Bytes& as_bytes() { return std::get<Bytes>(v_); }
  const Tensor& as_tensor() const { return std::get<Tensor>(v_); }
  Tensor& as_tensor() { return std::get<Tensor>(v_); }
  const Dict& as_dict() const { return std::get<Dict>(v_); }
  Dict& as_dict() { return std::get<Dict>(v_); }
  const List& as_list() const { return std::get<List>(v_); }
  List& as_list() { return std::get<List>(v_); }

  // The value at `path` below this one, or nullptr.
  Value* Find(const KeyPath& path);
  const Value* Find(const KeyPath& path) const;

 private:
  std::variant<None, bool, int64_t, double, std::string, Bytes, Tensor, Dict, List> v_;
};

inline Value& Dict::value(size_t i) { return values_[i]; }
inline const Value& Dict::value(size_t i) const { return values_[i]; }

const char* ValueKindName(Value::Kind k);

// Stores `value` at `path` below `root`, creating missing parent dicts (for
// key components) and extending lists (for index components; a list grows
// only by appending at its end). Fails with Mismatch when a parent on the
// way is not a container of the right kind.
// REQUIRES: root->is_dict().
Status InsertAtPath(Value* root, const KeyPath& path, Value value);

// Calls fn(path, value) for every value below `root` in pre-order
// (containers before their children; the root itself is not visited).
void VisitValues(const Value& root,
                 const std::function<void(const KeyPath&, const Value&)>& fn);

}  // namespace ckfmt
