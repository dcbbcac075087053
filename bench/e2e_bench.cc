// End-to-end benchmark: ckfmt::Save / CheckpointReader::Load of a realistic
// training state against the raw bandwidth of the same directory, measured
// in the same run.
//
//   ckfmt-bench-e2e [--dir DIR] [--size-gib 2] [--runs 5] [--codecs none,zstd,...] [--keep]
//
// Per run: raw io_uring O_DIRECT write + fsync, raw O_DIRECT read, memcpy,
// an async save, then for each codec (default: none, zstd, byteplane-zstd;
// level 1) ckfmt save next to a raw write, ckfmt load into preallocated
// tensors (in place) next to a raw read of the same file, and verify (of a
// compressed file, also with --checksums-only). The virtual disk's speed
// drifts and depends on the I/O just before, so every save, load and verify
// is paired with a raw transfer at the same moment, in alternating order, and
// writes follow an untimed warm-up write. Before every read the file's
// cached pages are dropped with posix_fadvise(DONTNEED); reads use O_DIRECT
// as well.
//
// Throughput is logical bytes (tensor + blob bytes of the state dict) per
// second of wall time; a save's time includes fsync, rename and directory
// fsync, a load's time includes opening and validating the index.
#include <fcntl.h>
#include <liburing.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "ckfmt/async_save.h"
#include "ckfmt/checksum.h"
#include "ckfmt/reader.h"
#include "ckfmt/verify.h"
#include "ckfmt/state_dict.h"
#include "ckfmt/tensor.h"
#include "ckfmt/writer.h"
#include "e2e_state.h"
#include "measure.h"

namespace {

using namespace ckfmt::bench;

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "ckfmt-bench-e2e: %s\n", msg.c_str());
  std::exit(1);
}

struct Args {
  std::string dir;
  double size_gib = 2.0;
  int runs = 5;
  std::vector<ckfmt::Codec> codecs = {ckfmt::Codec::kNone, ckfmt::Codec::kZstd,
                                      ckfmt::Codec::kBytePlaneZstd};
  bool keep = false;
  bool one_copy = false;  // load into the source tensors: half the memory
  size_t dest_offset = 0;  // of the destination tensors in their pages
  bool raw_only = false;  // measure the disk only (for bench/compare)
  std::string raw_read_file;  // --raw-read: time a raw read of this file only
  std::string raw_write_file;  // --raw-write: time a raw write of this file only
  ckfmt::IoOptions io;  // the engine's defaults unless overridden
  ckfmt::HostReads host_reads = ckfmt::HostReads::kAuto;
};

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) Die("missing value for " + s);
      return argv[++i];
    };
    if (s == "--dir") {
      a.dir = val();
    } else if (s == "--size-gib") {
      a.size_gib = std::atof(val().c_str());
    } else if (s == "--runs") {
      a.runs = std::atoi(val().c_str());
    } else if (s == "--codecs") {
      a.codecs.clear();
      std::string list = val();
      for (size_t pos = 0; pos <= list.size();) {
        size_t end = list.find(',', pos);
        if (end == std::string::npos) end = list.size();
        auto c = ckfmt::CodecFromName(list.substr(pos, end - pos));
        if (!c.ok()) Die(c.status().ToString());
        a.codecs.push_back(*c);
        pos = end + 1;
      }
    } else if (s == "--no-zstd") {
      a.codecs = {ckfmt::Codec::kNone};
    } else if (s == "--keep") {
      a.keep = true;
    } else if (s == "--one-copy") {
      a.one_copy = true;
    } else if (s == "--dest-offset") {
      a.dest_offset = size_t(std::atol(val().c_str()));
    } else if (s == "--raw-only") {
      a.raw_only = true;
    } else if (s == "--raw-read") {
      a.raw_read_file = val();
    } else if (s == "--raw-write") {
      a.raw_write_file = val();
    } else if (s == "--block-mib") {
      a.io.block_size = uint64_t(std::atof(val().c_str()) * kMiB);
    } else if (s == "--staging-mib") {
      a.io.staging_bytes = uint64_t(std::atof(val().c_str()) * kMiB);
    } else if (s == "--io-threads") {
      a.io.threads = unsigned(std::atoi(val().c_str()));
    } else if (s == "--host-reads") {
      const std::string v = val();
      if (v == "auto") a.host_reads = ckfmt::HostReads::kAuto;
      else if (v == "direct") a.host_reads = ckfmt::HostReads::kDirect;
      else if (v == "staged") a.host_reads = ckfmt::HostReads::kStaged;
      else Die("--host-reads takes auto, direct or staged, not " + v);
    } else if (s == "--buffered") {
      a.io.backend = ckfmt::IoBackend::kPread;
      a.io.direct_io = false;
    } else if (s == "-h" || s == "--help") {
      std::printf(
          "usage: ckfmt-bench-e2e [--dir DIR] [--size-gib 2] [--runs 5] [--codecs LIST] [--keep]\n"
          "  --dir DIR       directory on the disk to measure (default: a new dir under /tmp)\n"
          "  --size-gib N    logical size of the training state (default 2; 0.25 for a quick run)\n"
          "  --runs N        repetitions of every measurement (default 5)\n"
          "  --codecs LIST   codecs to save/load with (default none,zstd,byteplane-zstd; level 1)\n"
          "  --no-zstd       same as --codecs none\n"
          "  --keep          keep the checkpoint files (default: removed)\n"
          "  --one-copy      load into the source tensors (checked against hashes taken\n"
          "                  before): half the memory, for large sizes; no memcpy and\n"
          "                  async-save rows\n"
          "  --dest-offset N place each destination tensor N bytes into its page (default\n"
          "                  0; 64 as PyTorch's CPU allocator does): with direct host\n"
          "                  reads, loads read whole chunks straight into destinations\n"
          "                  that meet the disk's O_DIRECT alignment, others through\n"
          "                  staging\n"
          "  --raw-only      measure only the raw disk; prints RAW write_gibs=W read_gibs=R\n"
          "  --raw-read FILE drop FILE's cached pages and read its whole 4 MiB blocks raw;\n"
          "                  prints RAW read_gibs=R (a paired baseline for bench/compare)\n"
          "  --raw-write FILE write --size-gib in 4 MiB blocks to FILE (+fsync), then\n"
          "                  remove it; prints RAW write_gibs=W (bench/compare's warm-up\n"
          "                  before each save)\n"
          "engine I/O options (default: the engine's IoOptions defaults):\n"
          "  --block-mib N   IoOptions::block_size\n"
          "  --staging-mib N IoOptions::staging_bytes\n"
          "  --io-threads N  IoOptions::threads\n"
          "  --buffered      IoBackend::kPread without O_DIRECT (the page cache is still\n"
          "                  dropped before every load)\n"
          "  --host-reads M  ReadOptions::host_reads: auto (default), direct or staged\n");
      std::exit(0);
    } else {
      Die("unknown argument " + s + " (see --help)");
    }
  }
  if (a.size_gib <= 0 || a.runs < 1 || a.codecs.empty()) {
    Die("--size-gib must be > 0, --runs >= 1, --codecs not empty");
  }
  return a;
}

