#include "unpickler.h"

#include <cstring>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

namespace ckfmt::convert {

using py::Kind;
using py::Object;
using py::Ref;

Status MemorySource::Read(void* dst, size_t n) {
  if (n > size_ - pos_) {
    return Status::Corruption(where_ + ": pickle ends early (needs " + std::to_string(n) +
                              " more bytes at offset " + std::to_string(pos_) + ", has " +
                              std::to_string(size_ - pos_) + ")");
  }
  std::memcpy(dst, p_ + pos_, n);
  pos_ += n;
  return Status::OK();
}

Status FileSource::Read(void* dst, size_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  while (n > 0) {
    if (pos_ >= buf_start_ && pos_ < buf_start_ + buf_.size()) {
      size_t k = std::min<uint64_t>(n, buf_start_ + buf_.size() - pos_);
      std::memcpy(out, buf_.data() + (pos_ - buf_start_), k);
      out += k;
      pos_ += k;
      n -= k;
      continue;
    }
    if (n >= (1u << 16)) {  // large reads bypass the buffer
      CKFMT_RETURN_IF_ERROR(file_->ReadAt(pos_, out, n, "pickle"));
      pos_ += n;
      return Status::OK();
    }
    uint64_t want = std::min<uint64_t>(1u << 16, file_->size() - std::min(pos_, file_->size()));
    if (want < n) {
      return Status::Corruption(file_->path() + ": pickle ends early at offset " +
                                std::to_string(file_->size()) + " (truncated?)");
    }
    buf_.resize(want);
    CKFMT_RETURN_IF_ERROR(file_->ReadAt(pos_, buf_.data(), want, "pickle"));
    buf_start_ = pos_;
  }
  return Status::OK();
}

namespace {

const std::set<std::string>& AllowedGlobals() {
  static const std::set<std::string> s = {
      "collections.OrderedDict", "collections.Counter", "builtins.set", "builtins.frozenset",
      "builtins.bytearray", "builtins.complex", "builtins.slice", "builtins.object",
      "builtins.dict", "builtins.list", "builtins.tuple", "__builtin__.set",
      "_codecs.encode", "copyreg._reconstructor",
      "torch._utils._rebuild_tensor", "torch._utils._rebuild_tensor_v2",
      "torch._utils._rebuild_tensor_v3", "torch._utils._rebuild_parameter",
      "torch._utils._rebuild_parameter_with_state", "torch._tensor._rebuild_from_type_v2",
      "torch.Tensor", "torch.nn.parameter.Parameter", "torch.Size", "torch.device",
      "torch.serialization._get_layout", "torch.storage.UntypedStorage", "torch.UntypedStorage",
      "torch.storage.TypedStorage",
      "torch.distributed.checkpoint.metadata.Metadata",
      "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
      "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
      "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
      "torch.distributed.checkpoint.metadata.TensorProperties",
      "torch.distributed.checkpoint.metadata.MetadataIndex",
      "torch.distributed.checkpoint.metadata.StorageMeta",
      "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
      "torch.distributed.checkpoint.filesystem._StorageInfo",
      "pathlib.PosixPath", "pathlib.PurePosixPath", "pathlib.WindowsPath",
      "pathlib.PureWindowsPath", "pathlib.Path",
  };
  return s;
}

// Classes a NEWOBJ may instantiate (as inert kInstance records).
bool IsDataclass(const std::string& full) {
  return full.rfind("torch.distributed.checkpoint.", 0) == 0 && AllowedGlobals().count(full) &&
         full.find("_MEM_FORMAT_ENCODING") == std::string::npos;
}

struct TorchName {
  const char* name;
  DType dtype;
};
constexpr TorchName kTorchDTypes[] = {
    {"float64", DType::kF64}, {"double", DType::kF64}, {"float32", DType::kF32},
    {"float", DType::kF32}, {"float16", DType::kF16}, {"half", DType::kF16},
    {"bfloat16", DType::kBF16}, {"float8_e4m3fn", DType::kF8E4M3FN},
    {"float8_e5m2", DType::kF8E5M2}, {"int64", DType::kI64}, {"long", DType::kI64},
    {"int32", DType::kI32}, {"int", DType::kI32}, {"int16", DType::kI16},
    {"short", DType::kI16}, {"int8", DType::kI8}, {"uint8", DType::kU8},
    {"bool", DType::kBool}, {"complex64", DType::kC64}, {"cfloat", DType::kC64},
    {"complex128", DType::kC128}, {"cdouble", DType::kC128}, {"uint16", DType::kU16},
    {"uint32", DType::kU32}, {"uint64", DType::kU64},
};
constexpr TorchName kStorageClasses[] = {
    {"DoubleStorage", DType::kF64}, {"FloatStorage", DType::kF32},
    {"HalfStorage", DType::kF16}, {"BFloat16Storage", DType::kBF16},
    {"LongStorage", DType::kI64}, {"IntStorage", DType::kI32}, {"ShortStorage", DType::kI16},
    {"CharStorage", DType::kI8}, {"ByteStorage", DType::kU8}, {"BoolStorage", DType::kBool},
    {"ComplexFloatStorage", DType::kC64}, {"ComplexDoubleStorage", DType::kC128},
};
// torch.<name> globals that are constants, not dtypes we can store.
const std::set<std::string> kTorchConstants = {
    "strided", "sparse_coo", "sparse_csr", "contiguous_format", "channels_last",
    "preserve_format", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "complex32",
    "qint8", "quint8", "qint32", "per_tensor_affine", "per_channel_affine",
};

bool IsTorchStorageClassName(const std::string& n) {
  if (DTypeOfStorageClass(n)) return true;
  return n == "QInt8Storage" || n == "QInt32Storage" || n == "QUInt8Storage" ||
         n == "QUInt4x2Storage" || n == "QUInt2x4Storage";
}

}  // namespace

std::optional<DType> DTypeOfStorageClass(const std::string& name) {
  for (const auto& s : kStorageClasses) {
    if (name == s.name) return s.dtype;
  }
  return std::nullopt;
}

std::optional<DType> DTypeOfTorchName(const std::string& name) {
  for (const auto& s : kTorchDTypes) {
    if (name == s.name) return s.dtype;
  }
  return std::nullopt;
}

std::string StorageClassOf(DType t) {
  for (const auto& s : kStorageClasses) {
    if (s.dtype == t) return s.name;
  }
  return "";
}

bool IsAllowedGlobal(const std::string& module, const std::string& name) {
  if (AllowedGlobals().count(module + "." + name)) return true;
  if (module == "torch") {
    return DTypeOfTorchName(name).has_value() || IsTorchStorageClassName(name) ||
           kTorchConstants.count(name) > 0;
  }
  return false;
}

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
  Result<Ref> Global(const std::string& module, const std::string& name) {
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
  if (name == "builtins.set" || name == "builtins.frozenset" || name == "__builtin__.set" ||
      name == "builtins.list" || name == "builtins.tuple") {
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
  if (name == "_codecs.encode" || name == "builtins.bytearray") {
    if (name == "builtins.bytearray" && a.empty()) return py::MakeBytes("");
    if (name == "builtins.bytearray" && a.size() == 1 && a[0]->kind == Kind::kBytes) {
      return py::MakeBytes(a[0]->s);
    }
    CKFMT_RETURN_IF_ERROR(argc(1, 2));
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
  if (name == "builtins.complex" || name == "builtins.slice") {
    auto t = py::Make(Kind::kTuple);
    t->items = a;
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
    return Reduce(a[0], a[2], false);
  }
  if (name == "torch.Size") {
    CKFMT_RETURN_IF_ERROR(argc(0, 1));
    auto t = py::Make(Kind::kTuple);
    if (a.size() == 1) t->items = a[0]->items;
    return t;
  }
  if (name == "torch.device") {
    CKFMT_RETURN_IF_ERROR(argc(1, 2));
    if (a[0]->kind != Kind::kStr) return Err("torch.device of a " + py::Describe(*a[0]));
    std::string d = a[0]->s;
    if (a.size() == 2 && a[1]->kind == Kind::kInt) d += ":" + std::to_string(a[1]->i);
    return py::MakeStr(d);
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
  if (name == "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING") {
    CKFMT_RETURN_IF_ERROR(argc(1, 1));
    return a[0];
  }
  return Err("the whitelisted global " + name + " cannot be called this way");
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
    case Kind::kDict:     // OrderedDict attributes (state dicts' _metadata): dropped
    case Kind::kTensor:   // tensor attributes (subclass state): dropped
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

}  // namespace

Result<Ref> Unpickle(ByteSource& src, const UnpickleOptions& options) {
  Unpickler u(src, options);
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
