#include "pickle_object.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

namespace ckfmt::convert::py {

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kBigInt: return "int (beyond 64 bits)";
    case Kind::kFloat: return "float";
    case Kind::kStr: return "str";
    case Kind::kBytes: return "bytes";
    case Kind::kTuple: return "tuple";
    case Kind::kList: return "list";
    case Kind::kSet: return "set";
    case Kind::kDict: return "dict";
    case Kind::kGlobal: return "global";
    case Kind::kCall: return "object";
    case Kind::kInstance: return "instance";
    case Kind::kStorage: return "storage";
    case Kind::kTensor: return "tensor";
  }
  return "?";
}

const Object* Object::Attr(const std::string& name) const {
  if (!state || state->kind != Kind::kDict) return nullptr;
  for (const auto& [k, v] : state->dict) {
    if (k->kind == Kind::kStr && k->s == name) return v.get();
  }
  return nullptr;
}

Ref Make(Kind k) {
  auto o = std::make_shared<Object>();
  o->kind = k;
  return o;
}
Ref MakeNone() { return Make(Kind::kNone); }
Ref MakeBool(bool v) {
  auto o = Make(Kind::kBool);
  o->b = v;
  return o;
}
Ref MakeInt(int64_t v) {
  auto o = Make(Kind::kInt);
  o->i = v;
  return o;
}
Ref MakeFloat(double v) {
  auto o = Make(Kind::kFloat);
  o->f = v;
  return o;
}
Ref MakeStr(std::string v) {
  auto o = Make(Kind::kStr);
  o->s = std::move(v);
  return o;
}
Ref MakeBytes(std::string v) {
  auto o = Make(Kind::kBytes);
  o->s = std::move(v);
  return o;
}

std::string KeyOf(const Object& o, int depth) {
  switch (o.kind) {
    case Kind::kNone: return "N";
    case Kind::kBool: return o.b ? "i:1" : "i:0";
    case Kind::kInt: return "i:" + std::to_string(o.i);
    case Kind::kFloat:
      if (std::nearbyint(o.f) == o.f && std::fabs(o.f) < 9e18) {
        return "i:" + std::to_string(static_cast<int64_t>(o.f));
      } else {
        char buf[40];
        std::snprintf(buf, sizeof buf, "f:%.17g", o.f);
        return buf;
      }
    case Kind::kStr: return "s:" + o.s;
    case Kind::kBytes: return "b:" + o.s;
    case Kind::kBigInt: return "I:" + o.s;
    case Kind::kTuple: {
      if (depth >= kMaxDepth) break;  // by identity
      std::string k = "t:(";
      for (const auto& it : o.items) k += KeyOf(*it, depth + 1) + ",";
      return k + ")";
    }
    default:
      break;
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "@%p", static_cast<const void*>(&o));
  return buf;
}

std::string Describe(const Object& o, int depth) {
  switch (o.kind) {
    case Kind::kInt: return "int " + std::to_string(o.i);
    case Kind::kStr: return "str '" + o.s.substr(0, 40) + (o.s.size() > 40 ? "...'" : "'");
    case Kind::kGlobal: return "global " + o.GlobalName();
    case Kind::kInstance: return "instance of " + o.GlobalName();
    case Kind::kCall:
      if (!o.callable || depth >= kMaxDepth) return "object built by a call";
      return "object built by " + Describe(*o.callable, depth + 1);
    default: return KindName(o.kind);
  }
}

bool ContainsDisallowed(const Object& o, std::string* name, int depth) {
  if (depth > kMaxDepth) return false;
  if (o.kind == Kind::kGlobal && o.disallowed) {
    if (name) *name = o.GlobalName();
    return true;
  }
  for (const auto& it : o.items) {
    if (it && ContainsDisallowed(*it, name, depth + 1)) return true;
  }
  for (const auto& [k, v] : o.dict) {
    if (ContainsDisallowed(*k, name, depth + 1) || ContainsDisallowed(*v, name, depth + 1)) {
      return true;
    }
  }
  for (const Ref* r : {&o.callable, &o.args, &o.state}) {
    if (*r && ContainsDisallowed(**r, name, depth + 1)) return true;
  }
  return false;
}

namespace {

// Calls fn(ref) for each reference `o` holds to another object.
template <typename Fn>
void ForEachChild(Object& o, Fn&& fn) {
  for (Ref& it : o.items) fn(it);
  for (auto& [k, v] : o.dict) {
    fn(k);
    fn(v);
  }
  fn(o.callable);
  fn(o.args);
  fn(o.state);
  if (o.tensor) fn(o.tensor->storage);
}

}  // namespace

Status CheckGraph(const std::vector<Ref>& roots, const std::string& where) {
  // The visit state lives in the objects, and the children of every object
  // on the path share one stack: a DCP .metadata holds about ten objects per
  // tensor, and a hash map of states plus a vector per object cost more
  // than the rest of reading it.
  enum : uint8_t { kOnPath = 1, kDone = 2 };
  struct Frame {
    Object* o;
    size_t begin, next, end;  // o's children are kids[begin, end)
    uint16_t below = 0;       // the greatest graph_height among o's children so far
  };
  std::vector<Frame> path;
  std::vector<Object*> kids;
  auto too_deep = [&] {
    return Status::Unsupported(where + ": the pickle nests objects more than " +
                               std::to_string(kMaxDepth) + " deep");
  };
  auto enter = [&](Object* o) -> Status {
    if (o->graph_mark == kDone) {
      // Walked from an earlier root, perhaps one below this path: its
      // height says how far it reaches down from here.
      if (path.size() + o->graph_height > size_t(kMaxDepth)) return too_deep();
      if (!path.empty()) path.back().below = std::max(path.back().below, o->graph_height);
      return Status::OK();
    }
    if (o->graph_mark == kOnPath) {
      return Status::Unsupported(where + ": the pickle holds a self-referencing object");
    }
    if (path.size() >= size_t(kMaxDepth)) return too_deep();
    o->graph_mark = kOnPath;
    const size_t begin = kids.size();
    ForEachChild(*o, [&](const Ref& c) {
      if (c) kids.push_back(c.get());
    });
    path.push_back({o, begin, begin, kids.size()});
    return Status::OK();
  };
  for (const Ref& root : roots) {
    if (!root) continue;
    CKFMT_RETURN_IF_ERROR(enter(root.get()));
    while (!path.empty()) {
      Frame& top = path.back();
      if (top.next == top.end) {
        top.o->graph_mark = kDone;
        const uint16_t height = top.o->graph_height = uint16_t(top.below + 1);
        kids.resize(top.begin);
        path.pop_back();
        if (!path.empty()) path.back().below = std::max(path.back().below, height);
        continue;
      }
      CKFMT_RETURN_IF_ERROR(enter(kids[top.next++]));
    }
  }
  return Status::OK();
}

void Dismantle(std::vector<Ref> roots) {
  // Each object's references move to the work list before it can be freed,
  // so no destructor finds another object to free.
  std::vector<Ref> work = std::move(roots);
  while (!work.empty()) {
    Ref r = std::move(work.back());
    work.pop_back();
    if (!r) continue;
    ForEachChild(*r, [&](Ref& c) {
      if (c) work.push_back(std::move(c));
    });
    r->items.clear();
    r->dict.clear();
  }
}

}  // namespace ckfmt::convert::py
