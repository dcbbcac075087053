// Load policies: reconstruction of what the caller lacks, unexpected and
// missing keys, mismatches, custom allocators, prefixes, the report.
#include <gtest/gtest.h>

#include <algorithm>

#include "ckfmt/reader.h"
#include "ckfmt/writer.h"
#include "util/file_util.h"
#include "util/temp_dir.h"
#include "util/value_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt_test;

// A training checkpoint: model, optimizer state (list of per-param dicts,
// created lazily by the optimizer), scheduler scalars, a data-loader blob.
Value MakeCheckpoint(uint64_t seed) {
  Dict model;
  model.Set("embed.weight", RandomTensor(DType::kBF16, {64, 32}, seed + 1));
  Dict layer;
  layer.Set("weight", RandomTensor(DType::kF32, {32, 32}, seed + 2));
  layer.Set("bias", RandomTensor(DType::kF32, {32}, seed + 3));
  model.Set("layers", List{Value(std::move(layer))});
  Dict optim;
  List state;
  for (int i = 0; i < 3; ++i) {
    Dict s;
    s.Set("exp_avg", RandomTensor(DType::kF32, {32, 8}, seed + 10 + i));
    s.Set("exp_avg_sq", RandomTensor(DType::kF32, {32, 8}, seed + 20 + i));
    s.Set("step", Value(int64_t{100 + i}));
    state.push_back(std::move(s));
  }
  optim.Set("state", std::move(state));
  Dict group;
  group.Set("lr", Value(3e-4));
  group.Set("params", List{Value(int64_t{0}), Value(int64_t{1}), Value(int64_t{2})});
  optim.Set("param_groups", List{Value(std::move(group))});
  Dict root;
  root.Set("model", std::move(model));
  root.Set("optim", std::move(optim));
  root.Set("step", Value(int64_t{1234}));
  root.Set("loader", Bytes{"pickle", RandomString(300, seed + 99)});
  return Value(std::move(root));
}

class LoadPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path = dir.File("ckpt.ckfmt");
    original = MakeCheckpoint(7);
    CKFMT_ASSERT_OK(ckfmt::Save(path, original, SmallSaveOptions()));
  }
  // A caller dict holding only a zeroed copy of the model.
  Value ModelOnly() {
    Dict d;
    d.Set("model", ZeroedLike(*original.Find({"model"})));
    return Value(std::move(d));
  }
  Result<LoadReport> LoadWith(Value* sd, const LoadOptions& o) {
    return ckfmt::Load(path, sd, o, SmallReadOptions());
  }
  ScopedTempDir dir;
  std::string path;
  Value original;
};

TEST_F(LoadPolicyTest, LazyOptimizerStateIsReconstructed) {
  Value sd = ModelOnly();
  void* weight_buf = sd.Find({"model", "layers", 0u, "weight"})->as_tensor().data();
  auto report = LoadWith(&sd, {});
  CKFMT_ASSERT_OK(report);
  // Everything is there, bit for bit, in the file's order.
  EXPECT_TRUE(ValuesBitwiseEqual(*original.Find({"model"}), *sd.Find({"model"})));
  EXPECT_TRUE(ValuesBitwiseEqual(original, sd, /*dict_order=*/false));
  // Parents were created with the right kinds.
  ASSERT_NE(sd.Find({"optim"}), nullptr);
  EXPECT_TRUE(sd.Find({"optim"})->is_dict());
  ASSERT_TRUE(sd.Find({"optim", "state"})->is_list());
  EXPECT_EQ(sd.Find({"optim", "state"})->as_list().size(), 3u);
  EXPECT_TRUE(sd.Find({"optim", "state", 2u})->is_dict());
  // The model was loaded in place, the rest reconstructed.
  EXPECT_EQ(sd.Find({"model", "layers", 0u, "weight"})->as_tensor().data(), weight_buf);
  for (const KeyPath& p : LeafPaths(*original.Find({"model"}))) {
    KeyPath full = {"model"};
    full.insert(full.end(), p.begin(), p.end());
    EXPECT_TRUE(ContainsPath(report->loaded_in_place, full)) << FormatKeyPath(full);
    EXPECT_FALSE(ContainsPath(report->reconstructed, full)) << FormatKeyPath(full);
  }
  for (const KeyPath& p : {KeyPath{"optim", "state", 0u, "exp_avg"},
                           KeyPath{"optim", "state", 2u, "exp_avg_sq"},
                           KeyPath{"optim", "state", 1u, "step"},
                           KeyPath{"optim", "param_groups", 0u, "lr"}, KeyPath{"step"},
                           KeyPath{"loader"}}) {
    EXPECT_TRUE(ContainsPath(report->reconstructed, p)) << FormatKeyPath(p);
  }
  EXPECT_TRUE(report->missing.empty()) << PathsToString(report->missing);
  EXPECT_TRUE(report->unexpected.empty()) << PathsToString(report->unexpected);
  EXPECT_GT(report->bytes_read, 0u);
}

