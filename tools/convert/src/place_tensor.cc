#include "place_tensor.h"

#include <algorithm>

#include "crc32.h"

namespace ckfmt::convert {

Status PlaceTensor(OutputFile* out, uint64_t base, TensorSource& t, PieceMemory& memory,
                   uint32_t* crc, const std::function<void(uint64_t)>& on_piece) {
  const uint64_t esize = DTypeSize(t.dtype);
  const uint64_t total = t.nbytes();
  uint64_t next = 0;
  bool in_order = true;
  uint32_t c = 0;
  const Region whole = Region::Whole(t.shape);
  auto put = [&](const uint8_t* src, uint64_t dst_byte, uint64_t n) -> Status {
    CKFMT_RETURN_IF_ERROR(out->WriteAt(base + dst_byte, src, n));
    if (dst_byte == next) {
      if (crc) c = Crc32(c, src, n);
      next += n;
    } else {
      in_order = false;
    }
    return Status::OK();
  };
  CKFMT_RETURN_IF_ERROR(t.Stream(memory, [&](const Region& r, uint32_t, const void* data,
                                             uint64_t nbytes) -> Status {
    const auto* p = static_cast<const uint8_t*>(data);
    if (nbytes == 0) return Status::OK();
    if (r == whole) {
      CKFMT_RETURN_IF_ERROR(put(p, 0, nbytes));
    } else {
      Status st;
      ForEachOverlap(t.shape, r, whole, [&](const Run& run) {
        if (st.ok()) st = put(p + run.src_offset * esize, run.dst_offset * esize, run.count * esize);
      });
      CKFMT_RETURN_IF_ERROR(st);
    }
    if (on_piece) on_piece(nbytes);
    return Status::OK();
  }));
  if (crc) {
    if (!in_order || next != total) {
      // Out-of-order pieces: read the bytes back.
      c = 0;
      const uint64_t size = std::min<uint64_t>(total, std::max<uint64_t>(memory.budget(), 1 << 20));
      uint8_t* buf = memory.Buffer(PieceMemory::Id(0, 0), size);
      for (uint64_t off = 0; off < total;) {
        uint64_t n = std::min<uint64_t>(size, total - off);
        CKFMT_RETURN_IF_ERROR(out->ReadAt(base + off, buf, n));
        c = Crc32(c, buf, n);
        off += n;
      }
    }
    *crc = c;
  }
  return Status::OK();
}

}  // namespace ckfmt::convert
