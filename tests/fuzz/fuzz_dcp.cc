// Fuzz target: `ckfmt convert` of a DCP directory with one file replaced by
// the input, beside the other files of a DCP fixture (copied into the
// scratch directory once). Built twice:
//   fuzz_dcp       the input is .metadata, beside dcp_fsdp2's data files:
//                  the offsets, lengths and tensor layouts a hostile
//                  checkpoint controls;
//   fuzz_dcp_data  the input is rank 1's data file beside dcp_safetensors'
//                  metadata: the safetensors blob and its DCP_SHARDING_INFO.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "fuzz_convert_util.h"
#include "fuzz_util.h"

#if !defined(CKFMT_FUZZ_DCP_FIXTURE) || !defined(CKFMT_FUZZ_DCP_INPUT)
#error "CKFMT_FUZZ_DCP_FIXTURE names the DCP fixture directory, CKFMT_FUZZ_DCP_INPUT its file the input replaces"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  const std::string input =
      ckfmt_fuzz::WriteScratchFile(std::string("dcp/") + CKFMT_FUZZ_DCP_INPUT, data, size);
  const fs::path dir = fs::path(input).parent_path();
  static const bool copied = [&] {
    for (const auto& e : fs::directory_iterator(CKFMT_FUZZ_DCP_FIXTURE)) {
      if (e.path().filename() != CKFMT_FUZZ_DCP_INPUT) {
        fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
      }
    }
    return true;
  }();
  (void)copied;
  ckfmt_fuzz::RunConvert(dir.string(), (dir.parent_path() / "out.ckfmt").string(), data, size);
  return 0;
}
