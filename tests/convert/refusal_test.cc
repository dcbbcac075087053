// Hostile and broken inputs: pickles that name dangerous globals, damaged
// zip archives, lying sizes, ambiguous safetensors headers. Every one fails
// with an error that names the file and the record or key.
#include <gtest/gtest.h>

#include <filesystem>

#include "ckfmt/reader.h"
#include "ckfmt/utf8.h"
#include "convert_test_util.h"
#include "file_io.h"
#include "pickle_writer.h"
#include "unpickler.h"
#include "util/file_util.h"
#include "util/raw_file.h"
#include "zip_writer.h"

namespace ckfmt::convert::testing {
namespace {

// A torch.save-like archive with the given data.pkl and storages.
void WriteTorchZip(const std::string& path, const std::string& pickle,
                   const std::vector<std::pair<std::string, std::string>>& storages = {}) {
  auto out = OutputFile::Create(path);
  ASSERT_TRUE(out.ok());
  ZipWriter z(out->get());
  ASSERT_TRUE(z.AddRecord("archive/data.pkl", pickle).ok());
  ASSERT_TRUE(z.AddRecord("archive/byteorder", "little").ok());
  for (const auto& [k, v] : storages) ASSERT_TRUE(z.AddRecord("archive/data/" + k, v).ok());
  ASSERT_TRUE(z.AddRecord("archive/version", "3\n").ok());
  ASSERT_TRUE(z.Finish().ok());
  ASSERT_TRUE((*out)->Commit(false).ok());
}

// {"x": <module>.<name>("ls")} and {"ok": 1}
std::string CallPickle(const std::string& module, const std::string& name) {
  PickleWriter w(2);
  w.EmptyDict();
  w.Mark();
  w.Str("ok");
  w.Int(1);
  w.Str("x");
  w.Global(module, name);
  w.Mark();
  w.Str("ls");
  w.Tuple();
  w.Reduce();
  w.SetItems();
  w.Stop();
  return w.Take();
}

Status ConvertStatus(const std::string& src, const std::string& dst, ConvertOptions o = {}) {
  o.src = src;
  o.dst = dst;
  o.fsync = false;
  return Run(o).status();
}

TEST(Refusal, DangerousGlobalsAreNamed) {
  std::string dir = MakeTempDir("evil");
  for (auto [m, n] : std::vector<std::pair<std::string, std::string>>{
           {"os", "system"}, {"builtins", "eval"}, {"posix", "system"},
           {"subprocess", "Popen"}, {"builtins", "exec"}, {"torch", "load"}}) {
    std::string pt = dir + "/" + m + "_" + n + ".pt";
    WriteTorchZip(pt, CallPickle(m, n));
    Status s = ConvertStatus(pt, dir + "/out.ckfmt");
    ASSERT_FALSE(s.ok()) << m << "." << n;
    EXPECT_NE(s.message().find(m + "." + n), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(pt), std::string::npos) << s.ToString();
    EXPECT_FALSE(PathExists(dir + "/out.ckfmt"));
  }
}

TEST(Refusal, OpaquePickleIsCarriedWhenAllowed) {
  std::string dir = MakeTempDir("opaque");
  std::string pt = dir + "/evil.pt";
  WriteTorchZip(pt, CallPickle("os", "system"));
  ConvertOptions o;
  o.allow_opaque_pickle = true;
  ConvertReport r = ConvertOrDie(pt, dir + "/out.ckfmt", o);
  FileSummary s = SummarizeCkfmt(dir + "/out.ckfmt");
  ASSERT_EQ(s.bytes.count("x"), 1u);
  EXPECT_EQ(s.bytes["x"], "pickle");
  EXPECT_EQ(s.values["ok"]["value"], 1);
  bool noted = false;
  for (const auto& n : r.notes) noted |= n.find("os.system") != std::string::npos;
  EXPECT_TRUE(noted);
  // The carried bytes are a pickle of the same call, still refused when read strictly.
  auto reader = CheckpointReader::Open(dir + "/out.ckfmt");
  ASSERT_TRUE(reader.ok());
  const EntryRecord* e = (*reader)->Find(KeyPath{std::string("x")});
  ASSERT_NE(e, nullptr);
  std::string blob(e->ByteSize(), '\0');
  ASSERT_TRUE((*reader)->ReadRegion(e->path, Region::Whole(e->shape), blob.data()).ok());
  UnpickleOptions strict;
  strict.where = "blob";
  auto again = Unpickle(blob, strict);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("os.system"), std::string::npos);
  UnpickleOptions lax = strict;
  lax.allow_opaque = true;
  auto obj = Unpickle(blob, lax);
  ASSERT_TRUE(obj.ok()) << obj.status().ToString();
  EXPECT_EQ((*obj)->kind, py::Kind::kCall);
  EXPECT_EQ((*obj)->callable->GlobalName(), "os.system");
  ASSERT_EQ((*obj)->args->items.size(), 1u);
  EXPECT_EQ((*obj)->args->items[0]->s, "ls");
  // torch.save output drops the opaque object, with a reason.
  ConvertReport r2 = ConvertOrDie(dir + "/out.ckfmt", dir + "/back.pt");
  ASSERT_EQ(r2.dropped.size(), 1u);
  EXPECT_EQ(r2.dropped[0].key, "x");
}

TEST(Refusal, TruncatedArchive) {
  std::string dir = MakeTempDir("trunc");
  std::string z = ReadFile(Fixture("mlp_adamw.pt"));
  for (size_t cut : {z.size() / 2, z.size() - 10, size_t(100)}) {
    std::string p = dir + "/t.pt";
    WriteFile(p, z.substr(0, cut));
    ConvertOptions o;
    o.from = Format::kTorchZip;
    Status s = ConvertStatus(p, dir + "/out.ckfmt", o);
    ASSERT_FALSE(s.ok()) << cut;
    EXPECT_NE(s.message().find(p), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.ToString();
  }
}

// Offset of the central directory record for `name`.
size_t CentralRecord(const std::string& z, const std::string& name) {
  size_t pos = 0;
  while ((pos = z.find(std::string("PK\x01\x02", 4), pos)) != std::string::npos) {
    uint16_t nlen = uint8_t(z[pos + 28]) | (uint8_t(z[pos + 29]) << 8);
    if (z.compare(pos + 46, nlen, name) == 0) return pos;
    ++pos;
  }
  return std::string::npos;
}

void Put32(std::string& z, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) z[at + i] = char((v >> (8 * i)) & 0xff);
}

TEST(Refusal, LyingSizes) {
  std::string dir = MakeTempDir("lying");
  std::string z0 = ReadFile(Fixture("mlp_adamw.pt"));
  const std::string rec = "mlp_adamw/data/0";
  size_t c = CentralRecord(z0, rec);
  ASSERT_NE(c, std::string::npos);
  struct Case {
    const char* what;
    std::function<void(std::string&)> edit;
    const char* expect;
  };
  std::vector<Case> cases = {
      {"central size disagrees with the local header",
       [&](std::string& z) { Put32(z, c + 20, 12345); Put32(z, c + 24, 12345); }, "lying sizes"},
      {"compressed != uncompressed", [&](std::string& z) { Put32(z, c + 20, 1); }, "lying sizes"},
      {"offset past EOF", [&](std::string& z) { Put32(z, c + 42, 0x7fffffff); }, "past the end"},
      {"compressed record",
       [&](std::string& z) { z[c + 10] = 8; }, "compressed"},
      {"local header of another record",
       [&](std::string& z) { Put32(z, c + 42, 0); }, "local header names"},
      {"crc mismatch", [&](std::string& z) { Put32(z, c + 16, 0xdeadbeef); }, "crc"},
  };
  for (const auto& k : cases) {
    std::string z = z0;
    k.edit(z);
    std::string p = dir + "/l.pt";
    WriteFile(p, z);
    Status s = ConvertStatus(p, dir + "/out.ckfmt");
    ASSERT_FALSE(s.ok()) << k.what;
    EXPECT_NE(s.message().find(p), std::string::npos) << k.what << ": " << s.ToString();
    std::string lower = s.message();
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    EXPECT_NE(lower.find(k.expect), std::string::npos) << k.what << ": " << s.ToString();
    if (std::string(k.what) != "local header of another record") {
      EXPECT_NE(s.message().find(rec), std::string::npos) << k.what << ": " << s.ToString();
    }
  }
}

TEST(Refusal, StorageRecordTooSmallForTheView) {
  std::string dir = MakeTempDir("badview");
  // A float tensor of 4 elements viewing a 2-element storage.
  PickleWriter w(2);
  w.EmptyDict();
  w.Str("t");
  w.Global("torch._utils", "_rebuild_tensor_v2");
  w.Mark();
  w.Mark();
  w.Str("storage");
  w.Global("torch", "FloatStorage");
  w.Str("0");
  w.Str("cpu");
  w.Int(2);
  w.Tuple();
  w.BinPersId();
  w.Int(0);
  w.Mark(); w.Int(4); w.Tuple();
  w.Mark(); w.Int(1); w.Tuple();
  w.Bool(false);
  w.Global("collections", "OrderedDict");
  w.EmptyTuple();
  w.Reduce();
  w.Tuple();
  w.Reduce();
  std::string pk = w.Take();
  pk += "s.";  // SETITEM, STOP
  WriteTorchZip(dir + "/v.pt", pk, {{"0", std::string(8, '\0')}});
  Status s = ConvertStatus(dir + "/v.pt", dir + "/out.ckfmt");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tensor \"t\""), std::string::npos) << s.ToString();
  // A storage record shorter than the pickle declares.
  WriteTorchZip(dir + "/w.pt", pk, {{"0", std::string(4, '\0')}});
  s = ConvertStatus(dir + "/w.pt", dir + "/out.ckfmt");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("archive/data/0"), std::string::npos) << s.ToString();
}

