#include "dist_test_util.h"

#include <dirent.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "ckfmt/dist/sharded_state.h"
#include "ckfmt/reader.h"
#include "ckfmt/verify.h"

namespace ckfmt_dist_test {

using namespace ckfmt;

namespace {

uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Tensor Random(DType dtype, Shape shape, uint64_t seed) {
  Tensor t = Tensor::Zeros(dtype, std::move(shape));
  auto* p = static_cast<uint8_t*>(t.data());
  uint64_t x = seed;
  for (uint64_t i = 0; i < t.nbytes(); i += 8) {
    uint64_t v = SplitMix(x);
    std::memcpy(p + i, &v, std::min<uint64_t>(8, t.nbytes() - i));
  }
  if (dtype == DType::kBool) {
    for (uint64_t i = 0; i < t.nbytes(); ++i) p[i] &= 1;
  }
  return t;
}

}  // namespace

Value MakeFullState(uint64_t seed) {
  uint64_t s = seed * 1000;
  Dict model;
  model.Set("embed.weight", Random(DType::kF32, {11, 6}, ++s));
  List layers;
  for (int l = 0; l < 2; ++l) {
    Dict layer;
    layer.Set("attn.qkv.weight", Random(DType::kBF16, {18, 6}, ++s));
    layer.Set("attn.out.weight", Random(DType::kF32, {6, 6}, ++s));
    layer.Set("norm.weight", Random(DType::kF32, {6}, ++s));
    layer.Set("mlp.up.weight", Random(DType::kF32, {10, 6}, ++s));
    layer.Set("mlp.up.bias", Random(DType::kF32, {10}, ++s));
    layer.Set("mlp.down.weight", Random(DType::kF32, {6, 10}, ++s));
    layers.push_back(Value(std::move(layer)));
  }
  model.Set("layers", Value(std::move(layers)));
  model.Set("head.weight", Random(DType::kF32, {3, 6}, ++s));  // uneven / empty dim-0 shards
  model.Set("tiny", Random(DType::kF64, {2}, ++s));
  model.Set("empty", Random(DType::kF32, {0, 4}, ++s));
  model.Set("scale", Random(DType::kF32, {}, ++s));
  model.Set("mask", Random(DType::kBool, {5}, ++s));
  Value full{Dict{}};
  full.as_dict().Set("model", Value(std::move(model)));
  Dict state;
  List names;
  for (const auto& p : ModelParams(full)) {
    std::string name = DottedKeyPath(KeyPath(p.path.begin() + 1, p.path.end()));
    Dict st;
    st.Set("exp_avg", Random(DType::kF32, p.shape, ++s));
    st.Set("exp_avg_sq", Random(DType::kF32, p.shape, ++s));
    Tensor step = Tensor::Zeros(DType::kF32, {});
    *static_cast<float*>(step.data()) = 7.0f;
    st.Set("step", step);
    state.Set(name, Value(std::move(st)));
    names.push_back(Value(name));
  }
  Dict group;
  group.Set("lr", Value(1e-3));
  group.Set("betas", Value(List{Value(0.9), Value(0.999)}));
  group.Set("weight_decay", Value(0.01));
  group.Set("amsgrad", Value(false));
  group.Set("params", Value(std::move(names)));
  Dict optim;
  optim.Set("state", Value(std::move(state)));
  optim.Set("param_groups", Value(List{Value(std::move(group))}));
  full.as_dict().Set("optim", Value(std::move(optim)));
  full.as_dict().Set("step", Value(int64_t{7}));
  full.as_dict().Set("note", Value());
  Tensor blob = Random(DType::kU8, {100}, ++s);
  full.as_dict().Set("loader",
                     Value(Bytes{"pickle", std::string(static_cast<char*>(blob.data()), 100)}));
  return full;
}

std::vector<dist::ParamInfo> ModelParams(const Value& full) {
  std::vector<dist::ParamInfo> out;
  VisitValues(*full.Find({std::string("model")}), [&](const KeyPath& p, const Value& v) {
    if (!v.is_tensor()) return;
    KeyPath path{std::string("model")};
    path.insert(path.end(), p.begin(), p.end());
    out.push_back({path, v.as_tensor().shape()});
  });
  return out;
}

Value ModelOnly(const Value& full) {
  Value out{Dict{}};
  out.as_dict().Set("model", *full.Find({std::string("model")}));
  return out;
}

const char* LayoutName(LayoutKind k) {
  switch (k) {
    case LayoutKind::kFsdp1: return "fsdp1";
    case LayoutKind::kFsdp2: return "fsdp2";
    case LayoutKind::kGrid2D: return "grid2d";
  }
  return "?";
}

dist::LayoutFn MakeLayout(LayoutKind kind, const Value& full, int world, int rank) {
  auto params = ModelParams(full);
  std::map<std::string, KeyPath> by_name;
  for (const auto& p : params) by_name[DottedKeyPath(KeyPath(p.path.begin() + 1, p.path.end()))] = p.path;
  dist::ParamOf param_of = [by_name](const KeyPath& path) -> std::optional<KeyPath> {
    if (path.size() >= 1 && path[0] == PathComponent(std::string("model"))) return path;
    if (path.size() == 4 && path[0] == PathComponent(std::string("optim")) &&
        path[1] == PathComponent(std::string("state"))) {
      auto it = by_name.find(std::get<std::string>(path[2]));
      if (it != by_name.end()) return it->second;
    }
    return std::nullopt;
  };
  switch (kind) {
    case LayoutKind::kFsdp1: return dist::Fsdp1Layout(params, world, rank, param_of);
    case LayoutKind::kFsdp2:
      return dist::Fsdp2Layout(world, rank, [param_of](const KeyPath& p) {
        return param_of(p).has_value();
      });
    case LayoutKind::kGrid2D:
      break;
  }
  // Rows over ceil(world/2) ranks, columns over 2 (one column group when
  // world is 1). 1-d tensors: rows only, replicated across the column pair.
  const int cols = world >= 2 ? 2 : 1, rows = (world + cols - 1) / cols;
  const int rr = rank / cols, cc = rank % cols;
  return [=](const KeyPath& path, const Shape& shape) -> std::optional<Region> {
    if (shape.empty() || !param_of(path)) return std::nullopt;
    auto split = [](uint64_t n, int parts, int i) {
      uint64_t c = (n + parts - 1) / parts;
      uint64_t a = std::min<uint64_t>(c * i, n);
      return std::make_pair(a, std::min(a + c, n) - a);
    };
    std::vector<uint64_t> off(shape.size(), 0), len = shape;
    auto [a, n] = split(shape[0], rows, rr);
    off[0] = a;
    len[0] = n;
    if (shape.size() >= 2) {
      auto [b, m] = split(shape[1], cols, cc);
      off[1] = b;
      len[1] = m;
    }
    return Region::Box(off, len);
  };
}

namespace {

std::string Bits(const Tensor& t) {
  return std::string(static_cast<const char*>(t.data()), t.nbytes());
}

}  // namespace

::testing::AssertionResult MatchesFull(const Value& got, const Value& full, bool complete) {
  std::string problems;
  int count = 0;
  auto problem = [&](const KeyPath& p, const std::string& m) {
    if (++count <= 10) problems += "\n  " + FormatKeyPath(p) + ": " + m;
  };
  VisitValues(got, [&](const KeyPath& p, const Value& v) {
    const Value* w = full.Find(p);
    if (!w) return problem(p, "not in the original");
    if (v.kind() != w->kind()) {
      return problem(p, std::string("kind ") + ValueKindName(v.kind()) + ", original " +
                            ValueKindName(w->kind()));
    }
    switch (v.kind()) {
      case Value::Kind::kTensor: {
        const Tensor& t = v.as_tensor();
        const Tensor& o = w->as_tensor();
        if (t.dtype() != o.dtype() || t.global_shape() != o.shape()) {
          return problem(p, "dtype or global shape differs");
        }
        std::string want = Bits(o);
        if (t.shard()) {
          auto part = dist::ExtractRegion(o, t.region());
          if (!part.ok()) return problem(p, part.status().ToString());
          want = Bits(*part);
        }
        if (Bits(t) != want) return problem(p, "bytes differ (region " + t.region().ToString() + ")");
        break;
      }
      case Value::Kind::kBytes:
        if (!(v.as_bytes() == w->as_bytes())) problem(p, "bytes differ");
        break;
      case Value::Kind::kInt:
        if (v.as_int() != w->as_int()) problem(p, "int differs");
        break;
      case Value::Kind::kFloat:
        {
          double a = v.as_float(), b = w->as_float();
          if (std::memcmp(&a, &b, 8) != 0) problem(p, "float differs");
        }
        break;
      case Value::Kind::kBool:
        if (v.as_bool() != w->as_bool()) problem(p, "bool differs");
        break;
      case Value::Kind::kString:
        if (v.as_string() != w->as_string()) problem(p, "string differs");
        break;
      default: break;
    }
  });
  if (complete) {
    VisitValues(full, [&](const KeyPath& p, const Value&) {
      if (!got.Find(p)) problem(p, "missing");
    });
  }
  if (count == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << count << " problems:" << problems;
}

::testing::AssertionResult FileHoldsFull(const std::string& path, const Value& full) {
  auto verified = VerifyFile(path);
  if (!verified.ok()) return ::testing::AssertionFailure() << verified.status().ToString();
  if (!verified->ok()) return ::testing::AssertionFailure() << path << " fails verification";
  Value loaded{Dict{}};
  if (auto r = Load(path, &loaded); !r.ok()) {
    return ::testing::AssertionFailure() << r.status().ToString();
  }
  return MatchesFull(loaded, full, true);
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ckfmt_dist_test
