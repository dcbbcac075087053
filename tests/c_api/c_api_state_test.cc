// The C ABI's whole-state functions (ckfmt_save_entries, ckfmt_load_entries)
// as a binding sees them: only libckfmt.so and ckfmt/c_api.h. Every kind of
// value round-trips; what the caller lacks comes back through its callbacks
// (tensors into memory it allocates); the load policies, the callbacks'
// failures and what C callers get wrong give their status codes.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckfmt/c_api.h"
#include "util/temp_dir.h"

namespace {

// Status codes of ckfmt/status.h, as the ABI returns them.
constexpr int kInvalidArgument = 1, kCorruption = 3, kMismatch = 5, kMissingKeys = 7,
              kUnexpectedKeys = 8, kAborted = 9;
constexpr uint8_t kF32 = 2, kBF16 = 4;

// What on_entry got: one record per call, its pointers' contents copied.
struct Got {
  std::string key;
  uint8_t kind = 0, dtype = 0;
  int32_t device = 0;
  std::vector<uint64_t> shape;
  void* data = nullptr;
  std::string data_copy;  // tensor bytes, copied during the call
  int64_t int_value = 0;
  double float_value = 0;
  std::string bytes, content_type;
  uint64_t size = 0;
  std::vector<uint64_t> global_shape, offsets;  // a shard's
};

// The caller's side of a load: memory for what it lacks, and what it got.
struct Sink {
  std::vector<std::unique_ptr<std::vector<uint8_t>>> allocated;
  std::vector<std::string> alloc_keys;
  std::vector<Got> got;
  std::map<std::string, std::string> metadata;
  bool fail_alloc = false;
  std::string fail_entry_at;  // on_entry returns 7 for this key

