// Fuzz target: `ckfmt convert` from a single file of arbitrary bytes. The
// source format is detected from the content (torch.save zip or legacy,
// safetensors, ckfmt); a ckfmt source is written out as safetensors or,
// when it is an odd number of 4 KiB blocks long, as a DCP directory; any
// other as ckfmt. Hostile input must be refused, never crash the reader or
// leave the writer in a bad state.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "fuzz_convert_util.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char kCkfmtMagic[] = "\x89" "CKF\r\n\x1a\n";
  const bool is_ckfmt = size >= 8 && std::memcmp(data, kCkfmtMagic, 8) == 0;
  const std::string src = ckfmt_fuzz::WriteScratchFile("src.bin", data, size);
  const bool to_dcp = is_ckfmt && (size / 4096) % 2 == 1;
  const std::string dst = src.substr(0, src.rfind('/') + 1) +
                          (to_dcp ? "out_dcp" : is_ckfmt ? "out.safetensors" : "out.ckfmt");
  ckfmt_fuzz::RunConvert(src, dst, data, size, to_dcp ? ckfmt::convert::Format::kDcp
                                                      : ckfmt::convert::Format::kAuto);
  if (to_dcp) std::filesystem::remove_all(dst);  // each run writes a new DCP directory
  return 0;
}
