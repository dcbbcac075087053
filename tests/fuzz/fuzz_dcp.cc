// Fuzz target: `ckfmt convert` of a DCP directory whose .metadata is the
// input, beside the data files of tests/fixtures/dcp_fsdp2 (copied into the
// scratch directory once). The metadata's offsets, lengths and tensor
// layouts are what a hostile checkpoint controls.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "fuzz_convert_util.h"
#include "fuzz_util.h"

#ifndef CKFMT_FUZZ_DCP_FIXTURE
#error "CKFMT_FUZZ_DCP_FIXTURE names the DCP fixture directory"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  const std::string meta = ckfmt_fuzz::WriteScratchFile("dcp/.metadata", data, size);
  const fs::path dir = fs::path(meta).parent_path();
  static const bool copied = [&] {
    for (const auto& e : fs::directory_iterator(CKFMT_FUZZ_DCP_FIXTURE)) {
      if (e.path().extension() == ".distcp") {
        fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
      }
    }
    return true;
  }();
  (void)copied;
  ckfmt_fuzz::RunConvert(dir.string(), (dir.parent_path() / "out.ckfmt").string(), data, size);
  return 0;
}