TEST_F(LoadPolicyTest, ReconstructionAppendsToAPartiallyPresentList) {
  Value sd = ModelOnly();
  Dict optim;
  List state;
  Dict first;
  first.Set("exp_avg", Tensor::Zeros(DType::kF32, {32, 8}));
  first.Set("exp_avg_sq", Tensor::Zeros(DType::kF32, {32, 8}));
  first.Set("step", Value(int64_t{0}));
  state.push_back(std::move(first));
  optim.Set("state", std::move(state));
  sd.as_dict().Set("optim", std::move(optim));
  auto report = LoadWith(&sd, {});
  CKFMT_ASSERT_OK(report);
  EXPECT_TRUE(ValuesBitwiseEqual(original, sd, /*dict_order=*/false));
  EXPECT_TRUE(ContainsPath(report->loaded_in_place, {"optim", "state", 0u, "exp_avg"}));
  EXPECT_TRUE(ContainsPath(report->reconstructed, {"optim", "state", 2u, "exp_avg"}));
}

TEST_F(LoadPolicyTest, CustomAllocatorGetsReconstructedTensors) {
  struct Call {
    DType dtype;
    Shape shape;
    KeyPath path;
    void* data;
  };
  std::vector<Call> calls;
  LoadOptions o;
  o.allocator = [&](DType dt, const Shape& shape, const KeyPath& p, Device dev) -> Result<Tensor> {
    EXPECT_EQ(dev.type, DeviceType::kCPU);
    Tensor t = Tensor::Zeros(dt, shape);
    calls.push_back({dt, shape, p, t.data()});
    return t;
  };
  Value sd = ModelOnly();
  auto report = LoadWith(&sd, o);
  CKFMT_ASSERT_OK(report);
  EXPECT_TRUE(ValuesBitwiseEqual(original, sd, false));
  // One call per reconstructed tensor, with its dtype, shape and path, and
  // the tensor in the dict is the one the allocator returned.
  std::vector<KeyPath> want;
  VisitValues(original, [&](const KeyPath& p, const Value& v) {
    if (v.is_tensor() && p[0] != PathComponent("model")) want.push_back(p);
  });
  ASSERT_EQ(calls.size(), want.size());
  for (const KeyPath& p : want) {
    auto it = std::find_if(calls.begin(), calls.end(), [&](const Call& c) { return c.path == p; });
    ASSERT_NE(it, calls.end()) << FormatKeyPath(p);
    const Tensor& t = original.Find(p)->as_tensor();
    EXPECT_EQ(it->dtype, t.dtype());
    EXPECT_EQ(it->shape, t.shape());
    EXPECT_EQ(sd.Find(p)->as_tensor().data(), it->data) << FormatKeyPath(p);
  }
}

TEST_F(LoadPolicyTest, FailingAllocatorFailsTheLoad) {
  LoadOptions o;
  o.allocator = [](DType, const Shape&, const KeyPath& p, Device) -> Result<Tensor> {
    return Status::IOError("out of device memory for " + FormatKeyPath(p));
  };
  Value sd = ModelOnly();
  auto r = LoadWith(&sd, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("out of device memory"), std::string::npos)
      << r.status().ToString();
}

