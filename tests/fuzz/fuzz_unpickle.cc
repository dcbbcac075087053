// Fuzz target: the restricted unpickler `ckfmt convert` reads torch.save
// pickles with. Arbitrary opcodes must be refused, never executed or crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "unpickler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ckfmt::convert::UnpickleOptions options;
  options.where = "fuzz.pkl";
  options.allow_opaque = size > 0 && (data[0] & 1);
  (void)ckfmt::convert::Unpickle(std::string(reinterpret_cast<const char*>(data), size), options);
  return 0;
}
