// ckfmt -> safetensors -> ckfmt, ckfmt -> torch.save zip -> ckfmt and
// ckfmt -> DCP -> ckfmt keep every tensor bit for bit (and, through torch,
// every value and key type; through DCP, every value).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "convert_test_util.h"
#include "sink.h"

namespace ckfmt::convert::testing {
namespace {

class RoundTripTest : public ::testing::TestWithParam<const char*> {};

TEST_P(RoundTripTest, ThroughSafetensors) {
  std::string dir = MakeTempDir("rt_st");
  ConvertOrDie(Fixture(GetParam()), dir + "/a.ckfmt");
  ConvertReport r1 = ConvertOrDie(dir + "/a.ckfmt", dir + "/b.safetensors");
  ConvertReport r2 = ConvertOrDie(dir + "/b.safetensors", dir + "/b.ckfmt");
  FileSummary a = SummarizeCkfmt(dir + "/a.ckfmt");
  FileSummary b = SummarizeCkfmt(dir + "/b.ckfmt");
  std::set<std::string> dropped;
  for (const auto& d : r1.dropped) dropped.insert(d.key);
  for (const auto& [k, t] : a.tensors) {
    if (dropped.count(k)) continue;
    auto it = b.tensors.find(k);
    ASSERT_NE(it, b.tensors.end()) << k;
    EXPECT_EQ(it->second, t) << k;
  }
  // Non-tensor values are listed as dropped, with reasons.
  for (const auto& [k, v] : a.values) EXPECT_TRUE(dropped.count(k)) << k;
  for (const auto& d : r1.dropped) EXPECT_FALSE(d.reason.empty());
  EXPECT_TRUE(r2.dropped.empty());
}

TEST_P(RoundTripTest, ThroughTorchZip) {
  std::string dir = MakeTempDir("rt_pt");
  ConvertOrDie(Fixture(GetParam()), dir + "/a.ckfmt");
  ConvertReport r1 = ConvertOrDie(dir + "/a.ckfmt", dir + "/c.pt");
  EXPECT_TRUE(r1.dropped.empty());
  EXPECT_EQ(*DetectFormat(dir + "/c.pt"), Format::kTorchZip);
  ConvertOrDie(dir + "/c.pt", dir + "/c.ckfmt");
  FileSummary a = SummarizeCkfmt(dir + "/a.ckfmt");
  FileSummary c = SummarizeCkfmt(dir + "/c.ckfmt");
  EXPECT_EQ(a.tensors, c.tensors);
  EXPECT_EQ(a.values, c.values);
  EXPECT_EQ(a.bytes, c.bytes);
  auto meta = [](const FileSummary& s, const std::string& k) {
    for (const auto& [mk, v] : s.metadata) {
      if (mk == k) return v;
    }
    return std::string();
  };
  EXPECT_EQ(meta(a, "convert.torch.int_key_dicts"), meta(c, "convert.torch.int_key_dicts"));
  EXPECT_EQ(meta(a, "convert.torch.tuples"), meta(c, "convert.torch.tuples"));
}

TEST_P(RoundTripTest, ThroughDcp) {
  std::string dir = MakeTempDir("rt_dcp");
  ConvertOrDie(Fixture(GetParam()), dir + "/a.ckfmt");
  ConvertOptions to_dcp;
  to_dcp.to = Format::kDcp;
  ConvertReport r1 = ConvertOrDie(dir + "/a.ckfmt", dir + "/d", to_dcp);
  EXPECT_EQ(r1.to, Format::kDcp);
  EXPECT_EQ(*DetectFormat(dir + "/d"), Format::kDcp);
  ConvertOrDie(dir + "/d", dir + "/d.ckfmt");
  FileSummary a = SummarizeCkfmt(dir + "/a.ckfmt");
  FileSummary d = SummarizeCkfmt(dir + "/d.ckfmt");
  EXPECT_EQ(a.tensors, d.tensors);
  std::set<std::string> dropped;
  for (const auto& e : r1.dropped) dropped.insert(e.key);
  for (const auto& [k, v] : a.values) {
    if (dropped.count(k)) continue;
    auto it = d.values.find(k);
    ASSERT_NE(it, d.values.end()) << k;
    EXPECT_EQ(it->second, v) << k;
  }
  EXPECT_EQ(a.bytes, d.bytes);
  // Nothing but the directory itself is left beside it.
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.insert(e.path().filename());
  EXPECT_EQ(names, (std::set<std::string>{"a.ckfmt", "d", "d.ckfmt"}));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RoundTripTest,
                         ::testing::Values("mlp_adamw.pt", "dtypes.pt", "views.pt", "params.pt", "legacy.pt",
                                           "model.safetensors", "dcp_fsdp2", "dcp_tp", "dcp_safetensors"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return s;
                         });

TEST(RoundTrip, SafetensorsOutputListsDroppedEntries) {
  std::string dir = MakeTempDir("st_drop");
  ConvertReport r = ConvertOrDie(Fixture("mlp_adamw.pt"), dir + "/m.safetensors");
  std::set<std::string> dropped;
  for (const auto& d : r.dropped) dropped.insert(d.key);
  EXPECT_TRUE(dropped.count("epoch"));
  EXPECT_TRUE(dropped.count("name"));
  EXPECT_TRUE(dropped.count("optim.param_groups.0.lr"));
  EXPECT_FALSE(dropped.count("model.0.weight"));
  // complex128 has no safetensors dtype.
  ConvertReport r2 = ConvertOrDie(Fixture("dtypes.pt"), dir + "/d.safetensors");
  ASSERT_EQ(r2.dropped.size(), 1u);
  EXPECT_EQ(r2.dropped[0].key, "c128");
}

// Python typing ckfmt has no kind for is remembered in metadata, the root's
// too: the top-level dict's int keys ({0: ..., 1: ...}), and an
// OrderedDict with its attributes (a state dict's _metadata). The .pt
// written back has them again, as reading it back records the same.
TEST(RoundTrip, ContainerTypingComesBack) {
  std::string dir = MakeTempDir("rt_typing");
  Node root = Node::Dict();
  root.int_keys = true;
  Node model = Node::Dict();
  model.ordered = true;
  model.attributes = R"({"_metadata":{"":{"version":1},"0":{"version":2}}})";
  Node one;
  one.kind = Node::Kind::kInt;
  one.i = 2;
  model.children.emplace_back("w", one);
  root.children.emplace_back("0", model);
  root.children.emplace_back("1", one);
  ConvertLog log;
  ASSERT_TRUE(WriteCkfmt(root, dir + "/a.ckfmt", SinkOptions{}, &log).ok());
  auto meta = [](const FileSummary& s, const char* key) {
    for (const auto& [k, v] : s.metadata) {
      if (k == key) return v;
    }
    return std::string();
  };
  const std::map<const char*, std::string> want = {
      {kIntKeyDictsMeta, "[null]"},
      {kOrderedDictsMeta, R"(["0"])"},
      {kDictAttributesMeta,
       R"([["0","{\"_metadata\":{\"\":{\"version\":1},\"0\":{\"version\":2}}}"]])"}};
  for (const auto& [key, value] : want) {
    EXPECT_EQ(meta(SummarizeCkfmt(dir + "/a.ckfmt"), key), value) << key;
  }
  ConvertOrDie(dir + "/a.ckfmt", dir + "/b.pt");
  ConvertOrDie(dir + "/b.pt", dir + "/b.ckfmt");  // typing as the pickle has it
  for (const auto& [key, value] : want) {
    EXPECT_EQ(meta(SummarizeCkfmt(dir + "/b.ckfmt"), key), value) << key;
  }
}

TEST(RoundTrip, TorchZipIsStoredAlignedAndLittleEndian) {
  std::string dir = MakeTempDir("pt_layout");
  ConvertOrDie(Fixture("dtypes.pt"), dir + "/d.pt");
  std::string z = ReadFile(dir + "/d.pt");
  ASSERT_GT(z.size(), 30u);
  EXPECT_EQ(z.substr(0, 4), std::string("PK\x03\x04", 4));
  EXPECT_NE(z.find("archive/byteorder"), std::string::npos);
  EXPECT_NE(z.find("archive/version"), std::string::npos);
  EXPECT_NE(z.find("little"), std::string::npos);
}

}  // namespace
}  // namespace ckfmt::convert::testing
