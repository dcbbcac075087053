#include "util/value_util.h"

#include <cmath>
#include <filesystem>
#include <cstring>
#include <limits>
#include <random>

#include "util/file_util.h"
#include "util/region_ref.h"

namespace ckfmt_test {

using namespace ckfmt;

const std::vector<DType> kAllDTypes = {
    DType::kF64,  DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3FN, DType::kF8E5M2,
    DType::kI64,  DType::kI32, DType::kI16, DType::kI8,   DType::kU8,       DType::kBool,
    DType::kC64,  DType::kC128, DType::kU16, DType::kU32, DType::kU64};

void FillRandom(void* p, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  auto* b = static_cast<uint8_t*>(p);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(b + i, &v, 8);
  }
  uint64_t v = rng();
  for (; i < n; ++i, v >>= 8) b[i] = uint8_t(v);
}

Tensor RandomTensor(DType dtype, const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::Zeros(dtype, shape);
  FillRandom(t.data(), t.nbytes(), seed);
  if (dtype == DType::kBool) {
    auto* b = static_cast<uint8_t*>(t.data());
    for (uint64_t i = 0; i < t.nbytes(); ++i) b[i] &= 1;
  }
  return t;
}

std::string TensorBytes(const Tensor& t) {
  if (t.nbytes() == 0) return {};
  return std::string(static_cast<const char*>(t.data()), t.nbytes());
}

uint64_t TotalTensorBytes(const Value& v) {
  uint64_t n = 0;
  VisitValues(v, [&](const KeyPath&, const Value& x) {
    if (x.is_tensor()) n += x.as_tensor().nbytes();
  });
  return n;
}

std::string RandomString(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  FillRandom(s.data(), n, seed);
  return s;
}

Tensor ShardOf(const Tensor& whole, const Region& region) {
  std::string bytes =
      RefExtract(whole.shape(), region, TensorBytes(whole), DTypeSize(whole.dtype()));
  Shape local = region.kind == Region::Kind::kBox ? region.lengths : Shape{region.length};
  Tensor t = Tensor::Zeros(whole.dtype(), local);
  if (!bytes.empty()) std::memcpy(t.data(), bytes.data(), bytes.size());
  t.SetShard(ShardSpec{whole.shape(), region});
  return t;
}

