// Every committed fixture (written by torch itself, see
// tests/fixtures/make_fixtures.py) converts to ckfmt with exactly the
// tensors (dtype, shape, XXH3 of the bytes torch produced) and values its
// manifest lists.
#include <gtest/gtest.h>

#include "ckfmt/reader.h"
#include "convert_test_util.h"

namespace ckfmt::convert::testing {
namespace {

class FixtureTest : public ::testing::TestWithParam<const char*> {};

void ExpectMatchesManifest(const FileSummary& got, const nlohmann::json& m,
                           const std::string& what) {
  std::set<std::string> want_tensors;
  for (auto it = m["tensors"].begin(); it != m["tensors"].end(); ++it) {
    const std::string& key = it.key();
    want_tensors.insert(key);
    auto g = got.tensors.find(key);
    if (g == got.tensors.end()) {
      ADD_FAILURE() << what << ": tensor " << key << " missing";
      continue;
    }
    EXPECT_EQ(g->second.dtype, it.value()["dtype"].get<std::string>()) << what << " " << key;
    EXPECT_EQ(g->second.shape, it.value()["shape"].get<std::vector<uint64_t>>()) << what << " " << key;
    EXPECT_EQ(g->second.xxh3, it.value()["xxh3"].get<std::string>()) << what << " " << key;
  }
  for (const auto& [k, v] : got.tensors) {
    EXPECT_TRUE(want_tensors.count(k)) << what << ": unexpected tensor " << k;
  }
  std::set<std::string> want_values;
  for (auto it = m["values"].begin(); it != m["values"].end(); ++it) {
    want_values.insert(it.key());
    auto g = got.values.find(it.key());
    if (g == got.values.end()) {
      ADD_FAILURE() << what << ": value " << it.key() << " missing";
      continue;
    }
    EXPECT_EQ(g->second["type"], it.value()["type"]) << what << " " << it.key();
    EXPECT_EQ(g->second["value"], it.value()["value"]) << what << " " << it.key();
  }
  for (const auto& [k, v] : got.values) {
    EXPECT_TRUE(want_values.count(k)) << what << ": unexpected value " << k << " = " << v.dump();
  }
}

TEST_P(FixtureTest, ConvertsToCkfmtMatchingTheManifest) {
  std::string name = GetParam();
  std::string dir = MakeTempDir("fixture");
  std::string out = dir + "/out.ckfmt";
  ConvertReport r = ConvertOrDie(Fixture(name), out);
  nlohmann::json m = LoadManifest(name);
  EXPECT_EQ(r.tensors, m["tensors"].size());
  EXPECT_TRUE(r.dropped.empty());
  ExpectMatchesManifest(SummarizeCkfmt(out), m, name);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureTest,
                         ::testing::Values("mlp_adamw.pt", "dtypes.pt", "views.pt", "params.pt", "legacy.pt",
                                           "model.safetensors", "sharded_st", "dcp_fsdp2", "dcp_tp",
                                           "dcp_torch22", "dcp_safetensors"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return s;
                         });

TEST(FixtureDetails, TorchFormatsAreDetectedByContent) {
  EXPECT_EQ(*DetectFormat(Fixture("mlp_adamw.pt")), Format::kTorchZip);
  EXPECT_EQ(*DetectFormat(Fixture("legacy.pt")), Format::kTorchLegacy);
  EXPECT_EQ(*DetectFormat(Fixture("model.safetensors")), Format::kSafetensors);
  EXPECT_EQ(*DetectFormat(Fixture("sharded_st")), Format::kSafetensorsSharded);
  EXPECT_EQ(*DetectFormat(Fixture("sharded_st/model.safetensors.index.json")),
            Format::kSafetensorsSharded);
  EXPECT_EQ(*DetectFormat(Fixture("dcp_fsdp2")), Format::kDcp);
  // Content, not the extension: a torch zip renamed to .safetensors.
  std::string dir = MakeTempDir("detect");
  WriteFile(dir + "/x.safetensors", ReadFile(Fixture("mlp_adamw.pt")));
  EXPECT_EQ(*DetectFormat(dir + "/x.safetensors"), Format::kTorchZip);
}

TEST(FixtureDetails, DcpKeepsShardingAsSavedLayout) {
  std::string dir = MakeTempDir("dcp");
  ConvertOrDie(Fixture("dcp_fsdp2"), dir + "/out.ckfmt");
  auto r = CheckpointReader::Open(dir + "/out.ckfmt");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->index().world_size, 2u);
  EXPECT_EQ((*r)->index().save_mode, "flattened");
  // FSDP2 splits dim 0 unevenly: 7 rows -> 4 + 3.
  const EntryRecord* w = (*r)->Find(KeyPath{std::string("model"), std::string("0.weight")});
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->saved_layout.size(), 2u);
  EXPECT_EQ(w->saved_layout[0].rank, 0u);
  EXPECT_EQ(w->saved_layout[0].region, Region::Box({0, 0}, {4, 12}));
  EXPECT_EQ(w->saved_layout[1].rank, 1u);
  EXPECT_EQ(w->saved_layout[1].region, Region::Box({4, 0}, {3, 12}));
  EXPECT_EQ(w->pieces.size(), 2u);
  // Optimizer state keeps its nesting: optim/state/<fqn>/exp_avg.
  EXPECT_NE((*r)->Find(KeyPath{std::string("optim"), std::string("state"), std::string("0.weight"),
                               std::string("exp_avg")}),
            nullptr);
  // param_groups is a list.
  const EntryRecord* pg = (*r)->Find(KeyPath{std::string("optim"), std::string("param_groups")});
  ASSERT_NE(pg, nullptr);
  EXPECT_EQ(pg->kind, EntryKind::kList);

