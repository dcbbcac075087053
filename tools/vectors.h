// The golden vectors of spec/vectors: small files with fixed contents,
// written through the engine's public API. `ckfmt-make-vectors` writes them;
// ckfmt_golden_tests regenerates them and compares bytes, so a change of
// the on-disk format (or of the writer's layout decisions) fails the build.
#pragma once

#include <string>
#include <vector>

#include "ckfmt/io_options.h"
#include "ckfmt/status.h"

namespace ckfmt::tools {

struct GoldenVector {
  std::string name;         // file is NAME.ckfmt, inspect output NAME.inspect.json
  std::string description;  // one line, for spec/vectors/README.md
};

const std::vector<GoldenVector>& GoldenVectors();

// The libzstd version (ZSTD_versionNumber()) the committed vectors that
// hold zstd frames were written with. zstd does not promise identical
// output across versions; with another one, tests skip comparing those
// vectors' bytes (they still verify and inspect them).
inline constexpr unsigned kGoldenZstdVersion = 10504;  // 1.5.4

// The I/O settings the committed vectors were written with: plain pwrite,
// one worker thread. The bytes must not depend on them.
IoOptions GoldenIoOptions();

// Writes the vector `name` to `path` using `io`.
Status WriteGoldenVector(const std::string& name, const std::string& path,
                         const IoOptions& io = GoldenIoOptions());

// Writes NAME.ckfmt and NAME.inspect.json (`ckfmt inspect --json NAME.ckfmt`
// run from inside `dir`) for every vector into `dir`, which must exist.
Status WriteGoldenVectors(const std::string& dir);

}  // namespace ckfmt::tools
