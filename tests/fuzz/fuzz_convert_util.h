// The conversion both convert targets run: small buffers, no fsync, and
// opaque pickles allowed when the input's last byte is odd (so both of the
// unpickler's modes get inputs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ckfmt/convert/convert.h"

namespace ckfmt_fuzz {

inline void RunConvert(const std::string& src, const std::string& dst, const uint8_t* data,
                       size_t size,
                       ckfmt::convert::Format to = ckfmt::convert::Format::kAuto) {
  ckfmt::convert::ConvertOptions o;
  o.src = src;
  o.dst = dst;
  o.to = to;
  o.fsync = false;
  o.memory_budget = 16ull << 20;
  o.io_staging_bytes = 8ull << 20;
  o.allow_opaque_pickle = size > 0 && (data[size - 1] & 1);
  (void)ckfmt::convert::Run(o);
}

}  // namespace ckfmt_fuzz
