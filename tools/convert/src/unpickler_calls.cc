// What a call of each whitelisted global builds (REDUCE, NEWOBJ): torch's
// tensor rebuilds, containers, encodings, DCP dataclasses as inert records.
#include <algorithm>
#include <string>
#include <vector>

#include "unpickler_impl.h"

namespace ckfmt::convert::unpickle_internal {
namespace {

Result<uint64_t> AsIndex(const Object& o, const std::string& what, const std::string& where) {
  if (o.kind == Kind::kInt && o.i >= 0) return static_cast<uint64_t>(o.i);
  if (o.kind == Kind::kBool) return static_cast<uint64_t>(o.b);
  return Status::Corruption(where + ": " + what + " is " + py::Describe(o) +
                            ", expected a non-negative int");
}

Result<std::vector<uint64_t>> AsIndexTuple(const Object& o, const std::string& what,
                                           const std::string& where) {
  if (o.kind != Kind::kTuple && o.kind != Kind::kList) {
    return Status::Corruption(where + ": " + what + " is " + py::Describe(o) + ", expected a tuple");
  }
  std::vector<uint64_t> v;
  for (const auto& it : o.items) {
    CKFMT_ASSIGN_OR_RETURN(uint64_t x, AsIndex(*it, what, where));
    v.push_back(x);
  }
  return v;
}

// Whether a tensor rebuild's `state` (torch's _get_obj_state: the tensor's
// __dict__, or a (__dict__, slots) tuple) sets any attribute.
bool SetsAttributes(const Object& state) {
  auto empty = [](const Object& o) {
    return o.kind == Kind::kNone || (o.kind == Kind::kDict && o.dict.empty());
  };
  if (state.kind == Kind::kTuple) {
    return std::any_of(state.items.begin(), state.items.end(),
                       [&](const Ref& r) { return !empty(*r); });
  }
  return !empty(state);
}

}  // namespace

Result<Ref> Unpickler::MakeTensor(const std::vector<Ref>& a, std::optional<DType> dtype) {
  std::string where = opts_.where + ": rebuilding a tensor";
  if (a.size() < 4) return Err("tensor rebuild with " + std::to_string(a.size()) + " arguments");
  if (a[0]->kind != Kind::kStorage) {
    return Err("tensor rebuild expects a storage, got " + py::Describe(*a[0]));
  }
  auto t = std::make_shared<py::TensorRef>();
  t->storage = a[0];
  const py::Storage& st = *a[0]->storage;
  t->dtype = dtype ? *dtype : st.dtype;
  if (!dtype && st.untyped) t->dtype = DType::kU8;
  CKFMT_ASSIGN_OR_RETURN(t->offset, AsIndex(*a[1], "storage offset", where));
  CKFMT_ASSIGN_OR_RETURN(t->size, AsIndexTuple(*a[2], "size", where));
  CKFMT_ASSIGN_OR_RETURN(t->stride, AsIndexTuple(*a[3], "stride", where));
  if (t->size.size() != t->stride.size()) {
    return Err("tensor size has " + std::to_string(t->size.size()) + " dimensions but stride has " +
               std::to_string(t->stride.size()));
  }
  auto o = py::Make(Kind::kTensor);
  o->tensor = std::move(t);
  return o;
}

// bytes(), bytes(b), bytearray(...) and _codecs.encode(text, encoding):
// protocols below 3 write b"" as bytes() and other bytes as
// _codecs.encode(their latin-1 text, "latin1").
Result<Ref> Unpickler::BytesCall(const std::string& name, const std::vector<Ref>& a) {
  const bool bytes_type = name != "_codecs.encode";
  if (bytes_type && a.empty()) return py::MakeBytes("");
  if (bytes_type && a.size() == 1 && a[0]->kind == Kind::kBytes) return py::MakeBytes(a[0]->s);
  if (a.size() < 1 || a.size() > 2) {
    return Err(name + " called with " + std::to_string(a.size()) + " arguments");
  }
  if (a[0]->kind != Kind::kStr) return Err(name + " of a " + py::Describe(*a[0]));
  std::string enc = a.size() == 2 && a[1]->kind == Kind::kStr ? a[1]->s : "utf-8";
  if (enc == "utf-8" || enc == "utf8") return py::MakeBytes(a[0]->s);
  if (enc != "latin1" && enc != "latin-1" && enc != "iso-8859-1") {
    return Err(name + " with encoding '" + enc + "' is not supported");
  }
  // UTF-8 code points below 256 -> bytes.
  std::string out;
  const std::string& s = a[0]->s;
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      out += char(c);
    } else if ((c & 0xe0) == 0xc0 && i + 1 < s.size()) {
      uint32_t cp = ((c & 0x1f) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3f);
      if (cp > 0xff) return Err(name + ": code point above 255 for latin1");
      out += char(cp);
      ++i;
    } else {
      return Err(name + ": code point above 255 for latin1");
    }
  }
  return py::MakeBytes(out);
}