  static void* Alloc(void* ctx, const ckfmt_entry* e) {
    auto* s = static_cast<Sink*>(ctx);
    s->alloc_keys.push_back(e->key);
    if (s->fail_alloc) return nullptr;
    uint64_t n = e->dtype == kF32 ? 4 : 2;
    for (uint32_t i = 0; i < e->ndim; ++i) n *= e->shape[i];
    s->allocated.push_back(std::make_unique<std::vector<uint8_t>>(n, 0xab));
    return s->allocated.back()->data();
  }
  static int OnEntry(void* ctx, const ckfmt_entry* e) {
    auto* s = static_cast<Sink*>(ctx);
    Got g;
    g.key = e->key;
    g.kind = e->kind;
    if (e->kind == CKFMT_KIND_TENSOR) {
      g.dtype = e->dtype;
      g.device = e->device;
      g.shape.assign(e->shape, e->shape + e->ndim);
      g.data = e->data;
      uint64_t n = e->dtype == kF32 ? 4 : 2;
      for (uint64_t d : g.shape) n *= d;
      if (e->data) g.data_copy.assign(static_cast<const char*>(e->data), n);
      if (e->global_ndim) {
        g.global_shape.assign(e->global_shape, e->global_shape + e->global_ndim);
        if (e->offsets) g.offsets.assign(e->offsets, e->offsets + e->global_ndim);
      }
    }
    g.int_value = e->int_value;
    g.float_value = e->float_value;
    if ((e->kind == CKFMT_KIND_STRING || e->kind == CKFMT_KIND_BYTES) && e->bytes) {
      g.bytes.assign(static_cast<const char*>(e->bytes), e->size);
    }
    g.size = e->size;
    if (e->kind == CKFMT_KIND_BYTES) g.content_type = e->content_type;
    s->got.push_back(std::move(g));
    return s->fail_entry_at == e->key ? 7 : 0;
  }
  static int OnMetadata(void* ctx, const char* key, const char* value) {
    static_cast<Sink*>(ctx)->metadata[key] = value;
    return 0;
  }
  const Got* Find(const std::string& key) const {
    for (const Got& g : got) {
      if (g.key == key) return &g;
    }
    return nullptr;
  }
  std::vector<std::string> Keys() const {
    std::vector<std::string> keys;
    for (const Got& g : got) keys.push_back(g.key);
    return keys;
  }
};

class CApiStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (dir_ / "state.ckfmt").string();
    for (size_t i = 0; i < w_.size(); ++i) w_[i] = 0.5f * float(i) - 2.0f;
    for (size_t i = 0; i < m_.size(); ++i) m_[i] = uint16_t(0x3c00 + 13 * i);
  }

  static ckfmt_entry Tensor(const char* key, uint8_t dtype, uint32_t ndim, const uint64_t* shape,
                            void* data) {
    ckfmt_entry e{};
    e.key = key;
    e.kind = CKFMT_KIND_TENSOR;
    e.dtype = dtype;
    e.device = -1;
    e.ndim = ndim;
    e.shape = shape;
    e.data = data;
    return e;
  }
  static ckfmt_entry Of(const char* key, uint8_t kind) {
    ckfmt_entry e{};
    e.key = key;
    e.kind = kind;
    return e;
  }
  static ckfmt_entry Int(const char* key, int64_t v, uint8_t kind = CKFMT_KIND_INT) {
    ckfmt_entry e = Of(key, kind);
    e.int_value = v;
    return e;
  }
  static ckfmt_entry Text(const char* key, uint8_t kind, const std::string& s,
                          const char* content_type = nullptr) {
    ckfmt_entry e = Of(key, kind);
    e.bytes = s.data();
    e.size = s.size();
    e.content_type = content_type;
    return e;
  }

  // A training state of every kind: model weights, optimizer state (a
  // list of param groups, per-parameter moments), counters, RNG bytes, a
  // data-loader blob, a string, None, and an empty dict and list.
  std::vector<ckfmt_entry> State() {
    ckfmt_entry lr = Of("optim/param_groups/[0]/lr", CKFMT_KIND_FLOAT);
    lr.float_value = 3e-4;
    return {Tensor("model/w", kF32, 2, w_shape_, w_.data()),
            Of("optim/state", CKFMT_KIND_DICT),
            Tensor("optim/state/0/exp_avg", kBF16, 1, m_shape_, m_.data()),
            Int("optim/state/0/step", 1234),
            lr,
            Int("optim/param_groups/[0]/params/[0]", 0),
            Int("optim/param_groups/[0]/amsgrad", 0, CKFMT_KIND_BOOL),
            Of("optim/empty_list", CKFMT_KIND_LIST),
            Of("extra/none", CKFMT_KIND_NONE),
            Of("extra/empty_dict", CKFMT_KIND_DICT),
            Text("extra/name", CKFMT_KIND_STRING, name_),
            Text("loader", CKFMT_KIND_BYTES, blob_, "pickle"),
            Int("flag", 1, CKFMT_KIND_BOOL)};
  }
  int Save(const std::vector<ckfmt_entry>& e, const std::vector<ckfmt_metadata>& md = {},
           const char* codec = nullptr) {
    return ckfmt_save_entries(path_.c_str(), e.data(), e.size(), md.data(), md.size(), codec, err_,
                              sizeof err_);
  }
  ckfmt_load_options Options(Sink* sink, bool with_alloc = true) {
    ckfmt_load_options o{};
    o.verify_checksums = 1;
    o.reconstruct_device = -1;
    if (with_alloc) {
      o.alloc = &Sink::Alloc;
      o.alloc_ctx = sink;
    }
    o.on_entry = &Sink::OnEntry;
    o.entry_ctx = sink;
    o.on_metadata = &Sink::OnMetadata;
    o.metadata_ctx = sink;
    return o;
  }
  int Load(const std::vector<ckfmt_entry>& have, const ckfmt_load_options& o) {
    return ckfmt_load_entries(path_.c_str(), have.data(), have.size(), &o, err_, sizeof err_);
  }
  std::string FileBytes() const {
    std::ifstream f(path_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }

  ckfmt_test::ScopedTempDir tmp_;  // removed after TearDown
  std::filesystem::path dir_ = tmp_.path();
  std::string path_;
  std::vector<float> w_ = std::vector<float>(6);
  std::vector<uint16_t> m_ = std::vector<uint16_t>(5);
  const uint64_t w_shape_[2] = {2, 3};
  const uint64_t m_shape_[1] = {5};
  std::string name_ = "run-7 \xc3\xa9t\xc3\xa9";
  static constexpr char kBlob[] = "\x80\x04\x95\x00pickled\x00state";  // NULs inside
  std::string blob_ = std::string(kBlob, sizeof kBlob - 1);
  char err_[1024] = {};
};