std::string KeyName(ckfmt::Codec c) {
  std::string n(ckfmt::CodecName(uint8_t(c)));
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  Args args = ParseArgs(argc, argv);
  bool made_dir = false;
  if (args.dir.empty()) {
    char tmpl[] = "/tmp/ckfmt-bench-XXXXXX";
    if (!::mkdtemp(tmpl)) Die(std::string("mkdtemp: ") + std::strerror(errno));
    args.dir = tmpl;
    made_dir = true;
  } else {
    std::error_code ec;
    std::filesystem::create_directories(args.dir, ec);
    if (ec) Die("cannot create " + args.dir + ": " + ec.message());
  }

  if (!args.raw_read_file.empty()) {
    RawIo rawio;
    const uint64_t bytes = std::filesystem::file_size(args.raw_read_file) / kRawBlock * kRawBlock;
    if (bytes == 0) Die(args.raw_read_file + " holds no whole 4 MiB block");
    DropCache(args.raw_read_file);
    const double t = RawTransfer(args.raw_read_file, bytes, /*write=*/false, rawio);
    std::printf("RAW read_gibs=%.3f\n", double(bytes) / kGiB / t);
    if (made_dir) ::rmdir(args.dir.c_str());
    return 0;
  }
  const uint64_t size_bytes = std::max<uint64_t>(
      kRawBlock, uint64_t(args.size_gib * kGiB) / kRawBlock * kRawBlock);
  if (!args.raw_write_file.empty()) {
    RawIo rawio;
    RemoveAndSettle(args.raw_write_file);
    const double t = RawTransfer(args.raw_write_file, size_bytes, /*write=*/true, rawio);
    RemoveAndSettle(args.raw_write_file);
    std::printf("RAW write_gibs=%.3f\n", double(size_bytes) / kGiB / t);
    if (made_dir) ::rmdir(args.dir.c_str());
    return 0;
  }
  if (args.raw_only) {  // the baseline other benchmarks compare against
    RawIo rawio;
    const std::string path = args.dir + "/raw.bin";
    std::vector<double> w, r;
    for (int i = 0; i < args.runs; ++i) {
      // Each timed write follows an untimed one, as in the main benchmark
      // (see warm_up_writes there): the first write after reads is slower.
      RemoveAndSettle(path);
      RawTransfer(path, size_bytes, true, rawio);
      RemoveAndSettle(path);
      w.push_back(double(size_bytes) / kGiB / RawTransfer(path, size_bytes, true, rawio));
      r.push_back(double(size_bytes) / kGiB / RawTransfer(path, size_bytes, false, rawio));
    }
    ::unlink(path.c_str());
    if (made_dir) ::rmdir(args.dir.c_str());
    std::sort(w.begin(), w.end());
    std::sort(r.begin(), r.end());
    std::printf("RAW write_gibs=%.3f read_gibs=%.3f\n", w[w.size() / 2], r[r.size() / 2]);
    return 0;
  }

  // Build the state.
  const Layout L = MakeLayout(args.size_gib);
  Buffers src, dst;
  const auto g0 = Clock::now();
  AllocBuffers(L, &src, /*touch=*/false);
  FillBuffers(L, &src);
  if (!args.one_copy) AllocBuffers(L, &dst, /*touch=*/true, args.dest_offset);  // the trainer's
  Buffers& into_bufs = args.one_copy ? src : dst;
  const std::vector<uint64_t> src_hashes = TensorHashes(L, src);
  const auto g1 = Clock::now();
  const uint64_t logical = LogicalBytes(L, src);
  const std::string src_rng = src.rng, src_dataloader = src.dataloader;
  const uint64_t raw_bytes = (logical + kRawBlock - 1) / kRawBlock * kRawBlock;
  ckfmt::Value state = MakeStateDict(L, src, 1000);

  struct statvfs vfs{};
  if (::statvfs(args.dir.c_str(), &vfs) == 0) {
    const double avail = double(vfs.f_bavail) * double(vfs.f_frsize);
    if (avail < 1.5 * double(raw_bytes)) Die("not enough free space in " + args.dir);
  }

  std::printf("ckfmt-bench-e2e: dir %s, %d run(s), %u cores; engine IoOptions: %s, "
              "direct_io %d, block %.1f MiB, staging %.1f MiB, threads %u\n",
              args.dir.c_str(), args.runs, std::thread::hardware_concurrency(),
              std::string(ckfmt::IoBackendName(args.io.backend)).c_str(), int(args.io.direct_io),
              double(args.io.block_size) / kMiB, double(args.io.staging_bytes) / kMiB,
              args.io.threads);
  std::printf("state: %.3f GiB logical = %llu params (d=%llu, %llu layers, vocab %llu) x "
              "(bf16 weight + fp32 exp_avg + fp32 exp_avg_sq), %zu tensors + step/rng/dataloader; "
              "generated in %.1f s\n",
              double(logical) / kGiB, (unsigned long long)L.num_params, (unsigned long long)L.d,
              (unsigned long long)L.layers, (unsigned long long)L.vocab, L.params.size() * 4,
              Seconds(g0, g1));
  const double rss_state = CurrentRssMiB();
  std::printf("RSS after building source + destination tensors: %.0f MiB\n", rss_state);
  std::fflush(stdout);

  const std::string raw_path = args.dir + "/raw.bin";

  RawIo rawio;

  Series raw_w{"raw write (io_uring O_DIRECT 4MiB QD8, allocated +fsync)"};
  Series raw_r{"raw read  (io_uring O_DIRECT 4MiB QD8, fresh file)"};
  // The same read while every core spins (BusyCores): a load or verify that
  // decodes on every core gets no more from the disk than this.
  Series raw_r_busy{"raw read, every core busy (nice 19)"};
  // The same read while one core copies memory of its own: what any pass
  // over memory at the disk's pace costs it, whatever memory it is.
  Series raw_r_copying{"raw read, one core copying other memory"};
  // The same read hashing every block on every core (RawReadHashed): what
  // a verify, or a load that checks every byte, can expect from the disk.
  Series raw_r_hashed{"raw read, every block hashed (all cores)"};
  Series mcp{"memcpy of the state (1 thread)"};
  Series async_blocked{"async save, caller blocked (state / time)"};
  Series warm_load{"ckfmt load (none, page cache warm)"};
  // A resume in a fresh process: the state dict holds nothing yet, so the
  // load allocates every tensor, whose pages the reads fault in first.
  Series fresh_load{"ckfmt load (none, reconstructing all)"};
  Series fresh_raw_read{"raw read of the none file, next to it"};
  struct CodecRows {
    ckfmt::Codec codec;
    Series save, load;
    // Raw O_DIRECT write next to the save, in alternating order: a write's
    // speed here depends on the I/O just before it (see warm_up_writes), so
    // the save's baseline is the raw write at the same moment, as the
    // load's is the raw read.
    Series raw_write;
    // Raw O_DIRECT read of this very checkpoint file, next to its load: the
    // virtual disk serves recently written data faster, so only a read of
    // the same file at the same moment is a fair baseline for a load.
    Series raw_read;
    Series verify;     // ckfmt verify, GiB/s of file bytes
    Series verify_sums;  // ckfmt verify --checksums-only (compressed codecs only)
    double ratio = 0;  // logical / stored
    uint64_t file_bytes = 0;
  };
  std::vector<CodecRows> rows;
  for (ckfmt::Codec c : args.codecs) {
    std::string n(ckfmt::CodecName(uint8_t(c)));
    if (c != ckfmt::Codec::kNone) n += "-1";
    rows.push_back({c, Series{"ckfmt save (" + n + ")"}, Series{"ckfmt load (" + n + ", in place)"},
                    Series{"raw write next to the " + n + " save"},
                    Series{"raw read of the " + n + " file (4MiB QD8)"},
                    Series{"ckfmt verify (" + n + ", file bytes)"},
                    Series{"ckfmt verify (" + n + ", checksums only)"}});
  }
  std::vector<double> open_ms;
  std::string io_path;

  auto do_save = [&](const std::string& path, CodecRows& cr, int run) {
    Series& s = cr.save;
    RemoveAndSettle(path);
    ckfmt::SaveOptions so;
    so.codec = cr.codec;
    so.level = 1;
    so.io = args.io;
    OpMeter meter(args.dir);
    auto r = ckfmt::Save(path, state, so);
    const double secs = meter.Stop(s);
    if (!r.ok()) Die("Save " + path + ": " + r.status().ToString());
    if (r->raw_bytes != logical) {
      std::fprintf(stderr, "note: WriteStats.raw_bytes %llu != logical bytes %llu\n",
                   (unsigned long long)r->raw_bytes, (unsigned long long)logical);
    }
    s.gibs.push_back(double(logical) / kGiB / secs);
    cr.ratio = double(r->raw_bytes) / double(r->stored_bytes);
    cr.file_bytes = r->file_bytes;
    io_path = r->io_path;
    std::printf("  run %d: %-36s %6.3f GiB/s  (%.2f s, file %.0f MiB, %s)\n", run, s.name.c_str(),
                s.gibs.back(), secs, double(r->file_bytes) / kMiB, r->io_path.c_str());
  };
  // `warm`: the file is in the page cache (a load right after a save, or of
  // a file another process just read), where a load should run near memcpy.
  auto read_options = [&] {
    ckfmt::ReadOptions ro;
    ro.io = args.io;
    ro.host_reads = args.host_reads;
    return ro;
  };
  auto do_load = [&](const std::string& path, Series& s, int run, bool warm = false) {
    into_bufs.rng = std::string(src_rng.size(), '\0');
    into_bufs.dataloader = "{}";
    ckfmt::Value into = MakeStateDict(L, into_bufs, 0);
    Poison(into);
    if (warm) {
      WarmCache(path);
    } else {
      DropCache(path);
    }
    OpMeter meter(args.dir);
    auto reader = ckfmt::CheckpointReader::Open(path, read_options());
    if (!reader.ok()) Die("Open " + path + ": " + reader.status().ToString());
    const auto t_open = Clock::now();
    auto rep = (*reader)->Load(&into);
    const double secs = meter.Stop(s);
    if (!rep.ok()) Die("Load " + path + ": " + rep.status().ToString());
    reader->reset();
    open_ms.push_back(Seconds(meter.start(), t_open) * 1e3);
    s.gibs.push_back(double(logical) / kGiB / secs);
    if (!rep->reconstructed.empty() || !rep->missing.empty() || !rep->unexpected.empty()) {
      Die("in-place load reconstructed/missed entries:\n" + rep->ToString());
    }
    if (TensorHashes(L, into_bufs) != src_hashes) {
      Die("loaded tensors differ from the saved ones (" + path + ")");
    }
    const ckfmt::Value* step = into.Find({"step"});
    const ckfmt::Value* rng = into.Find({"rng"});
    const ckfmt::Value* dl = into.Find({"dataloader"});
    if (!step || step->kind() != ckfmt::Value::Kind::kInt || step->as_int() != 1000 || !rng ||
        rng->kind() != ckfmt::Value::Kind::kBytes || rng->as_bytes().data != src_rng || !dl ||
        dl->kind() != ckfmt::Value::Kind::kBytes || dl->as_bytes().data != src_dataloader) {
      Die("loaded small objects differ from the saved ones (" + path + ")");
    }
    std::printf("  run %d: %-36s %6.3f GiB/s  (%.2f s, open+index %.1f ms, verified)\n", run,
                s.name.c_str(), s.gibs.back(), secs, open_ms.back());
  };

  // Reads the file's whole 4 MiB blocks raw into the tensors of `into`
  // (GiB/s of stored bytes): the raw read for that memory. A direct read
  // hands the disk one segment per physically contiguous run of 4 KiB
  // pages (at most 254 per request here), where the raw baseline's huge
  // pages need two; how fast it goes depends on how the memory was faulted
  // in (ReadOptions::host_reads).
  Series raw_read_into{"raw read of the none file into the load's tensors"};
  // Drops `path`'s cached pages, then times read(), which returns the
  // seconds it took to read `bytes`, into `s`.
  auto time_read = [&](const std::string& path, uint64_t bytes, Series& s, auto&& read) {
    DropCache(path);
    const DiskCounters d0 = ReadDiskCounters(args.dir);
    const double t = read();
    s.Disk(d0, ReadDiskCounters(args.dir), t);
    s.gibs.push_back(double(bytes) / kGiB / t);
  };
  auto raw_read_into_tensors = [&](const std::string& path, const ckfmt::Value& into, Series& s,
                                   int run) {
    std::vector<void*> blocks = WholeBlocks(into, kRawBlock);
    blocks.resize(std::min<size_t>(blocks.size(), std::filesystem::file_size(path) / kRawBlock));
    if (blocks.empty()) return;
    time_read(path, blocks.size() * kRawBlock, s, [&] { return RawReadInto(path, blocks); });
    std::printf("  run %d: %-36s %6.3f GiB/s\n", run, s.name.c_str(), s.gibs.back());
  };

  // Loads into an empty state dict: every entry is reconstructed in fresh
  // memory, as when a trainer resumes before its optimizer has state.
  // Returns the state it made.
  // A load of `path` from the disk into `into`, timed into `s`; its seconds in *secs.
  auto timed_load = [&](const std::string& path, ckfmt::Value* into, Series& s, double* secs) {
    DropCache(path);
    OpMeter meter(args.dir);
    auto rep = ckfmt::Load(path, into, {}, read_options());
    *secs = meter.Stop(s);
    if (!rep.ok()) Die("Load " + path + ": " + rep.status().ToString());
    s.gibs.push_back(double(logical) / kGiB / *secs);
    return std::move(*rep);
  };
  auto do_fresh_load = [&](const std::string& path, Series& s, int run) {
    ckfmt::Value into = ckfmt::Dict{};
    double secs = 0;
    const ckfmt::LoadReport rep = timed_load(path, &into, s, &secs);
    if (!SameTensors(state, into)) Die("reconstructed tensors differ from the saved ones");
    std::printf("  run %d: %-36s %6.3f GiB/s  (%.2f s, %zu entries reconstructed, verified)\n",
                run, s.name.c_str(), s.gibs.back(), secs, rep.reconstructed.size());
    return into;
  };

  // The same file again, in place into the tensors a reconstructing load
  // made, and a raw read into that memory: pages faulted in by a load, not
  // by one sequential sweep as the other destination's were, so they are
  // less often physically contiguous (what a direct read into them costs
  // depends on it; see ReadOptions::host_reads).
  Series reload{"ckfmt load (none, in place, into those)"};
  Series raw_read_into_made{"raw read into the tensors a load made"};
  auto do_reload = [&](const std::string& path, ckfmt::Value& made, int run) {
    Poison(made);
    double secs = 0;
    if (!timed_load(path, &made, reload, &secs).reconstructed.empty()) {
      Die("in-place reload reconstructed entries");
    }
    if (!SameTensors(state, made)) Die("reloaded tensors differ from the saved ones");
    std::printf("  run %d: %-36s %6.3f GiB/s  (%.2f s, verified)\n", run, reload.name.c_str(),
                reload.gibs.back(), secs);
    raw_read_into_tensors(path, made, raw_read_into_made, run);
  };

  // The first write after a spell of reads runs up to 25% slower on this
  // virtual disk, whatever issues it (2 GiB: 1.4-1.6 GiB/s first, 2.0-2.2
  // second), so an untimed write of the state's size comes first and puts
  // both writes of a pair on the same footing. 512 MiB was not enough: in
  // two sets of 8 runs of --codecs none, the save ran at a median 0.87x and
  // 0.91x of its raw neighbour when it went first, 1.05x and 1.08x when it
  // went second; after a full-size warm-up, 0.97x and 0.97x first, 0.98x
  // and 0.93x second.
  auto warm_up_writes = [&] {
    RemoveAndSettle(raw_path);
    RawTransfer(raw_path, raw_bytes, /*write=*/true, rawio);
    RemoveAndSettle(raw_path);
  };

  // Writes the state's size in 4 MiB blocks to a fresh file.
  auto do_raw_write = [&](Series& s, int run) {
    RemoveAndSettle(raw_path);
    const DiskCounters d0 = ReadDiskCounters(args.dir);
    const double t = RawTransfer(raw_path, raw_bytes, /*write=*/true, rawio);
    s.Disk(d0, ReadDiskCounters(args.dir), t);
    s.gibs.push_back(double(raw_bytes) / kGiB / t);
    std::printf("  run %d: %-36s %6.3f GiB/s\n", run, s.name.c_str(), s.gibs.back());
    RemoveAndSettle(raw_path);
  };

  // Reads the whole 4 MiB blocks of `path`; GiB/s of stored bytes.
  auto do_raw_read = [&](const std::string& path, Series& s, int run) {
    const uint64_t bytes = std::filesystem::file_size(path) / kRawBlock * kRawBlock;
    if (bytes == 0) return;
    time_read(path, bytes, s, [&] { return RawTransfer(path, bytes, /*write=*/false, rawio); });
    std::printf("  run %d: %-36s %6.3f GiB/s\n", run, s.name.c_str(), s.gibs.back());
  };

  auto do_raw_read_into = [&](const std::string& path, int run) {
    // Not aligned for O_DIRECT, or the destination is the source state.
    if (args.dest_offset % 4096 != 0 || args.one_copy) return;
    raw_read_into_tensors(path, MakeStateDict(L, into_bufs, 0), raw_read_into, run);
  };

  // Full verification (every chunk's checksum, decode, zero padding); GiB/s
  // of file bytes, paired with the raw read of the same file.
  // The same without decoding (--checksums-only), for compressed files.
  auto do_verify = [&](const std::string& path, CodecRows& cr, int run, bool decode) {
    Series& s = decode ? cr.verify : cr.verify_sums;
    DropCache(path);
    OpMeter meter(args.dir);
    ckfmt::VerifyOptions vo;
    vo.io = args.io;
    vo.decode = decode;
    auto r = ckfmt::VerifyFile(path, vo);
    const double secs = meter.Stop(s);
    if (!r.ok()) Die("verify " + path + ": " + r.status().ToString());
    if (!r->problems.empty()) Die("verify " + path + " found problems in a good file");
    s.gibs.push_back(double(std::filesystem::file_size(path)) / kGiB / secs);
    std::printf("  run %d: %-36s %6.3f GiB/s\n", run, s.name.c_str(), s.gibs.back());
  };

  // Async save: the time the caller is blocked (the snapshot copy) against
  // one memcpy of the state; the saver is kept across runs like a trainer
  // keeps it, and set up once with Prepare() as a trainer would at start-up
  // (timed and printed: fresh memory is slow to fault in on some VMs).
  ckfmt::AsyncSaver saver;
  if (!args.one_copy) {
    const auto p0 = Clock::now();
    if (ckfmt::Status st = saver.Prepare(state); !st.ok()) Die("Prepare: " + st.ToString());
    std::printf("async saver Prepare(): %.3f s to set up %.2f GiB of snapshot memory (once)\n",
                std::chrono::duration<double>(Clock::now() - p0).count(),
                double(saver.reserved_bytes()) / kGiB);
  }
  auto do_async = [&](int run) {
    const std::string path = args.dir + "/state_async.ckfmt";
    ckfmt::SaveOptions so;
    so.io = args.io;
    if (ckfmt::Status st = saver.SaveAsync(path, state, so); !st.ok()) Die("SaveAsync: " + st.ToString());
    const double blocked = saver.last_blocked_seconds();
    auto r = saver.Wait();
    if (!r.ok()) Die("async save " + path + ": " + r.status().ToString());
    async_blocked.gibs.push_back(double(logical) / kGiB / blocked);
    std::printf("  run %d: %-36s %6.3f GiB/s  (blocked %.3f s; memcpy would take %.3f s)\n", run,
                async_blocked.name.c_str(), async_blocked.gibs.back(), blocked,
                double(logical) / kGiB / mcp.gibs.back());
    RemoveAndSettle(path);
  };

  const std::string load_start = LoadAvg();
  const auto b0 = Clock::now();
  for (int run = 0; run < args.runs; ++run) {
    warm_up_writes();
    const DiskCounters d0 = ReadDiskCounters(args.dir);
    const double tw = RawTransfer(raw_path, raw_bytes, /*write=*/true, rawio);
    raw_w.Disk(d0, ReadDiskCounters(args.dir), tw);
    raw_w.gibs.push_back(double(raw_bytes) / kGiB / tw);
    auto raw_read = [&] { return RawTransfer(raw_path, raw_bytes, /*write=*/false, rawio); };
    time_read(raw_path, raw_bytes, raw_r, raw_read);
    {
      BusyCores busy;
      time_read(raw_path, raw_bytes, raw_r_busy, raw_read);
    }
    {
      BusyCores copying(BusyCores::Work::kCopy, 1);
      time_read(raw_path, raw_bytes, raw_r_copying, raw_read);
    }
    time_read(raw_path, raw_bytes, raw_r_hashed,
              [&] { return RawReadHashed(raw_path, raw_bytes); });
    RemoveAndSettle(raw_path);
    if (!args.one_copy) mcp.gibs.push_back(MemcpyGiBs(L, src, &dst));
    std::printf(
        "  run %d: raw write %.3f GiB/s, raw read %.3f GiB/s (every core busy: %.3f, "
        "one copying: %.3f, hashed: %.3f), memcpy %.2f GiB/s\n",
        run, raw_w.gibs.back(), raw_r.gibs.back(), raw_r_busy.gibs.back(),
        raw_r_copying.gibs.back(), raw_r_hashed.gibs.back(), args.one_copy ? 0.0 : mcp.gibs.back());
    if (!args.one_copy) do_async(run);
    std::fflush(stdout);
    for (CodecRows& cr : rows) {
      const std::string path = args.dir + "/state_" + KeyName(cr.codec) + ".ckfmt";
      // Alternate which write and which read goes first so that drift
      // favours neither.
      warm_up_writes();
      if (run % 2 == 1) do_raw_write(cr.raw_write, run);
      do_save(path, cr, run);
      if (run % 2 == 0) do_raw_write(cr.raw_write, run);
      // The raw read of the file partners both the load and the verify, so
      // each of them goes before it in one run and after it in the next.
      auto verify = [&] {
        do_verify(path, cr, run, true);
        if (cr.codec != ckfmt::Codec::kNone) do_verify(path, cr, run, false);
      };
      if (run % 2 == 0) do_load(path, cr.load, run);
      if (run % 2 == 1) verify();
      do_raw_read(path, cr.raw_read, run);
      if (cr.codec == ckfmt::Codec::kNone) do_raw_read_into(path, run);
      if (run % 2 == 1) do_load(path, cr.load, run);
      if (run % 2 == 0) verify();
      if (cr.codec == ckfmt::Codec::kNone && !args.one_copy) {
        do_load(path, warm_load, run, true);
        // Alternating with its raw read, as the in-place load does.
        ckfmt::Value made;
        if (run % 2 == 0) made = do_fresh_load(path, fresh_load, run);
        do_raw_read(path, fresh_raw_read, run);
        if (run % 2 == 1) made = do_fresh_load(path, fresh_load, run);
        do_reload(path, made, run);
      }
      if (!args.keep) RemoveAndSettle(path);
      std::fflush(stdout);
    }
  }
  const auto b1 = Clock::now();
  const double peak = LifetimePeakMiB();

  static const char* const kHostReads[] = {"auto", "direct", "staged"};
  std::printf("\nckfmt-bench-e2e: %.3f GiB logical state, %d run(s), dir %s, engine I/O %s, "
              "host reads %s, destination tensors at page offset %zu\n",
              double(logical) / kGiB, args.runs, args.dir.c_str(), io_path.c_str(),
              kHostReads[int(args.host_reads)], args.dest_offset);
  // Median over runs of (this run's figure / this run's raw figure).
  auto paired = [](const Series& s, const Series& ref) {
    Series r;
    for (size_t i = 0; i < s.gibs.size() && i < ref.gibs.size(); ++i) {
      r.gibs.push_back(s.gibs[i] / ref.gibs[i]);
    }
    return r.Median();
  };
  std::printf("%-48s %8s %8s %8s %8s %8s %9s %6s %6s %6s %5s %7s\n",
              "measurement (GiB/s, logical bytes)", "median", "min", "max", "vs raw", "paired",
              "+RSS MiB", "cores", "steal", "disk", "QD", "req KiB");
  auto median_of = [](const std::vector<double>& v, const char* fmt, char* out, size_t n) {
    if (!v.empty()) std::snprintf(out, n, fmt, Series::MedianOf(v));
  };
  auto row = [&](const Series& s, const Series* ref) {
    if (s.gibs.empty()) return;
    char ratio[32] = "", pair[32] = "", rss[32] = "", cores[32] = "", busy[32] = "";
    char depth[32] = "", req[32] = "", steal[32] = "";
    median_of(s.depth, "%.1f", depth, sizeof depth);
    median_of(s.steal, "%.2f", steal, sizeof steal);
    median_of(s.request_kib, "%.0f", req, sizeof req);
    if (ref) std::snprintf(ratio, sizeof ratio, "%.2fx", s.Median() / ref->Median());
    if (ref) std::snprintf(pair, sizeof pair, "%.2fx", paired(s, *ref));
    if (s.peak_delta_mib >= 0) std::snprintf(rss, sizeof rss, "%.0f", s.peak_delta_mib);
    if (!s.cores.empty()) {
      std::vector<double> c = s.cores;
      std::sort(c.begin(), c.end());
      std::snprintf(cores, sizeof cores, "%.2f", c[c.size() / 2]);
    }
    if (!s.busy.empty()) {
      std::vector<double> b = s.busy;
      std::sort(b.begin(), b.end());
      std::snprintf(busy, sizeof busy, "%.0f%%", 100 * b[b.size() / 2]);
    }
    std::printf("%-48s %8.3f %8.3f %8.3f %8s %8s %9s %6s %6s %6s %5s %7s\n", s.name.c_str(),
                s.Median(), s.Min(), s.Max(), ratio, pair, rss, cores, steal, busy, depth, req);
  };
  row(raw_w, nullptr);
  row(raw_r, nullptr);
  row(raw_r_busy, &raw_r);
  row(raw_r_copying, &raw_r);
  row(raw_r_hashed, &raw_r);
  row(mcp, nullptr);
  row(async_blocked, &mcp);
  row(warm_load, &mcp);
  row(fresh_raw_read, nullptr);
  row(fresh_load, &fresh_raw_read);
  row(reload, &fresh_raw_read);
  row(raw_read_into_made, &fresh_raw_read);
  for (const CodecRows& cr : rows) {
    row(cr.raw_write, nullptr);
    row(cr.save, &cr.raw_write);
    row(cr.raw_read, nullptr);
    row(cr.load, &cr.raw_read);
    row(cr.verify, &cr.raw_read);
    if (!cr.verify_sums.gibs.empty()) row(cr.verify_sums, &cr.raw_read);
    if (cr.codec == ckfmt::Codec::kNone && !raw_read_into.gibs.empty()) {
      row(raw_read_into, &cr.raw_read);
      std::printf("%-48s %8s %8s %8s %8s %7.2fx\n", "ckfmt load (none, in place) / the row above",
                  "", "", "", "", paired(cr.load, raw_read_into));
    }
  }
  std::sort(open_ms.begin(), open_ms.end());
  std::printf(
      "'vs raw' = median of the row / median of the raw write next to the save (saves)\n"
      "         or of the raw read of the same file next to the load (loads); of memcpy\n"
      "         for the async and page-cache-warm rows; of the raw read for the\n"
      "         every-core-busy, copying and hashed reads;\n"
      "'paired' = median over runs of (the row's figure / the same run's raw figure).\n"
      "'+RSS' = max over runs of the peak RSS during the operation minus the RSS before it\n"
      "         (VmHWM, reset through /proc/self/clear_refs before each operation).\n"
      "'cores' = median of (process CPU time / wall time) during the operation.\n"
      "'steal' = median of (CPU time the hypervisor took from this machine's vCPUs,\n"
      "         all of them, / wall time), from /proc/stat: on %u cores, cores + steal\n"
      "         near %u means the process was ready to use every core but got less.\n"
      "'disk' = median of (time the disk had I/O in flight / wall time): below 100%%\n"
      "         the disk sat idle part of the time, waiting for this process.\n"
      "'QD' = median of the requests the disk had in flight on average while busy;\n"
      "'req KiB' = median of the mean request size (the block layer splits requests\n"
      "         at max_sectors_kb and max_segments).\n"
      "All rows count logical bytes: a compressed row above 1.00x is faster than the disk.\n",
      std::thread::hardware_concurrency(), std::thread::hardware_concurrency());
  for (const CodecRows& cr : rows) {
    std::printf("  %-16s file %8.1f MiB, logical/stored %.3fx\n",
                std::string(ckfmt::CodecName(uint8_t(cr.codec))).c_str(),
                double(cr.file_bytes) / kMiB, cr.ratio);
  }
  std::printf("open + index validation: median %.1f ms\n", open_ms[open_ms.size() / 2]);
  std::printf("peak RSS (process-lifetime max of getrusage ru_maxrss / VmHWM) %.0f MiB; the "
              "source + destination state alone is %.0f MiB\n",
              peak, rss_state);
  std::printf("benchmark wall time %.0f s; load average at start %s, at end %s (other\n"
              "processes on this machine compete for its %u cores: compare rows of one run only)\n",
              Seconds(b0, b1), load_start.c_str(), LoadAvg().c_str(),
              std::thread::hardware_concurrency());

  std::string line = "CKFMT_E2E";
  char buf[256];
  auto kv = [&](const char* fmt, auto... a) {
    std::snprintf(buf, sizeof buf, fmt, a...);
    line += " ";
    line += buf;
  };
  kv("size_gib=%.3f", double(logical) / kGiB);
  kv("runs=%d", args.runs);
  kv("raw_write=%.3f", raw_w.Median());
  kv("raw_read=%.3f", raw_r.Median());
  kv("raw_read_busy_paired=%.3f", paired(raw_r_busy, raw_r));
  if (!raw_r_busy.steal.empty()) kv("raw_read_busy_steal=%.2f", Series::MedianOf(raw_r_busy.steal));
  kv("raw_read_copying_paired=%.3f", paired(raw_r_copying, raw_r));
  kv("raw_read_hashed_paired=%.3f", paired(raw_r_hashed, raw_r));
  kv("memcpy=%.2f", mcp.Median());
  if (!async_blocked.gibs.empty()) {
    // Blocked time over memcpy time, steady state (median over runs).
    kv("async_blocked_vs_memcpy=%.3f", mcp.Median() / async_blocked.Median());
  }
  if (!warm_load.gibs.empty()) kv("warm_load_vs_memcpy=%.3f", warm_load.Median() / mcp.Median());
  if (!fresh_load.gibs.empty()) {
    kv("fresh_load_none_paired=%.3f", paired(fresh_load, fresh_raw_read));
    kv("reload_none_paired=%.3f", paired(reload, fresh_raw_read));
    kv("raw_read_into_made_paired=%.3f", paired(raw_read_into_made, fresh_raw_read));
  }
  double save_rss = 0, load_rss = 0;
  for (const CodecRows& cr : rows) {
    const std::string k = KeyName(cr.codec);
    kv("save_%s=%.3f", k.c_str(), cr.save.Median());
    kv("raw_write_%s=%.3f", k.c_str(), cr.raw_write.Median());
    kv("save_%s_vs_raw=%.3f", k.c_str(), cr.save.Median() / cr.raw_write.Median());
    kv("save_%s_paired=%.3f", k.c_str(), paired(cr.save, cr.raw_write));
    kv("load_%s=%.3f", k.c_str(), cr.load.Median());
    kv("raw_read_%s=%.3f", k.c_str(), cr.raw_read.Median());
    kv("load_%s_vs_raw=%.3f", k.c_str(), cr.load.Median() / cr.raw_read.Median());
    kv("load_%s_paired=%.3f", k.c_str(), paired(cr.load, cr.raw_read));
    if (cr.codec == ckfmt::Codec::kNone && !raw_read_into.gibs.empty()) {
      kv("raw_read_into_tensors=%.3f", raw_read_into.Median());
      kv("load_none_vs_raw_into_tensors_paired=%.3f", paired(cr.load, raw_read_into));
    }
    kv("verify_%s_paired=%.3f", k.c_str(), paired(cr.verify, cr.raw_read));
    kv("verify_%s_cores=%.2f", k.c_str(), Series::MedianOf(cr.verify.cores));
    if (!cr.verify.steal.empty()) {
      kv("verify_%s_steal=%.2f", k.c_str(), Series::MedianOf(cr.verify.steal));
    }
    if (!cr.verify_sums.gibs.empty()) {
      kv("verify_sums_%s_paired=%.3f", k.c_str(), paired(cr.verify_sums, cr.raw_read));
    }
    if (cr.codec != ckfmt::Codec::kNone) kv("ratio_%s=%.3f", k.c_str(), cr.ratio);
    save_rss = std::max(save_rss, cr.save.peak_delta_mib);
    load_rss = std::max(load_rss, cr.load.peak_delta_mib);
  }
  kv("peak_rss_mib=%.0f", peak);
  kv("save_extra_rss_mib=%.0f", save_rss);
  kv("load_extra_rss_mib=%.0f", load_rss);
  std::printf("%s\n", line.c_str());

  if (made_dir && !args.keep) std::filesystem::remove_all(args.dir);
  return 0;
}
