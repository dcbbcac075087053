// The read pipeline's parts: StagingRing's allocation, and RunScan's
// delivery of every item's bytes, its failures and its reuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <random>
#include <vector>

#include "ckfmt/file_layout.h"
#include "io/staging_ring.h"
#include "staged_scan.h"
#include "util/temp_dir.h"

namespace ckfmt {
namespace {

constexpr size_t kPage = kAlignment;

TEST(StagingRingTest, TakesInOrderAndWrapsOnceTheHeadIsFree) {
  StagingRing ring(8 * kPage);
  uint8_t* base = ring.buffers()[0].data();
  uint8_t* a = ring.Take(3 * kPage);
  uint8_t* b = ring.Take(3 * kPage);
  ASSERT_EQ(a, base);
  ASSERT_EQ(b, base + 3 * kPage);
  EXPECT_EQ(ring.Take(3 * kPage), nullptr);  // 2 pages left at the end, none at the start
  EXPECT_FALSE(ring.CanTake(3 * kPage));
  // Releasing `b` first frees nothing: `a` still holds the head.
  ring.Release(b);
  EXPECT_EQ(ring.Take(3 * kPage), nullptr);
  ring.Release(a);
  EXPECT_TRUE(ring.empty());
  EXPECT_EQ(ring.Take(8 * kPage), base);  // the whole buffer
}

TEST(StagingRingTest, WrappedSpaceEndsAtTheHead) {
  StagingRing ring(8 * kPage);
  uint8_t* base = ring.buffers()[0].data();
  uint8_t* a = ring.Take(4 * kPage);
  uint8_t* b = ring.Take(3 * kPage);
  ring.Release(a);
  // Free: [7, 8) at the end, [0, 4) at the start.
  uint8_t* c = ring.Take(2 * kPage);
  EXPECT_EQ(c, base);
  uint8_t* d = ring.Take(2 * kPage);
  EXPECT_EQ(d, base + 2 * kPage);
  EXPECT_EQ(ring.Take(1), nullptr);  // wrapped and full up to `b`
  ring.Release(b);
  EXPECT_EQ(ring.Take(4 * kPage), base + 4 * kPage);
  EXPECT_EQ(ring.Take(0), nullptr);
  EXPECT_EQ(ring.Take(9 * kPage), nullptr);
}

TEST(StagingRingTest, RandomUseNeverHandsOutOverlappingOrOutOfBoundsSpace) {
  std::mt19937 rng(7);
  StagingRing ring(64 * kPage);
  const uint8_t* base = ring.buffers()[0].data();
  std::map<const uint8_t*, size_t> live;  // extent -> pages
  size_t takes = 0;
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const size_t n = (1 + rng() % 20) * kPage - rng() % 100;
      const bool can = ring.CanTake(n);
      uint8_t* p = ring.Take(n);
      ASSERT_EQ(can, p != nullptr);
      if (!p) continue;
      ++takes;
      ASSERT_GE(p, base);
      ASSERT_LE(p + AlignUp(n), base + ring.capacity());
      ASSERT_EQ((p - base) % kPage, 0);
      for (const auto& [q, m] : live) ASSERT_TRUE(p + AlignUp(n) <= q || q + m <= p);
      live[p] = AlignUp(n);
    } else {
      auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
      ring.Release(it->first);
      live.erase(it);
    }
  }
  EXPECT_GT(takes, 5000u);
  for (const auto& [p, n] : live) ring.Release(p);
  EXPECT_TRUE(ring.empty());
}

// A file of `pages` pages whose every byte encodes its own offset.
std::string MakeFile(const ckfmt_test::ScopedTempDir& dir, size_t pages) {
  std::vector<uint8_t> bytes(pages * kPage);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + (i >> 12));
  std::string path = dir.File("scan.bin");
  FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
  return path;
}

uint8_t ByteAt(uint64_t i) { return static_cast<uint8_t>(i * 131 + (i >> 12)); }

// Requests of uneven sizes (some larger than the ring serves), items of
// uneven sizes inside them.
ScanJob UnevenJob(size_t pages, std::vector<uint64_t>* item_end) {
  ScanJob job;
  std::mt19937 rng(11);
  uint64_t pos = 0;
  while (pos < pages * kPage) {
    uint64_t len = std::min<uint64_t>((1 + rng() % 40) * kPage, pages * kPage - pos);
    ScanRequest r{pos, pos + len, job.item_begin.size(), 0};
    for (uint64_t at = pos; at < pos + len;) {
      uint64_t n = std::min<uint64_t>(1 + rng() % (3 * kPage), pos + len - at);
      job.item_begin.push_back(at);
      item_end->push_back(at + n);
      at += n;
    }
    r.end_item = job.item_begin.size();
    job.requests.push_back(r);
    pos += len;
  }
  return job;
}

