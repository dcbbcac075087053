// The C ABI's distributed save (ckfmt_comm, ckfmt_dist_save_entries) as a
// binding uses it: ranks are threads, and the transport under the four
// ckfmt_comm_ops is a set of in-process mailboxes. Shards of every rank
// make one file that a plain load reads back bitwise, in both modes; what
// one rank refuses, or a transport that fails on one rank, fails every rank
// and leaves the previous file in place.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "ckfmt/c_api.h"
#include "util/temp_dir.h"

// After a transport failure the communicator keeps the buffers the
// transport may still write (ckfmt/dist/communicator.h): leaked on purpose,
// so LeakSanitizer (scripts/sanitize.sh) is told to expect them.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:ckfmt::dist::AllGatherStrings\nleak:ckfmt::dist::BroadcastString\n";
}

namespace {

constexpr int kInvalidArgument = 1, kAborted = 9;
constexpr uint8_t kF32 = 2;

// Mailboxes between the ranks of one process. A send never blocks; a recv
// waits for its message, or fails once the sender is gone (as a transport
// that sees its peer go): a rank is gone once one of its operations failed
// or its save returned.
class Hub {
 public:
  explicit Hub(int size) : size_(size), gone_(size, false) {}
  int size() const { return size_; }

  void Put(int src, int dst, int tag, const void* data, uint64_t bytes) {
    std::lock_guard<std::mutex> lk(mu_);
    const auto* p = static_cast<const uint8_t*>(data);
    boxes_[{src, dst, tag}].emplace_back(p, p + bytes);
    cv_.notify_all();
  }
  bool Take(int src, int dst, int tag, void* data, uint64_t bytes) {
    std::unique_lock<std::mutex> lk(mu_);
    auto& box = boxes_[{src, dst, tag}];
    cv_.wait(lk, [&] { return !box.empty() || gone_[src]; });
    if (box.empty() || box.front().size() != bytes) return false;
    std::memcpy(data, box.front().data(), bytes);
    box.pop_front();
    return true;
  }
  void Gone(int rank) {
    std::lock_guard<std::mutex> lk(mu_);
    gone_[rank] = true;
    cv_.notify_all();
  }

 private:
  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<uint8_t>>> boxes_;
  std::vector<bool> gone_;
};

// One rank's side of the transport: the four operations over the hub.
// Collectives use tags above the 32768 the ABI may use.
struct Endpoint {
  Hub* hub;
  int rank;
  int fail_at = -1;  // the operation (counted from 0) that fails, -1: none
  int calls = 0;