std::string SafetensorsFile(const std::string& header, size_t data_bytes) {
  std::string f(8, '\0');
  for (int i = 0; i < 8; ++i) f[i] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  return f + header + std::string(data_bytes, '\x01');
}

TEST(Refusal, AmbiguousSafetensorsHeaders) {
  std::string dir = MakeTempDir("st");
  struct Case {
    const char* what;
    std::string header;
    size_t data;
    const char* expect;
  };
  std::vector<Case> cases = {
      {"duplicate key",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       8, "\"a\" appears twice"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       8, "overlap"},
      {"out of bounds", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8,
       "past the"},
      {"unknown dtype", R"({"a":{"dtype":"F4","shape":[1],"data_offsets":[0,1]}})", 1,
       "unknown dtype \"F4\""},
      {"shape disagrees", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
       "need 12"},
      {"not json", "{not json}", 0, "not valid JSON"},
      {"duplicate field of a tensor",
       R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", 4,
       "\"dtype\" appears twice"},
      {"duplicate metadata key",
       R"({"__metadata__":{"k":"1","k":"2"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       4, "\"k\" appears twice"},
      {"nesting 65 deep", R"({"a":)" + std::string(64, '[') + std::string(64, ']') + "}", 0,
       "nests deeper than 64 levels"},
      {"text after the header's JSON",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} {})", 4, "not valid JSON"},
  };
  for (const auto& k : cases) {
    std::string p = dir + "/x.safetensors";
    WriteFile(p, SafetensorsFile(k.header, k.data));
    Status s = ConvertStatus(p, dir + "/out.ckfmt");
    ASSERT_FALSE(s.ok()) << k.what;
    EXPECT_NE(s.message().find(k.expect), std::string::npos) << k.what << ": " << s.ToString();
    EXPECT_NE(s.message().find(p), std::string::npos) << k.what << ": " << s.ToString();
  }
  // And a good one, for contrast.
  std::string p = dir + "/ok.safetensors";
  WriteFile(p, SafetensorsFile(R"({"a.b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8));
  ConvertOrDie(p, dir + "/ok.ckfmt");
  FileSummary s = SummarizeCkfmt(dir + "/ok.ckfmt");
  EXPECT_EQ(s.tensors.count("a.b"), 1u);
}

