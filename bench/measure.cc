#include "measure.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <liburing.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>

#include "ckfmt/checksum.h"
#include "realistic_values.h"

namespace ckfmt::bench {

void Fatal(const std::string& msg) {
  std::fprintf(stderr, "bench: %s\n", msg.c_str());
  std::exit(1);
}

namespace {
// Writing "5" to /proc/self/clear_refs resets VmHWM and with it ru_maxrss,
// so the lifetime peak is tracked here across resets.
double g_lifetime_peak_mib = 0;

double RuMaxRssMiB() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}
}  // namespace

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double HwmMiB() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  double kib = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "VmHWM:", 6) == 0) kib = std::atof(line + 6);
  }
  std::fclose(f);
  return kib / 1024.0;
}

bool ResetPeakRss() {
  g_lifetime_peak_mib = std::max({g_lifetime_peak_mib, HwmMiB(), RuMaxRssMiB()});
  const int fd = ::open("/proc/self/clear_refs", O_WRONLY);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "5", 1) == 1;
  ::close(fd);
  return ok;
}

double LifetimePeakMiB() {
  return std::max({g_lifetime_peak_mib, HwmMiB(), RuMaxRssMiB()});
}

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

std::string LoadAvg() {
  FILE* f = std::fopen("/proc/loadavg", "r");
  if (!f) return "?";
  char buf[128] = {};
  if (!std::fgets(buf, sizeof buf, f)) buf[0] = 0;
  std::fclose(f);
  std::string s(buf);
  // "0.52 0.58 0.59 1/123 4567": keep the three averages.
  size_t n = 0, pos = 0;
  while (n < 3 && (pos = s.find(' ', pos + 1)) != std::string::npos) ++n;
  return s.substr(0, pos == std::string::npos ? s.size() : pos);
}

double CurrentRssMiB() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long pages = 0, resident = 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return double(resident) * double(sysconf(_SC_PAGESIZE)) / kMiB;
}

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}  // namespace

void* AlignedAlloc(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, std::max<size_t>(n, 1)) != 0) Fatal("out of memory");
  return p;
}

void DropCache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void WarmCache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) Fatal("open " + path + ": " + std::strerror(errno));
  std::vector<char> buf(4u << 20);
  while (::read(fd, buf.data(), buf.size()) > 0) {
  }
  ::close(fd);
}

namespace {
// The "steal" column of /proc/stat's first line: time this machine's vCPUs
// were ready to run but the hypervisor ran something else.
double StealSeconds() {
  FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return -1;
  // cpu user nice system idle iowait irq softirq steal
  double v[8] = {};
  const int got = std::fscanf(f, "cpu %lf %lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3],
                              &v[4], &v[5], &v[6], &v[7]);
  std::fclose(f);
  const long hz = ::sysconf(_SC_CLK_TCK);
  return got == 8 && hz > 0 ? v[7] / double(hz) : -1;
}
}  // namespace

DiskCounters ReadDiskCounters(const std::string& dir) {
  DiskCounters c;
  c.steal_s = StealSeconds();
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) return c;
  std::string p = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" +
                  std::to_string(minor(st.st_dev)) + "/stat";
  FILE* f = std::fopen(p.c_str(), "r");
  if (!f) return c;
  // reads, merged, sectors, ms; writes, merged, sectors, ms; in flight,
  // io_ticks, time_in_queue (Documentation/block/stat.rst).
  double v[11] = {};
  int got = 0;
  for (int i = 0; i < 11 && std::fscanf(f, "%lf", &v[i]) == 1; ++i) got = i + 1;
  std::fclose(f);
  if (got < 11) return c;
  c.known = true;
  c.requests = v[0] + v[4];
  c.sectors = v[2] + v[6];
  c.busy_ms = v[9];
  c.in_flight_ms = v[10];
  return c;
}

void RemoveAndSettle(const std::string& path) {
  std::filesystem::remove(path);
  ::sync();
}

namespace {
// One kRawBlock buffer, huge-page backed like the engine's staging: the
// baselines are the best this disk does with these request sizes.
// Uninitialised; free with std::free.
void* RawBlockBuffer() {
  void* b = nullptr;
  if (posix_memalign(&b, kHugePage, kRawBlock) != 0) Fatal("out of memory");
  (void)::madvise(b, kRawBlock, MADV_HUGEPAGE);
  return b;
}
}  // namespace

