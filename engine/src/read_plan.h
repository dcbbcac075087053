// Reading parts of entries: which chunks overlap which destinations, and
// the pipelined read -> verify -> decode -> scatter that fills them.
#pragma once

#include <optional>
#include <vector>

#include "ckfmt/index.h"
#include "ckfmt/reader.h"
#include "device/device_staging.h"
#include "io/file.h"
#include "staged_scan.h"
#include "thread_pool.h"

namespace ckfmt {

// A destination: `dst` receives the row-major stream of `region` of
// `entry`'s global tensor. `dst` is memory of `device` (a CUDA target is
// filled by host -> device copies from pinned memory).
struct ReadTarget {
  const EntryRecord* entry;
  Region region;
  uint8_t* dst;
  Device device = {};
  bool on_huge_pages = false;  // dst is in a Tensor with on_huge_pages()
};

// Reads of one open file. Staging, the I/O ring and the buffered
// handle for cached files are set up on first use and kept, so many small
// reads (e.g. one ReadRegion per tensor) do not pay for them each time.
class ReadSession {
 public:
  // REQUIRES: `file` and `options` outlive the session.
  ReadSession(const File& file, const ReadOptions& options) : file_(file), options_(options) {}

  // Reads exactly the chunks that overlap the targets (each chunk once,
  // even when several targets need it), verifies their checksums if asked,
  // decodes them and copies each overlap into place. Fails if a target
  // asks for elements no piece holds. Adds the bytes read to *bytes_read,
  // and those of them read straight into their destinations to
  // *bytes_direct.
  Status Read(const std::vector<ReadTarget>& targets, ThreadPool& pool, uint64_t* bytes_read,
              uint64_t* bytes_direct);

 private:
  Status ReadOnce(const std::vector<ReadTarget>& targets, ThreadPool& pool, uint64_t* bytes_read,
                  uint64_t* bytes_direct);
  // Makes staging_ fit reads of a `size`-byte file with `staged` bytes
  // through staging in requests up to `block`, keeping one that does.
  Status SetUpIo(uint64_t size, uint64_t staged, uint64_t block);
  // Which host destinations whole uncompressed chunks go straight into
  // (ReadOptions::host_reads; a kAuto answer is kept for the session).
  enum class DirectReads { kNone, kHugePages, kAll };
  DirectReads DirectToHost();
  // The stream for a target on `device`, setting up device staging first.
  Result<DeviceStream*> DeviceStreamFor(Device device);

  const File& file_;
  const ReadOptions& options_;
  std::unique_ptr<ScanStaging> staging_;
  File buffered_;  // for files already in the page cache
  std::optional<bool> on_virtio_;
  std::unique_ptr<DeviceStaging> device_;  // after staging_: unpins before it goes
};

}  // namespace ckfmt