TEST_F(CApiStateTest, EveryKindRoundTripsAndWhatTheCallerLacksIsHandedOver) {
  for (const char* codec : {"none", "zstd", "byteplane-zstd"}) {
    SCOPED_TRACE(codec);
    ASSERT_EQ(
        Save(State(), {{"run", "7"}, {"convert.torch.int_key_dicts", "[\"optim/state\"]"}}, codec),
        0)
        << err_;
    // The caller has the model (as after building it) and a step counter;
    // the optimizer state, created on the first step, it lacks.
    std::vector<float> w(6, -1.0f);
    const uint64_t shape[2] = {2, 3};
    Sink sink;
    ASSERT_EQ(Load({Tensor("model/w", kF32, 2, shape, w.data()), Int("flag", 0, CKFMT_KIND_BOOL)},
                   Options(&sink)),
              0)
        << err_;
    EXPECT_EQ(w, w_);  // in place
    EXPECT_EQ(sink.metadata,
              (std::map<std::string, std::string>{
                  {"run", "7"}, {"convert.torch.int_key_dicts", "[\"optim/state\"]"}}));
    // Pre-order, the caller's keys first; not the caller's tensor.
    EXPECT_EQ(sink.Keys(), (std::vector<std::string>{
                               "model", "flag", "optim", "optim/state", "optim/state/0",
                               "optim/state/0/exp_avg", "optim/state/0/step", "optim/param_groups",
                               "optim/param_groups/[0]", "optim/param_groups/[0]/lr",
                               "optim/param_groups/[0]/params", "optim/param_groups/[0]/params/[0]",
                               "optim/param_groups/[0]/amsgrad", "optim/empty_list", "extra",
                               "extra/none", "extra/empty_dict", "extra/name", "loader"}));
    ASSERT_EQ(sink.alloc_keys, std::vector<std::string>{"optim/state/0/exp_avg"});
    const Got* m = sink.Find("optim/state/0/exp_avg");
    EXPECT_EQ(m->kind, CKFMT_KIND_TENSOR);
    EXPECT_EQ(m->dtype, kBF16);
    EXPECT_EQ(m->device, -1);
    EXPECT_EQ(m->shape, std::vector<uint64_t>{5});
    EXPECT_EQ(m->data, sink.allocated[0]->data());  // the caller's memory, filled
    EXPECT_EQ(std::memcmp(sink.allocated[0]->data(), m_.data(), 10), 0);
    EXPECT_EQ(sink.Find("model")->kind, CKFMT_KIND_DICT);
    EXPECT_EQ(sink.Find("optim/param_groups")->kind, CKFMT_KIND_LIST);
    EXPECT_EQ(sink.Find("optim/state/0/step")->int_value, 1234);
    EXPECT_EQ(sink.Find("optim/param_groups/[0]/lr")->kind, CKFMT_KIND_FLOAT);
    EXPECT_EQ(sink.Find("optim/param_groups/[0]/lr")->float_value, 3e-4);
    EXPECT_EQ(sink.Find("optim/param_groups/[0]/amsgrad")->kind, CKFMT_KIND_BOOL);
    EXPECT_EQ(sink.Find("optim/param_groups/[0]/amsgrad")->int_value, 0);
    EXPECT_EQ(sink.Find("flag")->int_value, 1);  // the caller's declared flag gets the file's
    EXPECT_EQ(sink.Find("optim/empty_list")->kind, CKFMT_KIND_LIST);
    EXPECT_EQ(sink.Find("extra/none")->kind, CKFMT_KIND_NONE);
    EXPECT_EQ(sink.Find("extra/empty_dict")->kind, CKFMT_KIND_DICT);
    EXPECT_EQ(sink.Find("extra/name")->bytes, name_);
    EXPECT_EQ(sink.Find("loader")->kind, CKFMT_KIND_BYTES);
    EXPECT_EQ(sink.Find("loader")->bytes, blob_);
    EXPECT_EQ(sink.Find("loader")->content_type, "pickle");
  }
}

