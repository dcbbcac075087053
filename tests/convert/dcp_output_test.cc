// `ckfmt convert --to dcp`: the directory it writes, how it flattens a
// state the way DCP does, and what it refuses without leaving anything
// behind. (Loading the output with torch itself: live_torch_check.py.)
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ckfmt/writer.h"
#include "convert_test_util.h"
#include "file_io.h"
#include "unpickler.h"
#include "util/raw_file.h"

namespace ckfmt::convert::testing {
namespace {

namespace fs = std::filesystem;

Status ConvertToDcp(const std::string& src, const std::string& dst, ConvertReport* report = nullptr) {
  ConvertOptions o;
  o.src = src;
  o.dst = dst;
  o.to = Format::kDcp;
  o.fsync = false;
  Result<ConvertReport> r = Run(o);
  if (r.ok() && report) *report = *r;
  return r.status();
}

Tensor Iota(DType dtype, Shape shape) {
  Tensor t = Tensor::Zeros(dtype, shape);
  auto* p = static_cast<uint8_t*>(t.data());
  for (uint64_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(i * 7 + 3);
  return t;
}

// A ckfmt file of one small tensor in `dir`, to convert; its path.
std::string SaveOneTensor(const std::string& dir) {
  const std::string src = dir + "/s.ckfmt";
  Dict state;
  state.Set("w", Iota(DType::kF32, {4}));
  EXPECT_TRUE(Save(src, Value(state)).ok());
  return src;
}

// A stand-in for an older DCP checkpoint at `d`: only DCP's file names.
void MakeOldDcp(const std::string& d) {
  fs::create_directory(d);
  WriteFile(d + "/.metadata", "an older checkpoint");
  WriteFile(d + "/__0_0.distcp", "rank 0");
}

// Every entry name in dir.
std::set<std::string> Names(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename());
  return names;
}

// fqn -> kind ("tensor" or "bytes") and fqn -> planner path, from .metadata.
struct DcpKeys {
  std::map<std::string, std::string> kinds;
  std::map<std::string, std::vector<std::string>> paths;  // list indices as "#i"
};

DcpKeys ReadDcpKeys(const std::string& dir) {
  DcpKeys keys;
  UnpickleOptions uo;
  uo.where = dir;
  auto meta = Unpickle(ReadFile(dir + "/.metadata"), uo);
  EXPECT_TRUE(meta.ok()) << meta.status().ToString();
  if (!meta.ok()) return keys;
  const py::Object* sdm = (*meta)->Attr("state_dict_metadata");
  const py::Object* planner = (*meta)->Attr("planner_data");
  EXPECT_TRUE(sdm && planner);
  if (!sdm || !planner) return keys;
  for (const auto& [k, v] : sdm->dict) {
    keys.kinds[k->s] = v->s2 == "TensorStorageMetadata" ? "tensor" : v->s2;
  }
  for (const auto& [k, v] : planner->dict) {
    std::vector<std::string> path;
    for (const auto& part : v->items) {
      path.push_back(part->kind == py::Kind::kInt ? "#" + std::to_string(part->i) : part->s);
    }
    keys.paths[k->s] = path;
  }
  return keys;
}

TEST(DcpOutput, FlattensAsDcpDoes) {
  std::string dir = MakeTempDir("dcp_flat");
  Dict model;
  model.Set("w", Iota(DType::kBF16, {3, 4}));
  List tensors;
  tensors.push_back(Iota(DType::kF32, {2}));
  tensors.push_back(Iota(DType::kF32, {}));
  List ints;
  ints.push_back(int64_t{1});
  ints.push_back(int64_t{2});
  List nested;  // lists of scalars only: one leaf
  nested.push_back(ints);
  nested.push_back(List{});
  List mixed;  // a dict inside: walked into
  Dict inner;
  inner.Set("lr", 0.5);
  mixed.push_back(inner);
  mixed.push_back(int64_t{7});
  Dict state;
  state.Set("model", model);
  state.Set("tensors", tensors);
  state.Set("ints", ints);
  state.Set("nested", nested);
  state.Set("mixed", mixed);
  state.Set("empty", Dict{});
  state.Set("name", std::string("run-1"));
  state.Set("blob", Bytes{"json", "{\"epoch\": 3}"});
  Dict unnamed;  // empty keys are parts of the path like any other
  unnamed.Set("b", Iota(DType::kF32, {2}));
  unnamed.Set("", int64_t{5});
  state.Set("", unnamed);
  state.Set("b", Iota(DType::kI32, {2}));
  const std::string src = dir + "/s.ckfmt";
  ASSERT_TRUE(Save(src, Value(state)).ok());

  ConvertReport report;
  ASSERT_TRUE(ConvertToDcp(src, dir + "/out", &report).ok());
  EXPECT_EQ(Names(dir + "/out"), (std::set<std::string>{".metadata", "__0_0.distcp"}));
  DcpKeys keys = ReadDcpKeys(dir + "/out");
  std::map<std::string, std::string> want = {
      {"model.w", "tensor"},
      {"tensors.0", "tensor"},
      {"tensors.1", "tensor"},
      {"ints", "BytesStorageMetadata"},
      {"nested", "BytesStorageMetadata"},
      {"mixed.0.lr", "BytesStorageMetadata"},
      {"mixed.1", "BytesStorageMetadata"},
      {"name", "BytesStorageMetadata"},
      {"blob", "BytesStorageMetadata"},
      {".b", "tensor"},
      {".", "BytesStorageMetadata"},
      {"b", "tensor"},
  };
  EXPECT_EQ(keys.kinds, want);
  EXPECT_EQ(keys.paths["tensors.1"], (std::vector<std::string>{"tensors", "#1"}));
  EXPECT_EQ(keys.paths["mixed.0.lr"], (std::vector<std::string>{"mixed", "#0", "lr"}));
  EXPECT_EQ(keys.paths["model.w"], (std::vector<std::string>{"model", "w"}));
  EXPECT_EQ(keys.paths["."], (std::vector<std::string>{"", ""}));
  ASSERT_EQ(report.dropped.size(), 1u);
  EXPECT_EQ(report.dropped[0].key, "empty");

  // And back: the same tensors and values at the same paths.
  ConvertOrDie(dir + "/out", dir + "/back.ckfmt");
  FileSummary a = SummarizeCkfmt(src), b = SummarizeCkfmt(dir + "/back.ckfmt");
  EXPECT_EQ(a.tensors, b.tensors);
  for (const auto& [k, v] : a.values) EXPECT_EQ(b.values[k], v) << k;
}

// fqn -> its chunks' boxes ("offsets/sizes"), from .metadata.
std::map<std::string, std::vector<std::string>> ReadDcpChunks(const std::string& dir) {
  std::map<std::string, std::vector<std::string>> out;
  UnpickleOptions uo;
  uo.where = dir;
  auto meta = Unpickle(ReadFile(dir + "/.metadata"), uo);
  EXPECT_TRUE(meta.ok()) << meta.status().ToString();
  if (!meta.ok()) return out;
  auto ints = [](const py::Object* t) {
    std::string s;
    for (const auto& x : t->items) s += (s.empty() ? "" : ",") + std::to_string(x->i);
    return s;
  };
  for (const auto& [k, v] : (*meta)->Attr("state_dict_metadata")->dict) {
    const py::Object* chunks = v->Attr("chunks");
    if (!chunks) continue;
    for (const auto& c : chunks->items) {
      out[k->s].push_back(ints(c->Attr("offsets")) + "/" + ints(c->Attr("sizes")));
    }
  }
  return out;
}

// A whole tensor of `shape` whose saved layout is `layout`.
void AddWithLayout(CheckpointWriter& w, const std::string& key, Shape shape,
                   const std::vector<Region>& layout) {
  Tensor t = Iota(DType::kF32, shape);
  ASSERT_TRUE(
      w.AddTensorPiece({key}, DType::kF32, shape, Region::Whole(shape), 0, t.data()).ok());
  for (size_t r = 0; r < layout.size(); ++r) {
    ASSERT_TRUE(w.AddSavedLayout({key}, ShardRecord{uint32_t(r), layout[r]}).ok()) << key;
  }
}

TEST(DcpOutput, SavedShardsBecomeChunks) {
  std::string dir = MakeTempDir("dcp_chunks");
  const std::string src = dir + "/s.ckfmt";
  {
    SaveOptions so;
    so.world_size = 4;
    so.save_mode = "flattened";
    auto w = CheckpointWriter::Create(src, so);
    ASSERT_TRUE(w.ok());
    // FSDP2-like rows, with a replica of the first and an empty last shard.
    AddWithLayout(**w, "rows", {6, 4},
                  {Region::Box({0, 0}, {3, 4}), Region::Box({3, 0}, {3, 4}),
                   Region::Box({0, 0}, {3, 4}), Region::Box({6, 0}, {0, 4})});
    // Tensor-parallel columns: each chunk is a strided box of the tensor.
    AddWithLayout(**w, "cols", {4, 6}, {Region::Box({0, 3}, {4, 3}), Region::Box({0, 0}, {4, 3})});
    // FSDP1-like flat ranges that cut rows: the boxes that hold them.
    AddWithLayout(**w, "flat", {4, 6}, {Region::Flat(0, 10), Region::Flat(10, 14)});
    // Not a tiling: overlapping boxes, a gap. Written whole.
    AddWithLayout(**w, "overlap", {4}, {Region::Box({0}, {3}), Region::Box({2}, {2})});
    AddWithLayout(**w, "gap", {4}, {Region::Box({0}, {1}), Region::Box({2}, {2})});
    ASSERT_TRUE((*w)->Commit().ok());
  }
  ConvertReport report;
  ASSERT_TRUE(ConvertToDcp(src, dir + "/out", &report).ok());
  EXPECT_EQ(report.tensors, 5u);
  auto chunks = ReadDcpChunks(dir + "/out");
  EXPECT_EQ(chunks["rows"], (std::vector<std::string>{"0,0/3,4", "3,0/3,4"}));
  EXPECT_EQ(chunks["cols"], (std::vector<std::string>{"0,0/4,3", "0,3/4,3"}));
  EXPECT_EQ(chunks["overlap"], (std::vector<std::string>{"0/4"}));
  EXPECT_EQ(chunks["flat"],
            (std::vector<std::string>{"0,0/1,6", "1,0/1,4", "1,4/1,2", "2,0/2,6"}));
  EXPECT_EQ(chunks["gap"], (std::vector<std::string>{"0/4"}));
  ConvertOrDie(dir + "/out", dir + "/back.ckfmt");
  EXPECT_EQ(SummarizeCkfmt(src).tensors, SummarizeCkfmt(dir + "/back.ckfmt").tensors);
}

// A parallel save has no saved layout: each rank's shard is a piece.
TEST(DcpOutput, ParallelSavePiecesBecomeChunks) {
  std::string dir = MakeTempDir("dcp_parallel");
  const std::string src = dir + "/p.ckfmt";
  {
    SaveOptions so;
    so.world_size = 2;
    so.save_mode = "parallel";
    auto w = CheckpointWriter::Create(src, so);
    ASSERT_TRUE(w.ok());
    Tensor t = Iota(DType::kF32, {5, 3});
    const auto* p = static_cast<const uint8_t*>(t.data());
    ASSERT_TRUE((*w)->AddTensorPiece({"w"}, DType::kF32, {5, 3}, Region::Box({0, 0}, {3, 3}), 0,
                                     p).ok());
    ASSERT_TRUE((*w)->AddTensorPiece({"w"}, DType::kF32, {5, 3}, Region::Box({3, 0}, {2, 3}), 1,
                                     p + 9 * 4).ok());
    ASSERT_TRUE((*w)->Commit().ok());
  }
  ASSERT_TRUE(ConvertToDcp(src, dir + "/out").ok());
  EXPECT_EQ(ReadDcpChunks(dir + "/out")["w"], (std::vector<std::string>{"0,0/3,3", "3,0/2,3"}));
  ConvertOrDie(dir + "/out", dir + "/back.ckfmt");
  EXPECT_EQ(SummarizeCkfmt(src).tensors, SummarizeCkfmt(dir + "/back.ckfmt").tensors);
}

TEST(DcpOutput, KeysThatFlattenAlikeAreRefused) {
  std::string dir = MakeTempDir("dcp_dup");
  Dict a;
  a.Set("b", Iota(DType::kU8, {2}));
  Dict state;
  state.Set("a", a);
  state.Set("a.b", Iota(DType::kU8, {2}));
  const std::string src = dir + "/s.ckfmt";
  ASSERT_TRUE(Save(src, Value(state)).ok());
  Status s = ConvertToDcp(src, dir + "/out");
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.ToString();
  EXPECT_NE(s.message().find("flatten to the same DCP key \"a.b\""), std::string::npos)
      << s.ToString();
  EXPECT_EQ(Names(dir), std::set<std::string>{"s.ckfmt"});  // no output, no temporary
}

TEST(DcpOutput, PartialTensorIsRefusedAndNothingIsLeft) {
  std::string dir = MakeTempDir("dcp_partial");
  ckfmt_test::RawFileBuilder b;
  IndexRecord idx;
  EntryRecord t = ckfmt_test::TensorEntry({"t"}, DType::kU8, {8});
  t.partial = true;
  t.pieces.push_back(b.AddPiece(Region::Flat(0, 4), 0, "abcd", 4096));
  idx.entries.push_back(t);
  const std::string src = dir + "/partial.ckfmt";
  WriteFile(src, b.Build(idx));
  Status s = ConvertToDcp(src, dir + "/out");
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.ToString();
  EXPECT_NE(s.message().find("\"t\": tensor is partial"), std::string::npos) << s.ToString();
  EXPECT_EQ(Names(dir), std::set<std::string>{"partial.ckfmt"});
}

// Refused while the data file is being written: the temporary directory
// goes too.
TEST(DcpOutput, PartialBytesAreRefusedAndNothingIsLeft) {
  std::string dir = MakeTempDir("dcp_partial_bytes");
  const std::string src = dir + "/partial.ckfmt";
  WriteCkfmtWithPartialBytes(src);  // the tensor is written before the refusal
  Status s = ConvertToDcp(src, dir + "/out");
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.ToString();
  EXPECT_NE(s.message().find("blob: bytes entry is partial"), std::string::npos) << s.ToString();
  EXPECT_EQ(Names(dir), std::set<std::string>{"partial.ckfmt"});
}

TEST(DcpOutput, AnExistingDestinationIsReplacedOnlyIfEmptyOrDcp) {
  std::string dir = MakeTempDir("dcp_dest");
  const std::string src = SaveOneTensor(dir);

  // A directory holding anything but DCP's files is kept, untouched.
  fs::create_directory(dir + "/mixed");
  WriteFile(dir + "/mixed/.metadata", "an older checkpoint");
  WriteFile(dir + "/mixed/notes.txt", "the user's");
  Status s = ConvertToDcp(src, dir + "/mixed");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("holds notes.txt, which is not a DCP file"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(Names(dir + "/mixed"), (std::set<std::string>{".metadata", "notes.txt"}));
  fs::create_directory(dir + "/nested");
  fs::create_directory(dir + "/nested/x.distcp");
  EXPECT_EQ(ConvertToDcp(src, dir + "/nested").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(fs::is_directory(dir + "/nested/x.distcp"));

  WriteFile(dir + "/file", "x");
  s = ConvertToDcp(src, dir + "/file");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("is not a directory"), std::string::npos) << s.ToString();
  EXPECT_EQ(ReadFile(dir + "/file"), "x");

  EXPECT_EQ(ConvertToDcp(src, dir + "/no/such/dir").code(), StatusCode::kNotFound);

  fs::create_directory(dir + "/empty");
  ASSERT_TRUE(ConvertToDcp(src, dir + "/empty/").ok());  // a trailing slash, too
  EXPECT_EQ(Names(dir + "/empty"), (std::set<std::string>{".metadata", "__0_0.distcp"}));

  // A DCP checkpoint (another rank count's files too) is replaced whole.
  MakeOldDcp(dir + "/old");
  WriteFile(dir + "/old/__1_0.distcp", "rank 1");
  ConvertReport report;
  ASSERT_TRUE(ConvertToDcp(src, dir + "/old", &report).ok());
  EXPECT_EQ(Names(dir + "/old"), (std::set<std::string>{".metadata", "__0_0.distcp"}));
  EXPECT_EQ(ReadFile(dir + "/old/.metadata"), ReadFile(dir + "/empty/.metadata"));
  EXPECT_EQ(ReadFile(dir + "/old/__0_0.distcp"), ReadFile(dir + "/empty/__0_0.distcp"));
  ASSERT_EQ(report.notes.size(), 1u);
  EXPECT_EQ(report.notes[0], "replaced the DCP checkpoint at " + dir + "/old");
  EXPECT_EQ(Names(dir),  // no temporary or old copy left
            (std::set<std::string>{"s.ckfmt", "mixed", "nested", "file", "empty", "old"}));
}

// What a killed conversion left under a temporary name goes; a live
// conversion's (locked) temporary, or a young one, stays.
TEST(DcpOutput, StaleTemporaryDirectoriesOfKilledConversionsAreRemoved) {
  std::string dir = MakeTempDir("dcp_stale");
  const std::string src = SaveOneTensor(dir);
  const std::string stale = dir + "/out.tmp.0123456789abcdef";
  const std::string young = dir + "/out.tmp.fedcba9876543210";
  for (const std::string& d : {stale, young}) {
    fs::create_directory(d);
    WriteFile(d + "/__0_0.distcp", "half written");
  }
  fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::minutes(5));
  ASSERT_TRUE(ConvertToDcp(src, dir + "/out").ok());
  EXPECT_EQ(Names(dir), (std::set<std::string>{"s.ckfmt", "out", "out.tmp.fedcba9876543210"}));
}

// A file that comes into the old checkpoint while the new one is written
// is not deleted with it: the old directory is kept beside, and said so.
TEST(DcpOutput, AnOldCheckpointThatGainedOtherFilesIsKept) {
  std::string dir = MakeTempDir("dcp_replace_race");
  const std::string src = SaveOneTensor(dir);
  MakeOldDcp(dir + "/old");
  ConvertOptions o;
  o.src = src;
  o.dst = dir + "/old";
  o.to = Format::kDcp;
  o.fsync = false;
  o.progress = [&](uint64_t, uint64_t, const std::string&) {
    if (!fs::exists(dir + "/old/notes.txt")) WriteFile(dir + "/old/notes.txt", "the user's");
  };
  Result<ConvertReport> r = convert::Run(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Names(dir + "/old"), (std::set<std::string>{".metadata", "__0_0.distcp"}));
  std::string kept;
  for (const std::string& n : Names(dir)) {
    if (n.rfind("old.kept.", 0) == 0) kept = dir + "/" + n;
  }
  ASSERT_FALSE(kept.empty());
  EXPECT_EQ(Names(dir), (std::set<std::string>{"s.ckfmt", "old", fs::path(kept).filename()}));
  EXPECT_EQ(ReadFile(kept + "/.metadata"), "an older checkpoint");
  EXPECT_EQ(ReadFile(kept + "/__0_0.distcp"), "rank 0");
  EXPECT_EQ(ReadFile(kept + "/notes.txt"), "the user's");
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_EQ(r->notes[0], "kept the directory that " + dir + "/old named, now " + kept +
                             ": it came to hold notes.txt while the new checkpoint was written");
  // The kept directory is not taken for a stale temporary by the next
  // conversion, however old.
  fs::last_write_time(kept, fs::file_time_type::clock::now() - std::chrono::minutes(5));
  ASSERT_TRUE(ConvertToDcp(src, dir + "/old").ok());
  EXPECT_TRUE(fs::exists(kept + "/notes.txt"));
}

// A refused conversion leaves the DCP checkpoint it would have replaced.
TEST(DcpOutput, AFailedReplacementKeepsTheOldCheckpoint) {
  std::string dir = MakeTempDir("dcp_replace_fail");
  const std::string src = dir + "/partial.ckfmt";
  WriteCkfmtWithPartialBytes(src);
  MakeOldDcp(dir + "/old");
  EXPECT_EQ(ConvertToDcp(src, dir + "/old").code(), StatusCode::kUnsupported);
  EXPECT_EQ(ReadFile(dir + "/old/.metadata"), "an older checkpoint");
  EXPECT_EQ(ReadFile(dir + "/old/__0_0.distcp"), "rank 0");
  EXPECT_EQ(Names(dir), (std::set<std::string>{"partial.ckfmt", "old"}));
}

TEST(DcpOutput, NeedsToBeAskedFor) {
  std::string dir = MakeTempDir("dcp_ask");
  ConvertOptions o;
  o.src = Fixture("mlp_adamw.pt");
  o.dst = dir + "/out";
  Status s = convert::Run(o).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--to dcp"), std::string::npos) << s.ToString();
  EXPECT_EQ(*ParseFormat("DCP"), Format::kDcp);
}

}  // namespace
}  // namespace ckfmt::convert::testing