  bool Failing() {
    if (calls++ != fail_at) return false;
    hub->Gone(rank);
    return true;
  }
  int Received(int src, int tag, void* data, uint64_t bytes) {
    if (hub->Take(src, rank, tag, data, bytes)) return 0;
    hub->Gone(rank);
    return 4;
  }
  static int AllGather(void* ctx, const void* send, uint64_t bytes, void* recv) {
    auto* e = static_cast<Endpoint*>(ctx);
    if (e->Failing()) return 3;
    for (int r = 0; r < e->hub->size(); ++r) e->hub->Put(e->rank, r, 40000, send, bytes);
    for (int r = 0; r < e->hub->size(); ++r) {
      if (int rc = e->Received(r, 40000, static_cast<uint8_t*>(recv) + r * bytes, bytes)) {
        return rc;
      }
    }
    return 0;
  }
  static int Broadcast(void* ctx, void* data, uint64_t bytes, int root) {
    auto* e = static_cast<Endpoint*>(ctx);
    if (e->Failing()) return 3;
    if (e->rank == root) {
      for (int r = 0; r < e->hub->size(); ++r) {
        if (r != root) e->hub->Put(root, r, 40001, data, bytes);
      }
      return 0;
    }
    return e->Received(root, 40001, data, bytes);
  }
  static int Send(void* ctx, const void* data, uint64_t bytes, int dst, int tag) {
    auto* e = static_cast<Endpoint*>(ctx);
    if (e->Failing()) return 3;
    e->hub->Put(e->rank, dst, tag, data, bytes);
    return 0;
  }
  static int Recv(void* ctx, void* data, uint64_t bytes, int src, int tag) {
    auto* e = static_cast<Endpoint*>(ctx);
    if (e->Failing()) return 3;
    return e->Received(src, tag, data, bytes);
  }
  ckfmt_comm_ops Ops() {
    return ckfmt_comm_ops{this, rank, hub->size(), AllGather, Broadcast, Send, Recv};
  }
};

struct RankResult {
  int rc = -1;
  std::string err;
};

// A tensor entry (a shard when `global` is non-empty: a box at `offsets`,
// else a flat range from flat_start) or an int entry.
struct EntrySpec {
  std::string key;
  std::vector<uint64_t> shape, global, offsets;
  uint64_t flat_start = 0;
  std::vector<float> data;
  int64_t int_value = 0;
  bool is_int = false;
};

EntrySpec TensorSpec(const std::string& key, std::vector<uint64_t> shape, std::vector<float> data,
                     std::vector<uint64_t> global = {}, std::vector<uint64_t> offsets = {},
                     uint64_t flat_start = 0) {
  EntrySpec s;
  s.key = key;
  s.shape = std::move(shape);
  s.data = std::move(data);
  s.global = std::move(global);
  s.offsets = std::move(offsets);
  s.flat_start = flat_start;
  return s;
}

EntrySpec IntSpec(const std::string& key, int64_t value) {
  EntrySpec s;
  s.key = key;
  s.int_value = value;
  s.is_int = true;
  return s;
}

ckfmt_entry ToEntry(const EntrySpec& s) {
  ckfmt_entry e{};
  e.key = s.key.c_str();
  if (s.is_int) {
    e.kind = CKFMT_KIND_INT;
    e.int_value = s.int_value;
    return e;
  }
  e.kind = CKFMT_KIND_TENSOR;
  e.dtype = kF32;
  e.device = -1;
  e.ndim = static_cast<uint32_t>(s.shape.size());
  e.shape = s.shape.data();
  e.data = const_cast<float*>(s.data.data());
  e.global_ndim = static_cast<uint32_t>(s.global.size());
  e.global_shape = s.global.data();
  e.offsets = s.offsets.empty() ? nullptr : s.offsets.data();
  e.flat_start = s.flat_start;
  return e;
}

class CApiDistTest : public ::testing::Test {
 protected:
  static constexpr int kRanks = 3;
  static constexpr uint64_t kRows = 6, kCols = 5, kFlat = 10;

  void SetUp() override {
    path_ = (dir_ / "state.ckfmt").string();
    w_.resize(kRows * kCols);
    std::iota(w_.begin(), w_.end(), -7.5f);
    m_.resize(kFlat);
    for (size_t i = 0; i < m_.size(); ++i) m_[i] = 1e-3f * float(i * i);
  }

  // Rank r's part: rows [2r, 2r + 2) of w (a box), its slice of m's flat
  // range (uneven: 4, 3, 3 elements), the replicated step, and a value
  // only rank 1 has.
  std::vector<EntrySpec> Part(int r) const {
    std::vector<EntrySpec> part;
    part.push_back(TensorSpec("model/w", {2, kCols},
                              {w_.begin() + 2 * r * kCols, w_.begin() + (2 * r + 2) * kCols},
                              {kRows, kCols}, {2 * uint64_t(r), 0}));
    const uint64_t begin = r == 0 ? 0 : 4 + 3 * (r - 1), len = r == 0 ? 4 : 3;
    part.push_back(TensorSpec("optim/m", {len}, {m_.begin() + begin, m_.begin() + begin + len},
                              {kFlat}, {}, begin));
    part.push_back(IntSpec("step", 42));
    if (r == 1) part.push_back(IntSpec("loader/rank1_seen", 7));
    return part;
  }

  // Every rank saves its Part (changed by `edit`) through `fail_at`'s
  // endpoints; returns each rank's result.
  std::vector<RankResult> SaveAll(const ckfmt_dist_options* options, const char* codec,
                                  std::vector<int> fail_at = {},
                                  void (*edit)(int, std::vector<ckfmt_entry>*) = nullptr) {
    Hub hub(kRanks);
    std::vector<Endpoint> ends;
    for (int r = 0; r < kRanks; ++r) {
      ends.push_back(Endpoint{&hub, r, fail_at.empty() ? -1 : fail_at[r]});
    }
    std::vector<RankResult> results(kRanks);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r) {
      threads.emplace_back([&, r] {
        const std::vector<EntrySpec> part = Part(r);
        std::vector<ckfmt_entry> entries;
        for (const EntrySpec& s : part) entries.push_back(ToEntry(s));
        if (edit) edit(r, &entries);
        const ckfmt_comm_ops ops = ends[r].Ops();
        ckfmt_comm* comm = nullptr;
        char err[1024] = "";
        int rc = ckfmt_comm_new(&ops, &comm, err, sizeof err);
        const ckfmt_metadata md{"run", "dist"};
        if (rc == 0) {
          rc = ckfmt_dist_save_entries(comm, path_.c_str(), entries.data(), entries.size(), &md, 1,
                                       codec, options, err, sizeof err);
        }
        ckfmt_comm_free(comm);
        hub.Gone(r);
        results[r] = {rc, err};
      });
    }
    for (auto& t : threads) t.join();
    return results;
  }

