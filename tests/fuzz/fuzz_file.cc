// Fuzz target: a whole ckfmt file through the reader: open (layout, footer,
// index), load into an empty state dict (every entry reconstructed), load
// again in place into the tensors that load made, read a box and a flat
// range of every entry with data (as a resharding load does), and full verification
// (then without decoding, which must pass wherever the full one does).
// Before writing the input out, the harness recomputes the index and
// footer checksums where the footer locates an index, so
// that mutations reach the index's semantics and the load instead of
// stopping at a checksum; chunk checksums are left as they are (the
// decoders have their own target, fuzz_codec).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ckfmt/checksum.h"
#include "ckfmt/dtype.h"
#include "ckfmt/file_layout.h"
#include "ckfmt/reader.h"
#include "ckfmt/region.h"
#include "ckfmt/verify.h"
#include "fuzz_util.h"

namespace {

void FixChecksums(std::vector<uint8_t>& f) {
  using namespace ckfmt;
  if (f.size() < kFooterSize) return;
  uint8_t* footer = f.data() + f.size() - kFooterSize;
  const uint64_t offset = GetU64(footer), length = GetU64(footer + 8);
  if (offset <= f.size() - kFooterSize && length <= f.size() - kFooterSize - offset) {
    PutU64(footer + 16, Checksum(f.data() + offset, length));
  }
  PutU64(footer + 48, Checksum(footer, 48));
}

// A load allocates the tensors the index declares; a larger input is not
// loaded (opening and verifying it still run).
constexpr uint64_t kMaxLoadBytes = 64ull << 20;

// Reads the upper half of every dimension of each entry with data, and its
// middle third as a flat range: regions that cut across the file's pieces
// and chunks, as a load on another layout reads them.
void ReadRegions(ckfmt::CheckpointReader& reader) {
  std::vector<uint8_t> dst;
  for (const auto& e : reader.index().entries) {
    if (!e.HasData()) continue;
    const size_t elem = ckfmt::DTypeSize(e.dtype);
    if (elem == 0) continue;
    std::vector<uint64_t> offsets, lengths;
    for (uint64_t d : e.shape) {
      offsets.push_back(d / 2);
      lengths.push_back(d - d / 2);
    }
    auto n = ckfmt::NumElements(e.shape);
    if (!n.ok()) continue;
    const ckfmt::Region regions[] = {ckfmt::Region::Box(offsets, lengths),
                                     ckfmt::Region::Flat(*n / 3, *n / 3)};
    for (const ckfmt::Region& r : regions) {
      const uint64_t elems = r.NumElements();
      if (elems > kMaxLoadBytes / elem) continue;
      dst.assign(elems * elem, 0);
      (void)reader.ReadRegion(e.path, r, dst.data());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  FixChecksums(bytes);
  const std::string path = ckfmt_fuzz::WriteScratchFile("file.ckfmt", bytes.data(), bytes.size());

  ckfmt::ReadOptions ro;
  ro.io.direct_io = false;
  ro.io.threads = 1;
  auto reader = ckfmt::CheckpointReader::Open(path, ro);
  if (reader.ok()) {
    uint64_t declared = 0;
    for (const auto& e : (*reader)->index().entries) {
      if (e.HasData()) declared += e.ByteSize();  // what reconstructing allocates
    }
    if (declared <= kMaxLoadBytes) {
      ckfmt::Value state{ckfmt::Dict{}};
      // Then in place into what it made: the path of a resume whose
      // tensors exist (kinds, dtypes, shapes checked against the file).
      if ((*reader)->Load(&state).ok()) (void)(*reader)->Load(&state);
    }
    ReadRegions(**reader);
  }
  ckfmt::VerifyOptions vo;
  vo.io.direct_io = false;
  vo.io.threads = 1;
  auto full = ckfmt::VerifyFile(path, vo);
  // A pass that decodes nothing checks a subset of what the full one does.
  vo.decode = false;
  auto sums = ckfmt::VerifyFile(path, vo);
  if (full.ok() && full->ok() && !(sums.ok() && sums->ok())) {
    std::fprintf(stderr, "the full verify passed, the one without decoding did not: %s\n",
                 sums.ok() ? sums->problems[0].message.c_str() : sums.status().ToString().c_str());
    std::abort();
  }
  return 0;
}
