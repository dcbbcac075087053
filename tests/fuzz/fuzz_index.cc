// Fuzz target: the index parser (FlatBuffers verification and every
// semantic rule) on arbitrary bytes. It must refuse, never crash.
#include <cstddef>
#include <cstdint>

#include "ckfmt/index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A data region of 1 TiB after the header: offsets in the input decide.
  auto index = ckfmt::ParseIndex(data, size, 4096, 4096 + (1ull << 40), "fuzz.ckfmt");
  if (index.ok()) {
    uint64_t budget = ckfmt::kCoverageBudget;
    for (const auto& e : index->entries) (void)ckfmt::CheckCoverage(e, &budget);
  }
  return 0;
}