  // Loads the file whole and checks it holds the global state.
  void ExpectTheGlobalState() {
    std::vector<float> w(kRows * kCols, -1), m(kFlat, -1);
    const uint64_t ws[] = {kRows, kCols}, ms[] = {kFlat};
    ckfmt_entry e[2]{};
    e[0] = {};
    e[0].key = "model/w";
    e[0].kind = CKFMT_KIND_TENSOR;
    e[0].dtype = kF32;
    e[0].device = -1;
    e[0].ndim = 2;
    e[0].shape = ws;
    e[0].data = w.data();
    e[1] = e[0];
    e[1].key = "optim/m";
    e[1].ndim = 1;
    e[1].shape = ms;
    e[1].data = m.data();
    struct Seen {
      std::map<std::string, int64_t> ints;
      std::map<std::string, std::string> metadata;
    } seen;
    ckfmt_load_options lo{};
    lo.verify_checksums = 1;
    lo.on_entry = [](void* ctx, const ckfmt_entry* x) {
      if (x->kind == CKFMT_KIND_INT) static_cast<Seen*>(ctx)->ints[x->key] = x->int_value;
      return 0;
    };
    lo.entry_ctx = &seen;
    lo.on_metadata = [](void* ctx, const char* k, const char* v) {
      static_cast<Seen*>(ctx)->metadata[k] = v;
      return 0;
    };
    lo.metadata_ctx = &seen;
    char err[1024] = "";
    ASSERT_EQ(ckfmt_load_entries(path_.c_str(), e, 2, &lo, err, sizeof err), 0) << err;
    EXPECT_EQ(std::memcmp(w.data(), w_.data(), w.size() * 4), 0);
    EXPECT_EQ(std::memcmp(m.data(), m_.data(), m.size() * 4), 0);
    EXPECT_EQ(seen.ints, (std::map<std::string, int64_t>{{"loader/rank1_seen", 7}, {"step", 42}}));
    EXPECT_EQ(seen.metadata["run"], "dist");
    EXPECT_EQ(ckfmt_verify(path_.c_str(), err, sizeof err), 0) << err;
  }

