// The opcodes of pickle protocols 0-5, interpreted into pickle_object.h's
// objects; calls of globals are in unpickler_calls.cc.
#include "unpickler.h"

#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>

#include "unpickler_impl.h"

namespace ckfmt::convert {
namespace unpickle_internal {
namespace {

// The value of `s` read as hex digits; nullopt unless each character is one.
std::optional<uint32_t> ParseHex(std::string_view s) {
  uint32_t v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) return std::nullopt;
    v = v << 4 | uint32_t(d);
  }
  return v;
}

}  // namespace

Status Unpickler::SetItems(const Ref& d, std::vector<Ref>& kv) {
  if (kv.size() % 2) return Err("SETITEMS with an odd number of items");
  std::vector<std::pair<Ref, Ref>>* target = &d->dict;
  if (d->kind != Kind::kDict && d->kind != Kind::kCall && d->kind != Kind::kInstance) {
    return Err(std::string("SETITEM(S) on a ") + py::KindName(d->kind));
  }
  KeepMutated(d);  // which also keeps the pointer key below unique
  auto& pos = dict_keys_[d.get()];
  for (size_t i = 0; i < kv.size(); i += 2) {
    std::string k = py::KeyOf(*kv[i]);
    auto it = pos.find(k);
    if (it != pos.end()) {
      (*target)[it->second].second = std::move(kv[i + 1]);
    } else {
      pos.emplace(std::move(k), target->size());
      target->emplace_back(std::move(kv[i]), std::move(kv[i + 1]));
    }
  }
  return Status::OK();
}

Status Unpickler::Append(const Ref& l, std::vector<Ref> items) {
  if (l->kind != Kind::kList && l->kind != Kind::kSet && l->kind != Kind::kCall) {
    return Err(std::string("APPEND(S) on a ") + py::KindName(l->kind));
  }
  KeepMutated(l);
  for (auto& r : items) l->items.push_back(std::move(r));
  return Status::OK();
}

Status Unpickler::Build(Ref& obj, const Ref& state) {
  switch (obj->kind) {
    case Kind::kInstance:
      if (obj->state && obj->state->kind == Kind::kDict && state->kind == Kind::kDict) {
        KeepMutated(obj->state);
        for (const auto& kv : state->dict) obj->state->dict.push_back(kv);
      } else {
        KeepMutated(obj);
        obj->state = state;
      }
      return Status::OK();
    case Kind::kCall:
      KeepMutated(obj);
      obj->state = state;
      return Status::OK();
    case Kind::kDict:  // OrderedDict attributes (a state dict's _metadata)
      if (state->kind != Kind::kNone && !(state->kind == Kind::kDict && state->dict.empty())) {
        KeepMutated(obj);
        obj->state = state;
      }
      return Status::OK();
    case Kind::kTensor:  // tensor attributes (subclass state): dropped
      return Status::OK();
    default:
      return Err(std::string("BUILD on a ") + py::KindName(obj->kind));
  }
}

Result<Ref> Unpickler::Run() {
  bool stop = false;
  while (!stop) {
    op_pos_ = src_.position();
    uint8_t op;
    CKFMT_RETURN_IF_ERROR(src_.Read(&op, 1));
    CKFMT_ASSIGN_OR_RETURN(Ref r, Step(op, &stop));
    if (stop) return r;
  }
  return Err("unreachable");
}