double DoubleFromBits(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

Value MakeRichStateDict(uint64_t seed) {
  uint64_t s = seed * 1000;
  Dict model;
  {
    Dict dtypes;
    for (DType dt : kAllDTypes) dtypes.Set(std::string(DTypeName(dt)), RandomTensor(dt, {5, 7}, ++s));
    model.Set("dtypes", std::move(dtypes));
    Dict shapes;
    shapes.Set("0d", RandomTensor(DType::kF64, {}, ++s));
    shapes.Set("0d_bool", RandomTensor(DType::kBool, {}, ++s));
    shapes.Set("empty_0x5", RandomTensor(DType::kF32, {0, 5}, ++s));
    shapes.Set("empty_3x0", RandomTensor(DType::kI16, {3, 0}, ++s));
    shapes.Set("empty_1d", RandomTensor(DType::kU8, {0}, ++s));
    shapes.Set("one", RandomTensor(DType::kC128, {1}, ++s));
    shapes.Set("primes", RandomTensor(DType::kF32, {7, 13, 3}, ++s));
    shapes.Set("unit_dims", RandomTensor(DType::kI8, {1, 1, 1, 1}, ++s));
    shapes.Set("multi_chunk", RandomTensor(DType::kF32, {257, 129}, ++s));  // 132 KB
    shapes.Set("bf16_odd", RandomTensor(DType::kBF16, {10007}, ++s));
    shapes.Set("c128_multi", RandomTensor(DType::kC128, {1500}, ++s));
    shapes.Set("bool_big", RandomTensor(DType::kBool, {20011}, ++s));
    shapes.Set("f8_big", RandomTensor(DType::kF8E5M2, {3, 7001}, ++s));
    model.Set("shapes", std::move(shapes));
  }
  Dict optim;
  {
    List state;
    for (int i = 0; i < 2; ++i) {
      Dict st;
      st.Set("exp_avg", RandomTensor(DType::kF32, {13, 11}, ++s));
      st.Set("exp_avg_sq", RandomTensor(DType::kF32, {13, 11}, ++s));
      st.Set("step", Value(int64_t{1000 + i}));
      state.push_back(std::move(st));
    }
    optim.Set("state", std::move(state));
    Dict group;
    group.Set("lr", Value(1e-3));
    group.Set("betas", List{Value(0.9), Value(0.999)});
    group.Set("params", List{Value(int64_t{0}), Value(int64_t{1})});
    group.Set("name", Value("default"));
    group.Set("amsgrad", Value(false));
    optim.Set("param_groups", List{Value(std::move(group))});
  }
  Dict scalars;
  scalars.Set("int_min", Value(std::numeric_limits<int64_t>::min()));
  scalars.Set("int_max", Value(std::numeric_limits<int64_t>::max()));
  scalars.Set("int_zero", Value(int64_t{0}));
  scalars.Set("int_neg", Value(int64_t{-1}));
  scalars.Set("nan_payload", Value(DoubleFromBits(0x7FF8DEADBEEF0001ull)));
  scalars.Set("neg_nan", Value(DoubleFromBits(0xFFF8000000000000ull)));
  scalars.Set("signaling_nan", Value(DoubleFromBits(0x7FF0000000000001ull)));
  scalars.Set("inf", Value(std::numeric_limits<double>::infinity()));
  scalars.Set("neg_inf", Value(-std::numeric_limits<double>::infinity()));
  scalars.Set("neg_zero", Value(-0.0));
  scalars.Set("zero", Value(0.0));
  scalars.Set("denorm", Value(std::numeric_limits<double>::denorm_min()));
  scalars.Set("max", Value(std::numeric_limits<double>::max()));
  scalars.Set("true", Value(true));
  scalars.Set("false", Value(false));
  scalars.Set("str_nul", Value(std::string("a\0b\0\0c", 6)));
  scalars.Set("str_utf8", Value("Grüße, 世界 🌍"));
  scalars.Set("str_empty", Value(""));
  scalars.Set("str_long", Value(std::string(100000, 'x') + "end"));
  scalars.Set("none", Value());
  Dict blobs;
  blobs.Set("pickle", Bytes{"pickle", std::string("\x80\x04\x95\0\0\x2e", 6)});
  blobs.Set("empty", Bytes{"raw", ""});
  blobs.Set("big", Bytes{"application/octet-stream", RandomString(50001, ++s)});
  blobs.Set("no_content_type", Bytes{"", "json-ish {\"a\": 1}"});
  Dict keys;
  for (const char* k : {"a.b", "a/b", "a\\b", "", "ключ", "[3]", "0", " ", "\n", "<root>", "..."}) {
    keys.Set(k, Value(int64_t(++s)));
  }
  {
    Dict inner;
    inner.Set("", List{Value(List{}), Value(Dict{}), Value(), RandomTensor(DType::kU16, {3}, ++s)});
    keys.Set("x/y", std::move(inner));
  }
  Dict root;
  root.Set("model", std::move(model));
  root.Set("optim", std::move(optim));
  root.Set("scalars", std::move(scalars));
  root.Set("blobs", std::move(blobs));
  root.Set("keys", std::move(keys));
  root.Set("empty_dict", Dict{});
  root.Set("empty_list", List{});
  root.Set("list_of_tensors",
           List{RandomTensor(DType::kI64, {4}, ++s), RandomTensor(DType::kF16, {2, 2}, ++s),
                List{RandomTensor(DType::kU32, {9}, ++s)}});
  return Value(std::move(root));
}

Value ZeroedLike(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kTensor: {
      const Tensor& t = v.as_tensor();
      Tensor z = Tensor::Zeros(t.dtype(), t.shape());
      if (t.shard()) z.SetShard(*t.shard());
      return z;
    }
    case Value::Kind::kDict: {
      Dict d;
      for (size_t i = 0; i < v.as_dict().size(); ++i) {
        d.Set(v.as_dict().key(i), ZeroedLike(v.as_dict().value(i)));
      }
      return d;
    }
    case Value::Kind::kList: {
      List l;
      for (const auto& e : v.as_list()) l.push_back(ZeroedLike(e));
      return l;
    }
    case Value::Kind::kInt: return Value(v.as_int() ^ 0x5555);
    case Value::Kind::kFloat: return Value(1.25);
    case Value::Kind::kBool: return Value(!v.as_bool());
    case Value::Kind::kString: return Value("changed");
    case Value::Kind::kBytes: return Bytes{"changed", ""};
    case Value::Kind::kNone: return Value();
  }
  return Value();
}

