// Helpers for the convert tests: temp dirs, fixture manifests, and a
// reader that summarizes a ckfmt file as dotted key -> dtype/shape/hash.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckfmt/convert/convert.h"

namespace ckfmt::convert::testing {

std::string FixturesDir();
std::string Fixture(const std::string& name);
// A fresh directory under TEST_TMPDIR / ::testing::TempDir().
std::string MakeTempDir(const std::string& tag);

struct TensorSummary {
  std::string dtype;
  std::vector<uint64_t> shape;
  std::string xxh3;  // 16 hex digits
  bool operator==(const TensorSummary&) const = default;
};

struct FileSummary {
  std::map<std::string, TensorSummary> tensors;   // dotted key
  std::map<std::string, nlohmann::json> values;   // dotted key -> {"type","value"}
  std::map<std::string, std::string> bytes;       // dotted key -> content_type
  std::vector<std::pair<std::string, std::string>> metadata;
  uint32_t world_size = 0;
};

// Reads every entry of a ckfmt file (tensor data verified by checksum).
FileSummary SummarizeCkfmt(const std::string& path);
nlohmann::json LoadManifest(const std::string& fixture);
std::string Hex64(uint64_t v);

ConvertReport ConvertOrDie(const std::string& src, const std::string& dst,
                           ConvertOptions o = {});

// A ckfmt file holding a whole tensor "t" (2 bytes), then a bytes entry
// "blob" of 8 bytes of which only the first 4 were saved (FORMAT.md 6.5
// allows a partial bytes entry).
void WriteCkfmtWithPartialBytes(const std::string& path);

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& data);

}  // namespace ckfmt::convert::testing
