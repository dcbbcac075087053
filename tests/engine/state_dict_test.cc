// The state-dict value model and tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "ckfmt/state_dict.h"
#include "ckfmt/tensor.h"
#include "util/value_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt_test;

TEST(DictTest, InsertionOrderFindSetErase) {
  Dict d;
  EXPECT_TRUE(d.empty());
  d.Set("z", Value(int64_t{1}));
  d.Set("a", Value(int64_t{2}));
  d.Set("m", Value(int64_t{3}));
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d.key(0), "z");
  EXPECT_EQ(d.key(1), "a");
  EXPECT_EQ(d.key(2), "m");
  d.Set("a", Value("replaced"));  // replacing keeps the position
  EXPECT_EQ(d.key(1), "a");
  EXPECT_EQ(d.Find("a")->as_string(), "replaced");
  EXPECT_EQ(d.Find("nope"), nullptr);
  EXPECT_TRUE(d.Erase("z"));
  EXPECT_FALSE(d.Erase("z"));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d.key(0), "a");
  EXPECT_EQ(d.Find("m")->as_int(), 3);  // positions after an erase stay right
  d.Set("", Value());
  EXPECT_NE(d.Find(""), nullptr);
}

TEST(ValueTest, KindsAndFind) {
  EXPECT_EQ(Value().kind(), Value::Kind::kNone);
  EXPECT_EQ(Value(true).kind(), Value::Kind::kBool);
  EXPECT_EQ(Value(3).kind(), Value::Kind::kInt);
  EXPECT_EQ(Value(int64_t{3}).kind(), Value::Kind::kInt);
  EXPECT_EQ(Value(2.5).kind(), Value::Kind::kFloat);
  EXPECT_EQ(Value("s").kind(), Value::Kind::kString);
  EXPECT_EQ(Value(Bytes{"raw", "x"}).kind(), Value::Kind::kBytes);
  EXPECT_EQ(Value(Tensor::Zeros(DType::kF32, {2})).kind(), Value::Kind::kTensor);
  EXPECT_STREQ(ValueKindName(Value::Kind::kList), "list");

  Value root = MakeRichStateDict(1);
  ASSERT_NE(root.Find({"optim", "state", 1u, "step"}), nullptr);
  EXPECT_EQ(root.Find({"optim", "state", 1u, "step"})->as_int(), 1001);
  EXPECT_EQ(root.Find({"optim", "state", 2u}), nullptr);        // past the end
  EXPECT_EQ(root.Find({"optim", "state", "1"}), nullptr);       // key into a list
  EXPECT_EQ(root.Find({"optim", 0u}), nullptr);                 // index into a dict
  EXPECT_EQ(root.Find({"scalars", "int_max", "x"}), nullptr);   // below a leaf
  EXPECT_EQ(root.Find({}), &root);
}

TEST(InsertAtPathTest, CreatesParentsAndAppends) {
  Value root = Dict{};
  CKFMT_ASSERT_OK(InsertAtPath(&root, {"a", "b", 0u, "c"}, Value(int64_t{5})));
  ASSERT_TRUE(root.Find({"a"})->is_dict());
  ASSERT_TRUE(root.Find({"a", "b"})->is_list());
  ASSERT_TRUE(root.Find({"a", "b", 0u})->is_dict());
  EXPECT_EQ(root.Find({"a", "b", 0u, "c"})->as_int(), 5);
  CKFMT_ASSERT_OK(InsertAtPath(&root, {"a", "b", 1u}, Value("next")));
  EXPECT_EQ(root.Find({"a", "b"})->as_list().size(), 2u);
  // Replacing an existing leaf.
  CKFMT_ASSERT_OK(InsertAtPath(&root, {"a", "b", 1u}, Value("again")));
  EXPECT_EQ(root.Find({"a", "b", 1u})->as_string(), "again");
  EXPECT_EQ(root.Find({"a", "b"})->as_list().size(), 2u);
  // Inserting below an existing dict keeps its other children.
  CKFMT_ASSERT_OK(InsertAtPath(&root, {"a", "x"}, Value(1.0)));
  EXPECT_NE(root.Find({"a", "b"}), nullptr);
}