// Read memory is a fixed function of the options, whatever the file's size:
// a budget in flight, a budget more for the reads being handled, one
// request of overshoot; a file that fits in the budget gets less.
TEST(ScanStagingTest, RingHoldsTwoBudgetsAndARequestForLargeFiles) {
  ckfmt_test::ScopedTempDir dir;
  auto file = File::OpenRead(MakeFile(dir, 4), /*direct=*/true);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  IoOptions io;
  io.staging_bytes = 40 * kPage;
  for (uint64_t span : {uint64_t{41} * kPage, uint64_t{1} << 40}) {
    auto s = ScanStaging::Create(*file, io, span, span, 10 * kPage);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ((*s)->in_flight_budget(), 40 * kPage);
    EXPECT_EQ((*s)->ring().capacity(), 90 * kPage) << span;
  }
  auto small = ScanStaging::Create(*file, io, 30 * kPage, 30 * kPage, 10 * kPage);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ((*small)->in_flight_budget(), 30 * kPage);
  EXPECT_EQ((*small)->ring().capacity(), 50 * kPage);
  // Reads straight into place keep the whole budget in flight but need no
  // ring: only the staged part of a large file gets one.
  auto mostly_direct = ScanStaging::Create(*file, io, uint64_t{1} << 40, 5 * kPage, 10 * kPage);
  ASSERT_TRUE(mostly_direct.ok());
  EXPECT_EQ((*mostly_direct)->in_flight_budget(), 40 * kPage);
  EXPECT_EQ((*mostly_direct)->ring().capacity(), 25 * kPage);
}

class RunScanTest : public ::testing::TestWithParam<IoBackend> {};

TEST_P(RunScanTest, HandsEveryItemItsBytesOnceAndIsReusableAfterAFailure) {
  ckfmt_test::ScopedTempDir dir;
  const size_t pages = 600;
  auto file = File::OpenRead(MakeFile(dir, pages), /*direct=*/true);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  IoOptions io;
  io.backend = GetParam();
  io.staging_bytes = 40 * kPage;
  // The ring serves requests up to 20 pages; larger ones get their own buffer.
  auto staging = ScanStaging::Create(*file, io, pages * kPage, pages * kPage, 20 * kPage);
  ASSERT_TRUE(staging.ok());
  ThreadPool pool(3);
  std::vector<uint64_t> item_end;
  ScanJob job = UnevenJob(pages, &item_end);
  std::vector<std::atomic<int>> seen(item_end.size());
  std::atomic<int> own_buffers{0};
  job.on_item = [&](size_t k, const uint8_t* p, unsigned worker) {
    EXPECT_LT(worker, pool.size());
    for (uint64_t i = job.item_begin[k]; i < item_end[k]; ++i) {
      if (p[i - job.item_begin[k]] != ByteAt(i)) {
        return Status::Corruption("item " + std::to_string(k) + " byte " + std::to_string(i));
      }
    }
    ++seen[k];
    return Status::OK();
  };
  job.with_own_buffer = [&](uint8_t*, size_t n, const std::function<Status()>& use) {
    EXPECT_GT(n, (*staging)->max_request());
    ++own_buffers;
    return use();
  };
  uint64_t last = 0;
  job.on_progress = [&](uint64_t done) {
    EXPECT_GE(done, last);
    last = done;
  };
  ASSERT_TRUE(RunScan(*file, **staging, job, pool).ok());
  for (auto& s : seen) ASSERT_EQ(s.load(), 1);
  EXPECT_GT(own_buffers.load(), 0);
  EXPECT_EQ(last, pages * kPage);

  // A failing item stops the scan with its status...
  auto good = job.on_item;
  job.on_item = [&](size_t k, const uint8_t* p, unsigned w) {
    if (k == item_end.size() / 2) return Status::Corruption("item in the middle is bad");
    return good(k, p, w);
  };
  last = 0;
  Status s = RunScan(*file, **staging, job, pool);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.ToString().find("item in the middle is bad"), std::string::npos);
  // ...and leaves the staging ready for the next scan.
  EXPECT_TRUE((*staging)->ring().empty());
  for (auto& x : seen) x = 0;
  last = 0;
  job.on_item = good;
  ASSERT_TRUE(RunScan(*file, **staging, job, pool).ok());
  for (auto& x : seen) ASSERT_EQ(x.load(), 1);
}

