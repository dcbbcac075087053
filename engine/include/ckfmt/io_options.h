// I/O settings shared by the writer, the reader and verify.
#pragma once

#include <cstdint>
#include <string_view>

namespace ckfmt {

enum class IoBackend : uint8_t {
  kAuto,      // io_uring with O_DIRECT, falling back as below
  kUring,     // io_uring (O_DIRECT where the file system allows it)
  kPread,     // plain pread/pwrite, buffered
};
std::string_view IoBackendName(IoBackend b);

struct IoOptions {
  IoBackend backend = IoBackend::kAuto;
  bool direct_io = true;                 // O_DIRECT where the file system allows it
  // 4 MiB requests with 32 MiB in flight: measured best on virtio disks
  // (bench/e2e_bench.cc); 8 MiB requests or 48 MiB in flight read slower
  // there, and fewer than ~16 MiB in flight cannot keep a disk busy.
  uint64_t block_size = 4ull << 20;      // bytes per I/O request (reads: at most)
  // Bytes of I/O in flight (block_size multiples). Uncompressed writes
  // keep at most this in flight and fill as much again ahead (so the save
  // stages 2 * staging_bytes + one block per copying thread); compressed
  // ones stage this and a quarter more. Reads keep about this much in
  // flight and hold as much again, plus one request, for the data being
  // verified and copied out meanwhile (so a file larger than this is read
  // with 2 * staging_bytes + block_size).
  uint64_t staging_bytes = 32ull << 20;
  unsigned threads = 0;                  // worker threads for checksums/codecs; 0: all cores
};

// Staging buffers of finished operations are kept, up to 256 MiB, for the
// next save, load or verify of the process: fresh memory costs page faults
// that would otherwise delay the first I/O of each operation (about 0.1 s
// per 40 MiB in a VM). This frees them. Thread-safe.
void ReleaseStagingCache();

}  // namespace ckfmt
