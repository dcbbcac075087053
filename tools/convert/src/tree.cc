#include "tree.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <map>
#include <numeric>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "ckfmt/utf8.h"
#include "pickle_writer.h"

namespace ckfmt::convert {

uint64_t TensorSource::nbytes() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n * DTypeSize(dtype);
}

std::string QuoteKey(std::string_view key) {
  constexpr size_t kMaxQuoted = 200;
  if (key.size() <= kMaxQuoted) return "\"" + std::string(key) + "\"";
  size_t cut = kMaxQuoted;
  while (cut > 0 && (uint8_t(key[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return "\"" + std::string(key.substr(0, cut)) + "...\" (" + std::to_string(key.size()) +
         " bytes)";
}

std::string KeyForMessage(const std::string& key) {
  return key.empty() ? "<root>" : QuoteKey(key);
}

std::string NameSomeKeys(const std::vector<std::string>& keys) {
  constexpr size_t kNamed = 3;
  const size_t named = keys.size() <= kNamed + 1 ? keys.size() : kNamed;
  std::string names;
  for (size_t i = 0; i < named; ++i) {
    names += (i == 0 ? "" : i + 1 == keys.size() ? " and " : ", ") + KeyForMessage(keys[i]);
  }
  if (named < keys.size()) names += " and " + std::to_string(keys.size() - named) + " more";
  return names;
}

std::string JoinKey(const std::string& parent, const std::string& child) {
  return parent.empty() ? child : parent + "." + child;
}

namespace {

Status SplitRec(Region box, const std::vector<size_t>& order, size_t level, uint64_t budget,
                const std::function<uint64_t(const Region&)>& cost,
                const std::function<Status(const Region&)>& emit) {
  while (level < order.size() && box.lengths[order[level]] <= 1) ++level;
  if (level >= order.size() || cost(box) <= budget) return emit(box);
  size_t d = order[level];
  uint64_t len = box.lengths[d];
  Region one = box;
  one.lengths[d] = 1;
  uint64_t c1 = cost(one);
  Region two = box;
  two.lengths[d] = 2;
  uint64_t per = std::max<uint64_t>(1, cost(two) - std::min(cost(two), c1));
  uint64_t k = c1 >= budget ? 1 : 1 + (budget - c1) / per;
  for (uint64_t i = 0; i < len; i += k) {
    Region sub = box;
    sub.offsets[d] = box.offsets[d] + i;
    sub.lengths[d] = std::min(k, len - i);
    if (sub.lengths[d] == 1 && cost(sub) > budget) {
      CKFMT_RETURN_IF_ERROR(SplitRec(sub, order, level + 1, budget, cost, emit));
    } else {
      CKFMT_RETURN_IF_ERROR(emit(sub));
    }
  }
  return Status::OK();
}

}  // namespace

Status SplitBoxes(const Shape& shape, const std::vector<size_t>& order, uint64_t budget,
                  const std::function<uint64_t(const Region&)>& cost,
                  const std::function<Status(const Region&)>& emit) {
  return SplitBox(Region::Whole(shape), order, budget, cost, emit);
}

Status SplitBox(const Region& box, const std::vector<size_t>& order, uint64_t budget,
                const std::function<uint64_t(const Region&)>& cost,
                const std::function<Status(const Region&)>& emit) {
  return SplitRec(box, order, 0, std::max<uint64_t>(budget, 1), cost, emit);
}

Status TensorSource::StreamBox(PieceMemory&, const Region&, const PieceFn&) {
  return Status::Internal("this tensor source cannot stream a box");
}

Result<std::shared_ptr<TensorSource>> StridedTensorSource::Create(
    DType dtype, Shape shape, std::vector<uint64_t> stride, uint64_t offset,
    uint64_t storage_bytes, StorageReadFn read, std::string where) {
  if (stride.size() != shape.size()) {
    return Status::Corruption(where + ": " + std::to_string(shape.size()) + "-d size but " +
                              std::to_string(stride.size()) + "-d stride");
  }
  auto numel = NumElements(shape);
  if (!numel.ok() || !CheckedBytes(*numel, DTypeSize(dtype)).ok()) {
    return Status::Corruption(where + ": tensor size overflows 64 bits");
  }
  const uint64_t esize = DTypeSize(dtype);
  if (*numel > 0) {
    // The last element's storage index, with overflow checks.
    unsigned __int128 last = offset;
    for (size_t d = 0; d < shape.size(); ++d) last += (unsigned __int128)(shape[d] - 1) * stride[d];
    unsigned __int128 need = (last + 1) * esize;
    if (need > storage_bytes) {
      return Status::Corruption(
          where + ": the view (offset " + std::to_string(offset) + ", " +
          std::to_string(shape.size()) + "-d) needs " +
          (need >> 64 ? std::string("> 2^64") : std::to_string(uint64_t(need))) +
          " bytes of its storage, which has " + std::to_string(storage_bytes));
    }
  }
  auto s = std::make_shared<StridedTensorSource>();
  s->dtype = dtype;
  s->shape = std::move(shape);
  s->stride_ = std::move(stride);
  s->offset_ = offset;
  s->read_ = std::move(read);
  s->where_ = std::move(where);
  return std::shared_ptr<TensorSource>(std::move(s));
}

uint8_t* PieceMemory::Buffer(int id, uint64_t n) {
  if (n > capacity_[id]) {
    data_[id].reset();  // the old one goes first: peak memory stays n
    data_[id].reset(new uint8_t[n]);
    capacity_[id] = n;
  }
  return data_[id].get();
}

Status StridedTensorSource::Stream(PieceMemory& memory, const PieceFn& fn) {
  const size_t nd = shape.size();
  const uint64_t esize = DTypeSize(dtype);
  uint64_t numel = 1;
  for (uint64_t d : shape) numel *= d;
  if (numel == 0) return fn(Region::Whole(shape), rank, nullptr, 0);
  // Split the dimension with the largest stride first: a slab then spans
  // the least storage.
  std::vector<size_t> order(nd);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return stride_[a] > stride_[b]; });
  auto span_of = [&](const Region& box, uint64_t* first) {
    uint64_t lo = offset_, extent = 0;
    for (size_t d = 0; d < nd; ++d) {
      lo += box.offsets[d] * stride_[d];
      if (box.lengths[d] > 0) extent += (box.lengths[d] - 1) * stride_[d];
    }
    if (first) *first = lo;
    return extent + 1;  // elements
  };
  auto cost = [&](const Region& box) {
    return std::max(span_of(box, nullptr), box.NumElements()) * esize;
  };
  std::vector<Region> boxes;
  CKFMT_RETURN_IF_ERROR(SplitBoxes(shape, order, memory.budget(), cost, [&](const Region& box) {
    if (box.NumElements()) boxes.push_back(box);
    return Status::OK();
  }));
  // Reads the box's row-major stream into `out` (n * esize bytes), through
  // buffer `span_id` where the box is not contiguous in storage.
  auto load = [&](const Region& box, uint8_t* out, int span_id) -> Status {
    uint64_t first = 0;
    uint64_t span_elems = span_of(box, &first);
    uint64_t n = box.NumElements();
    // Contiguous in storage: the box's row-major order is storage order.
    bool contiguous = true;
    uint64_t expect = 1;
    for (size_t d = nd; d-- > 0;) {
      if (box.lengths[d] > 1 && stride_[d] != expect) contiguous = false;
      expect *= box.lengths[d];
    }
    if (contiguous && span_elems == n) return read_(first * esize, out, n * esize);
    uint8_t* span = memory.Buffer(span_id, span_elems * esize);
    CKFMT_RETURN_IF_ERROR(read_(first * esize, span, span_elems * esize));
    // Gather: odometer over all dims but the last.
    const uint64_t inner = nd ? box.lengths[nd - 1] : 1;
    const uint64_t inner_stride = nd ? stride_[nd - 1] : 0;
    std::vector<uint64_t> idx(nd, 0);
    uint8_t* dst = out;
    for (uint64_t done = 0; done < n; done += inner) {
      uint64_t base = 0;
      for (size_t d = 0; d + 1 < nd; ++d) base += idx[d] * stride_[d];
      const uint8_t* src = span + base * esize;
      if (inner_stride == 1) {
        std::memcpy(dst, src, inner * esize);
      } else {
        for (uint64_t j = 0; j < inner; ++j) {
          std::memcpy(dst + j * esize, src + j * inner_stride * esize, esize);
        }
      }
      dst += inner * esize;
      for (size_t d = nd < 2 ? 0 : nd - 1; d-- > 0;) {  // advance the odometer
        if (++idx[d] < box.lengths[d]) break;
        idx[d] = 0;
      }
    }
    return Status::OK();
  };
  return StreamWithReadAhead(boxes, rank, [&](const Region& box, int slot, const uint8_t** data,
                                               uint64_t* n) -> Status {
    *n = box.NumElements() * esize;
    uint8_t* out = memory.Buffer(PieceMemory::Id(slot, 0), *n);
    *data = out;
    return load(box, out, PieceMemory::Id(slot, 1));
  }, fn);
}

Status StreamWithReadAhead(const std::vector<Region>& boxes, uint32_t rank, const LoadFn& load,
                           const PieceFn& fn) {
  struct Loaded {
    const uint8_t* data = nullptr;
    uint64_t n = 0;
  };
  Loaded got[2];
  if (boxes.size() == 1) {
    CKFMT_RETURN_IF_ERROR(load(boxes[0], 0, &got[0].data, &got[0].n));
    return fn(boxes[0], rank, got[0].data, got[0].n);
  }
  // The next box loads on another thread while `fn` consumes this one.
  // Loads stay in order (CRC tracking sees sequential reads).
  std::future<Status> pending = std::async(std::launch::async, [&] {
    return load(boxes[0], 0, &got[0].data, &got[0].n);
  });
  for (size_t i = 0; i < boxes.size(); ++i) {
    CKFMT_RETURN_IF_ERROR(pending.get());
    const Loaded cur = got[i % 2];
    if (i + 1 < boxes.size()) {
      int slot = static_cast<int>((i + 1) % 2);
      pending = std::async(std::launch::async, [&, i, slot] {
        return load(boxes[i + 1], slot, &got[slot].data, &got[slot].n);
      });
    }
    Status st = fn(boxes[i], rank, cur.data, cur.n);
    if (!st.ok()) {
      if (pending.valid()) (void)pending.get();
      return st;
    }
  }
  return Status::OK();
}

namespace {

struct Ctx {
  Ctx(const PyToTreeOptions& o, ConvertLog* l) : opts(o), log(l) {}
  const PyToTreeOptions& opts;
  ConvertLog* log;
  uint64_t nodes = 0;
  // The keys of the tensors on each storage, in the order met: tensors that
  // share one (tied weights, views) are stored each on its own.
  std::map<std::string, std::vector<std::string>> storage_users;
  std::vector<std::string> storages_in_order;
  std::vector<std::string> parameters;       // keys of nn.Parameters, stored as tensors
  std::vector<std::string> with_attributes;  // keys of tensors whose attributes are dropped

  void UsesStorage(const py::Object& storage, const std::string& key) {
    auto& users = storage_users[storage.storage->key];
    if (users.empty()) storages_in_order.push_back(storage.storage->key);
    users.push_back(key);
  }

  // The notes that speak for many keys at once, made when the tree is done.
  void NoteForManyKeys() const {
    for (const std::string& s : storages_in_order) {
      const std::vector<std::string>& users = storage_users.at(s);
      if (users.size() < 2) continue;
      log->Note(NameSomeKeys(users) +
                " share one storage; each is stored on its own, no longer tied");
    }
    if (!parameters.empty()) {
      log->Note(NameSomeKeys(parameters) + ": torch.nn.Parameter stored as a plain tensor "
                "(requires_grad is not kept)");
    }
    if (!with_attributes.empty()) {
      log->Note(NameSomeKeys(with_attributes) + ": the Python attributes set on the tensor are "
                "not kept");
    }
  }
};

constexpr uint64_t kMaxNodes = 10'000'000;

// Size of the tree `o` expands to (shared references counted each time),
// computed over the object graph without expanding it; refuses cycles.
Result<uint64_t> ExpandedSize(const py::Object* o, std::unordered_map<const py::Object*, uint64_t>& memo,
                              const std::string& where, int depth = 0) {
  if (depth > py::kMaxDepth) {
    return Status::Unsupported(where + ": the pickle nests objects more than " +
                               std::to_string(py::kMaxDepth) + " deep");
  }
  auto it = memo.find(o);
  if (it != memo.end()) {
    if (it->second == UINT64_MAX) {
      return Status::Unsupported(where + ": the pickle holds a self-referencing object");
    }
    return it->second;
  }
  memo[o] = UINT64_MAX;  // in progress
  uint64_t n = 1;
  auto add = [&](const py::Object* c) -> Status {
    if (!c) return Status::OK();
    CKFMT_ASSIGN_OR_RETURN(uint64_t k, ExpandedSize(c, memo, where, depth + 1));
    n = std::min<uint64_t>(n + k, kMaxNodes + 1);
    return Status::OK();
  };
  for (const auto& c : o->items) CKFMT_RETURN_IF_ERROR(add(c.get()));
  for (const auto& [k, v] : o->dict) {
    CKFMT_RETURN_IF_ERROR(add(k.get()));
    CKFMT_RETURN_IF_ERROR(add(v.get()));
  }
  CKFMT_RETURN_IF_ERROR(add(o->callable.get()));
  CKFMT_RETURN_IF_ERROR(add(o->args.get()));
  CKFMT_RETURN_IF_ERROR(add(o->state.get()));
  memo[o] = n;
  return n;
}

std::string KeyToString(const py::Object& k, bool* was_int, std::string* note) {
  *was_int = false;
  switch (k.kind) {
    case py::Kind::kStr: return k.s;
    case py::Kind::kInt: *was_int = true; return std::to_string(k.i);
    case py::Kind::kBool: *note = "bool key"; return k.b ? "True" : "False";
    case py::Kind::kNone: *note = "None key"; return "None";
    case py::Kind::kFloat: {
      char buf[40];
      std::snprintf(buf, sizeof buf, "%.17g", k.f);
      *note = "float key";
      return buf;
    }
    case py::Kind::kTuple: {
      std::string s = "(";
      for (size_t i = 0; i < k.items.size(); ++i) {
        bool wi;
        std::string n2;
        if (i) s += ", ";
        s += KeyToString(*k.items[i], &wi, &n2);
      }
      *note = "tuple key";
      return s + (k.items.size() == 1 ? ",)" : ")");
    }
    default: *note = std::string(py::KindName(k.kind)) + " key"; return py::Describe(k);
  }
}

// `o` as JSON if it is made of what JSON holds (dicts and OrderedDicts with
// str keys, in order; lists, str, 64-bit ints, finite floats, bool, None),
// at most kMaxAttributeDepth deep; false otherwise.
bool PlainJson(const py::Object& o, nlohmann::ordered_json* out, int depth = 0) {
  const bool container = o.kind == py::Kind::kList || o.kind == py::Kind::kDict;
  if (container && depth >= kMaxAttributeDepth) return false;
  switch (o.kind) {
    case py::Kind::kNone: *out = nullptr; return true;
    case py::Kind::kBool: *out = o.b; return true;
    case py::Kind::kInt: *out = o.i; return true;
    case py::Kind::kFloat: *out = o.f; return std::isfinite(o.f);
    case py::Kind::kStr: *out = o.s; return IsValidUtf8(o.s);
    case py::Kind::kList:
      *out = nlohmann::ordered_json::array();
      for (const auto& item : o.items) {
        if (!PlainJson(*item, &out->emplace_back(), depth + 1)) return false;
      }
      return true;
    case py::Kind::kDict:
      if (o.state) return false;  // attributes of its own
      *out = nlohmann::ordered_json::object();
      for (const auto& [k, v] : o.dict) {
        if (k->kind != py::Kind::kStr || !IsValidUtf8(k->s)) return false;
        if (!PlainJson(*v, &(*out)[k->s], depth + 1)) return false;
      }
      return true;
    default: return false;
  }
}

Result<Node> Convert(const py::Ref& o, Ctx& c, const std::string& key, int depth) {
  if (depth > kMaxTreeDepth) {
    return Status::Unsupported(c.opts.where + ": " + KeyForMessage(key) + ": nesting deeper than " +
                               std::to_string(kMaxTreeDepth) + " levels, the converter's limit");
  }
  if (++c.nodes > kMaxNodes) {
    return Status::Unsupported(c.opts.where + ": more than " + std::to_string(kMaxNodes) +
                               " values (shared references expand too far)");
  }
  Node n;
  switch (o->kind) {
    case py::Kind::kNone: n.kind = Node::Kind::kNone; return n;
    case py::Kind::kBool: n.kind = Node::Kind::kBool; n.b = o->b; return n;
    case py::Kind::kInt: n.kind = Node::Kind::kInt; n.i = o->i; return n;
    case py::Kind::kFloat: n.kind = Node::Kind::kFloat; n.f = o->f; return n;
    case py::Kind::kStr:
      n.kind = Node::Kind::kStr;
      n.s = o->s;
      if (!o->s2.empty()) {
        c.log->Note(KeyForMessage(key) + ": " + o->s2 + " stored as the string " + QuoteKey(o->s));
      }
      return n;
    case py::Kind::kBigInt: {
      n.kind = Node::Kind::kStr;
      n.s = "0x";
      static const char* hex = "0123456789abcdef";
      for (size_t i = o->s.size(); i-- > 0;) {
        n.s += hex[uint8_t(o->s[i]) >> 4];
        n.s += hex[uint8_t(o->s[i]) & 15];
      }
      c.log->Note(KeyForMessage(key) + ": integer beyond 64 bits stored as the string of its two's "
                  "complement bytes (" + n.s + ")");
      return n;
    }
    case py::Kind::kBytes:
      n.kind = Node::Kind::kBytes;
      n.content_type = "bytes";
      n.s = o->s;
      if (!o->s2.empty()) c.log->Note(KeyForMessage(key) + ": " + o->s2 + " stored as bytes");
      return n;
    case py::Kind::kTuple:
    case py::Kind::kList:
    case py::Kind::kSet: {
      n = Node::List();
      n.is_tuple = o->kind == py::Kind::kTuple;
      if (o->kind == py::Kind::kSet) c.log->Note(KeyForMessage(key) + ": set stored as a list");
      if (o->s2 == "complex") {
        c.log->Note(KeyForMessage(key) + ": complex stored as the tuple (real, imag)");
      } else if (!o->s2.empty()) {
        c.log->Note(KeyForMessage(key) + ": " + o->s2 + " stored as a tuple");
      }
      for (size_t i = 0; i < o->items.size(); ++i) {
        CKFMT_ASSIGN_OR_RETURN(Node child,
                               Convert(o->items[i], c, JoinKey(key, std::to_string(i)), depth + 1));
        n.children.emplace_back(std::string(), std::move(child));
      }
      return n;
    }
    case py::Kind::kDict: {
      n = Node::Dict();
      n.ordered = o->s == "collections.OrderedDict";
      if (o->state) {
        nlohmann::ordered_json attributes;
        if (PlainJson(*o->state, &attributes) && attributes.is_object()) {
          n.attributes = attributes.dump();
        } else {
          c.log->Note(KeyForMessage(key) + ": the dict's attributes are not plain values; not "
                      "kept");
        }
      }
      bool all_int = !o->dict.empty(), any_int = false;
      std::unordered_map<std::string, bool> seen;
      for (const auto& [k, v] : o->dict) {
        bool was_int;
        std::string note;
        std::string ks = KeyToString(*k, &was_int, &note);
        all_int = all_int && was_int;
        any_int = any_int || was_int;
        if (!note.empty()) {
          c.log->Note(KeyForMessage(JoinKey(key, ks)) + ": " + note + " stored as a string");
        }
        if (!seen.emplace(ks, true).second) {
          return Status::Unsupported(c.opts.where + ": " + KeyForMessage(key) +
                                     ": two keys read as " + QuoteKey(ks) +
                                     " once converted to strings");
        }
        CKFMT_ASSIGN_OR_RETURN(Node child, Convert(v, c, JoinKey(key, ks), depth + 1));
        n.children.emplace_back(std::move(ks), std::move(child));
      }
      n.int_keys = all_int;
      if (any_int && !all_int) {
        c.log->Note(KeyForMessage(key) + ": int keys beside other keys stored as strings");
      }
      return n;
    }
    case py::Kind::kTensor: {
      n.kind = Node::Kind::kTensor;
      CKFMT_ASSIGN_OR_RETURN(n.tensor, c.opts.make_tensor(*o->tensor, key));
      c.UsesStorage(*o->tensor->storage, key);
      if (o->s2 == "torch.nn.Parameter") c.parameters.push_back(key);
      if (o->attributes_dropped) c.with_attributes.push_back(key);
      return n;
    }
    case py::Kind::kStorage: {
      py::TensorRef t;
      t.storage = o;
      t.dtype = o->storage->untyped ? DType::kU8 : o->storage->dtype;
      t.size = {o->storage->numel};
      t.stride = {1};
      n.kind = Node::Kind::kTensor;
      CKFMT_ASSIGN_OR_RETURN(n.tensor, c.opts.make_tensor(t, key));
      c.UsesStorage(*o, key);
      c.log->Note(KeyForMessage(key) + ": a bare storage stored as a 1-d tensor");
      return n;
    }
    case py::Kind::kGlobal:
      if (!o->disallowed) {
        n.kind = Node::Kind::kStr;
        n.s = o->GlobalName();
        c.log->Note(KeyForMessage(key) + ": " + n.s + " stored as the string \"" + n.s + "\"");
        return n;
      }
      [[fallthrough]];
    case py::Kind::kCall: {
      std::string name;
      py::ContainsDisallowed(*o, &name);
      if (!c.opts.allow_opaque) {
        return Status::Unsupported(c.opts.where + ": " + KeyForMessage(key) +
                                   ": refusing pickle global " + name);
      }
      CKFMT_ASSIGN_OR_RETURN(std::string bytes,
                             RepickleObject(*o, c.opts.where + ": " + KeyForMessage(key)));
      n.kind = Node::Kind::kBytes;
      n.content_type = "pickle";
      n.s = std::move(bytes);
      c.log->Note(KeyForMessage(key) + ": object using " + name +
                  " carried as opaque pickle bytes (content_type \"pickle\"), not executed");
      return n;
    }
    case py::Kind::kInstance: {
      n = Node::Dict();
      if (o->state && o->state->kind == py::Kind::kDict) {
        for (const auto& [k, v] : o->state->dict) {
          if (k->kind != py::Kind::kStr) continue;
          CKFMT_ASSIGN_OR_RETURN(Node child, Convert(v, c, JoinKey(key, k->s), depth + 1));
          n.children.emplace_back(k->s, std::move(child));
        }
      }
      c.log->Note(KeyForMessage(key) + ": instance of " + o->GlobalName() +
                  " stored as a dict of its fields");
      return n;
    }
  }
  return Status::Internal("unhandled object kind");
}

}  // namespace

Result<Node> PyToTree(const py::Ref& obj, const PyToTreeOptions& options, ConvertLog* log,
                      const std::string& key) {
  std::unordered_map<const py::Object*, uint64_t> memo;
  CKFMT_ASSIGN_OR_RETURN(uint64_t size, ExpandedSize(obj.get(), memo, options.where));
  if (size > kMaxNodes) {
    return Status::Unsupported(options.where + ": the pickle expands to more than " +
                               std::to_string(kMaxNodes) +
                               " values through shared references (a pickle bomb?)");
  }
  Ctx c{options, log};
  CKFMT_ASSIGN_OR_RETURN(Node root, Convert(obj, c, key, 0));
  c.NoteForManyKeys();
  return root;
}

namespace {

// Whether `s` is valid UTF-8 but for surrogate code points (ED A0..BF xx),
// which Python's pickle writes for a str holding a lone surrogate.
bool HasOnlySurrogateFaults(std::string s) {
  for (size_t i = 0; i + 2 < s.size(); ++i) {
    const auto b1 = static_cast<uint8_t>(s[i + 1]), b2 = static_cast<uint8_t>(s[i + 2]);
    if (static_cast<uint8_t>(s[i]) == 0xed && b1 >= 0xa0 && b1 <= 0xbf && (b2 & 0xc0) == 0x80) {
      s[i + 1] = char(0x80);  // ED 80 xx: an ordinary code point below the surrogates
      i += 2;
    }
  }
  return IsValidUtf8(s);
}

Status CheckSubtree(const Node& n, const std::string& where, const std::string& key, int depth) {
  if (depth > kMaxTreeDepth) {
    return Status::Unsupported(where + ": " + KeyForMessage(key) + ": nesting deeper than " +
                               std::to_string(kMaxTreeDepth) + " levels, the converter's limit");
  }
  // Why `text`, which is not valid UTF-8, cannot be converted.
  auto not_utf8 = [&](const std::string& what, const std::string& text) {
    if (HasOnlySurrogateFaults(text)) {  // a valid Python str that UTF-8 cannot hold
      return Status::Unsupported(where + ": " + what +
                                 " holds a lone surrogate, which ckfmt's UTF-8 strings cannot");
    }
    return Status::Corruption(where + ": " + what + " is not valid UTF-8, which ckfmt and "
                              "safetensors require of their strings");
  };
  if (n.kind == Node::Kind::kStr && !IsValidUtf8(n.s)) {
    return not_utf8("the string at " + KeyForMessage(key), n.s);
  }
  if (n.kind == Node::Kind::kBytes && !IsValidUtf8(n.content_type)) {
    return not_utf8("the content type at " + KeyForMessage(key), n.content_type);
  }
  const bool list = n.kind == Node::Kind::kList;
  for (size_t i = 0; i < n.children.size(); ++i) {
    const auto& [k, child] = n.children[i];
    if (!IsValidUtf8(k)) {
      return not_utf8("a key below " + (key.empty() ? "the root" : QuoteKey(key)), k);
    }
    const std::string child_key = JoinKey(key, list ? std::to_string(i) : k);
    CKFMT_RETURN_IF_ERROR(CheckSubtree(child, where, child_key, depth + 1));
  }
  return Status::OK();
}

}  // namespace

Status CheckTree(const Node& root, const std::string& where) {
  return CheckSubtree(root, where, "", 0);
}

uint64_t TreeBytes(const Node& n) {
  if (n.kind == Node::Kind::kTensor) return n.tensor->nbytes();
  if (n.kind == Node::Kind::kBytes) return n.s.size();
  uint64_t s = 0;
  for (const auto& [k, v] : n.children) s += TreeBytes(v);
  return s;
}

}  // namespace ckfmt::convert