TEST(InsertAtPathTest, RefusesWrongParentsAndGaps) {
  Value root = Dict{};
  CKFMT_ASSERT_OK(InsertAtPath(&root, {"leaf"}, Value(int64_t{1})));
  CKFMT_ASSERT_OK(InsertAtPath(&root, {"list"}, Value(List{})));
  Status st = InsertAtPath(&root, {"leaf", "child"}, Value());
  EXPECT_EQ(st.code(), StatusCode::kMismatch);
  st = InsertAtPath(&root, {"list", "key"}, Value());
  EXPECT_EQ(st.code(), StatusCode::kMismatch);
  st = InsertAtPath(&root, {"list", 1u}, Value());  // lists grow only at the end
  EXPECT_EQ(st.code(), StatusCode::kMismatch);
  EXPECT_TRUE(root.Find({"list"})->as_list().empty());
  // An index under a dict or a scalar: the error says what is there.
  CKFMT_ASSERT_OK(InsertAtPath(&root, {"dict"}, Value(Dict{})));
  st = InsertAtPath(&root, {"dict", 0u}, Value());
  EXPECT_EQ(st.code(), StatusCode::kMismatch);
  EXPECT_NE(st.message().find("is a dict, expected a list to hold index 0"), std::string::npos)
      << st.message();
  st = InsertAtPath(&root, {"leaf", 3u}, Value());
  EXPECT_NE(st.message().find("is an int, expected a list to hold index 3"), std::string::npos)
      << st.message();
  EXPECT_TRUE(root.Find({"dict"})->as_dict().empty());
  EXPECT_FALSE(InsertAtPath(&root, {}, Value()).ok());
}

TEST(InsertAtPathTest, DeepPathsAndTheirErrors) {
  // Alternating dict keys and list indices, 2000 levels, as a file may
  // declare them: created whole, and a refusal deep down names its prefix.
  KeyPath deep;
  for (int i = 0; i < 2000; ++i) {
    if (i % 2) {
      deep.emplace_back(std::in_place_type<uint64_t>, 0);
    } else {
      deep.emplace_back(std::in_place_type<std::string>, "k" + std::to_string(i));
    }
  }
  Value root = Dict{};
  CKFMT_ASSERT_OK(InsertAtPath(&root, deep, Value(int64_t{42})));
  const Value* leaf = root.Find(deep);
  ASSERT_NE(leaf, nullptr);
  EXPECT_EQ(leaf->as_int(), 42);

  KeyPath below_leaf = deep;
  below_leaf.push_back("x");
  Status st = InsertAtPath(&root, below_leaf, Value());
  EXPECT_EQ(st.code(), StatusCode::kMismatch);
  EXPECT_NE(st.message().find(FormatKeyPath(deep) + " is an int, expected a dict"), std::string::npos)
      << st.message().substr(st.message().size() - 80);
}

TEST(VisitValuesTest, PreOrderWithPaths) {
  Dict inner;
  inner.Set("x", Value(int64_t{1}));
  Dict root;
  root.Set("a", std::move(inner));
  root.Set("l", List{Value(int64_t{2}), Value(List{Value(int64_t{3})})});
  std::vector<std::string> seen;
  VisitValues(Value(std::move(root)), [&](const KeyPath& p, const Value&) {
    seen.push_back(FormatKeyPath(p));
  });
  std::vector<std::string> want = {"a", "a/x", "l", "l/[0]", "l/[1]", "l/[1]/[0]"};
  EXPECT_EQ(seen, want);
}

TEST(TensorTest, ZerosViewsAndShards) {
  Tensor z = Tensor::Zeros(DType::kC64, {3, 5});
  EXPECT_EQ(z.numel(), 15u);
  EXPECT_EQ(z.nbytes(), 120u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(z.data()) % 64, 0u);
  for (uint64_t i = 0; i < z.nbytes(); ++i) ASSERT_EQ(static_cast<uint8_t*>(z.data())[i], 0);
  EXPECT_TRUE(z.defined());
  EXPECT_EQ(z.global_shape(), (Shape{3, 5}));
  EXPECT_EQ(z.region(), Region::Whole({3, 5}));
  EXPECT_TRUE(Tensor::Zeros(DType::kF32, {0, 4}).defined());
  EXPECT_EQ(Tensor::Zeros(DType::kF32, {}).numel(), 1u);

  float buf[6] = {};
  Tensor v = Tensor::View(DType::kF32, {2, 3}, buf);
  EXPECT_EQ(v.data(), buf);
  v.SetShard(ShardSpec{{10, 3}, Region::Box({4, 0}, {2, 3})});
  EXPECT_EQ(v.global_shape(), (Shape{10, 3}));
  EXPECT_EQ(v.shape(), (Shape{2, 3}));
  EXPECT_EQ(v.region(), Region::Box({4, 0}, {2, 3}));
}

