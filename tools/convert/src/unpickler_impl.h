// The unpickler's machine: its stack, marks and memo, and the helpers its
// opcodes (unpickler.cc) and the calls of whitelisted globals
// (unpickler_calls.cc) share. Internal to unpickler*.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "pickle_globals.h"
#include "unpickler.h"

namespace ckfmt::convert::unpickle_internal {

using py::Kind;
using py::Object;
using py::Ref;

// The pickle memo. pickle and torch number its entries 0, 1, 2, ...:
// those go in a vector. An id far beyond the entries so far is legal but
// written by no one: it goes in a map, so that a hostile id costs nothing.
class MemoTable {
 public:
  void Put(uint64_t id, Ref r) {
    if (id >= dense_.size() && id <= 2 * count_ + 1024) dense_.resize(id + 1);
    if (id < dense_.size()) {
      const bool fresh = !dense_[id] && (sparse_.empty() || !sparse_.erase(id));
      count_ += fresh;
      dense_[id] = std::move(r);
    } else {
      count_ += sparse_.insert_or_assign(id, std::move(r)).second;
    }
  }
  const Ref* Find(uint64_t id) const {
    if (id < dense_.size() && dense_[id]) return &dense_[id];
    auto it = sparse_.find(id);
    return it == sparse_.end() ? nullptr : &it->second;
  }
  size_t size() const { return count_; }  // distinct ids
  void MoveAllTo(std::vector<Ref>* out) {
    for (Ref& r : dense_) {
      if (r) out->push_back(std::move(r));
    }
    for (auto& [id, r] : sparse_) out->push_back(std::move(r));
    dense_.clear();
    sparse_.clear();
    count_ = 0;
  }

 private:
  std::vector<Ref> dense_;
  std::unordered_map<uint64_t, Ref> sparse_;
  size_t count_ = 0;
};

class Unpickler {
 public:
  Unpickler(ByteSource& src, const UnpickleOptions& o) : src_(src), opts_(o) {}
  Result<Ref> Run();
  // Every object the unpickler still references (stack, memo, ...).
  std::vector<Ref> TakeObjects() {
    std::vector<Ref> all = std::move(stack_);
    memo_.MoveAllTo(&all);
    for (Ref& r : keepalive_) all.push_back(std::move(r));
    keepalive_.clear();
    return all;
  }