// `s` refuses as unsupported, quoting a key of `key_size` bytes by its
// start `quoted` and its length, in a message short enough to read.
void ExpectKeyQuotedShort(const Status& s, const std::string& quoted, size_t key_size) {
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.ToString().substr(0, 500);
  EXPECT_LT(s.message().size(), 1000u);
  EXPECT_NE(s.message().find(quoted), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("...\" (" + std::to_string(key_size) + " bytes)"),
            std::string::npos) << s.message();
}

// A megabyte key in an error is quoted by its start and its length, cut
// at a character boundary, not whole.
TEST(Refusal, LongKeysAreQuotedShort) {
  std::string dir = MakeTempDir("st");
  // 5 + 2k bytes: byte 200, where quoting stops, is inside a character.
  std::string key = "layer";
  while (key.size() < (1u << 20)) key += "\u00e9";  // two bytes in UTF-8
  const std::string p = dir + "/long.safetensors";
  WriteFile(p, SafetensorsFile("{\"" + key + "\":{\"dtype\":\"F4\",\"shape\":[1],"
                               "\"data_offsets\":[0,1]}}", 1));
  Status s = ConvertStatus(p, dir + "/out.ckfmt");
  ExpectKeyQuotedShort(s, "tensor \"layer\u00e9", key.size());
  EXPECT_NE(s.message().find("unknown dtype \"F4\""), std::string::npos) << s.message();
  EXPECT_TRUE(IsValidUtf8(s.message())) << "cut inside a character";
}