TEST_F(CApiStateTest, WithoutAllocCreatedTensorsAreHandedOverInCkfmtsMemory) {
  ASSERT_EQ(Save(State()), 0) << err_;
  Sink sink;
  ASSERT_EQ(Load({}, Options(&sink, /*with_alloc=*/false)), 0) << err_;
  EXPECT_TRUE(sink.alloc_keys.empty());
  ASSERT_NE(sink.Find("model/w"), nullptr);
  EXPECT_EQ(sink.Find("model/w")->data_copy,
            std::string(reinterpret_cast<const char*>(w_.data()), 24));
  EXPECT_EQ(sink.Find("optim/state/0/exp_avg")->data_copy,
            std::string(reinterpret_cast<const char*>(m_.data()), 10));
  EXPECT_EQ(sink.got.size(), 20u);  // every value, the root's children down
}

TEST_F(CApiStateTest, PoliciesAndPrefixesChooseWhatIsLoaded) {
  ASSERT_EQ(Save(State()), 0) << err_;
  std::vector<float> w(6);
  std::vector<float> absent(6, 9.0f);
  const uint64_t shape[2] = {2, 3};
  {
    Sink sink;
    ckfmt_load_options o = Options(&sink);
    o.unexpected = CKFMT_UNEXPECTED_ERROR;
    EXPECT_EQ(Load({Tensor("model/w", kF32, 2, shape, w.data())}, o), kUnexpectedKeys);
    EXPECT_NE(std::string(err_).find("optim, extra, loader, flag"), std::string::npos) << err_;
    EXPECT_TRUE(sink.got.empty());
    EXPECT_TRUE(sink.alloc_keys.empty());
  }
  {
    Sink sink;
    ckfmt_load_options o = Options(&sink);
    o.unexpected = CKFMT_UNEXPECTED_IGNORE;
    ASSERT_EQ(Load({Tensor("model/w", kF32, 2, shape, w.data()), Int("flag", 0)}, o), kMismatch)
        << "a bool in the file, an int declared";
    ASSERT_EQ(
        Load({Tensor("model/w", kF32, 2, shape, w.data()), Int("flag", 0, CKFMT_KIND_BOOL)}, o), 0)
        << err_;
    EXPECT_EQ(sink.Keys(), (std::vector<std::string>{"model", "flag"}));
  }
  {
    Sink sink;
    const std::vector<ckfmt_entry> have = {Tensor("model/w", kF32, 2, shape, w.data()),
                                           Tensor("model/absent", kF32, 2, shape, absent.data())};
    EXPECT_EQ(Load(have, Options(&sink)), kMissingKeys);
    EXPECT_NE(std::string(err_).find("model/absent"), std::string::npos) << err_;
    EXPECT_TRUE(sink.got.empty());
    ckfmt_load_options o = Options(&sink);
    o.missing = CKFMT_MISSING_IGNORE;
    ASSERT_EQ(Load(have, o), 0) << err_;
    EXPECT_EQ(absent, std::vector<float>(6, 9.0f));
    EXPECT_EQ(sink.Find("model/absent"), nullptr);
  }
  {
    Sink sink;
    ckfmt_load_options o = Options(&sink);
    const char* const prefixes[] = {"optim/param_groups", "loader"};
    o.prefixes = prefixes;
    o.n_prefixes = 2;
    ASSERT_EQ(Load({}, o), 0) << err_;
    EXPECT_EQ(sink.Keys(), (std::vector<std::string>{
                               "optim", "optim/param_groups", "optim/param_groups/[0]",
                               "optim/param_groups/[0]/lr", "optim/param_groups/[0]/params",
                               "optim/param_groups/[0]/params/[0]",
                               "optim/param_groups/[0]/amsgrad", "loader"}));
  }
}