TEST_F(LoadPolicyTest, AllocatorReturningTheWrongShapeIsRefused) {
  LoadOptions o;
  o.allocator = [](DType dt, const Shape&, const KeyPath&, Device) -> Result<Tensor> {
    return Tensor::Zeros(dt, {1});
  };
  Value sd = ModelOnly();
  auto r = LoadWith(&sd, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().code(), StatusCode::kOk);
}

TEST_F(LoadPolicyTest, UnexpectedWarnLeavesThemOutAndReportsThem) {
  LogCapture log;
  Value sd = ModelOnly();
  LoadOptions o;
  o.unexpected = UnexpectedPolicy::kWarn;
  auto report = LoadWith(&sd, o);
  CKFMT_ASSERT_OK(report);
  EXPECT_EQ(sd.Find({"optim"}), nullptr);
  EXPECT_EQ(sd.Find({"step"}), nullptr);
  EXPECT_EQ(sd.Find({"loader"}), nullptr);
  EXPECT_TRUE(report->reconstructed.empty()) << PathsToString(report->reconstructed);
  // Reported: at least the top-level keys (or everything below them).
  for (const char* k : {"optim", "step", "loader"}) {
    bool found = std::any_of(report->unexpected.begin(), report->unexpected.end(),
                             [&](const KeyPath& p) { return p[0] == PathComponent(k); });
    EXPECT_TRUE(found) << k << " not in " << PathsToString(report->unexpected);
  }
  EXPECT_TRUE(ValuesBitwiseEqual(*original.Find({"model"}), *sd.Find({"model"})));
  EXPECT_GE(log.CountContaining(LogLevel::kWarning, "optim"), 1u);
}

TEST_F(LoadPolicyTest, UnexpectedIgnoreLeavesThemOutQuietly) {
  LogCapture log;
  Value sd = ModelOnly();
  LoadOptions o;
  o.unexpected = UnexpectedPolicy::kIgnore;
  auto report = LoadWith(&sd, o);
  CKFMT_ASSERT_OK(report);
  EXPECT_EQ(sd.as_dict().size(), 1u);
  EXPECT_TRUE(report->reconstructed.empty());
  EXPECT_TRUE(ValuesBitwiseEqual(*original.Find({"model"}), *sd.Find({"model"})));
  EXPECT_EQ(log.CountContaining(LogLevel::kWarning, "optim"), 0u);
}

TEST_F(LoadPolicyTest, UnexpectedErrorNamesTheKeysAndChangesNothing) {
  Value sd = ModelOnly();
  LoadOptions o;
  o.unexpected = UnexpectedPolicy::kError;
  auto r = LoadWith(&sd, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnexpectedKeys);
  for (const KeyPath& p : {KeyPath{"optim"}, KeyPath{"step"}, KeyPath{"loader"}}) {
    EXPECT_TRUE(MentionsPath(r.status().message(), p)) << r.status().message();
  }
  EXPECT_TRUE(ValuesBitwiseEqual(ModelOnly(), sd)) << "a refused load modified the state dict";
}

TEST_F(LoadPolicyTest, MissingKeysFailByDefaultListingAllOfThem) {
  Value sd = ModelOnly();
  sd.as_dict().Set("extra_tensor_alpha", Tensor::Zeros(DType::kF32, {3}));
  sd.as_dict().Set("extra_scalar_beta", Value(int64_t{1}));
  sd.Find({"model"})->as_dict().Set("head.weight", Tensor::Zeros(DType::kF32, {2, 2}));
  sd.Find({"model", "layers"})->as_list().push_back(Value(Dict{}));
  sd.Find({"model", "layers", 1u})->as_dict().Set("weight", Tensor::Zeros(DType::kF32, {1}));
  auto r = LoadWith(&sd, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kMissingKeys);
  for (const KeyPath& p :
       {KeyPath{"extra_tensor_alpha"}, KeyPath{"extra_scalar_beta"},
        KeyPath{"model", "head.weight"}, KeyPath{"model", "layers", 1u, "weight"}}) {
    EXPECT_TRUE(MentionsPath(r.status().message(), p))
        << FormatKeyPath(p) << " not in: " << r.status().message();
  }
  // Nothing was loaded: the model is still zero.
  EXPECT_TRUE(ValuesBitwiseEqual(ZeroedLike(*original.Find({"model"})).as_dict().value(0),
                                 sd.Find({"model"})->as_dict().value(0)));
}