  // Without sharding metadata.
  ConvertOptions o;
  o.keep_sharding_metadata = false;
  ConvertOrDie(Fixture("dcp_fsdp2"), dir + "/flat.ckfmt", o);
  auto r2 = CheckpointReader::Open(dir + "/flat.ckfmt");
  ASSERT_TRUE(r2.ok());
  const EntryRecord* w2 = (*r2)->Find(KeyPath{std::string("model"), std::string("0.weight")});
  ASSERT_NE(w2, nullptr);
  EXPECT_TRUE(w2->saved_layout.empty());
}

// Tensor parallelism splits weights on other dims than the first, so DCP's
// chunks of a tensor are column blocks, not rows. They are kept as the
// ranks' boxes, and written into a torch.save zip (whose records' CRC-32
// then follows the bytes as placed, not as they came) that converts back,
// CRCs checked, to the manifest's values.
TEST(FixtureDetails, TensorParallelDcpKeepsItsBoxesAndConvertsToTorch) {
  std::string dir = MakeTempDir("dcp_tp");
  ConvertOrDie(Fixture("dcp_tp"), dir + "/tp.ckfmt");
  auto r = CheckpointReader::Open(dir + "/tp.ckfmt");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const EntryRecord* w = (*r)->Find(KeyPath{std::string("model"), std::string("colwise.weight")});
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->saved_layout.size(), 2u);
  EXPECT_EQ(w->saved_layout[0].region, Region::Box({0, 0}, {4, 3}));
  EXPECT_EQ(w->saved_layout[1].region, Region::Box({0, 3}, {4, 2}));

  ConvertOrDie(Fixture("dcp_tp"), dir + "/tp.pt");
  ConvertOrDie(dir + "/tp.pt", dir + "/back.ckfmt");
  ExpectMatchesManifest(SummarizeCkfmt(dir + "/back.ckfmt"), LoadManifest("dcp_tp"),
                        "dcp_tp through torch.save");
}

TEST(FixtureDetails, OptimizerIntKeysAreRemembered) {
  std::string dir = MakeTempDir("intkeys");
  ConvertOrDie(Fixture("mlp_adamw.pt"), dir + "/out.ckfmt");
  FileSummary s = SummarizeCkfmt(dir + "/out.ckfmt");
  bool found = false;
  for (const auto& [k, v] : s.metadata) {
    if (k == "convert.torch.int_key_dicts") {
      found = true;
      EXPECT_NE(v.find("optim/state"), std::string::npos) << v;
    }
  }
  EXPECT_TRUE(found);
}

TEST(FixtureDetails, SafetensorsMetadataIsKept) {
  std::string dir = MakeTempDir("stmeta");
  ConvertOrDie(Fixture("model.safetensors"), dir + "/out.ckfmt");
  FileSummary s = SummarizeCkfmt(dir + "/out.ckfmt");
  bool found = false;
  for (const auto& [k, v] : s.metadata) found |= k == "source" && v == "make_fixtures";
  EXPECT_TRUE(found);
}