TEST_F(CApiStateTest, ARefusedContentTypeStopsTheLoadBeforeAnythingIsRead) {
  ASSERT_EQ(Save(State()), 0) << err_;
  std::vector<float> w(6, -1.0f);
  const uint64_t shape[2] = {2, 3};
  Sink sink;
  ckfmt_load_options o = Options(&sink);
  o.refuse_content_type = "pickle";
  EXPECT_EQ(Load({Tensor("model/w", kF32, 2, shape, w.data())}, o), kAborted);
  EXPECT_NE(std::string(err_).find("loader holds bytes of content type \"pickle\""),
            std::string::npos)
      << err_;
  EXPECT_EQ(w, std::vector<float>(6, -1.0f));  // untouched
  EXPECT_TRUE(sink.got.empty());
  EXPECT_TRUE(sink.alloc_keys.empty());
  // Not handed over, so no refusal: ignored, or outside the prefixes.
  o.unexpected = CKFMT_UNEXPECTED_IGNORE;
  ASSERT_EQ(Load({Tensor("model/w", kF32, 2, shape, w.data())}, o), 0) << err_;
  EXPECT_EQ(w, w_);
  o.unexpected = CKFMT_UNEXPECTED_RECONSTRUCT;
  const char* const model[] = {"model"};
  o.prefixes = model;
  o.n_prefixes = 1;
  ASSERT_EQ(Load({}, o), 0) << err_;
  // Declared by the caller: handed over whatever the policy.
  o.prefixes = nullptr;
  o.n_prefixes = 0;
  o.unexpected = CKFMT_UNEXPECTED_IGNORE;
  ckfmt_entry loader = Of("loader", CKFMT_KIND_BYTES);
  EXPECT_EQ(Load({loader}, o), kAborted);
}

TEST_F(CApiStateTest, ACallbackThatFailsFailsTheLoadNamingTheKey) {
  ASSERT_EQ(Save(State()), 0) << err_;
  {
    Sink sink;
    sink.fail_alloc = true;
    EXPECT_EQ(Load({}, Options(&sink)), kAborted);
    EXPECT_NE(std::string(err_).find("model/w"), std::string::npos) << err_;
    EXPECT_NE(std::string(err_).find("alloc returned NULL"), std::string::npos) << err_;
    EXPECT_TRUE(sink.got.empty());
  }
  {
    Sink sink;
    sink.fail_entry_at = "extra/name";
    EXPECT_EQ(Load({}, Options(&sink)), kAborted);
    EXPECT_NE(std::string(err_).find("on_entry returned 7 for extra/name"), std::string::npos)
        << err_;
    EXPECT_EQ(sink.got.back().key, "extra/name");  // no call after the failing one
  }
  {
    Sink sink;
    ckfmt_load_options o = Options(&sink);
    o.on_metadata = [](void*, const char*, const char*) { return 3; };
    ASSERT_EQ(Save(State(), {{"k", "v"}}), 0) << err_;
    EXPECT_EQ(Load({}, o), kAborted);
    EXPECT_NE(std::string(err_).find("on_metadata returned 3 for \"k\""), std::string::npos)
        << err_;
    EXPECT_TRUE(sink.got.empty());
  }
}