Result<Ref> Unpickler::Reduce(const Ref& callable, const Ref& args, bool newobj) {
  auto symbolic = [&]() -> Ref {
    auto c = py::Make(Kind::kCall);
    c->s = newobj ? "newobj" : "reduce";
    c->callable = callable;
    c->args = args;
    return c;
  };
  if (callable->kind == Kind::kCall || (callable->kind == Kind::kGlobal && callable->disallowed)) {
    return symbolic();
  }
  if (callable->kind != Kind::kGlobal) {
    return Err("call of a " + py::Describe(*callable) + ", which is not a whitelisted global");
  }
  if (args->kind != Kind::kTuple) return Err("call arguments are not a tuple");
  const std::string name = callable->GlobalName();
  const auto& a = args->items;
  auto argc = [&](size_t lo, size_t hi) -> Status {
    if (a.size() < lo || a.size() > hi) {
      return Err(name + " called with " + std::to_string(a.size()) + " arguments");
    }
    return Status::OK();
  };
  if (newobj) {
    if (IsDataclass(name)) {
      auto o = py::Make(Kind::kInstance);
      o->s = callable->s;
      o->s2 = callable->s2;
      return o;
    }
    if (name.rfind("pathlib.", 0) != 0) return Err("NEWOBJ of " + name + " is not supported");
  }
  if (name == "collections.OrderedDict" || name == "collections.Counter" ||
      name == "builtins.dict") {
    CKFMT_RETURN_IF_ERROR(argc(0, 1));
    auto d = py::Make(Kind::kDict);
    if (name == "collections.OrderedDict") d->s = name;
    if (a.size() == 1) {
      const Object& src = *a[0];
      if (src.kind == Kind::kDict) {
        std::vector<Ref> kv;
        for (const auto& [k, v] : src.dict) {
          kv.push_back(k);
          kv.push_back(v);
        }
        CKFMT_RETURN_IF_ERROR(SetItems(d, kv));
      } else if (src.kind == Kind::kList || src.kind == Kind::kTuple) {
        std::vector<Ref> kv;
        for (const auto& p : src.items) {
          if ((p->kind != Kind::kTuple && p->kind != Kind::kList) || p->items.size() != 2) {
            return Err(name + " item is not a pair");
          }
          kv.push_back(p->items[0]);
          kv.push_back(p->items[1]);
        }
        CKFMT_RETURN_IF_ERROR(SetItems(d, kv));
      } else {
        return Err(name + " argument is a " + py::Describe(src));
      }
    }
    return d;
  }
  if (name == "builtins.set" || name == "builtins.frozenset" || name == "builtins.list" ||
      name == "builtins.tuple") {
    CKFMT_RETURN_IF_ERROR(argc(0, 1));
    auto s = py::Make(name == "builtins.list" ? Kind::kList
                      : name == "builtins.tuple" ? Kind::kTuple
                                                 : Kind::kSet);
    if (a.size() == 1) {
      if (a[0]->kind != Kind::kList && a[0]->kind != Kind::kTuple && a[0]->kind != Kind::kSet) {
        return Err(name + " argument is a " + py::Describe(*a[0]));
      }
      s->items = a[0]->items;
    }
    return s;
  }
  if (name == "_codecs.encode" || name == "builtins.bytearray" || name == "builtins.bytes") {
    CKFMT_ASSIGN_OR_RETURN(Ref b, BytesCall(name, a));
    if (name == "builtins.bytearray") b->s2 = "bytearray";
    return b;
  }
  if (name == "builtins.complex" || name == "builtins.slice") {
    auto t = py::Make(Kind::kTuple);
    t->items = a;
    t->s2 = name.substr(sizeof "builtins." - 1);
    return t;
  }
  if (name == "copyreg._reconstructor") {
    CKFMT_RETURN_IF_ERROR(argc(2, 3));
    if (a[0]->kind == Kind::kGlobal && a[0]->disallowed) return symbolic();
    if (a[0]->kind != Kind::kGlobal || !IsDataclass(a[0]->GlobalName())) {
      return Err("copyreg._reconstructor of " + py::Describe(*a[0]) + " is not supported");
    }
    auto o = py::Make(Kind::kInstance);
    o->s = a[0]->s;
    o->s2 = a[0]->s2;
    return o;
  }
  if (name == "torch._utils._rebuild_tensor") {
    CKFMT_RETURN_IF_ERROR(argc(4, 4));
    return MakeTensor(a, std::nullopt);
  }
  if (name == "torch._utils._rebuild_tensor_v2") {
    CKFMT_RETURN_IF_ERROR(argc(6, 7));
    return MakeTensor(a, std::nullopt);
  }
  if (name == "torch._utils._rebuild_tensor_v3") {
    CKFMT_RETURN_IF_ERROR(argc(7, 8));
    if (a[6]->kind != Kind::kGlobal || a[6]->s != "torch" || !DTypeOfTorchName(a[6]->s2)) {
      return Status::Unsupported(opts_.where + ": _rebuild_tensor_v3 with dtype " +
                                 py::Describe(*a[6]) + " is not supported");
    }
    return MakeTensor(a, DTypeOfTorchName(a[6]->s2));
  }
  if (name == "torch._utils._rebuild_parameter" ||
      name == "torch._utils._rebuild_parameter_with_state") {
    CKFMT_RETURN_IF_ERROR(argc(3, 4));
    if (a[0]->kind != Kind::kTensor) return Err(name + " of a " + py::Describe(*a[0]));
    a[0]->s2 = "torch.nn.Parameter";  // for the converter's note
    if (a.size() == 4 && SetsAttributes(*a[3])) a[0]->attributes_dropped = true;
    return a[0];
  }
  if (name == "torch._tensor._rebuild_from_type_v2") {
    CKFMT_RETURN_IF_ERROR(argc(4, 4));
    const Object& type = *a[1];
    std::string tn = type.kind == Kind::kGlobal ? type.GlobalName() : "";
    if (tn != "torch.Tensor" && tn != "torch.nn.parameter.Parameter") {
      if (type.kind == Kind::kGlobal && type.disallowed) return symbolic();
      return Status::Unsupported(opts_.where + ": tensor subclass " + py::Describe(type) +
                                 " is not supported");
    }
    CKFMT_ASSIGN_OR_RETURN(Ref t, Reduce(a[0], a[2], false));
    if (t->kind == Kind::kTensor) {
      if (tn == "torch.nn.parameter.Parameter") t->s2 = "torch.nn.Parameter";
      if (SetsAttributes(*a[3])) t->attributes_dropped = true;
    }
    return t;
  }
  if (name == "torch.Size") {
    CKFMT_RETURN_IF_ERROR(argc(0, 1));
    auto t = py::Make(Kind::kTuple);
    if (a.size() == 1) t->items = a[0]->items;
    t->s2 = name;
    return t;
  }
  if (name == "torch.device") {
    CKFMT_RETURN_IF_ERROR(argc(1, 2));
    if (a[0]->kind != Kind::kStr) return Err("torch.device of a " + py::Describe(*a[0]));
    std::string d = a[0]->s;
    if (a.size() == 2 && a[1]->kind == Kind::kInt) d += ":" + std::to_string(a[1]->i);
    Ref r = py::MakeStr(d);
    r->s2 = name;
    return r;
  }
  if (name == "torch.serialization._get_layout") {
    CKFMT_RETURN_IF_ERROR(argc(1, 1));
    if (a[0]->kind != Kind::kStr) return Err("_get_layout of a " + py::Describe(*a[0]));
    return py::MakeStr(a[0]->s);
  }
  if (name.rfind("pathlib.", 0) == 0) {
    std::string path;
    for (const auto& p : a) {
      if (p->kind != Kind::kStr) return Err(name + " part is a " + py::Describe(*p));
      if (!path.empty() && path.back() != '/') path += '/';
      path += p->s;
    }
    return py::MakeStr(path);
  }
  if (IsMemoryFormatEnum(name)) {
    CKFMT_RETURN_IF_ERROR(argc(1, 1));
    return a[0];
  }
  return Err("the whitelisted global " + name + " cannot be called this way");
}

}  // namespace ckfmt::convert::unpickle_internal
