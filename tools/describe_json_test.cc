// Unit tests of the IndexRecord -> JSON mapping (spec/INSPECT_JSON.md).
#include "describe_json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace ckfmt::tools {
namespace {

EntryRecord Scalar(KeyPath path, EntryKind kind) {
  EntryRecord e;
  e.path = std::move(path);
  e.kind = kind;
  return e;
}

EntryRecord Tensor1d(KeyPath path, uint64_t n, uint8_t codec) {
  EntryRecord e;
  e.path = std::move(path);
  e.kind = EntryKind::kTensor;
  e.dtype = DType::kF32;
  e.shape = {n};
  PieceRecord p;
  p.rank = 1;
  p.region = Region::Flat(0, n);
  p.chunks.push_back({8192, 10, n * 4, 0xABCull, codec});
  e.pieces.push_back(p);
  return e;
}

TEST(DescribeJson, Labels) {
  EXPECT_EQ(CodecLabel(0), "none");
  EXPECT_EQ(CodecLabel(1), "zstd");
  EXPECT_EQ(CodecLabel(200), "unknown(200)");
  EXPECT_EQ(ChecksumHex(0), "0000000000000000");
  EXPECT_EQ(ChecksumHex(0x594bfe9540615517ull), "594bfe9540615517");
  EXPECT_EQ(ChecksumHex(~0ull), "ffffffffffffffff");
}

TEST(DescribeJson, PathsAndRegions) {
  EXPECT_EQ(PathToJson({std::string("a"), uint64_t{3}, std::string("")}).dump(), R"(["a",3,""])");
  EXPECT_EQ(RegionToJson(Region::Box({1, 0}, {2, 5})).dump(),
            R"({"box":{"offsets":[1,0],"lengths":[2,5]}})");
  EXPECT_EQ(RegionToJson(Region::Flat(7, 9)).dump(), R"({"flat":{"start":7,"length":9}})");
  EXPECT_EQ(RegionToJson(Region::Box({}, {})).dump(), R"({"box":{"offsets":[],"lengths":[]}})");
}

TEST(DescribeJson, FloatValues) {
  auto value = [](double v) {
    EntryRecord e = Scalar({std::string("f")}, EntryKind::kFloat);
    e.float_value = v;
    return EntryToJson(e)["value"].dump();
  };
  EXPECT_EQ(value(std::numeric_limits<double>::quiet_NaN()), R"("nan")");
  EXPECT_EQ(value(-std::numeric_limits<double>::quiet_NaN()), R"("nan")");
  EXPECT_EQ(value(std::numeric_limits<double>::infinity()), R"("inf")");
  EXPECT_EQ(value(-std::numeric_limits<double>::infinity()), R"("-inf")");
  EXPECT_EQ(value(1.0), "1.0");
  EXPECT_EQ(value(-0.0), "-0.0");
  EXPECT_EQ(value(0.1), "0.1");
}

TEST(DescribeJson, EntryShapes) {
  EntryRecord i = Scalar({std::string("i")}, EntryKind::kInt);
  i.int_value = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(EntryToJson(i).dump(),
            R"({"path":["i"],"key":"i","kind":"int","value":-9223372036854775808})");
  EXPECT_EQ(EntryToJson(Scalar({std::string("n")}, EntryKind::kNone)).dump(),
            R"({"path":["n"],"key":"n","kind":"none","value":null})");
  EXPECT_EQ(EntryToJson(Scalar({std::string("d")}, EntryKind::kDict)).dump(),
            R"({"path":["d"],"key":"d","kind":"dict"})");
  Json t = EntryToJson(Tensor1d({std::string("t")}, 4, 77));
  EXPECT_EQ(t.dump(),
            R"({"path":["t"],"key":"t","kind":"tensor","dtype":"float32","shape":[4],)"
            R"("partial":false,"raw_bytes":16,"stored_bytes":10,"pieces":[{"rank":1,)"
            R"("region":{"flat":{"start":0,"length":4}},"chunks":[{"offset":8192,)"
            R"("stored_size":10,"raw_size":16,"checksum":"0000000000000abc",)"
            R"J("codec":"unknown(77)"}]}],"saved_layout":[]})J");
}

TEST(DescribeJson, PrefixAndTotals) {
  IndexRecord index;
  index.entries.push_back(Scalar({std::string("m")}, EntryKind::kDict));
  index.entries.push_back(Tensor1d({std::string("m"), std::string("w")}, 4, 0));
  index.entries.push_back(Tensor1d({std::string("x")}, 2, 0));
  FileInfo info{"f.ckfmt", 16384, {}};
  Json all = DescribeIndex(index, info);
  EXPECT_FALSE(all.contains("prefix"));
  EXPECT_EQ(all["totals"].dump(),
            R"({"entries":3,"tensors":2,"raw_bytes":24,"stored_bytes":20,"chunks":2})");
  Json some = DescribeIndex(index, info, KeyPath{std::string("m")});
  EXPECT_EQ(some["prefix"].dump(), R"(["m"])");
  EXPECT_EQ(some["entries"].size(), 2u);
  EXPECT_EQ(some["totals"].dump(),
            R"({"entries":2,"tensors":1,"raw_bytes":16,"stored_bytes":10,"chunks":1})");
  Json none = DescribeIndex(index, info, KeyPath{std::string("zzz")});
  EXPECT_TRUE(none["entries"].empty());
}

TEST(DescribeJson, InvalidUtf8IsReplaced) {
  IndexRecord index;
  index.metadata.emplace_back("k", std::string("a\xff" "b"));
  std::string out = DumpJson(DescribeIndex(index, FileInfo{"f", 0, {}}));
  EXPECT_NE(out.find("a\xef\xbf\xbd" "b"), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');
}

}  // namespace
}  // namespace ckfmt::tools