TEST_F(CApiStateTest, WhatCallersGetWrongIsRefusedAndTheFileKept) {
  ASSERT_EQ(Save(State()), 0) << err_;
  const std::string good = FileBytes();
  auto expect_refused = [&](int rc, const std::string& words) {
    EXPECT_EQ(rc, kInvalidArgument) << err_;
    EXPECT_NE(std::string(err_).find(words), std::string::npos) << err_;
  };
  auto bad = State();
  bad[3].kind = 42;
  expect_refused(Save(bad), "entry 3 (\"optim/state/0/step\"): unknown kind 42");
  bad = State();
  bad[10].bytes = nullptr;
  expect_refused(Save(bad), "entry 10 (\"extra/name\"): bytes is NULL");
  bad = State();
  bad[0].device = -2;
  expect_refused(Save(bad), "entry 0 (\"model/w\"): device -2");
  bad = State();
  bad[5].key = "optim/param_groups/[0]/lr";
  expect_refused(Save(bad), "the same key as entry 4");
  bad = State();
  bad[2].key = "optim";  // after optim/state, which it would replace
  expect_refused(Save(bad), "a key that earlier entries are under");
  expect_refused(Save({Int("l/[1]", 1)}), "cannot insert at index 1");
  expect_refused(Save({Int("", 1)}), "the empty key path");
  expect_refused(Save(State(), {{"k", nullptr}}), "metadata 0: key or value is NULL");
  expect_refused(
      ckfmt_save_entries(path_.c_str(), nullptr, 3, nullptr, 0, nullptr, err_, sizeof err_),
      "entries is NULL for 3");
  EXPECT_EQ(FileBytes(), good);

  Sink sink;
  ckfmt_load_options o = Options(&sink);
  o.unexpected = 5;
  expect_refused(Load({}, o), "options.unexpected is 5");
  o = Options(&sink);
  o.missing = -1;
  expect_refused(Load({}, o), "options.missing is -1");
  o = Options(&sink);
  o.n_prefixes = 1;
  expect_refused(Load({}, o), "options.prefixes is NULL for 1");
  o = Options(&sink);
  o.reconstruct_device = -3;
  expect_refused(Load({}, o), "options.reconstruct_device: device -3");
  std::vector<float> small(2);
  const uint64_t two[1] = {2};
  EXPECT_EQ(Load({Tensor("model/w", kF32, 1, two, small.data())}, Options(&sink)), kMismatch);
  EXPECT_NE(std::string(err_).find("model/w"), std::string::npos) << err_;
  EXPECT_TRUE(sink.got.empty());
}

// A tensor parallel rank, or an FSDP rank with flat parameters, loads its
// part of a whole tensor; a lone shard saves as a partial entry.
TEST_F(CApiStateTest, ShardsLoadTheirPartWhateverTheFilesSharding) {
  std::vector<float> whole(24);
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = float(i);
  const uint64_t global[2] = {4, 6};
  ASSERT_EQ(Save({Tensor("w", kF32, 2, global, whole.data())}), 0) << err_;
  Sink sink;

  std::vector<float> box(6, -1.0f);  // rows 2-3, columns 3-5
  const uint64_t box_shape[2] = {2, 3}, box_at[2] = {2, 3};
  ckfmt_entry b = Tensor("w", kF32, 2, box_shape, box.data());
  b.global_ndim = 2;
  b.global_shape = global;
  b.offsets = box_at;
  ASSERT_EQ(Load({b}, Options(&sink)), 0) << err_;
  EXPECT_EQ(box, (std::vector<float>{15, 16, 17, 21, 22, 23}));

  std::vector<float> flat(7, -1.0f);  // elements 5-11
  const uint64_t flat_shape[1] = {7};
  ckfmt_entry f = Tensor("w", kF32, 1, flat_shape, flat.data());
  f.global_ndim = 2;
  f.global_shape = global;
  f.flat_start = 5;
  ASSERT_EQ(Load({f}, Options(&sink)), 0) << err_;
  EXPECT_EQ(flat, (std::vector<float>{5, 6, 7, 8, 9, 10, 11}));

  // A save of the box alone: the file holds that part, and the part loads.
  ASSERT_EQ(Save({b}), 0) << err_;
  std::vector<float> again(6, -1.0f);
  b.data = again.data();
  ASSERT_EQ(Load({b}, Options(&sink)), 0) << err_;
  EXPECT_EQ(again, box);
  std::vector<float> all(24);
  EXPECT_NE(Load({Tensor("w", kF32, 2, global, all.data())}, Options(&sink)), 0)
      << "the whole tensor from a file that holds a part";

  auto expect_refused = [&](ckfmt_entry e, const std::string& words) {
    EXPECT_EQ(Save({e}), kInvalidArgument) << err_;
    EXPECT_NE(std::string(err_).find(words), std::string::npos) << err_;
  };
  ckfmt_entry bad = b;
  bad.global_shape = nullptr;
  expect_refused(bad, "entry 0 (\"w\"): global_shape is NULL");
  bad = b;
  bad.ndim = 1;
  expect_refused(bad, "a box shard of a 2-d tensor has 1 dimensions");
  const uint64_t outside[2] = {3, 3};
  bad = b;
  bad.offsets = outside;
  expect_refused(bad, "entry 0 (\"w\"): shard");
  bad = f;
  bad.flat_start = 20;
  expect_refused(bad, "entry 0 (\"w\"): shard");
}