  std::string FileBytes() const {
    std::ifstream f(path_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }

  ckfmt_test::ScopedTempDir tmp_;  // removed after TearDown
  std::filesystem::path dir_ = tmp_.path();
  std::string path_;
  std::vector<float> w_, m_;
};

TEST_F(CApiDistTest, EveryRanksShardsMakeOneFileInBothModes) {
  for (int mode : {CKFMT_DIST_FLATTENED, CKFMT_DIST_PARALLEL}) {
    for (const char* codec : {"none", "byteplane-zstd"}) {
      SCOPED_TRACE(std::string(mode == CKFMT_DIST_PARALLEL ? "parallel " : "flattened ") + codec);
      // A small budget: rank 0 gathers in several buckets.
      const ckfmt_dist_options options{mode, 64, 1};
      for (const RankResult& r : SaveAll(&options, codec)) ASSERT_EQ(r.rc, 0) << r.err;
      ExpectTheGlobalState();
    }
  }
}

TEST_F(CApiDistTest, OptionsNullSavesFlattened) {
  for (const RankResult& r : SaveAll(nullptr, nullptr)) ASSERT_EQ(r.rc, 0) << r.err;
  ExpectTheGlobalState();
}

TEST_F(CApiDistTest, WhatOneRankRefusesEveryRankReportsAndThePreviousFileStays) {
  for (const RankResult& r : SaveAll(nullptr, "none")) ASSERT_EQ(r.rc, 0) << r.err;
  const std::string good = FileBytes();
  // Rank 2 passes a tensor without data.
  auto results = SaveAll(nullptr, "none", {}, [](int r, std::vector<ckfmt_entry>* e) {
    if (r == 2) (*e)[0].data = nullptr;
  });
  for (const RankResult& r : results) {
    EXPECT_EQ(r.rc, kInvalidArgument) << r.err;
    EXPECT_NE(r.err.find("rank 2"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("model/w"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("data is NULL"), std::string::npos) << r.err;
  }
  EXPECT_EQ(FileBytes(), good);
  // Overlapping shards: rank 1 claims rank 0's rows too.
  results = SaveAll(nullptr, "none", {}, [](int r, std::vector<ckfmt_entry>* e) {
    static const uint64_t zero[] = {0, 0};
    if (r == 1) (*e)[0].offsets = zero;
  });
  for (const RankResult& r : results) {
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("model/w"), std::string::npos) << r.err;
  }
  EXPECT_EQ(FileBytes(), good);
  const ckfmt_dist_options bad_mode{7, 0, 0};
  for (const RankResult& r : SaveAll(&bad_mode, "none")) {
    EXPECT_EQ(r.rc, kInvalidArgument);
    EXPECT_NE(r.err.find("options.mode is 7"), std::string::npos) << r.err;
  }
  EXPECT_EQ(FileBytes(), good);
}

TEST_F(CApiDistTest, ATransportFailureOnOneRankFailsEveryRankAndThePreviousFileStays) {
  for (const RankResult& r : SaveAll(nullptr, "none")) ASSERT_EQ(r.rc, 0) << r.err;
  const std::string good = FileBytes();
  // Rank 1's transport fails at its first operation, then at a later one
  // (within the data gather of a flattened save, or the parallel save's
  // agreements); the others see it go.
  for (int mode : {CKFMT_DIST_FLATTENED, CKFMT_DIST_PARALLEL}) {
    for (int at : {0, 6}) {
      SCOPED_TRACE("mode " + std::to_string(mode) + ", operation " + std::to_string(at));
      const ckfmt_dist_options options{mode, 64, 0};
      auto results = SaveAll(&options, "none", {-1, at, -1});
      for (const RankResult& r : results) EXPECT_NE(r.rc, 0);
      EXPECT_EQ(results[1].rc, kAborted) << results[1].err;
      EXPECT_NE(results[1].err.find("failed in the caller's transport (it returned 3)"),
                std::string::npos)
          << results[1].err;
      EXPECT_EQ(FileBytes(), good);
    }
  }
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename(), "state.ckfmt") << "left behind: " << e.path();
  }
}

TEST_F(CApiDistTest, OneRankAloneSavesWhatItHas) {
  Hub hub(1);
  Endpoint end{&hub, 0};
  const ckfmt_comm_ops ops = end.Ops();
  ckfmt_comm* comm = nullptr;
  char err[512] = "";
  ASSERT_EQ(ckfmt_comm_new(&ops, &comm, err, sizeof err), 0) << err;
  const uint64_t shape[] = {kRows, kCols};
  const EntrySpec w = TensorSpec("model/w", {kRows, kCols}, w_);
  ckfmt_entry e = ToEntry(w);
  EXPECT_EQ(ckfmt_dist_save_entries(comm, path_.c_str(), &e, 1, nullptr, 0, nullptr, nullptr, err,
                                    sizeof err),
            0)
      << err;
  ckfmt_comm_free(comm);
  std::vector<float> back(w_.size());
  ckfmt_tensor t{"model/w", kF32, 2, shape, back.data()};
  ASSERT_EQ(ckfmt_load_tensors(path_.c_str(), &t, 1, 1, err, sizeof err), 0) << err;
  EXPECT_EQ(back, w_);
}

TEST(CApiComm, BadOperationsAreRefused) {
  char err[256] = "";
  ckfmt_comm* comm = reinterpret_cast<ckfmt_comm*>(1);
  EXPECT_EQ(ckfmt_comm_new(nullptr, &comm, err, sizeof err), kInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  Hub hub(2);
  Endpoint end{&hub, 0};
  ckfmt_comm_ops ops = end.Ops();
  ops.recv = nullptr;
  EXPECT_EQ(ckfmt_comm_new(&ops, &comm, err, sizeof err), kInvalidArgument);
  EXPECT_NE(std::string(err).find("must all be given"), std::string::npos) << err;
  ops = end.Ops();
  ops.rank = 2;
  EXPECT_EQ(ckfmt_comm_new(&ops, &comm, err, sizeof err), kInvalidArgument);
  EXPECT_NE(std::string(err).find("rank 2 of size 2"), std::string::npos) << err;
  EXPECT_EQ(ckfmt_comm_new(&ops, nullptr, err, sizeof err), kInvalidArgument);
  EXPECT_EQ(ckfmt_dist_save_entries(nullptr, "x", nullptr, 0, nullptr, 0, nullptr, nullptr, err,
                                    sizeof err),
            kInvalidArgument);
}

}  // namespace