TEST_F(LoadPolicyTest, MissingWarnAndIgnoreLoadTheRest) {
  for (MissingPolicy policy : {MissingPolicy::kWarn, MissingPolicy::kIgnore}) {
    LogCapture log;
    Value sd = ModelOnly();
    Tensor extra = RandomTensor(DType::kF32, {3}, 5);
    std::string extra_bytes = TensorBytes(extra);
    sd.as_dict().Set("extra_gamma", extra);
    LoadOptions o;
    o.missing = policy;
    auto report = LoadWith(&sd, o);
    CKFMT_ASSERT_OK(report);
    EXPECT_TRUE(ValuesBitwiseEqual(*original.Find({"model"}), *sd.Find({"model"})));
    EXPECT_EQ(TensorBytes(sd.Find({"extra_gamma"})->as_tensor()), extra_bytes)
        << "a missing entry was modified";
    if (policy == MissingPolicy::kWarn) {
      EXPECT_TRUE(ContainsPath(report->missing, {"extra_gamma"}))
          << PathsToString(report->missing);
      EXPECT_GE(log.CountContaining(LogLevel::kWarning, "extra_gamma"), 1u);
    } else {
      EXPECT_EQ(log.CountContaining(LogLevel::kWarning, "extra_gamma"), 0u);
    }
  }
}

TEST_F(LoadPolicyTest, ShapeMismatchNamesKeyAndBothShapes) {
  Value sd = ModelOnly();
  sd.Find({"model", "layers", 0u})->as_dict().Set("weight", Tensor::Zeros(DType::kF32, {37, 41}));
  auto r = LoadWith(&sd, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kMismatch);
  const std::string m = r.status().message();
  EXPECT_TRUE(MentionsPath(m, {"model", "layers", 0u, "weight"})) << m;
  for (const char* n : {"37", "41", "32"}) EXPECT_NE(m.find(n), std::string::npos) << n << ": " << m;
}

TEST_F(LoadPolicyTest, DtypeMismatchNamesKeyAndBothDtypes) {
  Value sd = ModelOnly();
  sd.Find({"model"})->as_dict().Set("embed.weight", Tensor::Zeros(DType::kI16, {64, 32}));
  auto r = LoadWith(&sd, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kMismatch);
  const std::string m = r.status().message();
  EXPECT_TRUE(MentionsPath(m, {"model", "embed.weight"})) << m;
  EXPECT_NE(m.find("int16"), std::string::npos) << m;
  EXPECT_NE(m.find("bfloat16"), std::string::npos) << m;
}

TEST_F(LoadPolicyTest, KindMismatches) {
  struct Case {
    KeyPath path;
    Value value;
  };
  std::vector<Case> cases;
  cases.push_back({{"step"}, Value("a string")});
  cases.push_back({{"step"}, Value(1.5)});
  cases.push_back({{"loader"}, Tensor::Zeros(DType::kU8, {300})});
  cases.push_back({{"optim"}, Value(List{})});
  cases.push_back({{"model", "embed.weight"}, Value(int64_t{3})});
  for (auto& c : cases) {
    Value sd = ModelOnly();
    ASSERT_TRUE(InsertAtPath(&sd, c.path, std::move(c.value)).ok());
    auto r = LoadWith(&sd, {});
    ASSERT_FALSE(r.ok()) << FormatKeyPath(c.path);
    EXPECT_EQ(r.status().code(), StatusCode::kMismatch) << r.status().ToString();
    EXPECT_TRUE(MentionsPath(r.status().message(), c.path)) << r.status().message();
  }
}