// A rank resuming with a fresh optimizer: what it lacks is created as the
// shard its layout says, not as the whole tensor.
TEST_F(CApiStateTest, ALayoutCreatesWhatTheCallerLacksAsItsShard) {
  std::vector<float> whole(24);
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = float(i);
  const uint64_t global[2] = {4, 6};
  ASSERT_EQ(Save({Tensor("model/w", kF32, 2, w_shape_, w_.data()),
                  Tensor("optim/m", kF32, 2, global, whole.data()), Int("step", 9)}),
            0)
      << err_;
  struct Layout {
    std::vector<std::string> asked;
    std::vector<std::vector<uint64_t>> shapes;
    int fail_with = 0;
    static int Of(void* ctx, const ckfmt_entry* e, uint64_t* offsets, uint64_t* lengths) {
      auto* l = static_cast<Layout*>(ctx);
      l->asked.push_back(e->key);
      l->shapes.emplace_back(e->shape, e->shape + e->ndim);
      if (l->fail_with) return l->fail_with;
      if (std::string(e->key) != "optim/m") return 0;  // whole
      offsets[0] = 2, offsets[1] = 3;                  // rows 2-3, columns 3-5
      lengths[0] = 2, lengths[1] = 3;
      return 1;
    }
  } layout;
  Sink sink;
  ckfmt_load_options o = Options(&sink);
  o.layout = &Layout::Of;
  o.layout_ctx = &layout;
  std::vector<float> w(6, -1.0f);
  const std::vector<ckfmt_entry> have = {Tensor("model/w", kF32, 2, w_shape_, w.data())};
  ASSERT_EQ(Load(have, o), 0) << err_;
  EXPECT_EQ(layout.asked, (std::vector<std::string>{"optim/m"}))  // the caller's w is not asked
      << "asked for " << layout.asked.size();
  EXPECT_EQ(layout.shapes.front(), (std::vector<uint64_t>{4, 6}));
  EXPECT_EQ(sink.alloc_keys, (std::vector<std::string>{"optim/m"}));
  const Got* m = sink.Find("optim/m");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(m->global_shape, (std::vector<uint64_t>{4, 6}));
  EXPECT_EQ(m->offsets, (std::vector<uint64_t>{2, 3}));
  const std::vector<float> want = {15, 16, 17, 21, 22, 23};
  EXPECT_EQ(m->data_copy, std::string(reinterpret_cast<const char*>(want.data()), 24));
  ASSERT_NE(sink.Find("step"), nullptr);
  EXPECT_EQ(sink.Find("step")->int_value, 9);
  EXPECT_EQ(w, w_);

  // A layout that fails stops the load before anything is read.
  Sink failed;
  o = Options(&failed);
  o.layout = &Layout::Of;
  o.layout_ctx = &layout;
  layout.fail_with = 7;
  std::fill(w.begin(), w.end(), -1.0f);
  EXPECT_EQ(Load(have, o), kAborted);
  EXPECT_NE(std::string(err_).find("layout returned 7 for optim/m"), std::string::npos) << err_;
  EXPECT_EQ(w, std::vector<float>(6, -1.0f));
  EXPECT_TRUE(failed.alloc_keys.empty());
  EXPECT_TRUE(failed.got.empty());
}

