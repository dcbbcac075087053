// The save plans ranks send each other (dist/plan.h): every field survives
// the trip, and a message that is cut short, runs long or names a kind or
// dtype this build does not know is refused, naming who sent it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dist/plan.h"
#include "dist/wire.h"

namespace {

using namespace ckfmt;
using namespace ckfmt::dist;

KeyPath Path(std::initializer_list<const char*> keys) {
  KeyPath p;
  for (const char* k : keys) p.emplace_back(std::string(k));
  return p;
}

std::vector<LocalEntry> SomeLocalEntries() {
  LocalEntry t;
  t.path = Path({"model", "w"});
  t.kind = EntryKind::kTensor;
  t.sharded = true;
  t.dtype = DType::kBF16;
  t.shape = {4, 6};
  t.region = Region::Box({2, 0}, {2, 6});
  t.has_checksum = true;
  t.checksum = 0x0123456789abcdefull;
  t.on_device = true;
  LocalEntry s;
  s.path = Path({"meta", "name"});
  s.kind = EntryKind::kString;
  s.string_value = "run-7";
  LocalEntry f;
  f.path = Path({"lr"});
  f.kind = EntryKind::kFloat;
  f.float_value = -2.5e-4;
  LocalEntry b;
  b.path = Path({"blob"});
  b.kind = EntryKind::kBytes;
  b.shape = {3};
  b.region = Region::Flat(0, 3);
  b.content_type = "application/x-rng";
  return {t, s, f, b};
}

GlobalPlan SomeGlobalPlan() {
  PlanEntry t;
  t.path = Path({"model", "w"});
  t.kind = EntryKind::kTensor;
  t.dtype = DType::kF32;
  t.shape = {4};
  t.sharded = true;
  t.on_device = true;
  t.layout = {{0, Region::Flat(0, 2)}, {1, Region::Flat(2, 2)}};
  t.owners = t.layout;
  PlanEntry i;
  i.path = Path({"step"});
  i.kind = EntryKind::kInt;
  i.int_value = -42;
  PlanEntry flag;
  flag.path = Path({"done"});
  flag.kind = EntryKind::kBool;
  flag.bool_value = true;
  GlobalPlan plan;
  plan.entries = {t, i, flag};
  return plan;
}

// The fields both kinds of plan entry have.
template <typename Entry>
void ExpectSameHead(const Entry& a, const Entry& b) {
  EXPECT_EQ(b.path, a.path);
  EXPECT_EQ(b.kind, a.kind);
  EXPECT_EQ(b.dtype, a.dtype);
  EXPECT_EQ(b.shape, a.shape);
  EXPECT_EQ(b.content_type, a.content_type);
  EXPECT_EQ(b.int_value, a.int_value);
  EXPECT_EQ(b.float_value, a.float_value);
  EXPECT_EQ(b.bool_value, a.bool_value);
  EXPECT_EQ(b.string_value, a.string_value);
  EXPECT_EQ(b.sharded, a.sharded);
  EXPECT_EQ(b.on_device, a.on_device);
}

TEST(PlanWire, LocalPlanRoundTripsEveryField) {
  std::vector<LocalEntry> in = SomeLocalEntries();
  auto out = DecodeLocalPlan(EncodeLocalPlan(in), 3);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const LocalEntry& a = in[i];
    const LocalEntry& b = (*out)[i];
    ExpectSameHead(a, b);
    EXPECT_EQ(b.region.ToString(), a.region.ToString());
    EXPECT_EQ(b.has_checksum, a.has_checksum);
    EXPECT_EQ(b.checksum, a.checksum);
  }
}

TEST(PlanWire, GlobalPlanRoundTripsEveryField) {
  GlobalPlan in = SomeGlobalPlan();
  auto out = DecodeGlobalPlan(EncodeGlobalPlan(in));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->entries.size(), in.entries.size());
  for (size_t i = 0; i < in.entries.size(); ++i) {
    const PlanEntry& a = in.entries[i];
    const PlanEntry& b = out->entries[i];
    ExpectSameHead(a, b);
    ASSERT_EQ(b.layout.size(), a.layout.size());
    ASSERT_EQ(b.owners.size(), a.owners.size());
    for (size_t j = 0; j < a.layout.size(); ++j) {
      EXPECT_EQ(b.layout[j].rank, a.layout[j].rank);
      EXPECT_EQ(b.layout[j].region.ToString(), a.layout[j].region.ToString());
    }
  }
}

// The byte that holds the first entry's kind: after the entry count (8
// bytes) and its path.
size_t FirstKindOffset(const KeyPath& first_path) {
  WireWriter w;
  w.U64(0);
  w.Path(first_path);
  return w.str().size();
}

TEST(PlanWire, EveryTruncationAndAnAppendedByteAreRefused) {
  std::string local = EncodeLocalPlan(SomeLocalEntries());
  std::string global = EncodeGlobalPlan(SomeGlobalPlan());
  for (size_t n = 0; n < local.size(); ++n) {
    auto r = DecodeLocalPlan(local.substr(0, n), 2);
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_NE(r.status().message().find("rank 2's plan"), std::string::npos)
        << r.status().message();
  }
  for (size_t n = 0; n < global.size(); ++n) {
    auto r = DecodeGlobalPlan(global.substr(0, n));
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_NE(r.status().message().find("rank 0's merged plan"), std::string::npos);
  }
  EXPECT_FALSE(DecodeLocalPlan(local + '\0', 2).ok());
  EXPECT_FALSE(DecodeGlobalPlan(global + '\0').ok());
}

TEST(PlanWire, UnknownKindsAndDtypesAreRefusedInBothPlans) {
  std::string local = EncodeLocalPlan(SomeLocalEntries());
  std::string global = EncodeGlobalPlan(SomeGlobalPlan());
  const size_t kind_at = FirstKindOffset(Path({"model", "w"}));
  ASSERT_EQ(uint8_t(local[kind_at]), uint8_t(EntryKind::kTensor));
  ASSERT_EQ(uint8_t(global[kind_at]), uint8_t(EntryKind::kTensor));
  for (uint8_t bad_kind : {uint8_t(0), uint8_t(10), uint8_t(255)}) {
    std::string l = local, g = global;
    l[kind_at] = char(bad_kind);
    g[kind_at] = char(bad_kind);
    EXPECT_FALSE(DecodeLocalPlan(l, 1).ok()) << int(bad_kind);
    EXPECT_FALSE(DecodeGlobalPlan(g).ok()) << int(bad_kind);
  }
  // The dtype follows the kind.
  std::string l = local, g = global;
  l[kind_at + 1] = char(0xee);
  g[kind_at + 1] = char(0xee);
  EXPECT_FALSE(DecodeLocalPlan(l, 1).ok());
  EXPECT_FALSE(DecodeGlobalPlan(g).ok());
}

}  // namespace