namespace {

std::string ShapeStr(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

std::string Diff(const Value& a, const Value& b, KeyPath& path, bool dict_order) {
  const std::string where = FormatKeyPath(path) + ": ";
  if (a.kind() != b.kind()) {
    return where + "kind " + ValueKindName(a.kind()) + " vs " + ValueKindName(b.kind());
  }
  switch (a.kind()) {
    case Value::Kind::kNone: return "";
    case Value::Kind::kBool:
      return a.as_bool() == b.as_bool() ? "" : where + "bool differs";
    case Value::Kind::kInt:
      return a.as_int() == b.as_int()
                 ? ""
                 : where + std::to_string(a.as_int()) + " vs " + std::to_string(b.as_int());
    case Value::Kind::kFloat: {
      double x = a.as_float(), y = b.as_float();
      if (std::memcmp(&x, &y, 8) == 0) return "";
      uint64_t bx, by;
      std::memcpy(&bx, &x, 8);
      std::memcpy(&by, &y, 8);
      char buf[128];
      std::snprintf(buf, sizeof buf, "float bits %016llx vs %016llx", (unsigned long long)bx,
                    (unsigned long long)by);
      return where + buf;
    }
    case Value::Kind::kString:
      return a.as_string() == b.as_string() ? "" : where + "string differs";
    case Value::Kind::kBytes:
      if (a.as_bytes().content_type != b.as_bytes().content_type) {
        return where + "content type \"" + a.as_bytes().content_type + "\" vs \"" +
               b.as_bytes().content_type + "\"";
      }
      return a.as_bytes().data == b.as_bytes().data ? "" : where + "bytes data differs";
    case Value::Kind::kTensor: {
      const Tensor& x = a.as_tensor();
      const Tensor& y = b.as_tensor();
      if (x.dtype() != y.dtype()) {
        return where + "dtype " + std::string(DTypeName(x.dtype())) + " vs " +
               std::string(DTypeName(y.dtype()));
      }
      if (x.shape() != y.shape()) return where + "shape " + ShapeStr(x.shape()) + " vs " + ShapeStr(y.shape());
      std::string bx = TensorBytes(x), by = TensorBytes(y);
      if (bx != by) {
        size_t i = 0;
        while (i < bx.size() && bx[i] == by[i]) ++i;
        return where + "tensor bytes differ first at byte " + std::to_string(i) + " of " +
               std::to_string(bx.size());
      }
      return "";
    }
    case Value::Kind::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.size() != y.size()) {
        return where + "dict sizes " + std::to_string(x.size()) + " vs " + std::to_string(y.size());
      }
      for (size_t i = 0; i < x.size(); ++i) {
        const Value* other = nullptr;
        if (dict_order) {
          if (x.key(i) != y.key(i)) {
            return where + "key #" + std::to_string(i) + " is \"" + x.key(i) + "\" vs \"" +
                   y.key(i) + "\"";
          }
          other = &y.value(i);
        } else {
          other = y.Find(x.key(i));
          if (!other) return where + "key \"" + x.key(i) + "\" missing on the right";
        }
        path.emplace_back(x.key(i));
        std::string d = Diff(x.value(i), *other, path, dict_order);
        path.pop_back();
        if (!d.empty()) return d;
      }
      return "";
    }
    case Value::Kind::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.size() != y.size()) {
        return where + "list sizes " + std::to_string(x.size()) + " vs " + std::to_string(y.size());
      }
      for (size_t i = 0; i < x.size(); ++i) {
        path.emplace_back(uint64_t{i});
        std::string d = Diff(x[i], y[i], path, dict_order);
        path.pop_back();
        if (!d.empty()) return d;
      }
      return "";
    }
  }
  return "";
}

}  // namespace