// Keys from a pickle are quoted short too: here a 1 MiB dict key whose
// value holds two keys that both read as "1" ({key: {1: 0, "1": 0}}).
TEST(Refusal, LongPickleKeysAreQuotedShort) {
  std::string dir = MakeTempDir("pklong");
  const std::string key = "k" + std::string(1 << 20, 'x');
  PickleWriter w(2);
  w.EmptyDict();
  w.Mark();
  w.Str(key);
  w.EmptyDict();
  w.Mark();
  w.Int(1);
  w.Int(0);
  w.Str("1");
  w.Int(0);
  w.SetItems();
  w.SetItems();
  w.Stop();
  const std::string pt = dir + "/long.pt";
  WriteTorchZip(pt, w.Take());
  Status s = ConvertStatus(pt, dir + "/out.ckfmt");
  ExpectKeyQuotedShort(s, "\"kxxx", key.size());
  EXPECT_NE(s.message().find("two keys read as \"1\""), std::string::npos) << s.message();
}

// Converting a file onto itself would replace the source: refused however
// the destination names it, and the source is left as it was.
TEST(Refusal, DestinationThatIsTheSource) {
  std::string dir = MakeTempDir("same");
  const std::string src = dir + "/a.ckfmt";
  ASSERT_TRUE(ConvertStatus(Fixture("mlp_adamw.pt"), src).ok());
  const std::string before = ReadFile(src);
  std::filesystem::create_symlink("a.ckfmt", dir + "/link.ckfmt");
  std::filesystem::create_directory(dir + "/sub");
  for (const std::string& dst : {src, dir + "/./a.ckfmt", dir + "/sub/../a.ckfmt",
                                 dir + "/link.ckfmt"}) {
    Status s = ConvertStatus(src, dst);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << dst << ": " << s.ToString();
    EXPECT_EQ(s.message(), dst + ": destination is the source");
  }
  // Through a link as the source, too.
  Status s = ConvertStatus(dir + "/link.ckfmt", src);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(ReadFile(src), before);
  EXPECT_EQ(std::filesystem::read_symlink(dir + "/link.ckfmt"), "a.ckfmt");
}

// Python pickles a str holding a lone surrogate as UTF-8 with the
// surrogate's bytes: a valid file that ckfmt cannot hold (exit 3), not a
// damaged one.
TEST(Refusal, LoneSurrogatesAreUnsupportedNotCorrupt) {
  std::string dir = MakeTempDir("surrogate");
  PickleWriter w(2);
  w.EmptyDict();
  w.Mark();
  w.Str("s");
  w.Str("a\xed\xa0\x80" "b");  // "a\ud800b", as pickle.dumps writes it
  w.SetItems();
  w.Stop();
  const std::string src = dir + "/surrogate.pt";
  WriteTorchZip(src, w.Take());
  Status s = ConvertStatus(src, dir + "/out.ckfmt");
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.ToString();
  EXPECT_NE(s.message().find("the string at \"s\" holds a lone surrogate"), std::string::npos)
      << s.ToString();
}