RawIo::RawIo() {
  for (unsigned i = 0; i < kRawDepth; ++i) {
    bufs.push_back(RawBlockBuffer());
    Rng r(1000 + i);
    auto* p = static_cast<uint64_t*>(bufs.back());
    for (size_t k = 0; k < kRawBlock / 8; ++k) p[k] = r.Next();
  }
}

RawIo::~RawIo() {
  for (void* p : bufs) std::free(p);
}

namespace {

// Buffer slots handed between threads, first in first out: the slots free
// for the next transfer (given back by the transfer loop or, for a hashed
// read, by the hashing threads), and the blocks read but not yet hashed.
class SlotQueue {
 public:
  // Holds slots 0 .. n-1.
  explicit SlotQueue(unsigned n = 0) {
    for (unsigned i = 0; i < n; ++i) slots_.push_back(i);
  }
  void Push(unsigned slot) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      slots_.push_back(slot);
    }
    cv_.notify_one();
  }
  // No more Push(): waiting Take()s return once the queue is empty.
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }
  // The first slot, or none at once; with `wait`, blocks until there is
  // one or the queue is closed.
  std::optional<unsigned> Take(bool wait) {
    std::unique_lock<std::mutex> lock(mu_);
    if (wait) cv_.wait(lock, [&] { return closed_ || !slots_.empty(); });
    if (slots_.empty()) return std::nullopt;
    const unsigned slot = slots_.front();
    slots_.pop_front();
    return slot;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<unsigned> slots_;
  bool closed_ = false;
};

// Moves `nblocks` whole kRawBlock blocks between `fd` and memory, at most
// kRawDepth in flight; block k uses buffer(k, slot), where `slot` is one
// `slots` holds free. A finished block's slot goes to done(slot), which
// gives it back to `slots` now or later.
void RawBlocks(int fd, uint64_t nblocks, bool write, SlotQueue& slots,
               const std::function<void*(uint64_t, unsigned)>& buffer,
               const std::function<void(unsigned)>& done) {
  io_uring ring;
  if (int e = io_uring_queue_init(kRawDepth, &ring, 0); e < 0) {
    Fatal(std::string("io_uring_queue_init: ") + std::strerror(-e));
  }
  uint64_t submitted = 0, finished = 0;
  unsigned in_flight = 0;
  while (finished < nblocks) {
    unsigned queued = 0;
    while (in_flight < kRawDepth && submitted < nblocks) {
      // With nothing in flight, only a slot given back can let this go on.
      const std::optional<unsigned> slot = slots.Take(/*wait=*/in_flight == 0);
      if (!slot) break;
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (!sqe) Fatal("io_uring_get_sqe failed");
      void* buf = buffer(submitted, *slot);
      if (write) {
        io_uring_prep_write(sqe, fd, buf, kRawBlock, submitted * kRawBlock);
      } else {
        io_uring_prep_read(sqe, fd, buf, kRawBlock, submitted * kRawBlock);
      }
      io_uring_sqe_set_data64(sqe, *slot);
      ++submitted;
      ++queued;
      ++in_flight;
    }
    if (queued) {
      if (int e = io_uring_submit(&ring); e < 0) {
        Fatal(std::string("io_uring_submit: ") + std::strerror(-e));
      }
    }
    io_uring_cqe* cqe = nullptr;
    if (int e = io_uring_wait_cqe(&ring, &cqe); e < 0) {
      Fatal(std::string("io_uring_wait_cqe: ") + std::strerror(-e));
    }
    do {
      if (cqe->res != int(kRawBlock)) {
        Fatal(std::string("raw ") + (write ? "write" : "read") + " returned " +
            std::to_string(cqe->res) +
            (cqe->res < 0 ? std::string(" ") + std::strerror(-cqe->res) : std::string()));
      }
      const auto slot = unsigned(io_uring_cqe_get_data64(cqe));
      ++finished;
      --in_flight;
      io_uring_cqe_seen(&ring, cqe);
      done(slot);
    } while (io_uring_peek_cqe(&ring, &cqe) == 0);
  }
  io_uring_queue_exit(&ring);
}

// RawBlocks with kRawDepth slots, each free again as soon as its transfer ends.
void RawBlocks(int fd, uint64_t nblocks, bool write,
               const std::function<void*(uint64_t, unsigned)>& buffer) {
  SlotQueue slots(kRawDepth);
  RawBlocks(fd, nblocks, write, slots, buffer, [&](unsigned slot) { slots.Push(slot); });
}

}  // namespace