std::string DiffValues(const Value& a, const Value& b, bool dict_order) {
  KeyPath path;
  return Diff(a, b, path, dict_order);
}

::testing::AssertionResult ValuesBitwiseEqual(const Value& a, const Value& b, bool dict_order) {
  std::string d = DiffValues(a, b, dict_order);
  if (d.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "values differ at " << d;
}

std::vector<KeyPath> AllPaths(const Value& root) {
  std::vector<KeyPath> out;
  VisitValues(root, [&](const KeyPath& p, const Value&) { out.push_back(p); });
  return out;
}

std::vector<KeyPath> LeafPaths(const Value& root) {
  std::vector<KeyPath> out;
  VisitValues(root, [&](const KeyPath& p, const Value& v) {
    if (!v.is_dict() && !v.is_list()) out.push_back(p);
  });
  return out;
}

bool ContainsPath(const std::vector<KeyPath>& paths, const KeyPath& p) {
  for (const auto& q : paths) {
    if (q == p) return true;
  }
  return false;
}

std::string StoredChunksByEntry(const std::string& path) {
  auto reader = CheckpointReader::Open(path);
  if (!reader.ok()) {
    ADD_FAILURE() << reader.status().ToString();
    return "";
  }
  std::string s;
  for (const EntryRecord& e : (*reader)->index().entries) {
    s += FormatKeyPath(e.path) + ":";
    for (const PieceRecord& p : e.pieces) {
      s += " [";
      for (const ChunkRecord& c : p.chunks) {
        s += " " + std::to_string(c.stored_size) + "/" + std::to_string(c.raw_size) + "/" +
             std::to_string(c.checksum) + "/" + std::to_string(c.codec);
      }
      s += " ]";
    }
    s += "\n";
  }
  return s;
}

std::string PathsToString(const std::vector<KeyPath>& paths) {
  std::string s = "{";
  for (const auto& p : paths) s += " " + FormatKeyPath(p);
  return s + " }";
}

bool MentionsPath(const std::string& message, const KeyPath& path) {
  return message.find(FormatKeyPath(path)) != std::string::npos ||
         message.find(DottedKeyPath(path)) != std::string::npos;
}

SaveOptions SmallSaveOptions(Codec codec) {
  SaveOptions o;
  o.chunk_size = kSmallChunk;
  o.codec = codec;
  o.fsync = false;
  o.io.block_size = 16 << 10;
  o.io.staging_bytes = 64 << 10;
  o.io.threads = 2;
  return o;
}

ReadOptions SmallReadOptions() {
  ReadOptions o;
  o.io.block_size = 16 << 10;
  o.io.staging_bytes = 64 << 10;
  o.io.threads = 2;
  return o;
}

LogCapture::LogCapture() {
  SetLogSink([this](LogLevel level, const std::string& m) {
    std::lock_guard<std::mutex> lock(mu_);
    messages_.emplace_back(level, m);
  });
}

LogCapture::~LogCapture() { SetLogSink(nullptr); }

std::vector<std::pair<LogLevel, std::string>> LogCapture::messages() const {
  std::lock_guard<std::mutex> lock(mu_);
  return messages_;
}

size_t LogCapture::CountContaining(LogLevel level, const std::string& needle) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [l, m] : messages_) {
    if (l == level && m.find(needle) != std::string::npos) ++n;
  }
  return n;
}

std::vector<std::string> TempNames(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& n : names) {
    if (n.find(".tmp.") != std::string::npos) out.push_back(n);
  }
  return out;
}

void ExpectPreviousFileKept(const std::string& dir, const std::string& path,
                            const std::string& before) {
  EXPECT_TRUE(ReadFileBytes(path) == before) << path << " changed";
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  EXPECT_TRUE(TempNames(names).empty()) << ::testing::PrintToString(names);
}

}  // namespace ckfmt_test
