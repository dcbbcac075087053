#include "ckfmt/state_dict.h"

namespace ckfmt {

Value* Dict::Find(const std::string& key) {
  auto it = pos_.find(key);
  return it == pos_.end() ? nullptr : &values_[it->second];
}

const Value* Dict::Find(const std::string& key) const {
  auto it = pos_.find(key);
  return it == pos_.end() ? nullptr : &values_[it->second];
}

Value& Dict::Set(const std::string& key, Value value) {
  if (Value* v = Find(key)) return *v = std::move(value);
  pos_.emplace(key, keys_.size());
  keys_.push_back(key);
  values_.push_back(std::move(value));
  return values_.back();
}

bool Dict::Erase(const std::string& key) {
  auto it = pos_.find(key);
  if (it == pos_.end()) return false;
  size_t i = it->second;
  keys_.erase(keys_.begin() + i);
  values_.erase(values_.begin() + i);
  pos_.erase(it);
  for (auto& [k, p] : pos_) {
    if (p > i) --p;
  }
  return true;
}

const char* ValueKindName(Value::Kind k) {
  switch (k) {
    case Value::Kind::kNone: return "none";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "string";
    case Value::Kind::kBytes: return "bytes";
    case Value::Kind::kTensor: return "tensor";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kList: return "list";
  }
  return "unknown";
}

namespace {

template <typename V>
V* FindImpl(V* v, const KeyPath& path) {
  for (const auto& c : path) {
    if (const auto* key = std::get_if<std::string>(&c)) {
      if (!v->is_dict()) return nullptr;
      v = v->as_dict().Find(*key);
    } else {
      uint64_t i = std::get<uint64_t>(c);
      if (!v->is_list() || i >= v->as_list().size()) return nullptr;
      v = &v->as_list()[i];
    }
    if (!v) return nullptr;
  }
  return v;
}

// "an int", "a dict": the kind of `v` with its article, for messages.
std::string KindWithArticle(const Value& v) {
  return std::string(v.kind() == Value::Kind::kInt ? "an " : "a ") + ValueKindName(v.kind());
}

}  // namespace

Value* Value::Find(const KeyPath& path) { return FindImpl(this, path); }
const Value* Value::Find(const KeyPath& path) const { return FindImpl(this, path); }

Status InsertAtPath(Value* root, const KeyPath& path, Value value) {
  if (path.empty()) return Status::InvalidArgument("cannot insert at the root path");
  Value* v = root;
  for (size_t i = 0; i < path.size(); ++i) {
    const bool last = i + 1 == path.size();
    // The container the next component needs, should it have to be created.
    auto fresh = [&]() -> Value {
      if (last) return std::move(value);
      return std::holds_alternative<std::string>(path[i + 1]) ? Value(Dict{}) : Value(List{});
    };
    // Built only for an error: copying the prefix at every level made one
    // insertion cost d^2 for a path of depth d, and a file of d nested
    // containers d^3.
    auto so_far = [&] { return KeyPath(path.begin(), path.begin() + i); };
    if (const auto* key = std::get_if<std::string>(&path[i])) {
      if (!v->is_dict()) {
        return Status::Mismatch(FormatKeyPath(so_far()) + " is " + KindWithArticle(*v) +
                                ", expected a dict to hold key \"" + *key + "\"");
      }
      Value* child = v->as_dict().Find(*key);
      v = child && !last ? child : &v->as_dict().Set(*key, fresh());
    } else {
      uint64_t idx = std::get<uint64_t>(path[i]);
      if (!v->is_list()) {
        return Status::Mismatch(FormatKeyPath(so_far()) + " is " + KindWithArticle(*v) +
                                ", expected a list to hold index " + std::to_string(idx));
      }
      List& list = v->as_list();
      if (idx > list.size()) {
        return Status::Mismatch(FormatKeyPath(so_far()) + " has " + std::to_string(list.size()) +
                                " elements; cannot insert at index " + std::to_string(idx));
      }
      if (idx == list.size()) {
        list.push_back(fresh());
      } else if (last) {
        list[idx] = std::move(value);
      }
      v = &list[idx];
    }
  }
  return Status::OK();
}

namespace {
void Visit(const Value& v, KeyPath& path,
           const std::function<void(const KeyPath&, const Value&)>& fn) {
  if (v.is_dict()) {
    const Dict& d = v.as_dict();
    for (size_t i = 0; i < d.size(); ++i) {
      path.emplace_back(d.key(i));
      fn(path, d.value(i));
      Visit(d.value(i), path, fn);
      path.pop_back();
    }
  } else if (v.is_list()) {
    const List& l = v.as_list();
    for (size_t i = 0; i < l.size(); ++i) {
      path.emplace_back(uint64_t{i});
      fn(path, l[i]);
      Visit(l[i], path, fn);
      path.pop_back();
    }
  }
}
}  // namespace

void VisitValues(const Value& root,
                 const std::function<void(const KeyPath&, const Value&)>& fn) {
  KeyPath path;
  Visit(root, path, fn);
}

}  // namespace ckfmt