// Keys must be UTF-8 in ckfmt and safetensors; a pickle's need not be (a
// DCP .metadata key like this one used to throw out of the JSON writer,
// found by tests/fuzz).
TEST(Refusal, KeysThatAreNotUtf8) {
  std::string dir = MakeTempDir("utf8");
  PickleWriter w(2);
  w.EmptyDict();
  w.Mark();
  w.Str("caf\xe9");  // Latin-1
  w.Int(1);
  w.SetItems();
  w.Stop();
  const std::string src = dir + "/latin1.pt";
  WriteTorchZip(src, w.Take());
  for (const char* dst : {"/out.ckfmt", "/out.safetensors", "/out.pt"}) {
    Status s = ConvertStatus(src, dir + dst);
    ASSERT_FALSE(s.ok()) << dst;
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find("not valid UTF-8"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(src), std::string::npos) << s.ToString();
  }
}

// A safetensors key of 100000 dotted parts would nest that deep when split
// (the converter crashed on the stack); it is kept flat, with a note.
TEST(Refusal, DeeplyDottedKeysStayFlat) {
  std::string dir = MakeTempDir("dots");
  std::string key;
  for (int i = 0; i < 100000; ++i) key += "a.";
  key += "b";
  const std::string src = dir + "/deep.safetensors";
  WriteFile(src, SafetensorsFile("{\"" + key + "\":{\"dtype\":\"F32\",\"shape\":[1],"
                                 "\"data_offsets\":[0,4]}}", 4));
  ConvertReport r = ConvertOrDie(src, dir + "/deep.ckfmt");
  EXPECT_EQ(r.tensors, 1u);
  bool noted = false;
  for (const auto& n : r.notes) noted |= n.find("kept as flat keys") != std::string::npos;
  EXPECT_TRUE(noted);
  auto reader = CheckpointReader::Open(dir + "/deep.ckfmt");
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_NE((*reader)->Find(KeyPath{key}), nullptr);
}

// DCP at the depth limit, in files torch wrote (tests/fixtures/make_fixtures.py
// --only dcp_deep): a state nested 101 dicts deep has a planner path of 102
// parts, which no output could hold; a flat key of 150 dotted parts saved
// without planner data would split as deep, so it is kept whole.
TEST(Refusal, DcpPlannerPathTooDeep) {
  std::string dir = MakeTempDir("dcp_deep");
  Status s = ConvertStatus(Fixture("dcp_deep_nesting"), dir + "/out.ckfmt");
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.ToString();
  EXPECT_NE(s.message().find("dcp_deep_nesting/.metadata"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("nests deeper than 100 levels"), std::string::npos) << s.ToString();
  EXPECT_FALSE(PathExists(dir + "/out.ckfmt"));
}

// DCP metadata whose tensor has two chunks sharing rows (torch never
// writes that; tests/fixtures/make_fixtures.py --only dcp_overlap edits it in).
TEST(Refusal, DcpChunksThatOverlap) {
  std::string dir = MakeTempDir("dcp_overlap");
  Status s = ConvertStatus(Fixture("dcp_overlap"), dir + "/out.ckfmt");
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("dcp_overlap/.metadata"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("box[0:4, 0:3] and box[2:4, 0:3] of w overlap"), std::string::npos)
      << s.ToString();
  EXPECT_FALSE(PathExists(dir + "/out.ckfmt"));
}

// A copy of the dcp_safetensors fixture (FileSystemWriter with
// serialization_format=SAFETENSORS) with `from` replaced by `to`, of the
// same length, in rank 1's data file.
std::string EditedDcpSafetensors(const std::string& name, const std::string& from,
                                 const std::string& to) {
  EXPECT_EQ(from.size(), to.size());
  std::string dir = MakeTempDir(name) + "/dcp";
  std::filesystem::copy(Fixture("dcp_safetensors"), dir);
  std::string data = ReadFile(dir + "/__1_0.distcp");
  size_t at = data.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) data.replace(at, from.size(), to);
  WriteFile(dir + "/__1_0.distcp", data);
  return dir;
}