 private:
  // Every cycle runs through a container changed after it was made (SETITEM,
  // APPEND, BUILD): a new object holds only older ones. Keeping each such
  // container until the end puts every cycle where TakeObjects finds it, so
  // Unpickle refuses it and takes it apart, even one popped off the stack
  // or dropped by an error before it could be checked: shared_ptr alone
  // would never free it.
  void KeepMutated(const Ref& o) {
    if (!o->kept) {
      o->kept = true;
      keepalive_.push_back(o);
    }
  }
  Status Err(const std::string& m) const {
    return Status::Corruption(opts_.where + ": pickle offset " + std::to_string(op_pos_) + ": " + m);
  }
  Status Refuse(const std::string& global) const {
    return Status::Unsupported(opts_.where + ": refusing pickle global " + global +
                               ": it is not on the whitelist of globals torch checkpoints use "
                               "(nothing was executed; pass allow_opaque_pickle to carry such "
                               "objects as opaque pickle bytes)");
  }
  template <typename T>
  Result<T> ReadLE(size_t n) {
    uint8_t b[8] = {};
    CKFMT_RETURN_IF_ERROR(src_.Read(b, n));
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t(b[i]) << (8 * i);
    return static_cast<T>(v);
  }
  Result<std::string> ReadBytes(uint64_t n) {
    if (n > src_.remaining()) {
      return Err("a length of " + std::to_string(n) + " runs past the end of the input (" +
                 std::to_string(src_.remaining()) + " bytes left)");
    }
    std::string s(n, '\0');
    CKFMT_RETURN_IF_ERROR(src_.Read(s.data(), n));
    return s;
  }
  Result<std::string> ReadLine() {
    std::string s;
    for (;;) {
      char c;
      CKFMT_RETURN_IF_ERROR(src_.Read(&c, 1));
      if (c == '\n') return s;
      s += c;
      if (s.size() > (1u << 20)) return Err("text line longer than 1 MiB");
    }
  }
  Result<Ref> Pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) {
      return Err("stack underflow");
    }
    Ref r = std::move(stack_.back());
    stack_.pop_back();
    return r;
  }
  Result<Ref*> Top() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) {
      return Err("stack underflow");
    }
    return &stack_.back();
  }
  Result<std::vector<Ref>> PopMark() {
    if (marks_.empty()) return Err("no MARK on the stack");
    size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Ref> items(std::make_move_iterator(stack_.begin() + m),
                           std::make_move_iterator(stack_.end()));
    stack_.resize(m);
    return items;
  }
  Status Push(Ref r) {
    stack_.push_back(std::move(r));
    return Status::OK();
  }
  // Immutable values repeat: a DCP .metadata holds about eight small ints,
  // two bools and five empty tuples per tensor. Each such value is one
  // shared object here (nothing mutates these kinds: SETITEM(S), APPEND(S)
  // and BUILD refuse or ignore them), which spares an allocation apiece.
  Ref Int(int64_t v) {
    if (v < 0 || v >= int64_t(kSharedInts)) return py::MakeInt(v);
    Ref& r = ints_[size_t(v)];
    if (!r) r = py::MakeInt(v);
    return r;
  }
  Ref Bool(bool v) {
    Ref& r = bools_[v];
    if (!r) r = py::MakeBool(v);
    return r;
  }
  Ref Shared(Ref& slot, Kind k) {
    if (!slot) slot = py::Make(k);
    return slot;
  }
  Status Memo(uint64_t idx) {
    CKFMT_ASSIGN_OR_RETURN(Ref * top, Top());
    memo_.Put(idx, *top);
    return Status::OK();
  }
  Status Get(uint64_t idx) {
    const Ref* r = memo_.Find(idx);
    if (!r) return Err("memo key " + std::to_string(idx) + " is not defined");
    return Push(*r);
  }
  Result<Ref> Global(const std::string& pickled_module, const std::string& name) {
    // Protocols 0-2 name builtins by their Python 2 modules, which Python 3
    // maps back when it loads them (pickle's fix_imports).
    const std::string module = pickled_module == "__builtin__" ? "builtins"
                               : pickled_module == "copy_reg"  ? "copyreg"
                                                               : pickled_module;
    auto g = py::Make(Kind::kGlobal);
    g->s = module;
    g->s2 = name;
    if (!IsAllowedGlobal(module, name)) {
      if (!opts_.allow_opaque) return Refuse(module + "." + name);
      g->disallowed = true;
    }
    return g;
  }
  Status SetItems(const Ref& d, std::vector<Ref>& kv);
  Status Append(const Ref& l, std::vector<Ref> items);
  Result<Ref> Reduce(const Ref& callable, const Ref& args, bool newobj);
  Result<Ref> BytesCall(const std::string& name, const std::vector<Ref>& a);
  Result<Ref> MakeTensor(const std::vector<Ref>& a, std::optional<DType> dtype);
  Status Build(Ref& obj, const Ref& state);
  Result<Ref> Step(uint8_t op, bool* stop);

  ByteSource& src_;
  const UnpickleOptions& opts_;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  MemoTable memo_;
  static constexpr size_t kSharedInts = 1024;
  std::vector<Ref> ints_ = std::vector<Ref>(kSharedInts);
  Ref bools_[2], none_, empty_tuple_;
  uint64_t op_pos_ = 0;
  // Dict key positions for Python's replace-on-duplicate semantics.
  std::unordered_map<const Object*, std::unordered_map<std::string, size_t>> dict_keys_;
  std::vector<Ref> keepalive_;
};

}  // namespace ckfmt::convert::unpickle_internal
