// What the benchmarks measure with, beside the engine: wall and CPU time,
// resident memory, disk busy time, and the raw O_DIRECT bandwidth of a
// directory (the baseline every throughput ratio is taken against).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace ckfmt::bench {

using Clock = std::chrono::steady_clock;
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
inline constexpr double kMiB = 1024.0 * 1024.0;

// Prints "bench: msg" and exits 1.
[[noreturn]] void Fatal(const std::string& msg);

double Seconds(Clock::time_point a, Clock::time_point b);
// CPU seconds (user + system, all threads) used by the process so far.
double CpuSeconds();
// "0.52 0.58 0.59": other processes compete for the same cores.
std::string LoadAvg();

// Resident memory. Per-operation peaks: ResetPeakRss() resets the kernel's
// high-water mark (VmHWM) so that HwmMiB() after an operation is its peak;
// LifetimePeakMiB() is the process's peak across resets.
double CurrentRssMiB();
double HwmMiB();
bool ResetPeakRss();  // false where the kernel does not allow it
double LifetimePeakMiB();

// 4096-aligned, uninitialised; exits on failure. Free with std::free.
void* AlignedAlloc(size_t n);

// Writes back and evicts `path`'s cached pages, so the next read is cold.
void DropCache(const std::string& path);
// Reads `path` through the page cache, so the next read is warm.
void WarmCache(const std::string& path);
// The counters of the block device under a directory
// (/sys/dev/block/M:m/stat). Busy time over wall time tells a pipeline that
// leaves the disk idle from a disk that is simply slower in this run; the
// requests in flight and their size tell whether the disk was given as
// much work at once as the raw baseline gives it. Read with them, at the
// same moment, the CPU time the hypervisor took from this machine's vCPUs.
struct DiskCounters {
  double steal_s = -1;  // /proc/stat steal, all CPUs, in seconds; < 0: unknown
  bool known = false;
  double busy_ms = 0;      // time with I/O in flight (io_ticks)
  double in_flight_ms = 0; // the sum over requests of their time in flight
  double requests = 0;     // reads and writes completed
  double sectors = 0;      // 512-byte sectors read and written
};
DiskCounters ReadDiskCounters(const std::string& dir);
// Removes `path` and waits for the file system to finish with it: on a disk
// mounted with online discard, freeing a GiB queues TRIMs that would
// otherwise slow whichever write is timed next.
void RemoveAndSettle(const std::string& path);

// Raw bandwidth: io_uring, O_DIRECT, 4 MiB requests, queue depth 8.
inline constexpr size_t kRawBlock = 4u << 20;
inline constexpr unsigned kRawDepth = 8;

struct RawIo {
  std::vector<void*> bufs;
  RawIo();  // buffers hold distinct incompressible bytes
  ~RawIo();
  RawIo(const RawIo&) = delete;
  RawIo& operator=(const RawIo&) = delete;
};

// Seconds to move `bytes` (a multiple of kRawBlock) between `path` and
// memory; a write creates the file, allocates all of it first (as the
// engine allocates ahead of its writes; where the file system cannot, it
// writes on) and includes the allocation and its fsync.
double RawTransfer(const std::string& path, uint64_t bytes, bool write, RawIo& io);
// Seconds to read the first blocks.size() whole kRawBlock blocks of `path`
// into `blocks` (block k into blocks[k], each aligned for O_DIRECT), as
// RawTransfer reads: a raw read into given memory, such as a load's
// destination tensors, whose physical page layout decides how many
// segments the disk gets.
double RawReadInto(const std::string& path, const std::vector<void*>& blocks);

// Seconds to read `bytes` of `path` (a multiple of kRawBlock) as RawTransfer
// reads, with every block hashed (ckfmt's checksum) on a thread per core
// before its buffer is read into again; 2 * kRawDepth buffers let the next
// reads go on meanwhile. What reading and checking every byte gets from
// this disk, to hold verifies and checked loads against: on some virtual
// disks any pass over memory at the disk's pace slows the disk
// (bench/HISTORY.md, runs AC-AF).
double RawReadHashed(const std::string& path, uint64_t bytes);

// While alive, a thread per hardware thread spins at the lowest priority
// (nice 19): what a raw transfer gets from the disk while every core is
// busy, as it is during a load that decodes on all of them. The priority
// keeps the transfer's own thread first in line for a core, so a slowdown
// is the machine's (a VM's virtual disk needs host CPU time too), not the
// scheduler's. With kCopy, `threads` threads (0: one per hardware thread)
// instead memcpy 256 MiB between two buffers of their own over and over:
// what the disk gets while the guest moves memory it never reads from or
// writes to, as a load's or verify's every pass over the data does.
class BusyCores {
 public:
  enum class Work { kSpin, kCopy };
  explicit BusyCores(Work work = Work::kSpin, unsigned threads = 0);
  ~BusyCores();
  BusyCores(const BusyCores&) = delete;
  BusyCores& operator=(const BusyCores&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::atomic<unsigned> ready_{0};  // copying threads with their buffers faulted in
  std::vector<std::thread> threads_;
};

// One row of results: a figure per run, with what each run cost.
struct Series {
  std::string name;
  std::vector<double> gibs = {};  // GiB/s per run
  double peak_delta_mib = -1;      // max over runs of (peak RSS during the op - RSS before)
  std::vector<double> cores = {};  // CPU seconds / wall seconds per run
  std::vector<double> busy = {};   // disk busy time / wall time per run
  std::vector<double> depth = {};  // requests in flight on average while busy, per run
  std::vector<double> request_kib = {};  // mean request size per run
  std::vector<double> steal = {};  // CPU seconds stolen from the machine / wall seconds per run
  void Disk(const DiskCounters& a, const DiskCounters& b, double seconds) {
    if (a.steal_s >= 0 && b.steal_s >= a.steal_s)
      steal.push_back((b.steal_s - a.steal_s) / seconds);
    if (!a.known || !b.known || b.busy_ms < a.busy_ms) return;
    busy.push_back((b.busy_ms - a.busy_ms) / 1e3 / seconds);
    const double busy_ms = b.busy_ms - a.busy_ms, requests = b.requests - a.requests;
    if (busy_ms > 0) depth.push_back((b.in_flight_ms - a.in_flight_ms) / busy_ms);
    if (requests > 0) request_kib.push_back((b.sectors - a.sectors) / 2 / requests);
  }
  void Rss(double before_mib) { peak_delta_mib = std::max(peak_delta_mib, HwmMiB() - before_mib); }
  double Median() const { return MedianOf(gibs); }
  double Min() const { return gibs.empty() ? 0 : *std::min_element(gibs.begin(), gibs.end()); }
  double Max() const { return gibs.empty() ? 0 : *std::max_element(gibs.begin(), gibs.end()); }
  static double MedianOf(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  }
};

// Times one operation and records what it cost. Construct right before the
// operation (it resets the RSS peak and notes CPU, disk and clock).
class OpMeter {
 public:
  explicit OpMeter(std::string dir);
  Clock::time_point start() const { return t0_; }
  // Appends the operation's cores and disk busy share to `s`, raises its
  // RSS peak; returns the wall seconds since construction.
  double Stop(Series& s);

 private:
  std::string dir_;
  double rss0_, cpu0_;
  bool hwm_;
  DiskCounters disk0_;
  Clock::time_point t0_;
};

}  // namespace ckfmt::bench