TEST(TensorTest, OwningKeepsOwnerAlive) {
  auto owner = std::make_shared<std::vector<uint8_t>>(16);
  std::weak_ptr<std::vector<uint8_t>> weak = owner;
  Tensor copy;
  {
    Tensor t = Tensor::Owning(DType::kU8, {16}, owner->data(), owner);
    owner.reset();
    copy = t;
  }
  EXPECT_FALSE(weak.expired());
  copy = Tensor();
  EXPECT_TRUE(weak.expired());
}

size_t MappingCount() {
  std::ifstream maps("/proc/self/maps");
  size_t n = 0;
  for (std::string line; std::getline(maps, line);) ++n;
  return n;
}

// Host tensors are aligned by size: 64 bytes, a page from 64 KiB, and from
// 2 MiB a huge page in a mapping of their own, which goes with the tensor.
TEST(TensorTest, HostTensorsAreAlignedBySize) {
  auto aligned = [](const Tensor& t, uintptr_t a) {
    return reinterpret_cast<uintptr_t>(t.data()) % a == 0;
  };
  EXPECT_TRUE(aligned(Tensor::Empty(DType::kU8, {100}), 64));
  EXPECT_TRUE(aligned(Tensor::Empty(DType::kU8, {Tensor::kPageAlignedFrom}), 4096));
  Tensor big = Tensor::Empty(DType::kU8, {Tensor::kHugePageAlignedFrom + 5});
  EXPECT_TRUE(aligned(big, Tensor::kHugePageAlignedFrom));
  std::memset(big.data(), 0x5a, big.nbytes());  // every byte writable
  Tensor zeros = Tensor::Zeros(DType::kF32, {1 << 20});
  EXPECT_TRUE(aligned(zeros, Tensor::kHugePageAlignedFrom));
  const auto* z = static_cast<const uint8_t*>(zeros.data());
  EXPECT_TRUE(std::all_of(z, z + zeros.nbytes(), [](uint8_t b) { return b == 0; }));
  // Freed with the tensor: no mapping is left behind.
  const size_t before = MappingCount();
  for (int i = 0; i < 64; ++i) {
    Tensor t = Tensor::Empty(DType::kU8, {3u << 20});
    static_cast<uint8_t*>(t.data())[t.nbytes() - 1] = 1;
  }
  EXPECT_LT(MappingCount(), before + 8);
}

// Only a tensor in a huge-page mapping of its own says it is on huge pages,
// and only where transparent huge pages are on (loads read straight into
// such tensors, HostReads::kAuto).
TEST(TensorTest, OnHugePagesOnlyForTheirOwnHugePageMapping) {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(f, modes);
  const bool thp =
      modes.find("[always]") != std::string::npos || modes.find("[madvise]") != std::string::npos;
  Tensor big = Tensor::Empty(DType::kU8, {Tensor::kHugePageAlignedFrom});
  EXPECT_EQ(big.on_huge_pages(), thp) << modes;
  EXPECT_EQ(Tensor(big).on_huge_pages(), thp);  // copies share the memory
  EXPECT_EQ(Tensor::Zeros(DType::kF32, {1 << 20}).on_huge_pages(), thp);
  EXPECT_FALSE(Tensor::Empty(DType::kU8, {Tensor::kHugePageAlignedFrom - 1}).on_huge_pages());
  EXPECT_FALSE(
      Tensor::View(DType::kU8, {Tensor::kHugePageAlignedFrom}, big.data()).on_huge_pages());
}

TEST(TensorTest, HostAllocator) {
  Allocator a = HostAllocator();
  auto t = a(DType::kBF16, {7, 3}, {"x"}, Device{});
  CKFMT_ASSERT_OK(t);
  EXPECT_EQ(t->dtype(), DType::kBF16);
  EXPECT_EQ(t->shape(), (Shape{7, 3}));
  EXPECT_EQ(t->nbytes(), 7u * 3u * 2u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data()) % 64, 0u);
  // Uninitialised by contract; every byte must be writable.
  std::memset(t->data(), 0xab, t->nbytes());
  // Impossible sizes are errors, not crashes.
  EXPECT_FALSE(a(DType::kF64, {1ull << 62}, {"x"}, Device{}).ok());
  EXPECT_FALSE(a(DType::kF64, {1ull << 40, 1ull << 40}, {"x"}, Device{}).ok());
  EXPECT_FALSE(a(DType::kU8, {1ull << 60}, {"x"}, Device{}).ok());
  EXPECT_FALSE(a(DType::kU8, {~0ull - 100}, {"x"}, Device{}).ok());  // rounding up would wrap
}

}  // namespace