// Such a blob keys tensors by fqn, so a data file holds one chunk of each;
// DCP_SHARDING_INFO says which. A blob whose chunk is not the one the
// metadata points at (DCP keeps only the last when a rank has two) is
// refused, not read as the other.
TEST(Refusal, DcpSafetensorsChunkThatIsNotTheOneTheMetadataNames) {
  std::string dir = EditedDcpSafetensors("dcp_st_offsets",
                                         R"(\"model.0.weight\": {\"saved_offsets\": [4, 0]})",
                                         R"(\"model.0.weight\": {\"saved_offsets\": [5, 0]})");
  Status s = ConvertStatus(dir, dir + ".ckfmt");
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("__1_0.distcp @"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("\"model.0.weight\" chunk 1"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("holds the chunk at offsets [5,0], the metadata expects the chunk "
                             "at offsets [4,0]"),
            std::string::npos)
      << s.ToString();
  EXPECT_FALSE(PathExists(dir + ".ckfmt"));
}

// The blob's own contradictions, each refused as corrupt naming the chunk:
// sharding info that is not the documented JSON, sharding info without the
// key, and a tensor the sharding info names but the blob lacks.
TEST(Refusal, DcpSafetensorsBlobThatContradictsItself) {
  struct Case {
    const char* name;
    std::string from, to, says;
  } cases[] = {
      {"dcp_st_bad_info", R"(\"model.0.weight\": {\"saved_offsets\": [4, 0]})",
       R"(\"model.0.weight\": {\"saved_offsets\": [4,-0]})",
       "DCP_SHARDING_INFO is not {\"<fqn>\": {\"saved_offsets\": [<int>, ...]}, ...}"},
      {"dcp_st_key_not_in_info", R"(\"model.0.weight\": {\"saved_offsets\")",
       R"(\"model.0.weighX\": {\"saved_offsets\")",
       "\"model.0.weight\" chunk 1): the file's safetensors blob holds no chunk of this key, "
       "the metadata expects the chunk at offsets [4,0]"},
      {"dcp_st_tensor_not_in_blob", R"("model.0.weight":{)", R"("model.0.weighX":{)",
       "\"model.0.weight\" chunk 1): the file's safetensors blob has no tensor "
       "\"model.0.weight\""},
  };
  for (const Case& c : cases) {
    std::string dir = EditedDcpSafetensors(c.name, c.from, c.to);
    Status s = ConvertStatus(dir, dir + ".ckfmt");
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << c.name << ": " << s.ToString();
    EXPECT_NE(s.message().find("__1_0.distcp @"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(c.says), std::string::npos) << c.name << ": " << s.ToString();
    EXPECT_FALSE(PathExists(dir + ".ckfmt")) << c.name;
  }
}

TEST(Refusal, DcpSafetensorsWithoutShardingInfo) {
  std::string dir = EditedDcpSafetensors("dcp_st_no_info", "DCP_SHARDING_INFO",
                                         "DCP_SHARDING_INFX");
  Status s = ConvertStatus(dir, dir + ".ckfmt");
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.ToString();
  EXPECT_NE(s.message().find("__1_0.distcp @"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("without DCP_SHARDING_INFO"), std::string::npos) << s.ToString();
  EXPECT_FALSE(PathExists(dir + ".ckfmt"));
}

// Neither of DCP's serializations at an item's offset: refused, where the
// converter once read the bytes there as the tensor's own.
TEST(Refusal, DcpItemInNeitherSerialization) {
  std::string dir = EditedDcpSafetensors("dcp_st_neither", R"({"__metadata__")",
                                         R"(["__metadata__")");
  Status s = ConvertStatus(dir, dir + ".ckfmt");
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("__1_0.distcp @"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("neither a torch.save archive nor in a safetensors blob"),
            std::string::npos)
      << s.ToString();
  EXPECT_FALSE(PathExists(dir + ".ckfmt"));
}

// A ckfmt file nested 101 levels deep through lists: the converter's limit
// is 100, and its refusal spells list indices in the key.
TEST(Refusal, CkfmtNestedBeyondTheConverterLimit) {
  std::string dir = MakeTempDir("deep_lists");
  IndexRecord idx;
  KeyPath path;
  for (int i = 0; i < 50; ++i) {
    path.emplace_back(std::string("l"));
    idx.entries.push_back(ckfmt_test::ContainerEntry(path, EntryKind::kList));
    path.emplace_back(uint64_t{0});
    idx.entries.push_back(ckfmt_test::ContainerEntry(path, EntryKind::kDict));
  }
  path.emplace_back(std::string("x"));
  EntryRecord leaf;
  leaf.path = path;
  leaf.kind = EntryKind::kInt;
  leaf.int_value = 7;
  idx.entries.push_back(leaf);
  const std::string src = dir + "/deep.ckfmt";
  ckfmt_test::RawFileBuilder b;
  WriteFile(src, b.Build(idx));
  for (const char* dst : {"/out.safetensors", "/out.pt", "/out.ckfmt"}) {
    Status s = ConvertStatus(src, dir + dst);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << dst << ": " << s.ToString();
    EXPECT_NE(s.message().find("\"l.0.l.0.l.0."), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("deeper than 100 levels, the converter's limit"), std::string::npos)
        << s.ToString();
    EXPECT_FALSE(PathExists(dir + dst));
  }
}

// A partial bytes entry (FORMAT.md 6.5 allows one): safetensors drops it
// as it drops every bytes entry; outputs that hold bytes refuse it, as
// torch.save refuses a partial tensor. It used to stop every conversion.
TEST(Refusal, CkfmtPartialBytesEntry) {
  std::string dir = MakeTempDir("partial_bytes");
  const std::string src = dir + "/partial.ckfmt";
  WriteCkfmtWithPartialBytes(src);
  ConvertReport r = ConvertOrDie(src, dir + "/out.safetensors");
  EXPECT_EQ(r.tensors, 1u);
  ASSERT_EQ(r.dropped.size(), 1u);
  EXPECT_EQ(r.dropped[0].key, "blob");
  for (const char* dst : {"/out.pt", "/out.ckfmt"}) {
    Status s = ConvertStatus(src, dir + dst);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << dst << ": " << s.ToString();
    EXPECT_NE(s.message().find("blob: bytes entry is partial"), std::string::npos) << s.ToString();
    EXPECT_FALSE(PathExists(dir + dst));
  }
}

TEST(Refusal, DcpDeeplyDottedKeyStaysWhole) {
  std::string dir = MakeTempDir("dcp_deep");
  ConvertReport r = ConvertOrDie(Fixture("dcp_deep_key"), dir + "/out.ckfmt");
  EXPECT_EQ(r.tensors, 1u);
  bool noted = false;
  for (const auto& n : r.notes) noted |= n.find("kept as one key") != std::string::npos;
  EXPECT_TRUE(noted);
  std::string key = "p0";
  for (int i = 1; i < 150; ++i) key += ".p" + std::to_string(i);
  auto reader = CheckpointReader::Open(dir + "/out.ckfmt");
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  const EntryRecord* e = (*reader)->Find(KeyPath{key});
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype, DType::kI32);
  EXPECT_EQ(e->shape, (Shape{4}));
}

TEST(Refusal, TruncatedLegacyFile) {
  std::string dir = MakeTempDir("legacy");
  std::string z = ReadFile(Fixture("legacy.pt"));
  std::string p = dir + "/l.pt";
  WriteFile(p, z.substr(0, z.size() - 100));
  Status s = ConvertStatus(p, dir + "/out.ckfmt");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(p), std::string::npos) << s.ToString();
}

TEST(Refusal, DestinationFormatMustBeKnown) {
  std::string dir = MakeTempDir("dst");
  Status s = ConvertStatus(Fixture("mlp_adamw.pt"), dir + "/out.xyz");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--to"), std::string::npos);
  ConvertOptions o;
  o.to = Format::kCkfmt;
  EXPECT_TRUE(ConvertStatus(Fixture("mlp_adamw.pt"), dir + "/out.xyz", o).ok());
}

TEST(Refusal, DestinationThatIsADirectory) {
  // Every output format refuses it, with nothing left behind.
  std::string dir = MakeTempDir("dstdir");
  for (const char* name : {"/out.ckfmt", "/out.safetensors", "/out.pt"}) {
    const std::string dst = dir + name;
    std::filesystem::create_directory(dst);
    Status s = ConvertStatus(Fixture("mlp_adamw.pt"), dst);
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(dst + " is a directory"), std::string::npos) << s.ToString();
    EXPECT_TRUE(std::filesystem::is_empty(dst));
  }
  const auto entries = std::distance(std::filesystem::directory_iterator(dir),
                                     std::filesystem::directory_iterator());
  EXPECT_EQ(entries, 3) << "temporaries left in " << dir;
}