double RawTransfer(const std::string& path, uint64_t bytes, bool write, RawIo& io) {
  const int flags = write ? (O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT) : (O_RDONLY | O_DIRECT);
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) Fatal("open " + path + ": " + std::strerror(errno));
  const auto t0 = Clock::now();
  // Writes inside the file's size run side by side on ext4; extending ones
  // run one at a time. The baseline is the faster of the two.
  if (write) (void)::fallocate(fd, 0, 0, static_cast<off_t>(bytes));
  RawBlocks(fd, bytes / kRawBlock, write, [&](uint64_t, unsigned slot) { return io.bufs[slot]; });
  if (write && ::fsync(fd) != 0) Fatal("fsync: " + std::string(std::strerror(errno)));
  const auto t1 = Clock::now();
  ::close(fd);
  return Seconds(t0, t1);
}

double RawReadInto(const std::string& path, const std::vector<void*>& blocks) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) Fatal("open " + path + ": " + std::strerror(errno));
  const auto t0 = Clock::now();
  RawBlocks(fd, blocks.size(), /*write=*/false, [&](uint64_t k, unsigned) { return blocks[k]; });
  const auto t1 = Clock::now();
  ::close(fd);
  return Seconds(t0, t1);
}

double RawReadHashed(const std::string& path, uint64_t bytes) {
  // Room for a queue's worth of blocks being hashed while as many are read.
  constexpr unsigned kSlots = 2 * kRawDepth;
  static const std::vector<void*> bufs = [] {
    std::vector<void*> v;
    for (unsigned i = 0; i < kSlots; ++i) {
      v.push_back(RawBlockBuffer());
      std::memset(v.back(), 0, kRawBlock);  // resident before the first timed read
    }
    return v;
  }();
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) Fatal("open " + path + ": " + std::strerror(errno));
  SlotQueue free_slots(kSlots), to_hash;
  std::atomic<uint64_t> digest{0};  // an atomic result keeps the hashing from being elided
  std::vector<std::thread> hashers;
  const auto t0 = Clock::now();
  for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i) {
    hashers.emplace_back([&] {
      while (const std::optional<unsigned> slot = to_hash.Take(/*wait=*/true)) {
        digest.fetch_xor(Checksum(bufs[*slot], kRawBlock), std::memory_order_relaxed);
        free_slots.Push(*slot);
      }
    });
  }
  RawBlocks(
      fd, bytes / kRawBlock, /*write=*/false, free_slots,
      [&](uint64_t, unsigned slot) { return bufs[slot]; },
      [&](unsigned slot) { to_hash.Push(slot); });
  to_hash.Close();
  for (std::thread& h : hashers) h.join();
  const auto t1 = Clock::now();
  ::close(fd);
  return Seconds(t0, t1);
}

OpMeter::OpMeter(std::string dir)
    : dir_(std::move(dir)), rss0_(CurrentRssMiB()), cpu0_(0), hwm_(ResetPeakRss()),
      disk0_(ReadDiskCounters(dir_)) {
  cpu0_ = CpuSeconds();
  t0_ = Clock::now();
}

double OpMeter::Stop(Series& s) {
  const double seconds = Seconds(t0_, Clock::now());
  s.Disk(disk0_, ReadDiskCounters(dir_), seconds);
  s.cores.push_back((CpuSeconds() - cpu0_) / seconds);
  if (hwm_) s.Rss(rss0_);
  return seconds;
}

BusyCores::BusyCores(Work work, unsigned threads) {
  const unsigned n = threads ? threads : std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < n; ++i) {
    threads_.emplace_back([this, work] {
      (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);  // this thread only
      if (work == Work::kSpin) {
        while (!stop_.load(std::memory_order_relaxed)) {
        }
        return;
      }
      // Far larger than any cache: every copy goes to memory and back.
      const size_t bytes = size_t(256) << 20;
      std::vector<uint8_t> from(bytes, 1), to(bytes, 2);
      ++ready_;
      while (!stop_.load(std::memory_order_relaxed)) {
        std::memcpy(to.data(), from.data(), bytes);
        asm volatile("" : : "r"(to.data()) : "memory");  // the copy is the point: keep it
      }
    });
  }
  // Faulting the buffers in is not part of what the caller measures.
  if (work == Work::kCopy) {
    while (ready_.load() < n) std::this_thread::yield();
  }
}

BusyCores::~BusyCores() {
  stop_ = true;
  for (std::thread& t : threads_) t.join();
}

}  // namespace ckfmt::bench