TEST_F(LoadPolicyTest, ScalarsAreAssignedInPlace) {
  Value sd = ZeroedLike(original);
  auto report = LoadWith(&sd, {});
  CKFMT_ASSERT_OK(report);
  EXPECT_EQ(sd.Find({"step"})->as_int(), 1234);
  EXPECT_EQ(sd.Find({"loader"})->as_bytes().content_type, "pickle");
  EXPECT_TRUE(ValuesBitwiseEqual(original, sd));
  EXPECT_TRUE(ContainsPath(report->loaded_in_place, {"step"}));
}

TEST_F(LoadPolicyTest, PrefixRestrictedLoad) {
  // The caller has the model, an unrelated tensor the file lacks, and a
  // tensor that the file has but that lies outside the prefix.
  Value sd = ModelOnly();
  Tensor outside = RandomTensor(DType::kI64, {1}, 3);
  const std::string outside_bytes = TensorBytes(outside);
  sd.as_dict().Set("not_in_file", Tensor::Zeros(DType::kF32, {4}));
  sd.as_dict().Set("step", Value(int64_t{-5}));
  LoadOptions o;
  o.prefixes = {{"model"}};
  auto report = LoadWith(&sd, o);
  CKFMT_ASSERT_OK(report);  // not_in_file is outside the selection: not missing
  EXPECT_TRUE(ValuesBitwiseEqual(*original.Find({"model"}), *sd.Find({"model"})));
  EXPECT_EQ(sd.Find({"step"})->as_int(), -5) << "an entry outside the prefix was loaded";
  EXPECT_EQ(sd.Find({"optim"}), nullptr) << "an entry outside the prefix was reconstructed";
  EXPECT_EQ(sd.Find({"loader"}), nullptr);
  EXPECT_FALSE(ContainsPath(report->missing, {"not_in_file"}));
  for (const auto* list : {&report->reconstructed, &report->unexpected, &report->missing}) {
    for (const KeyPath& p : *list) {
      EXPECT_TRUE(HasPrefix(p, {"model"})) << FormatKeyPath(p) << " reported";
    }
  }
}

TEST_F(LoadPolicyTest, NestedAndMultiplePrefixes) {
  Value sd = Dict{};
  LoadOptions o;
  o.prefixes = {{"optim", "param_groups"}, {"step"}};
  auto report = LoadWith(&sd, o);
  CKFMT_ASSERT_OK(report);
  EXPECT_TRUE(ValuesBitwiseEqual(*original.Find({"optim", "param_groups"}),
                                 *sd.Find({"optim", "param_groups"})));
  EXPECT_EQ(sd.Find({"step"})->as_int(), 1234);
  EXPECT_EQ(sd.Find({"model"}), nullptr);
  EXPECT_EQ(sd.Find({"optim", "state"}), nullptr);
  EXPECT_EQ(sd.Find({"loader"}), nullptr);
}

TEST_F(LoadPolicyTest, PrefixWithMissingKeysInside) {
  Value sd = ModelOnly();
  sd.Find({"model"})->as_dict().Set("new_head", Tensor::Zeros(DType::kF32, {2}));
  LoadOptions o;
  o.prefixes = {{"model"}};
  auto r = LoadWith(&sd, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kMissingKeys);
  EXPECT_TRUE(MentionsPath(r.status().message(), {"model", "new_head"})) << r.status().message();
}

TEST(LoadReportTest, ToStringMentionsEveryCategoryAndKey) {
  LoadReport r;
  r.loaded_in_place = {{"model", "w"}};
  r.reconstructed = {{"optim", "state", 0u, "exp_avg"}};
  r.missing = {{"head", "bias"}};
  r.unexpected = {{"loader"}};
  r.bytes_read = 12345;
  std::string s = r.ToString();
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  for (const char* cat : {"place", "reconstructed", "missing", "unexpected"}) {
    EXPECT_NE(lower.find(cat), std::string::npos) << cat << " not in:\n" << s;
  }
  for (const KeyPath* p : {&r.loaded_in_place[0], &r.reconstructed[0], &r.missing[0],
                           &r.unexpected[0]}) {
    EXPECT_TRUE(MentionsPath(s, *p)) << FormatKeyPath(*p) << " not in:\n" << s;
  }
}

}  // namespace