// Requests that hold no items (gaps read through) finish as soon as their
// read does; when the last ones are such requests, the worker that takes
// their reads ends the scan and every other worker must notice. A hang
// here is the failure, so the scans run under a deadline.
TEST_P(RunScanTest, EndsWhenTheLastRequestsHoldNoItems) {
  ckfmt_test::ScopedTempDir dir;
  const size_t pages = 64;
  auto file = File::OpenRead(MakeFile(dir, pages), /*direct=*/true);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  IoOptions io;
  io.backend = GetParam();
  io.staging_bytes = 8 * kPage;
  auto staging = ScanStaging::Create(*file, io, pages * kPage, pages * kPage, 2 * kPage);
  ASSERT_TRUE(staging.ok());
  ThreadPool pool(4);
  ScanJob job;
  for (size_t p = 0; p < pages; p += 2) {
    // Items only in the first half: the second half's requests are gaps.
    const size_t items = p < pages / 2 ? 1 : 0;
    job.requests.push_back({p * kPage, (p + 2) * kPage, job.item_begin.size(),
                            job.item_begin.size() + items});
    if (items) job.item_begin.push_back(p * kPage);
  }
  std::atomic<size_t> handled{0};
  job.on_item = [&](size_t, const uint8_t*, unsigned) {
    ++handled;
    return Status::OK();
  };
  auto scans = std::async(std::launch::async, [&] {
    for (int i = 0; i < 200; ++i) {
      Status s = RunScan(*file, **staging, job, pool);
      if (!s.ok()) return s;
    }
    return Status::OK();
  });
  if (scans.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "RunScan did not return within 60 s";
    std::_Exit(1);  // the scan's threads cannot be joined
  }
  Status s = scans.get();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(handled.load(), 200u * pages / 4);
}

// Requests with a destination of their own are read straight into it (the
// item sees that memory, no staging), interleaved with staged ones.
TEST_P(RunScanTest, ReadsDirectRequestsIntoTheirOwnMemory) {
  ckfmt_test::ScopedTempDir dir;
  const size_t pages = 300;
  auto file = File::OpenRead(MakeFile(dir, pages), /*direct=*/true);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ScanJob job;
  std::vector<uint64_t> item_end;
  std::vector<std::unique_ptr<AlignedBuffer>> dests;
  std::mt19937 rng(5);
  uint64_t staged = 0;
  for (uint64_t pos = 0; pos < pages * kPage;) {
    const uint64_t len = std::min<uint64_t>((1 + rng() % 8) * kPage, pages * kPage - pos);
    const bool direct = rng() % 2 == 0;
    ScanRequest r{pos, pos + len, job.item_begin.size(), 0};
    if (direct) {
      dests.push_back(std::make_unique<AlignedBuffer>(len));
      job.direct.push_back(dests.back()->data());
      job.item_begin.push_back(pos);
      item_end.push_back(pos + len);
    } else {
      job.direct.push_back(nullptr);
      staged += len;
      for (uint64_t at = pos; at < pos + len; at += kPage) {
        job.item_begin.push_back(at);
        item_end.push_back(at + kPage);
      }
    }
    r.end_item = job.item_begin.size();
    job.requests.push_back(r);
    pos += len;
  }
  ASSERT_GT(dests.size(), 10u);
  ASSERT_GT(staged, 0u);
  IoOptions io;
  io.backend = GetParam();
  io.staging_bytes = 16 * kPage;
  auto staging = ScanStaging::Create(*file, io, pages * kPage, staged, 8 * kPage);
  ASSERT_TRUE(staging.ok());
  ThreadPool pool(3);
  std::vector<std::atomic<int>> seen(item_end.size());
  job.on_item = [&](size_t k, const uint8_t* p, unsigned) {
    const uint8_t* ring = (*staging)->ring().buffers()[0].data();
    const bool in_ring = p >= ring && p < ring + (*staging)->ring().capacity();
    const size_t r = static_cast<size_t>(
        std::upper_bound(job.requests.begin(), job.requests.end(), job.item_begin[k],
                         [](uint64_t at, const ScanRequest& q) { return at < q.begin; }) -
        job.requests.begin() - 1);
    if (job.direct[r] ? p != job.direct[r] : !in_ring) {
      return Status::Internal("item " + std::to_string(k) + " handed the wrong memory");
    }
    for (uint64_t i = job.item_begin[k]; i < item_end[k]; ++i) {
      if (p[i - job.item_begin[k]] != ByteAt(i)) {
        return Status::Corruption("item " + std::to_string(k) + " byte " + std::to_string(i));
      }
    }
    ++seen[k];
    return Status::OK();
  };
  Status st = RunScan(*file, **staging, job, pool);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (auto& x : seen) ASSERT_EQ(x.load(), 1);
  EXPECT_TRUE((*staging)->ring().empty());

  job.direct.pop_back();  // one destination short of the requests
  st = RunScan(*file, **staging, job, pool);
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st.ToString();
}

INSTANTIATE_TEST_SUITE_P(Backends, RunScanTest,
                         ::testing::Values(IoBackend::kAuto, IoBackend::kPread),
                         [](const auto& info) {
                           return std::string(info.param == IoBackend::kPread ? "pread" : "uring");
                         });

}  // namespace
}  // namespace ckfmt