// The safetensors blob of a DCP data file (dcp_safetensors, rank 1) as a
// file of its own, as DCP's HuggingFace writer leaves one per rank: its
// tensors are that rank's chunks, and a note says so, naming the ones at
// nonzero offsets. Rank 0's blob places every chunk at offset 0 (a chunk
// there looks like a whole tensor): no note.
TEST(FixtureDetails, SafetensorsOfDcpChunksAreNoted) {
  std::string dir = MakeTempDir("st_dcp_chunks");
  for (const char* rank : {"0", "1"}) {
    std::string data = ReadFile(Fixture(std::string("dcp_safetensors/__") + rank + "_0.distcp"));
    size_t header = data.find("{\"__metadata__\"");
    ASSERT_NE(header, std::string::npos);
    ASSERT_GE(header, 8u);
    std::string st = dir + "/rank" + rank + ".safetensors";
    WriteFile(st, data.substr(header - 8));
    ConvertReport r = ConvertOrDie(st, st + ".ckfmt");
    std::vector<std::string> chunk_notes;
    for (const std::string& n : r.notes) {
      if (n.find("DCP_SHARDING_INFO") != std::string::npos) chunk_notes.push_back(n);
    }
    if (std::string(rank) == "0") {
      EXPECT_TRUE(chunk_notes.empty()) << chunk_notes[0];
      continue;
    }
    ASSERT_EQ(chunk_notes.size(), 1u);
    EXPECT_EQ(chunk_notes[0],
              st + ": \"model.0.bias\", \"model.0.weight\", \"model.2.bias\" and 9 more are, "
                   "by DCP_SHARDING_INFO, chunks at nonzero offsets of larger tensors (one "
                   "rank's part of a DCP save); each is stored as the chunk it holds");
  }
}

TEST(FixtureDetails, ProgressReachesTheTotal) {
  std::string dir = MakeTempDir("progress");
  ConvertOptions o;
  uint64_t last_done = 0, last_total = 0, calls = 0;
  o.progress = [&](uint64_t done, uint64_t total, const std::string& key) {
    EXPECT_GE(done, last_done);
    EXPECT_FALSE(key.empty());
    last_done = done;
    last_total = total;
    ++calls;
  };
  ConvertOrDie(Fixture("mlp_adamw.pt"), dir + "/out.ckfmt", o);
  EXPECT_GT(calls, 0u);
  EXPECT_EQ(last_done, last_total);
}

// Views of one storage (tied weights alike) are stored each on its own:
// the report says which, once per storage, as torch.save and the legacy
// format record them.
TEST(FixtureDetails, TensorsSharingAStorageAreNoted) {
  std::string dir = MakeTempDir("shared");
  const std::string want =
      "\"base\", \"transposed\", \"slice\" and 2 more share one storage; each is stored on its "
      "own, no longer tied";
  ConvertReport zip = ConvertOrDie(Fixture("views.pt"), dir + "/views.ckfmt");
  EXPECT_EQ(zip.notes, std::vector<std::string>{want});
  ConvertReport legacy = ConvertOrDie(Fixture("legacy.pt"), dir + "/legacy.ckfmt");
  std::vector<std::string> shared;
  for (const std::string& n : legacy.notes) {
    if (n.find("share one storage") != std::string::npos) shared.push_back(n);
  }
  EXPECT_EQ(shared, std::vector<std::string>{
                        "\"views.base\", \"views.transposed\", \"views.slice\" and 2 more share "
                        "one storage; each is stored on its own, no longer tied"});
  // Tensors on storages of their own get no such note.
  for (const std::string& n : ConvertOrDie(Fixture("mlp_adamw.pt"), dir + "/m.ckfmt").notes) {
    EXPECT_EQ(n.find("share one storage"), std::string::npos) << n;
  }
}

// nn.Parameters (trainable or not) become plain tensors, and Python
// attributes set on a tensor or a Parameter are dropped: one note each
// names them.
TEST(FixtureDetails, ParametersAndTensorAttributesAreNoted) {
  std::string dir = MakeTempDir("params");
  EXPECT_EQ(ConvertOrDie(Fixture("params.pt"), dir + "/p.ckfmt").notes,
            (std::vector<std::string>{
                "\"w\", \"frozen\" and \"tagged_param\": torch.nn.Parameter stored as a plain "
                "tensor (requires_grad is not kept)",
                "\"tagged\" and \"tagged_param\": the Python attributes set on the tensor are not "
                "kept"}));
}

TEST(FixtureDetails, TinyBudgetSplitsTensorsIntoPieces) {
  // A tiny budget splits tensors into many box pieces and still converts exactly.
  std::string dir = MakeTempDir("budget");
  ConvertOptions o;
  o.memory_budget = 64;  // 32-byte pieces: every view is split
  ConvertOrDie(Fixture("views.pt"), dir + "/out.ckfmt", o);
  ExpectMatchesManifest(SummarizeCkfmt(dir + "/out.ckfmt"), LoadManifest("views.pt"), "views");
}

}  // namespace
}  // namespace ckfmt::convert::testing