TEST_F(CApiStateTest, ListingTellsWhatAFileHoldsWithoutReadingItsData) {
  ASSERT_EQ(Save(State(), {{"run", "7"}}, "zstd"), 0) << err_;
  {
    // Damage the first chunk: a listing reads the index only.
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096 + 8);
    f.put('\x55');
  }
  Sink sink;
  ASSERT_EQ(ckfmt_list_entries(path_.c_str(), &Sink::OnEntry, &sink, &Sink::OnMetadata, &sink, err_,
                               sizeof err_),
            0)
      << err_;
  EXPECT_EQ(sink.metadata, (std::map<std::string, std::string>{{"run", "7"}}));
  EXPECT_EQ(sink.Keys(), (std::vector<std::string>{"model",
                                                   "model/w",
                                                   "optim",
                                                   "optim/state",
                                                   "optim/state/0",
                                                   "optim/state/0/exp_avg",
                                                   "optim/state/0/step",
                                                   "optim/param_groups",
                                                   "optim/param_groups/[0]",
                                                   "optim/param_groups/[0]/lr",
                                                   "optim/param_groups/[0]/params",
                                                   "optim/param_groups/[0]/params/[0]",
                                                   "optim/param_groups/[0]/amsgrad",
                                                   "optim/empty_list",
                                                   "extra",
                                                   "extra/none",
                                                   "extra/empty_dict",
                                                   "extra/name",
                                                   "loader",
                                                   "flag"}));
  const Got* w = sink.Find("model/w");
  EXPECT_EQ(w->kind, CKFMT_KIND_TENSOR);
  EXPECT_EQ(w->dtype, kF32);
  EXPECT_EQ(w->shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(w->data, nullptr);
  EXPECT_EQ(w->size, 24u);
  EXPECT_EQ(sink.Find("optim/state/0/step")->int_value, 1234);
  EXPECT_EQ(sink.Find("extra/name")->bytes, name_);
  const Got* loader = sink.Find("loader");
  EXPECT_EQ(loader->kind, CKFMT_KIND_BYTES);
  EXPECT_EQ(loader->size, blob_.size());
  EXPECT_EQ(loader->content_type, "pickle");
  EXPECT_TRUE(loader->bytes.empty());

  sink.fail_entry_at = "optim";
  EXPECT_EQ(
      ckfmt_list_entries(path_.c_str(), &Sink::OnEntry, &sink, nullptr, nullptr, err_, sizeof err_),
      kAborted);
  EXPECT_NE(std::string(err_).find("on_entry returned 7 for optim"), std::string::npos) << err_;
  EXPECT_EQ(ckfmt_list_entries(nullptr, nullptr, nullptr, nullptr, nullptr, err_, sizeof err_),
            kInvalidArgument);
  {
    // Damage the footer: the index is verified before anything is listed.
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-20, std::ios::end);
    f.put('\x01');
  }
  Sink none;
  EXPECT_EQ(
      ckfmt_list_entries(path_.c_str(), &Sink::OnEntry, &none, nullptr, nullptr, err_, sizeof err_),
      kCorruption);
  EXPECT_TRUE(none.got.empty());
}

TEST_F(CApiStateTest, NullOptionsVerifyReconstructOnTheHostAndRequireTheCallersKeys) {
  ASSERT_EQ(Save(State()), 0) << err_;
  std::vector<float> w(6);
  const uint64_t shape[2] = {2, 3};
  const ckfmt_entry have[] = {Tensor("model/w", kF32, 2, shape, w.data())};
  ASSERT_EQ(ckfmt_load_entries(path_.c_str(), have, 1, nullptr, err_, sizeof err_), 0) << err_;
  EXPECT_EQ(w, w_);
  const ckfmt_entry absent[] = {Int("absent", 1)};
  EXPECT_EQ(ckfmt_load_entries(path_.c_str(), absent, 1, nullptr, err_, sizeof err_), kMissingKeys);
}

}  // namespace