TEST(Refusal, SourceThatIsNotARegularFile) {
  // A FIFO as the source file, or as a DCP directory's .metadata, is
  // refused at once (a plain open for reading would wait for a writer), as
  // is a device; nothing is written.
  const std::string dir = MakeTempDir("fifo");
  const std::string fifo = dir + "/model.safetensors";
  ckfmt_test::MakeFifo(fifo);
  std::filesystem::create_directory(dir + "/dcp");
  ckfmt_test::MakeFifo(dir + "/dcp/.metadata");
  for (const std::string& src : {fifo, dir + "/dcp", std::string("/dev/null")}) {
    const std::string bad = src == dir + "/dcp" ? src + "/.metadata" : src;
    Status s = ckfmt_test::WithinSeconds(bad, [&] { return ConvertStatus(src, dir + "/out.ckfmt"); });
    ASSERT_FALSE(s.ok()) << src;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(bad + " is not a regular file"), std::string::npos) << s.ToString();
    EXPECT_FALSE(std::filesystem::exists(dir + "/out.ckfmt"));
  }
}

// Converts (to torch.save) a few-MiB ckfmt file whose `entries` bytes
// entries declare `gib_each` GiB each in compressed chunks (which decode to
// up to 1 GiB each); expects the refusal for memory, before anything is
// read or written. `src` gets the file's path.
void ExpectHugeBytesRefused(int entries, int gib_each, std::string* src, Status* s) {
  const std::string dir = MakeTempDir("hugebytes");
  ckfmt_test::RawFileBuilder b;
  IndexRecord idx = ckfmt_test::DeclareHugeEntries(b, entries, gib_each, EntryKind::kBytes, "blob");
  *src = dir + "/huge.ckfmt";
  WriteFile(*src, b.Build(idx));
  *s = ConvertStatus(*src, dir + "/out.pt");
  ASSERT_FALSE(s->ok());
  EXPECT_EQ(s->code(), StatusCode::kIOError) << s->ToString();
  EXPECT_NE(s->message().find(*src), std::string::npos) << s->ToString();
  EXPECT_NE(s->message().find("host memory"), std::string::npos) << s->ToString();
  EXPECT_NE(s->message().find("blob"), std::string::npos) << s->ToString();
  EXPECT_FALSE(std::filesystem::exists(dir + "/out.pt"));
}

TEST(Refusal, CkfmtBytesEntryLargerThanMemory) {
  // One 1 TiB entry, which convert reads whole: it used to abort on
  // std::bad_alloc.
  std::string src;
  Status s;
  ExpectHugeBytesRefused(1, 1024, &src, &s);
}

TEST(Refusal, CkfmtBytesEntriesTogetherBeyondMemoryAreRefusedBeforeAnyIsRead) {
  // 256 entries of 1 GiB: each alone fits, together no machine here holds
  // them, and convert keeps them all. The sum is refused first, rather than
  // allocating (and zeroing) entries one by one until the memory ends.
  std::string src;
  Status s;
  ExpectHugeBytesRefused(256, 1, &src, &s);
  EXPECT_NE(s.message().find("for 256 entries"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace ckfmt::convert::testing