Result<Ref> Unpickler::Step(uint8_t op, bool* stop) {
  auto ok = [] { return Ref(); };
  switch (op) {
    case 0x80: {  // PROTO
      CKFMT_ASSIGN_OR_RETURN(uint8_t v, ReadLE<uint8_t>(1));
      if (v > 5) return Err("pickle protocol " + std::to_string(v) + " is not supported");
      return ok();
    }
    case 0x95: {  // FRAME: a length hint only
      CKFMT_ASSIGN_OR_RETURN(uint64_t n, ReadLE<uint64_t>(8));
      (void)n;
      return ok();
    }
    case '.': {  // STOP
      CKFMT_ASSIGN_OR_RETURN(Ref r, Pop());
      if (!stack_.empty() || !marks_.empty()) {
        // Python tolerates leftovers; so do we, but the result is the top.
      }
      *stop = true;
      return r;
    }
    case '(': marks_.push_back(stack_.size()); return ok();
    case '0': { CKFMT_RETURN_IF_ERROR(Pop().status()); return ok(); }
    case '1': { CKFMT_RETURN_IF_ERROR(PopMark().status()); return ok(); }
    case '2': { CKFMT_ASSIGN_OR_RETURN(Ref * t, Top()); Ref c = *t; CKFMT_RETURN_IF_ERROR(Push(c)); return ok(); }
    case 'N': CKFMT_RETURN_IF_ERROR(Push(Shared(none_, Kind::kNone))); return ok();
    case 0x88: CKFMT_RETURN_IF_ERROR(Push(Bool(true))); return ok();
    case 0x89: CKFMT_RETURN_IF_ERROR(Push(Bool(false))); return ok();
    case 'J': { CKFMT_ASSIGN_OR_RETURN(uint32_t v, ReadLE<uint32_t>(4)); CKFMT_RETURN_IF_ERROR(Push(Int(int32_t(v)))); return ok(); }
    case 'K': { CKFMT_ASSIGN_OR_RETURN(uint8_t v, ReadLE<uint8_t>(1)); CKFMT_RETURN_IF_ERROR(Push(Int(v))); return ok(); }
    case 'M': { CKFMT_ASSIGN_OR_RETURN(uint16_t v, ReadLE<uint16_t>(2)); CKFMT_RETURN_IF_ERROR(Push(Int(v))); return ok(); }
    case 0x8a:    // LONG1
    case 0x8b: {  // LONG4
      uint64_t n;
      if (op == 0x8a) {
        CKFMT_ASSIGN_OR_RETURN(n, ReadLE<uint64_t>(1));
      } else {
        CKFMT_ASSIGN_OR_RETURN(uint32_t n4, ReadLE<uint32_t>(4));
        n = n4;
      }
      CKFMT_ASSIGN_OR_RETURN(std::string b, ReadBytes(n));
      if (n <= 8) {
        uint64_t v = 0;
        for (size_t i = 0; i < n; ++i) v |= uint64_t(uint8_t(b[i])) << (8 * i);
        if (n > 0 && n < 8 && (uint8_t(b[n - 1]) & 0x80)) v |= ~uint64_t(0) << (8 * n);  // sign-extend
        CKFMT_RETURN_IF_ERROR(Push(py::MakeInt(static_cast<int64_t>(v))));
      } else {
        auto o = py::Make(Kind::kBigInt);
        o->s = std::move(b);
        CKFMT_RETURN_IF_ERROR(Push(o));
      }
      return ok();
    }
    case 'I': {  // INT (text)
      CKFMT_ASSIGN_OR_RETURN(std::string l, ReadLine());
      if (l == "00") { CKFMT_RETURN_IF_ERROR(Push(py::MakeBool(false))); return ok(); }
      if (l == "01") { CKFMT_RETURN_IF_ERROR(Push(py::MakeBool(true))); return ok(); }
      char* end = nullptr;
      long long v = std::strtoll(l.c_str(), &end, 10);
      if (l.empty() || *end) return Err("bad INT '" + l + "'");
      CKFMT_RETURN_IF_ERROR(Push(py::MakeInt(v)));
      return ok();
    }
    case 'L': {  // LONG (text)
      CKFMT_ASSIGN_OR_RETURN(std::string l, ReadLine());
      if (!l.empty() && l.back() == 'L') l.pop_back();
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(l.c_str(), &end, 10);
      if (l.empty() || *end || errno) return Err("unsupported LONG '" + l + "'");
      CKFMT_RETURN_IF_ERROR(Push(py::MakeInt(v)));
      return ok();
    }
    case 'F': {
      CKFMT_ASSIGN_OR_RETURN(std::string l, ReadLine());
      char* end = nullptr;
      double v = std::strtod(l.c_str(), &end);
      if (l.empty() || *end) return Err("bad FLOAT '" + l + "'");
      CKFMT_RETURN_IF_ERROR(Push(py::MakeFloat(v)));
      return ok();
    }
    case 'G': {  // BINFLOAT, big-endian
      uint8_t b[8];
      CKFMT_RETURN_IF_ERROR(src_.Read(b, 8));
      uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits = (bits << 8) | b[i];
      double d;
      std::memcpy(&d, &bits, 8);
      CKFMT_RETURN_IF_ERROR(Push(py::MakeFloat(d)));
      return ok();
    }
    case 'X': case 0x8c: case 0x8d:  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
    case 'B': case 'C': case 0x8e:   // BINBYTES, SHORT_BINBYTES, BINBYTES8
    case 'T': case 'U': case 0x96: {  // BINSTRING, SHORT_BINSTRING, BYTEARRAY8
      uint64_t n;
      if (op == 0x8c || op == 'C' || op == 'U') {
        CKFMT_ASSIGN_OR_RETURN(n, ReadLE<uint64_t>(1));
      } else if (op == 'X' || op == 'B' || op == 'T') {
        CKFMT_ASSIGN_OR_RETURN(n, ReadLE<uint64_t>(4));
      } else {
        CKFMT_ASSIGN_OR_RETURN(n, ReadLE<uint64_t>(8));
      }
      CKFMT_ASSIGN_OR_RETURN(std::string s, ReadBytes(n));
      bool is_str = op == 'X' || op == 0x8c || op == 0x8d || op == 'T' || op == 'U';
      CKFMT_RETURN_IF_ERROR(Push(is_str ? py::MakeStr(std::move(s)) : py::MakeBytes(std::move(s))));
      return ok();
    }
    case 'S': {  // STRING: a quoted repr
      CKFMT_ASSIGN_OR_RETURN(std::string l, ReadLine());
      if (l.size() < 2 || (l[0] != '\'' && l[0] != '"') || l.back() != l[0]) {
        return Err("bad STRING");
      }
      std::string out;
      for (size_t i = 1; i + 1 < l.size(); ++i) {
        if (l[i] != '\\' || i + 2 >= l.size()) {
          out += l[i];
          continue;
        }
        char c = l[++i];
        if (c == 'n') out += '\n';
        else if (c == 't') out += '\t';
        else if (c == 'r') out += '\r';
        else if (c == 'x' && i + 2 < l.size()) {
          auto v = ParseHex(std::string_view(l).substr(i + 1, 2));
          if (!v) return Err("bad \\x escape in STRING");
          out += char(*v);
          i += 2;
        } else out += c;
      }
      CKFMT_RETURN_IF_ERROR(Push(py::MakeStr(out)));
      return ok();
    }
    case 'V': {  // UNICODE: raw-unicode-escape
      CKFMT_ASSIGN_OR_RETURN(std::string l, ReadLine());
      std::string out;
      for (size_t i = 0; i < l.size(); ++i) {
        if (l[i] == '\\' && i + 5 < l.size() + 0 && l[i + 1] == 'u') {
          auto hex = ParseHex(std::string_view(l).substr(i + 2, 4));
          if (!hex) return Err("bad \\u escape in UNICODE");
          uint32_t cp = *hex;
          i += 5;
          if (cp < 0x80) out += char(cp);
          else if (cp < 0x800) { out += char(0xc0 | (cp >> 6)); out += char(0x80 | (cp & 0x3f)); }
          else { out += char(0xe0 | (cp >> 12)); out += char(0x80 | ((cp >> 6) & 0x3f)); out += char(0x80 | (cp & 0x3f)); }
        } else {
          auto c = static_cast<uint8_t>(l[i]);
          if (c < 0x80) out += char(c);
          else { out += char(0xc0 | (c >> 6)); out += char(0x80 | (c & 0x3f)); }
        }
      }
      CKFMT_RETURN_IF_ERROR(Push(py::MakeStr(out)));
      return ok();
    }
    case '}': CKFMT_RETURN_IF_ERROR(Push(py::Make(Kind::kDict))); return ok();
    case ']': CKFMT_RETURN_IF_ERROR(Push(py::Make(Kind::kList))); return ok();
    case ')': CKFMT_RETURN_IF_ERROR(Push(Shared(empty_tuple_, Kind::kTuple))); return ok();
    case 0x8f: CKFMT_RETURN_IF_ERROR(Push(py::Make(Kind::kSet))); return ok();
    case 'd': {
      CKFMT_ASSIGN_OR_RETURN(auto items, PopMark());
      auto d = py::Make(Kind::kDict);
      CKFMT_RETURN_IF_ERROR(SetItems(d, items));
      CKFMT_RETURN_IF_ERROR(Push(d));
      return ok();
    }
    case 'l': case 't': case 0x91: {  // LIST, TUPLE, FROZENSET
      CKFMT_ASSIGN_OR_RETURN(auto items, PopMark());
      auto o = py::Make(op == 'l' ? Kind::kList : op == 't' ? Kind::kTuple : Kind::kSet);
      o->items = std::move(items);
      CKFMT_RETURN_IF_ERROR(Push(o));
      return ok();
    }
    case 0x85: case 0x86: case 0x87: {  // TUPLE1-3
      size_t n = op - 0x84;
      auto o = py::Make(Kind::kTuple);
      o->items.resize(n);
      for (size_t i = n; i-- > 0;) {
        CKFMT_ASSIGN_OR_RETURN(o->items[i], Pop());
      }
      CKFMT_RETURN_IF_ERROR(Push(o));
      return ok();
    }
    case 's': {  // SETITEM
      CKFMT_ASSIGN_OR_RETURN(Ref v, Pop());
      CKFMT_ASSIGN_OR_RETURN(Ref k, Pop());
      CKFMT_ASSIGN_OR_RETURN(Ref * d, Top());
      std::vector<Ref> kv = {k, v};
      CKFMT_RETURN_IF_ERROR(SetItems(*d, kv));
      return ok();
    }
    case 'u': {  // SETITEMS
      CKFMT_ASSIGN_OR_RETURN(auto items, PopMark());
      CKFMT_ASSIGN_OR_RETURN(Ref * d, Top());
      CKFMT_RETURN_IF_ERROR(SetItems(*d, items));
      return ok();
    }
    case 'a': {
      CKFMT_ASSIGN_OR_RETURN(Ref v, Pop());
      CKFMT_ASSIGN_OR_RETURN(Ref * l, Top());
      CKFMT_RETURN_IF_ERROR(Append(*l, {v}));
      return ok();
    }
    case 'e': case 0x90: {  // APPENDS, ADDITEMS
      CKFMT_ASSIGN_OR_RETURN(auto items, PopMark());
      CKFMT_ASSIGN_OR_RETURN(Ref * l, Top());
      CKFMT_RETURN_IF_ERROR(Append(*l, std::move(items)));
      return ok();
    }
    case 'q': { CKFMT_ASSIGN_OR_RETURN(uint64_t i, ReadLE<uint64_t>(1)); CKFMT_RETURN_IF_ERROR(Memo(i)); return ok(); }
    case 'r': { CKFMT_ASSIGN_OR_RETURN(uint64_t i, ReadLE<uint64_t>(4)); CKFMT_RETURN_IF_ERROR(Memo(i)); return ok(); }
    case 0x94: CKFMT_RETURN_IF_ERROR(Memo(memo_.size())); return ok();
    case 'p': {
      CKFMT_ASSIGN_OR_RETURN(std::string l, ReadLine());
      CKFMT_RETURN_IF_ERROR(Memo(std::strtoull(l.c_str(), nullptr, 10)));
      return ok();
    }
    case 'h': { CKFMT_ASSIGN_OR_RETURN(uint64_t i, ReadLE<uint64_t>(1)); CKFMT_RETURN_IF_ERROR(Get(i)); return ok(); }
    case 'j': { CKFMT_ASSIGN_OR_RETURN(uint64_t i, ReadLE<uint64_t>(4)); CKFMT_RETURN_IF_ERROR(Get(i)); return ok(); }
    case 'g': {
      CKFMT_ASSIGN_OR_RETURN(std::string l, ReadLine());
      CKFMT_RETURN_IF_ERROR(Get(std::strtoull(l.c_str(), nullptr, 10)));
      return ok();
    }
    case 'c': {  // GLOBAL
      CKFMT_ASSIGN_OR_RETURN(std::string module, ReadLine());
      CKFMT_ASSIGN_OR_RETURN(std::string name, ReadLine());
      CKFMT_ASSIGN_OR_RETURN(Ref g, Global(module, name));
      CKFMT_RETURN_IF_ERROR(Push(g));
      return ok();
    }
    case 0x93: {  // STACK_GLOBAL
      CKFMT_ASSIGN_OR_RETURN(Ref name, Pop());
      CKFMT_ASSIGN_OR_RETURN(Ref module, Pop());
      if (module->kind != Kind::kStr || name->kind != Kind::kStr) {
        return Err("STACK_GLOBAL needs two strings");
      }
      CKFMT_ASSIGN_OR_RETURN(Ref g, Global(module->s, name->s));
      CKFMT_RETURN_IF_ERROR(Push(g));
      return ok();
    }
    case 'R': {  // REDUCE
      CKFMT_ASSIGN_OR_RETURN(Ref args, Pop());
      CKFMT_ASSIGN_OR_RETURN(Ref callable, Pop());
      CKFMT_ASSIGN_OR_RETURN(Ref r, Reduce(callable, args, false));
      CKFMT_RETURN_IF_ERROR(Push(r));
      return ok();
    }
    case 0x81: {  // NEWOBJ
      CKFMT_ASSIGN_OR_RETURN(Ref args, Pop());
      CKFMT_ASSIGN_OR_RETURN(Ref cls, Pop());
      CKFMT_ASSIGN_OR_RETURN(Ref r, Reduce(cls, args, true));
      CKFMT_RETURN_IF_ERROR(Push(r));
      return ok();
    }
    case 0x92: {  // NEWOBJ_EX
      CKFMT_ASSIGN_OR_RETURN(Ref kwargs, Pop());
      CKFMT_ASSIGN_OR_RETURN(Ref args, Pop());
      CKFMT_ASSIGN_OR_RETURN(Ref cls, Pop());
      if (kwargs->kind == Kind::kDict && !kwargs->dict.empty() &&
          !(cls->kind == Kind::kGlobal && cls->disallowed)) {
        return Err("NEWOBJ_EX with keyword arguments is not supported");
      }
      CKFMT_ASSIGN_OR_RETURN(Ref r, Reduce(cls, args, true));
      if (r->kind == Kind::kCall) r->state = nullptr;
      CKFMT_RETURN_IF_ERROR(Push(r));
      return ok();
    }
    case 'i': case 'o': {  // INST, OBJ: old-style class instantiation
      Ref cls;
      std::vector<Ref> items;
      if (op == 'i') {
        CKFMT_ASSIGN_OR_RETURN(std::string module, ReadLine());
        CKFMT_ASSIGN_OR_RETURN(std::string name, ReadLine());
        CKFMT_ASSIGN_OR_RETURN(cls, Global(module, name));
        CKFMT_ASSIGN_OR_RETURN(items, PopMark());
      } else {
        CKFMT_ASSIGN_OR_RETURN(items, PopMark());
        if (items.empty()) return Err("OBJ without a class");
        cls = items.front();
        items.erase(items.begin());
      }
      auto args = py::Make(Kind::kTuple);
      args->items = std::move(items);
      CKFMT_ASSIGN_OR_RETURN(Ref r, Reduce(cls, args, true));
      CKFMT_RETURN_IF_ERROR(Push(r));
      return ok();
    }
    case 'b': {  // BUILD
      CKFMT_ASSIGN_OR_RETURN(Ref state, Pop());
      CKFMT_ASSIGN_OR_RETURN(Ref * obj, Top());
      CKFMT_RETURN_IF_ERROR(Build(*obj, state));
      return ok();
    }
    case 'Q': case 'P': {  // BINPERSID, PERSID
      Ref pid;
      if (op == 'Q') {
        CKFMT_ASSIGN_OR_RETURN(pid, Pop());
      } else {
        CKFMT_ASSIGN_OR_RETURN(std::string l, ReadLine());
        pid = py::MakeStr(l);
      }
      if (!opts_.persistent_load) return Err("unexpected persistent id in this pickle");
      CKFMT_ASSIGN_OR_RETURN(Ref r, opts_.persistent_load(pid));
      CKFMT_RETURN_IF_ERROR(Push(r));
      return ok();
    }
    case 0x82: case 0x83: case 0x84:
      return Status::Unsupported(opts_.where + ": pickle EXT opcodes (copyreg extension "
                                 "registry) are refused: they name arbitrary globals");
    case 0x97: case 0x98: case 0x99:
      return Status::Unsupported(opts_.where + ": pickle protocol 5 out-of-band buffers are "
                                 "not supported");
    default: {
      char buf[8];
      std::snprintf(buf, sizeof buf, "0x%02x", op);
      return Err(std::string("unknown pickle opcode ") + buf);
    }
  }
}

}  // namespace unpickle_internal

using py::Ref;

Result<Ref> Unpickle(ByteSource& src, const UnpickleOptions& options) {
  unpickle_internal::Unpickler u(src, options);
  Result<Ref> result = u.Run();
  // A pickle can build what no checkpoint holds and shared_ptr cannot free
  // safely: a list appended to itself (never freed), or lists nested a
  // million deep (freed by recursion that overflows the stack). Refused,
  // then taken apart without recursion.
  std::vector<Ref> all = u.TakeObjects();
  if (result.ok()) all.push_back(*result);
  Status s = result.ok() ? py::CheckGraph(all, options.where) : result.status();
  if (!s.ok()) {
    py::Dismantle(std::move(all));
    return s;
  }
  return result;
}

Result<Ref> Unpickle(const std::string& bytes, const UnpickleOptions& options) {
  MemorySource src(bytes.data(), bytes.size(), options.where);
  return Unpickle(src, options);
}

}  // namespace ckfmt::convert
